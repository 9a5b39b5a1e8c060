"""Shared input handling of the DeepSeek-V3.2 sparse-attention (DSA) ops.

npu_lightning_indexer, npu_sparse_flash_attention and their quantized and backward forms take
the same kind of inputs: a query in BSND or TND, a key (and value) in BSND, TND or PA_BSND
(paged: ``[block_count, block_size, N, D]`` read through a ``block_table``), and int32
``actual_seq_lengths`` tensors (per-batch lengths for BSND and PA_BSND, prefix sums for TND).

The metadata half (:func:`check_inputs`) runs in the check, so eager, FakeTensor and
``torch.compile`` raise alike; the value half (:func:`query_spans`, :func:`key_spans`) reads the
length tensors and runs in the references only (eager: data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ... import checks

MAX_TOKENS = 9223372036854775807     # pre_tokens / next_tokens: only the default is supported
QUERY_LAYOUTS = ("BSND", "TND")
KEY_LAYOUTS = ("BSND", "TND", "PA_BSND")


@dataclass(frozen=True)
class Shapes:
    """What the check learnt from the shapes: batch, query heads, key heads, head dim."""
    batch: int
    q_heads: int
    k_heads: int
    head_dim: int


def _lengths(op: str, name: str, t: Optional[torch.Tensor], batch: Optional[int]) -> None:
    if t is None:
        return
    checks.expect_dtype(t, (torch.int32, torch.int64), op, name)
    checks.expect(t.dim() == 1, op, name, "a 1-D tensor", lambda: f"shape {tuple(t.shape)}",
                  ValueError)
    if batch is not None:
        checks.expect(t.shape[0] == batch, op, name, lambda: f"length B = {batch}",
                      lambda: f"length {t.shape[0]}", ValueError)


def check_inputs(op: str, query: torch.Tensor, key: torch.Tensor, *, lengths_q, lengths_k,
                 block_table, layout_query: str, layout_key: str, key_name: str = "key",
                 lengths_k_name: str = "actual_seq_lengths_key",
                 layout_key_name: str = "layout_key", pre_tokens: int = MAX_TOKENS,
                 next_tokens: int = MAX_TOKENS, layout_query_name: str = "layout_query",
                 lengths_q_name: str = "actual_seq_lengths_query") -> Shapes:
    """The layout, rank, length-tensor and block-table rules shared by the DSA ops.

    The backward ops name their arguments differently (one ``layout``, ``actual_seq_qlen``):
    the ``*_name`` arguments give the spelling the error messages use."""
    checks.expect_one_of(layout_query, QUERY_LAYOUTS, op, layout_query_name)
    checks.expect_one_of(layout_key, KEY_LAYOUTS, op, layout_key_name)
    checks.expect(layout_key == "PA_BSND" or layout_key == layout_query, op, layout_key_name,
                  lambda: f"equal to {layout_query_name} ({layout_query!r}) unless it is "
                  "'PA_BSND'",
                  repr(layout_key), ValueError)
    checks.expect(pre_tokens == MAX_TOKENS, op, "pre_tokens", f"the default {MAX_TOKENS}",
                  repr(pre_tokens), ValueError)
    checks.expect(next_tokens == MAX_TOKENS, op, "next_tokens", f"the default {MAX_TOKENS}",
                  repr(next_tokens), ValueError)
    q_rank = 4 if layout_query == "BSND" else 3
    checks.expect(query.dim() == q_rank, op, "query",
                  f"a {q_rank}-D tensor for {layout_query_name} {layout_query!r}",
                  lambda: f"shape {tuple(query.shape)}", ValueError)
    k_rank = 3 if layout_key == "TND" else 4
    checks.expect(key.dim() == k_rank, op, key_name,
                  f"a {k_rank}-D tensor for {layout_key_name} {layout_key!r}",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    checks.expect(query.numel() > 0, op, "query", "a non-empty tensor",
                  lambda: f"shape {tuple(query.shape)}", ValueError)
    checks.expect(key.numel() > 0, op, key_name, "a non-empty tensor",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    if layout_query == "TND":
        checks.expect(lengths_q is not None, op, lengths_q_name,
                      f"a tensor when {layout_query_name} is 'TND'", "None", ValueError)
        batch = lengths_q.shape[0] if lengths_q.dim() == 1 else -1
    else:
        batch = query.shape[0]
    _lengths(op, lengths_q_name, lengths_q, batch)
    if layout_key in ("TND", "PA_BSND"):
        checks.expect(lengths_k is not None, op, lengths_k_name,
                      f"a tensor when {layout_key_name} is {layout_key!r}", "None", ValueError)
    _lengths(op, lengths_k_name, lengths_k, batch)
    if layout_key == "BSND":
        checks.expect(key.shape[0] == batch, op, key_name, lambda: f"batch size B = {batch}",
                      lambda: f"shape {tuple(key.shape)}", ValueError)
    if layout_key == "PA_BSND":
        checks.expect(block_table is not None, op, "block_table",
                      f"a tensor when {layout_key_name} is 'PA_BSND'", "None", ValueError)
        checks.expect_dtype(block_table, (torch.int32,), op, "block_table")
        checks.expect(block_table.dim() == 2 and block_table.shape[0] == batch, op,
                      "block_table", lambda: f"a 2-D tensor [B = {batch}, max_blocks]",
                      lambda: f"shape {tuple(block_table.shape)}", ValueError)
    else:
        checks.expect(block_table is None, op, "block_table",
                      f"None unless {layout_key_name} is 'PA_BSND'", "a tensor", ValueError)
    q_heads, head_dim = query.shape[-2], query.shape[-1]
    k_heads = key.shape[-2]
    checks.expect(k_heads > 0 and q_heads % k_heads == 0, op, "query",
                  lambda: f"a head count N1 divisible by the {key_name} head count N2 = {k_heads}",
                  lambda: f"shape {tuple(query.shape)}", ValueError)
    return Shapes(batch, q_heads, k_heads, head_dim)


def _values(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.tolist()]


def query_spans(op: str, query: torch.Tensor, layout: str, lengths,
                name: str = "actual_seq_lengths_query") -> list[tuple[int, int]]:
    """(first row, row count) of each batch's valid query tokens, in rows of the flattened
    query (``B * S1`` rows for BSND, ``T1`` for TND)."""
    if layout == "TND":
        ends = _values(lengths)
        total = query.shape[0]
        ok = all(e >= 0 for e in ends) and all(a <= b for a, b in zip(ends, ends[1:])) and \
            (not ends or ends[-1] <= total)
        checks.expect(ok, op, name,
                      lambda: f"non-negative non-decreasing prefix sums at most T1 = {total}",
                      ends, ValueError)
        starts = [0] + ends[:-1]
        return [(s, e - s) for s, e in zip(starts, ends)]
    b, s1 = query.shape[0], query.shape[1]
    counts = [s1] * b if lengths is None else _values(lengths)
    checks.expect(all(0 <= c <= s1 for c in counts), op, name,
                  lambda: f"values in [0, S1 = {s1}]", counts, ValueError)
    return [(i * s1, c) for i, c in enumerate(counts)]


def key_spans(op: str, key: torch.Tensor, layout: str, lengths, block_table, batch: int,
              lengths_name: str = "actual_seq_lengths_key") -> list[tuple[int, int]]:
    """(first row, length) of each batch's keys: rows of ``key.flatten(0, -3)`` for BSND and
    TND; for PA_BSND the start is 0 and the rows are read through the block table."""
    if layout == "TND":
        ends = _values(lengths)
        total = key.shape[0]
        ok = all(e >= 0 for e in ends) and all(a <= b for a, b in zip(ends, ends[1:])) and \
            (not ends or ends[-1] <= total)
        checks.expect(ok, op, lengths_name,
                      lambda: f"non-negative non-decreasing prefix sums at most T2 = {total}",
                      ends, ValueError)
        starts = [0] + ends[:-1]
        return [(s, e - s) for s, e in zip(starts, ends)]
    if layout == "BSND":
        s2 = key.shape[1]
        counts = [s2] * batch if lengths is None else _values(lengths)
        checks.expect(all(0 <= c <= s2 for c in counts), op, lengths_name,
                      lambda: f"values in [0, S2 = {s2}]", counts, ValueError)
        return [(i * s2, c) for i, c in enumerate(counts)]
    counts = _values(lengths)
    block_size = key.shape[1]
    capacity = block_table.shape[1] * block_size
    checks.expect(all(0 <= c <= capacity for c in counts), op, lengths_name,
                  lambda: f"values in [0, block_table.size(1) * block_size = {capacity}]",
                  counts, ValueError)
    need = max([(c + block_size - 1) // block_size for c in counts] + [0])
    if need:
        used = block_table[:, :need]
        blocks = key.shape[0]
        # Only the blocks a sequence reaches are read; their ids must name blocks of the cache.
        reach = torch.arange(need, device=used.device).unsqueeze(0) * block_size < \
            torch.tensor(counts, device=used.device).unsqueeze(1)
        bad = reach & ((used < 0) | (used >= blocks))
        checks.expect(not bool(bad.any()), op, "block_table",
                      lambda: f"block ids in [0, {blocks}) for the blocks the sequences use",
                      lambda: used[bad].tolist(), ValueError)
    return [(0, c) for c in counts]


def batch_rows(x: torch.Tensor, layout: str, span: tuple[int, int], batch_index: int,
               block_table=None) -> torch.Tensor:
    """The ``[length, N, D]`` rows of batch ``batch_index`` (a view when not paged)."""
    start, length = span
    if layout == "PA_BSND":
        block_size = x.shape[1]
        n_blocks = (length + block_size - 1) // block_size
        ids = block_table[batch_index, :n_blocks].long()
        return x.index_select(0, ids).flatten(0, 1)[:length]
    return x.flatten(0, -3)[start:start + length]


def causal_limit(rows: int, keys: int, device) -> torch.Tensor:
    """rightDownCausal (sparse_mode 3): query row ``i`` of ``rows`` sees keys ``j`` with
    ``j <= keys - rows + i``; returns how many keys each row sees, clamped to [0, keys]."""
    i = torch.arange(rows, device=device)
    return (keys - rows + i + 1).clamp(0, keys)
