"""The flat layout in which npu_mhc_sinkhorn saves its intermediates for the backward op.

The kernel keeps what one vector core processes in one pass of its unified buffer together, so
``norm_out`` and ``sum_out`` are 1-D and ordered by the kernel's tiling (op-plugin
test/test_custom_ops/test_npu_mhc_sinkhorn_backward.py builds them this way for the NPU kernel;
sizes from op_plugin/ops/opapi/MhcSinkhornKernelNpuOpApi.cpp: ``2 * num_iters * T * n * 8`` and
``2 * num_iters * T * 8``):

* the T tokens are split over up to 64 cores, ``ceil(T / 64)`` each (the last takes the rest),
  and each core's tokens into chunks of ``ub`` tokens (the last chunk shorter), where ``ub`` is
  what fits the 248 KiB unified buffer in both the forward and the backward kernel;
* per chunk of ``u`` tokens, ``norm_out`` holds the ``2 * num_iters`` normalised matrices as
  ``[2 * num_iters, n, u, 8]`` (row, token, column padded to 8 with zeros);
* per chunk, ``sum_out`` holds for each of the ``num_iters`` iterations its row sums as
  ``[8, u]`` (row padded to 8 with ones; iteration 0, which has no row step, stores ones) and
  then its column sums as ``[u, 8]`` (padded with zeros).

``norm_out[0]`` is the softmax itself (the kernel adds ``eps`` after storing it), which is what
the softmax gradient needs.
"""

from __future__ import annotations

import torch

CORES = 64
UB_BYTES = 248 * 1024
N_ALIGN = 8            # one 32-byte block of float32
_MASK_BYTES = 64
_RESERVED_BYTES = 256 * 2
_DOUBLE_BUFFER = 2
_VF_T_FACTOR = 8


def _align(v: int) -> int:
    return (v + N_ALIGN - 1) // N_ALIGN * N_ALIGN


def _forward_floats(ub: int, n: int) -> int:
    io = 2 * _align(ub * n * n)
    return io + 2 * _align(n * ub * N_ALIGN) + 2 * _align(ub * N_ALIGN)


def _backward_floats(ub: int, n: int) -> int:
    io = 2 * _align(ub * n * n)
    return io + _align(2 * ub * n * N_ALIGN) + _align(2 * ub * N_ALIGN)


def _ub_factor(t_main: int, n: int, floats, round_to_vf: bool) -> int:
    available = (UB_BYTES - _MASK_BYTES - _RESERVED_BYTES) // _DOUBLE_BUFFER
    if floats(t_main, n) * 4 <= available:
        return t_main
    ub = available // (floats(1, n) * 4)
    if round_to_vf and ub >= _VF_T_FACTOR:
        ub = ub // _VF_T_FACTOR * _VF_T_FACTOR
    return ub


def chunk_sizes(tokens: int, n: int) -> list[int]:
    """Token counts of the kernel's chunks, in memory order."""
    t_main = (tokens + CORES - 1) // CORES
    used = (tokens + t_main - 1) // t_main
    t_tail = tokens - t_main * (used - 1)
    # Forward and backward kernels must agree on one chunking: the smaller buffer wins.
    ub = min(_ub_factor(t_main, n, _forward_floats, False),
             _ub_factor(t_main, n, _backward_floats, True))
    sizes = []
    for core in range(used):
        count = t_tail if core == used - 1 else t_main
        loops = (count + ub - 1) // ub
        sizes += [ub] * (loops - 1) + [count - ub * (loops - 1)]
    return sizes


def pack(norms: torch.Tensor, row_sums: torch.Tensor, col_sums: torch.Tensor):
    """``norms [2I, T, n, n]``, ``row_sums`` and ``col_sums [I, T, n]`` to the flat layout."""
    steps, tokens, n = norms.shape[0], norms.shape[1], norms.shape[-1]
    iters = steps // 2
    # Written chunk by chunk into the zero-filled outputs (the padding), one copy per value.
    norm = norms.new_zeros(steps * tokens * n * N_ALIGN)
    sums = norms.new_zeros(steps * tokens * N_ALIGN)
    norm_at = sum_at = start = 0
    for u in chunk_sizes(tokens, n):
        stop = start + u
        size = steps * n * u * N_ALIGN
        norm[norm_at:norm_at + size].view(steps, n, u, N_ALIGN)[..., :n].copy_(
            norms[:, start:stop].transpose(1, 2))
        norm_at += size
        size = steps * u * N_ALIGN
        block = sums[sum_at:sum_at + size].view(iters, 2, N_ALIGN * u)
        rows = block[:, 0].view(iters, N_ALIGN, u)
        rows[:, :n].copy_(row_sums[:, start:stop].transpose(1, 2))
        rows[:, n:] = 1.0                       # the row part is padded with ones
        block[:, 1].view(iters, u, N_ALIGN)[..., :n].copy_(col_sums[:, start:stop])
        sum_at += size
        start = stop
    return norm, sums


def unpack(norm: torch.Tensor, sums: torch.Tensor, tokens: int, n: int, iters: int):
    """The inverse of :func:`pack`: ``norms [2I, T, n, n]``, ``row_sums``, ``col_sums``."""
    norms, rows, cols = [], [], []
    norm_at = sum_at = 0
    for u in chunk_sizes(tokens, n):
        size = 2 * iters * n * u * N_ALIGN
        block = norm[norm_at:norm_at + size].reshape(2 * iters, n, u, N_ALIGN)
        norms.append(block[..., :n].transpose(1, 2))                       # [2I, u, n, n]
        norm_at += size
        size = 2 * iters * u * N_ALIGN
        block = sums[sum_at:sum_at + size].reshape(iters, 2, N_ALIGN * u)
        rows.append(block[:, 0].reshape(iters, N_ALIGN, u)[:, :n].transpose(1, 2))
        cols.append(block[:, 1].reshape(iters, u, N_ALIGN)[..., :n])
        sum_at += size
    return torch.cat(norms, 1), torch.cat(rows, 1), torch.cat(cols, 1)
