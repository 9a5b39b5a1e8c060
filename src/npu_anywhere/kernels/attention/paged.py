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

One-token decode without mask or pse has a fused path once it is hot (the tiering of
``kernels/compiled.py``): on the CPU a C++ loop nest (:mod:`.cpu_decode`) that reads each cached
token row once, in place; elsewhere :func:`decode_core` compiled by Inductor, which indexes the
block table inside its loops.  Neither writes a gathered copy of the cache.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..compiled import CompiledProvider
from ...ops.attention.problem import AttentionProblem, probs_dtype
from . import cpu_decode, online

CHUNK_BYTES = 16 * 2**20
"""Target size of one gathered float32 key chunk: large enough that the per-chunk op count
(about 20 torch calls) stays small against the arithmetic, small against the cache."""


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


def _as_words(cache: torch.Tensor) -> torch.Tensor:
    """A contiguous cache as ``[num_blocks, words]`` of the widest integer that tiles a block.

    ``index_select`` copies 8-byte words with a fast row copy, but moves bfloat16 / float16
    elements one at a time (measured 100x slower on a 2 MiB gather); the bits are the same.
    A non-contiguous cache (a permuted view) is returned as it is: viewing it flat would copy it.
    """
    if not cache.is_contiguous():
        return cache
    flat = cache.view(cache.shape[0], -1)
    row_bytes = flat.shape[1] * flat.element_size()
    for word in (torch.int64, torch.int32):
        size = torch.empty((), dtype=word).element_size()
        if row_bytes % size == 0 and flat.data_ptr() % size == 0:
            return flat.view(word)
    return flat


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

    words = {name: _as_words(cache) for name, cache in (("k", key_cache), ("v", value_cache))}

    def gather(cache, name, ids, nb, nblk):
        d = cache.shape[3]
        source = words[name]
        rows = buffer(name + "_rows", (ids.numel(), *source.shape[1:]), source.dtype)
        torch.index_select(source, 0, ids, out=rows)
        rows = rows.view(cache.dtype).view(nb, nblk, bs, n_kv, d)
        dense = buffer(name, (nb, n_kv, nblk * bs, d), dtype)
        dense.view(nb, n_kv, nblk, bs, d).copy_(rows.permute(0, 3, 1, 2, 4))
        return dense

    def read(b0, b1, j0, j1):
        p0, p1 = j0 // bs, -(-j1 // bs)
        ids = table[b0:b1, p0:p1].reshape(-1)
        nb, nblk = b1 - b0, p1 - p0
        return gather(key_cache, "k", ids, nb, nblk), gather(value_cache, "v", ids, nb, nblk)

    return read


def decode_core(q, key_cache, value_cache, table, kv_lens, scale: float,
                round_to: Optional[torch.dtype] = None):
    """One-token decode over a paged cache, written for Inductor to fuse.

    ``q`` ``[B, Nkv, g, D]`` float32, caches ``[num_blocks, bs, Nkv, D]``, ``table`` ``[B, P]``
    int64 (in range), ``kv_lens`` ``[B]`` int64.  The gather ``cache[table]`` is indexed inside
    the fused loops, so the compiled code reads each cache row once, in place, and never writes
    a copy; scores are ``[B, P * bs, Nkv, g]`` (4 bytes per cached token and query head).
    ``round_to``: the dtype the probabilities are rounded to before ``P @ V``
    (``problem.probs_dtype``; the sum is taken before).
    """
    b, p = table.shape
    bs, h, d = key_cache.shape[1:]
    t = p * bs
    k = key_cache[table].view(b, t, h, 1, d).to(q.dtype)
    s = (q.unsqueeze(1) * k).sum(-1) * scale                       # [B, T, Nkv, g]
    pos = torch.arange(t, device=q.device)
    hidden = (pos.view(1, t) >= kv_lens.view(b, 1)).view(b, t, 1, 1)
    s = s.masked_fill(hidden, float("-inf"))
    m = s.amax(1)                                                  # [B, Nkv, g]
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = torch.exp(s - m_safe.unsqueeze(1))
    l = e.sum(1)
    if round_to is not None:                                       # the NPU's cast before P @ V
        e = e.to(round_to).to(q.dtype)
    v = value_cache[table].view(b, t, h, 1, value_cache.shape[3]).to(q.dtype)
    o = (e.unsqueeze(-1) * v).sum(1)                               # [B, Nkv, g, Dv]
    out = o / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)
    lse = torch.where(l == 0, torch.full_like(l, float("-inf")), m_safe + torch.log(l))
    return out, lse


