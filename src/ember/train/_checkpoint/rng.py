"""Global random-number-generator states as JSON, for bit-identical resume ("exact resume").

:func:`rng_state` captures torch's CPU generator, every CUDA device's generator (when CUDA is
available), numpy's global ``RandomState`` and python's :mod:`random`; :func:`set_rng_state`
puts them back exactly, so the next random numbers of all three libraries are the ones an
uninterrupted run would have drawn. The JSON::

    {"torch": "<base64 of torch.get_rng_state()>",
     "cuda": ["<base64>", ...],                       (only when CUDA is available)
     "numpy": {"bit_generator": "MT19937", "keys": "<base64 of 624 little-endian uint32>",
               "pos": 624, "has_gauss": 0, "cached_gaussian": 0.0},
     "python": {"version": 3, "state": [625 ints], "gauss_next": null}}
"""

from __future__ import annotations

import base64
import binascii
import random
from typing import TYPE_CHECKING, Any

import torch

from ember._errors import CheckpointError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["rng_state", "seed_everything", "set_rng_state"]


def seed_everything(seed: int) -> None:
    """Seed torch (every device), numpy's global generator and Python's :mod:`random` with
    ``seed`` (``SupervisedTraining.seed``)."""
    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    torch.manual_seed(seed)  # every CUDA device too
    np.random.seed(seed % 2**32)  # numpy's legacy seeds are 32 bits
    random.seed(seed)


def rng_state() -> dict[str, Any]:
    """The current torch (CPU and CUDA), numpy and python RNG states, as JSON."""
    state: dict[str, Any] = {
        "torch": _b64(torch.get_rng_state()),
        "numpy": _numpy_state(),
        "python": _python_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:

    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    """Restore states captured by :func:`rng_state`; CheckpointError if ``state`` is malformed.

    CUDA states are restored for the devices
    present (a run resumed on fewer GPUs keeps the first ones); without CUDA they are ignored.
    """
    try:
        torch_state = _tensor(state["torch"])
        numpy_state = _parse_numpy(state["numpy"])
        python_state = _parse_python(state["python"])
        cuda_states = [_tensor(s) for s in state.get("cuda", [])]
        if torch_state.numel() != torch.get_rng_state().numel():
            raise ValueError(f"torch state has {torch_state.numel()} bytes")
    except (KeyError, TypeError, ValueError, OverflowError, binascii.Error) as error:
        raise CheckpointError(f"malformed RNG state: {type(error).__name__}: {error}") from None
    try:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states and torch.cuda.is_available():
            for device, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(cuda_state, device)
    except (TypeError, ValueError, OverflowError, RuntimeError) as error:
        raise CheckpointError(f"malformed RNG state: {type(error).__name__}: {error}") from error


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _tensor(text: object) -> torch.Tensor:
    if not isinstance(text, str):
        raise TypeError(f"expected base64 text, got {type(text).__name__}")
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)


def _numpy_state() -> dict[str, Any]:

    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "bit_generator": str(name),
        "keys": base64.b64encode(np.asarray(keys, dtype="<u4").tobytes()).decode("ascii"),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _parse_numpy(value: Any) -> tuple[str, np.ndarray[Any, Any], int, int, float]:

    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    keys = np.frombuffer(base64.b64decode(value["keys"], validate=True), dtype="<u4")
    if keys.shape != (624,):
        raise ValueError(f"numpy state has {keys.size} keys, expected 624")
    return (
        str(value["bit_generator"]),
        keys.astype(np.uint32),
        int(value["pos"]),
        int(value["has_gauss"]),
        float(value["cached_gaussian"]),
    )


def _python_state() -> dict[str, Any]:
    version, internal, gauss_next = random.getstate()
    return {"version": version, "state": list(internal), "gauss_next": gauss_next}


def _parse_python(value: Any) -> tuple[Any, ...]:
    internal = value["state"]
    if not isinstance(internal, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in internal
    ):
        raise TypeError("python RNG state must be a list of ints")
    if len(internal) != 625:
        raise ValueError(f"python RNG state has {len(internal)} words, expected 625")
    if not all(0 <= x < 1 << 32 for x in internal[:624]) or not 0 <= internal[624] <= 624:
        raise ValueError("python RNG state words must be 32-bit, its position 0..624")
    gauss = value["gauss_next"]
    if gauss is not None and not isinstance(gauss, float | int):
        raise TypeError("python RNG gauss_next must be a number or null")
    return (int(value["version"]), tuple(internal), None if gauss is None else float(gauss))
