"""The ``torch.npu`` / ``torch_npu.npu`` device API, mapped onto the local device.

The local device is CUDA when available, else CPU; ``NPU_ANYWHERE_DEVICE=cpu`` (or
``cuda:1``...) overrides it.  ``is_available()`` answers False unless the user opts in
(``install(claim_npu=True)`` or ``NPU_ANYWHERE_CLAIM_NPU=1``): libraries such as HF accelerate
test ``torch.npu.is_available()`` to decide that an NPU exists, and would then take Ascend-only
paths (HCCL, ``npu:`` device strings) that cannot work here.

The device answers to the name of the product strict mode enforces (``get_device_name()`` is
"Ascend910B4" under ``strict("A2")``; ``NPU_ANYWHERE_SOC`` names another part; in default mode
A2's too: Ascend code branches on that name, and A2 is the line most of it targets).
"""

from __future__ import annotations

import os
import types
from typing import Any, Optional

import torch

from .. import targets
from . import options

_claim_npu = os.environ.get("NPU_ANYWHERE_CLAIM_NPU", "") not in ("", "0", "false", "False")
# torch.cuda as it was before transfer_to_npu patched it (the CUDA stand-in calls these).
_cuda = types.SimpleNamespace(**{name: getattr(torch.cuda, name) for name in (
    "is_available", "device_count", "current_device", "set_device", "get_device_name",
    "get_device_properties", "synchronize", "manual_seed", "manual_seed_all", "seed",
    "seed_all", "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all", "empty_cache", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "mem_get_info", "memory_stats", "memory_summary", "device",
    "is_bf16_supported")})


def set_claim_npu(value: bool) -> None:
    global _claim_npu
    _claim_npu = bool(value)


def local_device(index: Optional[int] = None) -> torch.device:
    """The device that stands in for ``npu`` / ``npu:<index>``."""
    override = os.environ.get("NPU_ANYWHERE_DEVICE", "").strip()
    if override:
        dev = torch.device(override)
        if index is not None and dev.type == "cuda" and dev.index is None:
            return torch.device("cuda", index)
        return dev
    if _cuda.is_available():
        return torch.device("cuda", _cuda.current_device() if index is None else index)
    return torch.device("cpu")


def _on_cuda() -> bool:
    return local_device().type == "cuda"


# -- devices ---------------------------------------------------------------------------------

def is_available() -> bool:
    return _claim_npu


def device_count() -> int:
    return _cuda.device_count() if _on_cuda() else 1


def current_device() -> int:
    return _cuda.current_device() if _on_cuda() else 0


def _index(device: Any, api: str = "torch.npu.set_device") -> int:
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        device = device.split(":", 1)[1] if ":" in device else "0"
        return int(device)
    if isinstance(device, torch.device):
        return device.index or 0
    raise TypeError(f"{api}: expected an int, str or torch.device, but got "
                    f"{type(device).__name__}")


def set_device(device: Any) -> None:
    """Select the device.  On CUDA an index past the GPUs is refused, as torch_npu refuses
    one past the NPUs.  On the CPU stand-in every index names the one CPU: multi-process
    Ascend scripts and tests start a process per rank that calls ``set_device(rank)``, and
    each of them runs on the CPU (their collectives over the ``hccl`` backend, :mod:`.hccl`)."""
    index = _index(device)
    if index < 0:
        raise RuntimeError(f"torch.npu.set_device: expected a device index >= 0, but got {index}")
    if not _on_cuda():
        return
    if index >= device_count():
        raise RuntimeError(f"torch.npu.set_device: expected a device index < {device_count()} "
                           f"(local device {local_device()}), but got {index}")
    _cuda.set_device(index)


