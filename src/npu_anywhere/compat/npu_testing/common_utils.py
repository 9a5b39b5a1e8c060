"""``torch_npu.testing.common_utils``: input makers and skip decorators of torch_npu's tests.

Semantics followed: torch_npu ``torch_npu/testing/common_utils.py``.  "npu" devices are the
local device of :mod:`npu_anywhere.compat.device` (CPU, or CUDA when present), so the pair
``create_common_tensor`` returns is a CPU golden input and a copy on that device.

Emulation knobs (see :mod:`.soc`):

``NPU_ANYWHERE_STRICT`` / ``NPU_ANYWHERE_SOC``
    the SoC :class:`SupportedDevices` compares with (no skips when neither is set);
``NPU_ANYWHERE_CANN_VERSION``
    the CANN version :class:`SkipIfNotGteCANNVersion` compares with; unset means "newest"
    (npu_anywhere follows the latest documented behaviour), so nothing is skipped.
``SET_NPU_DEVICE``
    the device index :func:`get_npu_device` names, as in torch_npu.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import unittest
from itertools import product
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ... import targets
from .. import device as _device
from . import soc

__all__ = [
    "SkipIfNotGteCANNVersion",
    "SupportedDevices",
    "create_common_tensor",
    "create_dtype_tensor",
    "freeze_rng_state",
    "get_npu_device",
    "is_iterable",
    "iter_indices",
    "set_npu_device",
]

ENV_CANN_VERSION = "NPU_ANYWHERE_CANN_VERSION"
# torch_npu reads these; kept so that code importing them finds them.
PERF_TEST_ENABLE = os.getenv("PERF_TEST_ENABLE", "").upper() in ("ON", "1", "YES", "TRUE", "Y")


@contextlib.contextmanager
def freeze_rng_state() -> Iterator[None]:
    """Restore torch's CPU generator state on leaving the block."""
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def iter_indices(tensor: torch.Tensor):
    """Every index of ``tensor``: ints for 1-d, tuples above, nothing for 0-d (as torch_npu)."""
    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return product(*(range(s) for s in tensor.size()))


def is_iterable(obj: object) -> bool:
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def get_npu_device() -> str:
    """``"npu:<SET_NPU_DEVICE>"``, ``"npu:0"`` when the variable is unset."""
    index = os.environ.get("SET_NPU_DEVICE")
    return "npu:0" if index is None else f"npu:{index}"


def set_npu_device() -> str:
    """Make :func:`get_npu_device` the current device and return its name."""
    name = get_npu_device()
    _device.set_device(name)
    return name


def _resolve(device: Any) -> torch.device:
    """The torch device an "npu" name stands for here (other devices pass through)."""
    if device is None:
        device = get_npu_device()
    if isinstance(device, str) and re.fullmatch(r"npu(:\d+)?", device):
        index = int(device.split(":")[1]) if ":" in device else None
        return _device.local_device(index)
    if isinstance(device, torch.device) and device.type in ("npu", "privateuseone"):
        return _device.local_device(device.index)
    return torch.device(device)


def _format_cast(tensor: torch.Tensor, npu_format: int) -> torch.Tensor:
    from ... import ops  # late: the op registry is heavy and not needed for plain inputs
    return ops.TORCH_NPU_FUNCTIONS["npu_format_cast"](tensor, npu_format)


