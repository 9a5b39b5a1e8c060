"""Paged-KV attention that reads the cache blocks in place (decode and chunked prefill).

The cache is ``[num_blocks, block_size, Nkv, D]`` and ``block_table[b, p]`` names the block that
holds tokens ``p * block_size .. (p + 1) * block_size - 1`` of batch ``b``.  Instead of gathering
every sequence into a dense ``[B, Nkv, Skv, D]`` copy (what a hand-written implementation does:
the whole cache read, written and read again, and page-faulting fresh memory), the online-softmax
engine (:mod:`.online`) asks for a few blocks of a few sequences at a time: ``index_select``
gathers those blocks into a small reused buffer, one copy converts them to float32 in the
``[b, Nkv, keys, D]`` order the matmul wants, and the scores of that chunk are folded into the
running softmax.  Memory beyond the output is two chunk buffers (a few MiB) whatever the context
length; block ids past a sequence's length are never read except to fill a partly used chunk
(clamped into range, then masked by ``kv_lens``).

The same path serves decode (``Sq = 1``) and chunked prefill (TND queries over a paged cache with
the bottom-right causal band), and every mask / pse / band the problem can carry.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...ops.attention.problem import AttentionProblem
from . import online

CHUNK_BYTES = 4 * 2**20
"""Target size of one gathered float32 key chunk (stays in the last-level cache)."""


def supports(problem: AttentionProblem) -> Optional[str]:
    if not problem.paged:
        return "dense KV (see dense.py)"
    if problem.block_size <= 0:
        return "block_size must be positive"
    return None


def _plan(problem: AttentionProblem) -> tuple[int, int]:
    """(batches per group, blocks per chunk) so a float32 key chunk is about CHUNK_BYTES."""
    cache = problem.key_cache
    block_bytes = problem.block_size * cache.shape[2] * cache.shape[3] * 4
    budget = max(1, CHUNK_BYTES // block_bytes)
    longest = max(problem.kv_lens, default=0)
    blocks = max(1, -(-longest // problem.block_size))
    per_chunk = min(blocks, budget)
    group = max(1, min(problem.batch, budget // per_chunk))
    return group, per_chunk


def _reader(problem: AttentionProblem, dtype: torch.dtype):
    key_cache, value_cache = problem.key_cache, problem.value_cache
    table = problem.block_table.long().clamp(0, key_cache.shape[0] - 1)
    bs = problem.block_size
    n_kv = key_cache.shape[2]
    buffers: dict = {}

    def buffer(name, shape, like):
        key = (name, shape)
        if key not in buffers:
            buffers[key] = torch.empty(shape, dtype=like, device=key_cache.device)
        return buffers[key]

    def gather(cache, name, ids, nb, nblk):
        d = cache.shape[3]
        rows = buffer(name + "_rows", (ids.numel(), bs, n_kv, d), cache.dtype)
        torch.index_select(cache, 0, ids, out=rows)
        dense = buffer(name, (nb, n_kv, nblk * bs, d), dtype)
        dense.view(nb, n_kv, nblk, bs, d).copy_(
            rows.view(nb, nblk, bs, n_kv, d).permute(0, 3, 1, 2, 4))
        return dense

    def read(b0, b1, j0, j1):
        p0, p1 = j0 // bs, -(-j1 // bs)
        ids = table[b0:b1, p0:p1].reshape(-1)
        nb, nblk = b1 - b0, p1 - p0
        return gather(key_cache, "k", ids, nb, nblk), gather(value_cache, "v", ids, nb, nblk)

    return read


def paged_attention(problem: AttentionProblem) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(out [B, Nq, Sq, Dv], lse [B, Nq, Sq] or None)`` of a paged-KV problem."""
    dtype = online.compute_dtype(problem)
    b, n_q, s_q, _ = problem.query.shape
    device = problem.query.device
    out = torch.zeros((b, n_q, s_q, problem.head_dim_v), dtype=dtype, device=device)
    lse = None
    if problem.return_lse:
        lse = torch.full((b, n_q, s_q), float("-inf"), dtype=dtype, device=device)
    group, per_chunk = _plan(problem)
    read = _reader(problem, dtype)
    chunk = per_chunk * problem.block_size
    for b0 in range(0, b, group):
        online.attend(problem, read, b0, min(b, b0 + group), out=out, lse=lse, chunk=chunk,
                      granule=problem.block_size)
    return out, lse


paged_attention.supports = supports
