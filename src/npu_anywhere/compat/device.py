"""The ``torch.npu`` / ``torch_npu.npu`` device API, mapped onto the local device.

The local device is CUDA when available, else CPU; ``NPU_ANYWHERE_DEVICE=cpu`` (or
``cuda:1``...) overrides it.  ``is_available()`` answers False unless the user opts in
(``install(claim_npu=True)`` or ``NPU_ANYWHERE_CLAIM_NPU=1``): libraries such as HF accelerate
test ``torch.npu.is_available()`` to decide that an NPU exists, and would then take Ascend-only
paths (HCCL, ``npu:`` device strings) that cannot work here.
"""

from __future__ import annotations

import contextlib
import os
import time
import types
from typing import Any, Optional

import torch

_claim_npu = os.environ.get("NPU_ANYWHERE_CLAIM_NPU", "") not in ("", "0", "false", "False")


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
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device() if index is None else index)
    return torch.device("cpu")


def _on_cuda() -> bool:
    return local_device().type == "cuda"


# -- devices ---------------------------------------------------------------------------------

def is_available() -> bool:
    return _claim_npu


def device_count() -> int:
    return torch.cuda.device_count() if _on_cuda() else 1


def current_device() -> int:
    return torch.cuda.current_device() if _on_cuda() else 0


def set_device(device: Any) -> None:
    index = _index(device)
    if index >= device_count():
        raise RuntimeError(f"torch.npu.set_device: expected a device index < {device_count()} "
                           f"(local device {local_device()}), but got {index}")
    if _on_cuda():
        torch.cuda.set_device(index)


def _index(device: Any) -> int:
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = device.split(":", 1)[1] if ":" in device else "0"
        return int(device)
    if isinstance(device, torch.device):
        return device.index or 0
    raise TypeError(f"torch.npu.set_device: expected an int, str or torch.device, but got "
                    f"{type(device).__name__}")


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


def get_device_name(device: Any = None) -> str:
    if _on_cuda():
        return f"npu_anywhere on {torch.cuda.get_device_name(device)}"
    return "npu_anywhere on cpu"


def get_device_properties(device: Any = None) -> Any:
    if _on_cuda():
        return torch.cuda.get_device_properties(device)
    return types.SimpleNamespace(name=get_device_name(), total_memory=_host_memory(),
                                 major=0, minor=0, multi_processor_count=os.cpu_count() or 1)


def synchronize(device: Any = None) -> None:
    if _on_cuda():
        torch.cuda.synchronize()


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


manual_seed_all = manual_seed


def set_compile_mode(jit_compile: bool = False) -> None:
    """Ascend kernel-compilation switch; there is nothing to switch here."""
    return None


# -- memory ----------------------------------------------------------------------------------

def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _cuda_or(name: str, default: Any):
    def call(*args, **kwargs):
        if _on_cuda():
            return getattr(torch.cuda, name)(*args, **kwargs)
        return default() if callable(default) else default
    call.__name__ = name
    return call


empty_cache = _cuda_or("empty_cache", None)
memory_allocated = _cuda_or("memory_allocated", 0)
max_memory_allocated = _cuda_or("max_memory_allocated", 0)
memory_reserved = _cuda_or("memory_reserved", 0)
max_memory_reserved = _cuda_or("max_memory_reserved", 0)
reset_peak_memory_stats = _cuda_or("reset_peak_memory_stats", None)
reset_max_memory_allocated = _cuda_or("reset_max_memory_allocated", None)
mem_get_info = _cuda_or("mem_get_info", lambda: (_host_memory(), _host_memory()))


# -- streams and events ----------------------------------------------------------------------

class Stream:
    """A CPU stand-in for an NPU stream: work is synchronous, so every wait is immediate."""

    def __new__(cls, *args, **kwargs):
        if _on_cuda():
            return torch.cuda.Stream(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device = local_device()
        self.priority = priority

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event


class Event:
    """A CPU stand-in for an NPU event, timing with the host clock."""

    def __new__(cls, *args, **kwargs):
        if _on_cuda():
            return torch.cuda.Event(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, **kwargs: Any):
        self._time: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        if self._time is None or end._time is None:
            raise RuntimeError("Event.elapsed_time: expected both events recorded, but got an "
                               "unrecorded event")
        return (end._time - self._time) * 1000.0


_default_stream: Optional[Stream] = None


def current_stream(device: Any = None) -> Any:
    global _default_stream
    if _on_cuda():
        return torch.cuda.current_stream(device)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


default_stream = current_stream


@contextlib.contextmanager
def stream(s: Any = None):
    if _on_cuda() and s is not None:
        with torch.cuda.stream(s):
            yield
    else:
        yield


class _Config:
    allow_internal_format = False


config = _Config()


def make_module(name: str) -> types.ModuleType:
    """A module object exposing this API (for ``torch.npu`` and ``torch_npu.npu``)."""
    module = types.ModuleType(name, __doc__)
    for attr in ("is_available", "device_count", "current_device", "set_device",
                 "is_initialized", "init", "get_device_name", "get_device_properties",
                 "synchronize", "manual_seed", "manual_seed_all", "set_compile_mode",
                 "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
                 "mem_get_info", "Stream", "Event", "current_stream", "default_stream",
                 "stream", "config"):
        setattr(module, attr, globals()[attr])
    module.local_device = local_device
    return module