def _decode_key(q, key_cache, value_cache, table, kv_lens, scale, round_to=None):
    # Heads, group, head dims and block size are fixed by the model; batch, table width and
    # cache size change while serving and turn dynamic after their first change.
    return (tuple(q.shape[1:]), tuple(key_cache.shape[1:]), tuple(value_cache.shape[1:]),
            key_cache.dtype, q.dtype, q.device.type, round_to)


def _decode_compiled_only(q, key_cache, value_cache, table, kv_lens, scale: float,
                          round_to: Optional[torch.dtype] = None):
    """:func:`decode_core` when traced by torch.compile; None when run eagerly.

    Run eagerly, ``decode_core`` would materialize the gathered cache and a product four times
    its size; the compiled provider runs its function eagerly when compilation fails, so the
    eager answer here is "not available" and the caller uses the chunked engine instead.
    """
    if not torch.compiler.is_dynamo_compiling():    # per thread, unlike is_compiling()
        return None
    return decode_core(q, key_cache, value_cache, table, kv_lens, scale, round_to)


_compiled_decode = CompiledProvider(_decode_compiled_only, _decode_key,
                                    op_name="paged decode attention")


def _decode_args(problem: AttentionProblem):
    """Arguments of :func:`decode_core` when the fused decode applies, else a reason string."""
    if problem.q_capacity != 1:
        return "more than one query row"
    if problem.mask is not None or problem.pse is not None:
        return "a mask or pse"
    if problem.banded:
        return "a band"
    if not (problem.key_cache.is_contiguous() and problem.value_cache.is_contiguous()):
        return "a non-contiguous cache (a permuted view)"
    dtype = online.compute_dtype(problem)
    b, n_q, _, d = problem.query.shape
    n_kv = problem.num_kv_heads
    q = problem.query.to(dtype).reshape(b, n_kv, n_q // n_kv, d)
    table = problem.block_table.long().clamp(0, problem.key_cache.shape[0] - 1)
    kv_lens = torch.tensor(problem.kv_lens, device=q.device)
    return (q, problem.key_cache, problem.value_cache, table, kv_lens, float(problem.scale),
            probs_dtype(problem))


def _fused_decode(args):
    """``(out, lse)`` of :func:`decode_core`'s arguments from the fastest fused kernel that is
    ready: the CPU loop nest (:mod:`.cpu_decode`), else Inductor's; None when neither is."""
    if cpu_decode.supports(*args) is None:
        return cpu_decode.decode(*args)
    if _compiled_decode.supports(*args) is not None:
        return None
    return _compiled_decode.run(*args)            # None when compilation failed (now off)


def _try_compiled_decode(problem: AttentionProblem):
    args = _decode_args(problem)
    if isinstance(args, str):
        return None
    result = _fused_decode(args)
    if result is None:
        return None
    out, lse = result
    b, n_q = problem.query.shape[:2]
    out = out.reshape(b, n_q, 1, -1)
    for bi, q_len in enumerate(problem.q_lens):
        if q_len == 0:
            out[bi] = 0
    return out, (lse.reshape(b, n_q, 1) if problem.return_lse else None)


def paged_attention(problem: AttentionProblem) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(out [B, Nq, Sq, Dv], lse [B, Nq, Sq] or None)`` of a paged-KV problem.

    One-token decode without mask / pse runs a fused kernel once it is hot (the tiering of
    ``kernels/compiled.py``: ``NPU_ANYWHERE_COMPILE_AFTER`` calls of one shape): on the CPU
    :mod:`.cpu_decode`, elsewhere :func:`decode_core` compiled; every other call, and decode
    before that, runs the chunked online-softmax engine.
    """
    fused = _try_compiled_decode(problem)
    if fused is not None:
        return fused
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