class device:
    """``with torch.npu.device(i):`` -- select the device inside the block."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device, "torch.npu.device")
        self._previous = -1

    def __enter__(self) -> "device":
        if self.idx >= 0:
            self._previous = current_device()
            if self.idx != self._previous:
                set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.idx >= 0 and self._previous != self.idx:
            set_device(self._previous)
        return False


class device_of(device):
    """``with torch.npu.device_of(tensor):`` -- the device of ``tensor`` inside the block."""

    def __init__(self, obj: Any):
        super().__init__(obj.get_device() if obj.device.type == "cuda" else -1)


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


_lazy_init = init


def synchronize(device: Any = None) -> None:
    if _on_cuda():
        _cuda.synchronize()


def set_compile_mode(jit_compile: bool = False) -> None:
    """Ascend kernel-compilation switch; there is nothing to switch here."""
    return None


# -- what the device is ----------------------------------------------------------------------

# One real part number of each line (the torch_npu.testing emulation names the same ones).
_PRODUCT_NAMES = {
    targets.Product.ATLAS_TRAINING: "Ascend910A",
    targets.Product.ATLAS_INFERENCE: "Ascend310P3",
    targets.Product.A2: "Ascend910B4",
    targets.Product.A3: "Ascend910_9391",
    targets.Product.ASCEND_950: "Ascend950PR",
}
# (AI cube cores, vector cores, L2 MiB) of the product's largest part, as npu-smi reports them.
_PRODUCT_CORES = {
    targets.Product.ATLAS_TRAINING: (32, 0, 32),
    targets.Product.ATLAS_INFERENCE: (8, 7, 16),
    targets.Product.A2: (24, 48, 192),
    targets.Product.A3: (24, 48, 192),
    targets.Product.ASCEND_950: (32, 64, 128),
}


def _soc():
    try:  # the SoC torch_npu.testing emulates (strict target, else NPU_ANYWHERE_SOC)
        from .npu_testing import soc
    except ImportError:
        return None
    return soc


def product() -> targets.Product:
    """The product this device impersonates: the strict-mode one, else the one
    ``NPU_ANYWHERE_SOC`` names, else Atlas A2."""
    soc = _soc()
    return (targets.current() or (soc.env_product() if soc is not None else None)
            or targets.Product.A2)


def get_device_name(device: Any = None) -> str:
    """The SoC name, e.g. "Ascend910B4" for A2 (what code keys on: ``"910B" in name``)."""
    soc = _soc()
    name = soc.emulated_soc() if soc is not None else None
    return name or _PRODUCT_NAMES[product()]


def get_device_properties(device: Any = None) -> Any:
    """Properties shaped as torch_npu's (name, total_memory, cube/vector cores, L2 size)."""
    cube, vector, l2_mib = _PRODUCT_CORES[product()]
    total = (_cuda.get_device_properties(device).total_memory if _on_cuda()
             else _host_memory())
    return types.SimpleNamespace(name=get_device_name(device), total_memory=total,
                                 cube_core_num=cube, vector_core_num=vector,
                                 L2_cache_size=l2_mib * 1024 * 1024, major=0, minor=0,
                                 multi_processor_count=cube)


# torch_npu's SoC version codes (c10_npu::SocVersion), which code compares in ranges:
# 220-225 A2, 250-255 A3, 200-205 310P, 260 the 950, 100-104 the 910 line.
_SOC_CODES = {
    "Ascend910PremiumA": 100, "Ascend910ProA": 101, "Ascend910A": 102, "Ascend910ProB": 103,
    "Ascend910B": 104, "Ascend310P1": 200, "Ascend310P2": 201, "Ascend310P3": 202, "Ascend310P4": 203,
    "Ascend310P5": 204, "Ascend310P7": 205,
    "Ascend910B1": 220, "Ascend910B2": 221, "Ascend910B2C": 222, "Ascend910B3": 223,
    "Ascend910B4": 224, "Ascend910B4-1": 225,
    "Ascend910_9391": 250, "Ascend910_9392": 251, "Ascend910_9381": 252,
    "Ascend910_9382": 253, "Ascend910_9372": 254, "Ascend910_9362": 255,
}
_PRODUCT_CODES = {targets.Product.ATLAS_TRAINING: 102, targets.Product.ATLAS_INFERENCE: 202,
                  targets.Product.A2: 224, targets.Product.A3: 250,
                  targets.Product.ASCEND_950: 260}


