"""Numeric precision of a run: ``"32"``, ``"bf16-mixed"``, ``"16-mixed"`` (Lightning's names).

Mixed precision runs the forward passes of ``train_step`` and ``inference_step`` under
``torch.autocast`` on the training device (the backward pass runs outside it, as torch
recommends); ``"16-mixed"`` also scales the loss with ``torch.amp.GradScaler`` so that small
float16 gradients do not underflow: the gradients are unscaled before clipping, and a step
whose gradients are not finite is skipped and the scale lowered (the scaler's state is part
of every checkpoint).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import torch

__all__ = ["PRECISIONS", "Precision", "autocast_of", "check_precision", "grad_scaler"]

Precision: TypeAlias = Literal["32", "bf16-mixed", "16-mixed"]
PRECISIONS: tuple[Precision, ...] = ("32", "bf16-mixed", "16-mixed")
_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def check_precision(value: object) -> Precision:
    """``value`` if it is one of :data:`PRECISIONS`, else ValueError listing them."""
    for precision in PRECISIONS:
        if value == precision and isinstance(value, str):
            return precision
    raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {value!r}")


def autocast_of(precision: Precision, device: torch.device) -> tuple[str, torch.dtype] | None:
    """The ``(device type, dtype)`` to autocast to on ``device``, or None for ``"32"``.

    Raises ValueError when autocast cannot run that dtype on that device, before training.
    """
    dtype = _DTYPES.get(precision)
    if dtype is None:
        return None
    if not torch.amp.autocast_mode.is_autocast_available(device.type):
        raise ValueError(
            f"precision {precision!r} needs torch.autocast on the training device, which "
            f"{device.type!r} does not support; use precision('32')"
        )
    if dtype is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"precision 'bf16-mixed' needs bfloat16 support, which {device} lacks; use "
            "precision('16-mixed') or precision('32')"
        )
    return device.type, dtype


def grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """The gradient scaler ``"16-mixed"`` needs on ``device``, or None."""
    if precision != "16-mixed":
        return None
    return torch.amp.GradScaler(device.type)