def create_common_tensor(item: Sequence[Any], minValue: float, maxValue: float,
                         device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A uniform random input as a (cpu, npu) pair holding the same values.

    Parameters
    ----------
    item : [numpy dtype, npu format, shape]
        ``np.float16``, ``np.float32``, ``np.int32``... ; the ACL format code the npu copy
        gets via ``npu_format_cast`` (-1: none); the shape.
    minValue, maxValue : float
        Bounds of ``np.random.uniform`` (then cast to the dtype, so integer inputs are
        truncated toward zero as in torch_npu).
    device : str or torch.device, optional
        Where the second tensor goes; default :func:`get_npu_device`.
    """
    dtype, npu_format, shape = item[0], item[1], item[2]
    values = np.random.uniform(minValue, maxValue, shape).astype(dtype)
    cpu_input = torch.from_numpy(values)
    npu_input = torch.from_numpy(values).to(_resolve(device))
    if npu_format != -1:
        npu_input = _format_cast(npu_input, npu_format)
    return cpu_input, npu_input


def create_dtype_tensor(shape: Sequence[int], dtype: torch.dtype, npu_format: int = -1,
                        min_value: int = -5, max_value: int = 5, no_zero: bool = False,
                        device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random (cpu, npu) pair of a torch dtype, as torch_npu makes it.

    bool: uniform 0/1; float16/float32: uniform in ``[min_value, max_value)``; any other
    dtype: int32 integers in ``[min_value, max_value]``.  ``no_zero`` replaces zeros by ones.
    The format cast applies to float16/float32 only.
    """
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(bool)
    elif dtype == torch.half:
        values = np.random.uniform(min_value, max_value, shape).astype(np.float16)
    elif dtype == torch.float:
        values = np.random.uniform(min_value, max_value, shape).astype(np.float32)
    else:
        values = np.random.randint(min_value, max_value + 1, size=shape).astype(np.int32)
    if no_zero:
        values = np.where(values != 0, values, np.ones_like(values))
    cpu_input = torch.from_numpy(values)
    npu_input = torch.from_numpy(values).to(_resolve(device))
    if npu_format != -1 and dtype in (torch.float, torch.half):
        npu_input = _format_cast(npu_input, npu_format)
    return cpu_input, npu_input


class SupportedDevices:
    """Skip the decorated test unless the emulated SoC is one of ``supported_devices``.

    The names are torch_npu's short SoC keys (``"Ascend910B"``, ``"Ascend910_93"``,
    ``"Ascend950"``, ``"Ascend310P"``...); :mod:`.soc` maps them to products.  The SoC is
    read when the test runs, so ``with npu_anywhere.strict("950"):`` around a run works.
    With no strict target and no ``NPU_ANYWHERE_SOC`` the test always runs, with every product
    emulated at once -- whose numerics are the Atlas A2 / A3 kernels' -- except that a test
    whose list names one other product runs as that product: ``SupportedDevices(['Ascend950'])``
    runs under ``strict("950")``, so a 950-only test sees the 950's rules and numerics.
    """

    def __init__(self, supported_devices: list[str]) -> None:
        self.supported_devices = supported_devices

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run_if_supported(slf, *args, **kwargs):
            soc_name = soc.emulated_soc()
            if soc_name is not None:
                key = soc.device_key(soc_name)
                if key not in self.supported_devices:
                    raise unittest.SkipTest(f"Only run on {self.supported_devices!r}, current "
                                            f"device is {key}.")
                return fn(slf, *args, **kwargs)
            only = self._only_product()
            if only is None:
                return fn(slf, *args, **kwargs)
            with targets.strict(only):
                return fn(slf, *args, **kwargs)
        return run_if_supported

    def _only_product(self):
        """The one product other than A2 / A3 that every listed key names, or None."""
        try:
            products = {soc.product_of(key) for key in self.supported_devices}
        except ValueError:
            return None
        if len(products) != 1 or products & {targets.Product.A2, targets.Product.A3}:
            return None
        return products.pop()


def _version_key(version: str) -> tuple:
    """Order CANN versions: ``8.3.RC1 < 8.3.0 < 8.5.0 < 9.0.0``; ``RCn``/``Tn`` are pre-releases.

    Raises ValueError for anything else, so that a typo does not silently skip tests.
    """
    key = []
    for part in str(version).strip().split("."):
        match = re.fullmatch(r"(\d+)|(RC|T|alpha|beta)(\d+)", part, flags=re.IGNORECASE)
        if match is None:
            raise ValueError(f"SkipIfNotGteCANNVersion: expected a version such as 8.5.0 or "
                             f"8.3.RC1, but got {version!r}")
        # A release component sorts above every pre-release of the same position.
        key.append((1, int(match.group(1)), 0) if match.group(1) else (0, 0, int(match.group(3))))
    return tuple(key)


def emulated_cann_version() -> str | None:
    """``NPU_ANYWHERE_CANN_VERSION`` or None ("newest": every version check passes)."""
    return os.environ.get(ENV_CANN_VERSION, "").strip() or None


class SkipIfNotGteCANNVersion:
    """Skip the decorated test unless the emulated CANN is at least ``base_version``."""

    def __init__(self, base_version: str, module: str = "CANN") -> None:
        _version_key(base_version)
        self.base_version = base_version
        self.module = module

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run_if_new_enough(slf, *args, **kwargs):
            current = emulated_cann_version()
            if current is not None and _version_key(current) < _version_key(self.base_version):
                raise unittest.SkipTest(f"Only run on {self.base_version} or greater, current "
                                        f"cann version is {current}.")
            return fn(slf, *args, **kwargs)
        return run_if_new_enough
