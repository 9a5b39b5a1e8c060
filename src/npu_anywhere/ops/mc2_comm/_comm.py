"""The collectives of the communication-fused ops, over the group an ``hcom`` name designates.

``hcom`` is the name ``get_hccl_comm_name`` gives (:mod:`npu_anywhere.compat.hccl`).  Without a
group of that name -- no ``init_process_group``, or a single process -- every collective is the
identity over one rank, so single-process code computes the one-rank result.  Collectives run
on CPU copies (the gloo backend), in the dtype given; the reducing ops pass float32 copies of
their rounded partials, so that the sum is rounded once more at the end.
"""

from __future__ import annotations

import torch

from ... import checks


def _hccl():
    # Imported on first use: importing npu_anywhere must not import the compat package.
    from ...compat import hccl
    return hccl


def group_size(hcom: str) -> int:
    return _hccl().group_size(hcom)


def expect_world_size(op: str, param: str, world_size: int, hcom: str) -> None:
    """``world_size`` (an argument the NPU takes on trust) must be the group's size."""
    size = group_size(hcom)
    checks.expect(world_size == size, op, param,
                  lambda: f"the size of the group named by hcom ({size}"
                          f"{'' if _hccl().lookup(hcom) else ', no such group'})",
                  world_size, ValueError)


def _backend(hcom: str):
    backend = _hccl().lookup(hcom)
    return None if backend is None or backend.size() == 1 else backend


def _on_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous()


def all_reduce_sum(t: torch.Tensor, hcom: str) -> torch.Tensor:
    backend = _backend(hcom)
    if backend is None:
        return t
    buf = _on_cpu(t).clone()
    backend.allreduce([buf]).wait()
    return buf.to(t.device)


def all_gather_rows(t: torch.Tensor, hcom: str) -> torch.Tensor:
    """The ranks' ``t`` concatenated along dim 0, in rank order."""
    backend = _backend(hcom)
    if backend is None:
        return t
    src = _on_cpu(t)
    out = src.new_empty((src.shape[0] * backend.size(), *src.shape[1:]))
    backend._allgather_base(out, src).wait()
    return out.to(t.device)


def reduce_scatter_rows(t: torch.Tensor, hcom: str) -> torch.Tensor:
    """This rank's block of rows of the sum of the ranks' ``t``."""
    backend = _backend(hcom)
    if backend is None:
        return t
    src = _on_cpu(t)
    out = src.new_empty((src.shape[0] // backend.size(), *src.shape[1:]))
    backend._reduce_scatter_base(out, src).wait()
    return out.to(t.device)


def all_to_all_rows(t: torch.Tensor, hcom: str, send_rows: list[int],
                    recv_rows: list[int]) -> torch.Tensor:
    """All-to-all-v: ``send_rows[i]`` rows (in order) go to rank i, ``recv_rows[i]`` come from
    rank i and are stacked in rank order."""
    backend = _backend(hcom)
    if backend is None:
        return t
    src = _on_cpu(t)
    out = src.new_empty((sum(recv_rows), *src.shape[1:]))
    backend.alltoall_base(out, src, list(recv_rows), list(send_rows)).wait()
    return out.to(t.device)