def get_soc_version() -> int:
    """torch_npu's SoC version code of :func:`get_device_name` (224 for Ascend910B4)."""
    return _SOC_CODES.get(get_device_name(), _PRODUCT_CODES[product()])


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (0, 0)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is native from Atlas A2 on; the 910 and 310P lines lack it."""
    return product() not in (targets.Product.ATLAS_TRAINING, targets.Product.ATLAS_INFERENCE)


def is_support_inf_nan() -> bool:
    return True


# -- random numbers: the stand-in shares the local device's generator ------------------------

def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    if _on_cuda():
        _cuda.manual_seed(seed)
    else:
        # Not torch.manual_seed: that seeds every backend and calls back into manual_seed_all.
        torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    if _on_cuda():
        _cuda.manual_seed_all(seed)
    else:
        torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    if _on_cuda():
        _cuda.seed()
    else:
        torch.default_generator.seed()


seed_all = seed


def initial_seed() -> int:
    return _cuda.initial_seed() if _on_cuda() else torch.default_generator.initial_seed()


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    return _cuda.get_rng_state() if _on_cuda() else torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    if _on_cuda():
        _cuda.set_rng_state(new_state)
    else:
        torch.default_generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    set_rng_state(new_states[0])


# -- memory ----------------------------------------------------------------------------------

def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _cuda_or(name: str, default: Any):
    def call(*args, **kwargs):
        if _on_cuda():
            return getattr(_cuda, name)(*args, **kwargs)
        return default() if callable(default) else default
    call.__name__ = name
    return call


empty_cache = _cuda_or("empty_cache", None)
memory_allocated = _cuda_or("memory_allocated", 0)
max_memory_allocated = _cuda_or("max_memory_allocated", 0)
memory_reserved = _cuda_or("memory_reserved", 0)
max_memory_reserved = _cuda_or("max_memory_reserved", 0)
memory_cached = memory_reserved
max_memory_cached = max_memory_reserved
reset_peak_memory_stats = _cuda_or("reset_peak_memory_stats", None)
reset_max_memory_allocated = _cuda_or("reset_max_memory_allocated", None)
reset_max_memory_cached = reset_max_memory_allocated
mem_get_info = _cuda_or("mem_get_info", lambda: (_host_memory(), _host_memory()))
memory_stats = _cuda_or("memory_stats", dict)
memory_summary = _cuda_or("memory_summary", "npu_anywhere: the stand-in device is the CPU; "
                          "its memory is not tracked.")


# torch.npu.config.allow_internal_format, torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32:
# switches that scripts set and test suites save and restore, kept in torch_npu's option table
# (torch_npu._C._npu_getOption reads the same values); recorded only.
config = options.Config()
matmul = options.MatmulConfig()
conv = options.ConvConfig()
# torch.npu.set_option({name: value}): torch_npu's Python entry to the same option table.
set_option = options.set_option

API = ("is_available", "device_count", "current_device", "set_device", "device", "device_of",
       "is_initialized", "init", "_lazy_init", "synchronize", "set_compile_mode",
       "get_device_name", "get_device_properties", "get_device_capability", "get_soc_version",
       "get_amp_supported_dtype", "is_bf16_supported", "is_support_inf_nan",
       "_is_in_bad_fork", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
       "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
       "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
       "max_memory_reserved", "memory_cached", "max_memory_cached", "reset_peak_memory_stats",
       "reset_max_memory_allocated", "reset_max_memory_cached", "mem_get_info",
       "memory_stats", "memory_summary", "config", "matmul", "conv", "set_option",
       "local_device")
