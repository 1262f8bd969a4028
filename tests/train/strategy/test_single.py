"""SingleDevice and MultiDevice refuse a device the machine does not have, where it is named."""

from __future__ import annotations

import pytest
import torch

from ember.train import MultiDevice, SingleDevice


def test_a_cuda_device_the_machine_lacks_is_refused_at_the_call() -> None:
    """Issue 29, item 10: SingleDevice("cuda:0") on a CPU build raised torch's AssertionError
    ("Torch not compiled with CUDA enabled") at launch; now a ValueError at the call says how
    many CUDA devices there are. On a GPU machine, the first index past its devices."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = f"cuda:{count}"
    with pytest.raises(
        ValueError, match=f"SingleDevice's device '{missing}' is not available on this machine"
    ):
        SingleDevice(missing)
    with pytest.raises(ValueError, match=rf"devices\[1\] '{missing}' is not available"):
        MultiDevice(["cpu", missing])
    assert SingleDevice("cpu").device == torch.device("cpu")


def test_a_device_that_is_no_device_is_named() -> None:
    with pytest.raises(ValueError, match="SingleDevice's device is not a valid device: 'gpu0'"):
        SingleDevice("gpu0")
    with pytest.raises(TypeError, match=r"SingleDevice's device must be a str or torch\.device"):
        SingleDevice(0)  # type: ignore[arg-type]  # the mistake under test
