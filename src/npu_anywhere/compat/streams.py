"""``torch.npu.Stream`` / ``Event`` / ``current_stream`` / ``stream()`` on the local device.

On CUDA these are CUDA's own.  On the CPU work is synchronous, so a stream is a token whose
waits return at once and an event is a host timestamp (``elapsed_time`` in milliseconds).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Optional

import torch

from .device import _on_cuda, local_device


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

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


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


def set_stream(s: Any) -> None:
    if _on_cuda() and s is not None:
        torch.cuda.set_stream(s)


@contextlib.contextmanager
def stream(s: Any = None):
    if _on_cuda() and s is not None:
        with torch.cuda.stream(s):
            yield
    else:
        yield


API = ("Stream", "Event", "current_stream", "default_stream", "set_stream", "stream")
