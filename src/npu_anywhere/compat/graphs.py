"""``torch.npu.NPUGraph`` / ``torch.npu.graph`` and the graph task API, off the NPU.

An NPU (ACL) graph captures the kernels a block of code launches and replays them on the same
memory: the code's inputs are refilled in place, ``replay()`` recomputes, and its outputs are
the tensors the capture produced.  vllm-ascend, dlinfer and sgl-kernel-npu also patch the host
arguments of captured attention calls between replays: the ops launched between
``graph_task_group_begin`` / ``graph_task_group_end`` form a task group whose handle, given to
``graph_task_update_begin`` / ``graph_task_update_end``, takes the same ops with new arguments
(new ``actual_seq_lengths_kv``, say), or ``NPUGraph.update(cpu_update_input=[{...}])`` does
it for graphs captured with ``auto_dispatch_capture=True`` (torch_npu ``npu/graphs.py``).

Here capture runs the block eagerly (its results are right for the captured inputs) while a
dispatch mode records each operator call below autograd with its arguments and outputs.
``replay()`` calls the recorded operators again, in order, on the same argument tensors, and
writes each result into the tensor the capture returned (a result already in that memory, as
an in-place op, ``out=`` or a view gives, is left as it is), so downstream recorded calls and
the caller's references see the new values.  Allocation-only calls are not replayed, as an
allocation is no kernel.  Random ops draw new numbers at each replay.  The same recording
runs on CUDA, so graph updates work there too (no CUDA graph speed-up is claimed).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_NOT_REPLAYED = {
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
    torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
    torch.ops.aten.new_empty_strided.default,
}
"""Calls that only allocate (the memory stays the captured one; nothing to recompute)."""


@dataclass
class _Call:
    """One recorded operator call: ``func(*args, **kwargs)`` gave ``outputs`` (flattened)."""
    func: Any
    args: tuple
    kwargs: dict
    outputs: list


@dataclass
class TaskGroupHandle:
    """What ``graph_task_group_end`` returns: the task group's calls in its graph."""
    graph: "NPUGraph"
    start: int
    stop: int


@dataclass
class _Recording:
    calls: list = field(default_factory=list)


class _Recorder(TorchDispatchMode):
    """Runs every call as usual and appends it to ``recording`` (nested calls run inside the
    mode's own handling, so only the outermost operator of each call is recorded)."""

    def __init__(self, recording: _Recording):
        super().__init__()
        self.recording = recording

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        outputs, _ = tree_flatten(result)
        # Host arguments are fixed at capture, as the NPU bakes them into the task: the
        # containers are rebuilt so that a list the caller changes later is not the one kept.
        self.recording.calls.append(_Call(func, tree_map(_keep, args), tree_map(_keep, kwargs),
                                          outputs))
        return result


def _keep(leaf: Any) -> Any:
    return leaf


_capturing: list["NPUGraph"] = []
_updating: list[tuple[TaskGroupHandle, _Recording, _Recorder]] = []
_groups_open: list[tuple["NPUGraph", int]] = []


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.device == b.device and a.data_ptr() == b.data_ptr() and a.shape == b.shape
            and a.stride() == b.stride() and a.dtype == b.dtype)


class NPUGraph:
    """A captured block of NPU work, replayed on the captured memory (see the module doc)."""

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._recording: Optional[_Recording] = None
        self._recorder: Optional[_Recorder] = None
        self._pool = graph_pool_handle()
        self.auto_dispatch_capture = False

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError("NPUGraph.capture_begin: expected capture_error_mode 'global', "
                             f"'thread_local' or 'relaxed', but got {capture_error_mode!r}")
        if self._recording is not None or _capturing:
            raise RuntimeError("NPUGraph.capture_begin: a capture is already underway")
        if pool is not None:
            self._pool = pool
        self._calls = []
        self._recording = _Recording()
        self._recorder = _Recorder(self._recording)
        self._recorder.__enter__()
        _capturing.append(self)

    def capture_end(self) -> None:
        if self._recording is None:
            raise RuntimeError("NPUGraph.capture_end: no capture is underway")
        self._recorder.__exit__(None, None, None)
        self._calls = self._recording.calls
        self._recording = self._recorder = None
        _capturing.remove(self)

    def replay(self) -> None:
        if self._recording is not None:
            raise RuntimeError("NPUGraph.replay: the graph is still being captured")
        with torch.no_grad():
            for call in self._calls:
                if call.func in _NOT_REPLAYED:
                    continue
                outputs, _ = tree_flatten(call.func(*call.args, **call.kwargs))
                for old, new in zip(call.outputs, outputs):
                    if not isinstance(old, torch.Tensor) or _same_memory(old, new):
                        continue
                    if old.shape != new.shape:
                        raise RuntimeError(
                            f"NPUGraph.replay: {call.func} now returns shape "
                            f"{tuple(new.shape)}, but the capture returned {tuple(old.shape)}; "
                            "a graph replays fixed shapes")
                    old.copy_(new)

    def reset(self) -> None:
        self._calls = []

    def pool(self) -> Any:
        return self._pool

    def update(self, cpu_update_input: list) -> None:
        """Give the graph's attention-style calls new host arguments (``auto_dispatch_capture``
        graphs): one dict per call taking any of the given keywords, or one dict for all."""
        if not self.auto_dispatch_capture:
            raise RuntimeError("NPUGraph.update: the graph was not captured with "
                               "auto_dispatch_capture=True, so it cannot be updated")
        targets = [c for c in self._calls
                   if any(key in c.kwargs for d in cpu_update_input for key in d)]
        if len(cpu_update_input) == 1:
            cpu_update_input = [dict(cpu_update_input[0]) for _ in targets]
        if len(cpu_update_input) != len(targets):
            raise RuntimeError(f"NPUGraph.update: expected {len(targets)} entries in "
                               f"cpu_update_input (one per updatable call), but got "
                               f"{len(cpu_update_input)}")
        for call, changes in zip(targets, cpu_update_input):
            call.kwargs = {**call.kwargs, **changes}

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w", encoding="utf-8") as f:
            json.dump([str(c.func) for c in self._calls], f, indent=1)

    def __repr__(self) -> str:
        return f"NPUGraph({len(self._calls)} recorded calls)"


class graph:
    """``with torch.npu.graph(g):`` captures the block into ``g`` (torch_npu's signature)."""

    def __init__(self, npu_graph: NPUGraph, pool: Any = None, stream: Any = None,
                 auto_dispatch_capture: bool = False, capture_error_mode: str = "global"):
        self.npu_graph = npu_graph
        self.pool = pool
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        npu_graph.auto_dispatch_capture = auto_dispatch_capture

    def __enter__(self) -> None:
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: Any) -> None:
        self.npu_graph.capture_end()


def graph_pool_handle() -> tuple[int, int]:
    """An opaque memory-pool token (the captured memory is simply kept alive here)."""
    graph_pool_handle.counter += 1
    return (0, graph_pool_handle.counter)


graph_pool_handle.counter = 0


def is_current_stream_capturing() -> bool:
    return bool(_capturing)


def graph_task_group_begin(stream: Any = None) -> None:
    if not _capturing:
        raise RuntimeError("graph_task_group_begin: expected a graph capture underway, but "
                           "none is")
    graph_ = _capturing[-1]
    _groups_open.append((graph_, len(graph_._recording.calls)))


def graph_task_group_end(stream: Any = None) -> TaskGroupHandle:
    if not _groups_open:
        raise RuntimeError("graph_task_group_end: expected an open graph_task_group_begin, "
                           "but there is none")
    graph_, start = _groups_open.pop()
    return TaskGroupHandle(graph_, start, len(graph_._recording.calls))


def graph_task_update_begin(stream: Any, handle: TaskGroupHandle) -> None:
    """The calls up to ``graph_task_update_end`` replace the task group's calls (they also
    run now, which changes nothing the next replay does not recompute)."""
    if not isinstance(handle, TaskGroupHandle):
        raise TypeError("graph_task_update_begin: expected handle a graph_task_group_end "
                        f"result, but got {type(handle).__name__}")
    if _updating:
        raise RuntimeError("graph_task_update_begin: an update is already underway")
    recording = _Recording()
    recorder = _Recorder(recording)
    recorder.__enter__()
    _updating.append((handle, recording, recorder))


def graph_task_update_end(stream: Any = None) -> None:
    if not _updating:
        raise RuntimeError("graph_task_update_end: expected an open graph_task_update_begin, "
                           "but there is none")
    handle, recording, recorder = _updating.pop()
    recorder.__exit__(None, None, None)
    graph_ = handle.graph
    if graph_._recording is not None:
        raise RuntimeError("graph_task_update_end: the task group's graph is still being "
                           "captured")
    calls = graph_._calls
    if handle.stop - handle.start != len(recording.calls):
        # The replacement has as many calls as the group had in every use seen; a different
        # count would move the other groups' handles, so it is refused.
        raise RuntimeError(f"graph_task_update_end: the update launched {len(recording.calls)} "
                           f"operator calls, but the task group holds "
                           f"{handle.stop - handle.start}")
    calls[handle.start:handle.stop] = recording.calls


class ExternalEvent:
    """``torch.npu.ExternalEvent``: orders an update stream against replay; work here is
    synchronous, so every method returns at once."""

    def record(self, stream: Any = None) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def reset(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None) -> Any:
    """The callables themselves: a graphed callable computes what its source does, forward
    and backward, and eager execution is that computation here."""
    return copy.copy(callables) if isinstance(callables, tuple) else callables


API = ("NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
       "graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin",
       "graph_task_update_end", "ExternalEvent", "make_graphed_callables")
