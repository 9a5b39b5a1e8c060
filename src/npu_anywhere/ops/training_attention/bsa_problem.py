"""Inputs of npu_block_sparse_attention and its backward: layouts, lengths, documented rules.

Layouts (seed 004; op-plugin docs/zh/custom_APIs/torch_npu-npu_block_sparse_attention.md):

* BNSD: query ``[B, N1, Sq, D]``, key / value ``[B, N2, Skv, D]``; ``actual_seq_lengths`` /
  ``actual_seq_lengths_kv`` optional (both or neither), each at most the padded S.
* TND: query ``[Tq, N1, D]``, key / value ``[Tkv, N2, D]``; the lengths are required and are
  *per-batch* lengths (not cumulative ends): their sums are Tq and Tkv
  (hicann/ops-transformer attention/block_sparse_attention/op_host/
  block_sparse_attention_tiling.cpp, ValidateTNDSeqlenSum).

``block_sparse_mask`` is ``[B, N1, ceil(maxSq / bx), ceil(maxSkv / by)]``; for BNSD with lengths
the block counts may follow either the padded S or the longest actual length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ... import checks, targets
from ...targets import Product

LAYOUTS = ("TND", "BNSD")
FLOATS = (torch.float16, torch.bfloat16)
MASK_DTYPES = (torch.int8, torch.uint8, torch.bool, torch.int32)
# The kernel reads the mask as one byte per block (int8 in the aclnn doc): one-byte types are
# read correctly on the NPU, an int32 mask would be misread, so strict mode rejects it.
STRICT_MASK_DTYPES = (torch.int8, torch.uint8, torch.bool)
HEAD_DIMS = (64, 128)
BLOCK_Y_ALIGN = 128
# The torch_npu doc lists the Atlas A2 and A3 training / inference parts.
SUPPORTED = frozenset({Product.A2, Product.A3})


@dataclass(frozen=True)
class BSAProblem:
    """Sizes of one call; ``q_lens`` / ``kv_lens`` are per-batch lengths (always set)."""
    layout: str
    batch: int
    heads: int
    kv_heads: int
    sq: int            # padded (BNSD) or longest (TND) query length
    skv: int
    d: int
    bx: int
    by: int
    q_lens: tuple
    kv_lens: tuple

    @property
    def packed(self) -> bool:
        return self.layout == "TND"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _lengths(op: str, name: str, values, batch: Optional[int], cap: Optional[int]) -> tuple:
    vals = tuple(int(v) for v in values)
    checks.expect(len(vals) >= 1, op, name, "a non-empty list of per-batch lengths",
                  repr(values), ValueError)
    if batch is not None:
        checks.expect(len(vals) == batch, op, name,
                      lambda: f"{batch} lengths (one per batch)", lambda: len(vals), ValueError)
    checks.expect(all(v >= 0 for v in vals), op, name, "non-negative lengths", repr(vals),
                  ValueError)
    if cap is not None:
        checks.expect(all(v <= cap for v in vals), op, name,
                      lambda: f"lengths at most the padded sequence length {cap}", repr(vals),
                      ValueError)
    return vals


def check_dtypes(op: str, query, key, value) -> Optional[Product]:
    product = targets.expect_supported(op, SUPPORTED)
    allowed = FLOATS if product is not None else FLOATS + (torch.float64,)
    checks.expect_dtype(query, allowed, op, "query")
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value}, op)
    return product


def parse(op: str, query, key, value, block_sparse_mask, block_shape, q_input_layout,
          kv_input_layout, num_key_value_heads, actual_seq_lengths, actual_seq_lengths_kv,
          ) -> BSAProblem:
    """Check everything the forward and the backward share; return the call's sizes."""
    checks.expect_one_of(q_input_layout, LAYOUTS, op, "q_input_layout")
    checks.expect_one_of(kv_input_layout, LAYOUTS, op, "kv_input_layout")
    checks.expect(kv_input_layout == q_input_layout, op, "kv_input_layout",
                  lambda: f"the same layout as q_input_layout ({q_input_layout!r})",
                  repr(kv_input_layout), ValueError)
    layout = q_input_layout
    rank = 3 if layout == "TND" else 4
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect(t.dim() == rank, op, name, lambda: f"a {rank}-D tensor for layout {layout}",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    product = check_dtypes(op, query, key, value)

    checks.expect(block_shape is not None and len(block_shape) >= 2, op, "block_shape",
                  "at least two elements [blockShapeX, blockShapeY]", repr(block_shape),
                  ValueError)
    bx, by = int(block_shape[0]), int(block_shape[1])
    checks.expect(bx > 0 and by > 0, op, "block_shape", "positive elements",
                  repr(list(block_shape)), ValueError)
    checks.expect(by % BLOCK_Y_ALIGN == 0, op, "block_shape",
                  f"blockShapeY (block_shape[1]) a multiple of {BLOCK_Y_ALIGN}", by, ValueError)

    checks.expect(key.shape == value.shape, op, "value", lambda: f"the shape of key "
                  f"{tuple(key.shape)}", lambda: f"shape {tuple(value.shape)}", RuntimeError)
    n_axis = 1
    heads, kv_heads, d = query.shape[n_axis], key.shape[n_axis], query.shape[-1]
    checks.expect(kv_heads == num_key_value_heads, op, "num_key_value_heads",
                  lambda: f"the head count of key ({kv_heads})", num_key_value_heads, ValueError)
    checks.expect(kv_heads >= 1 and heads >= kv_heads and heads % kv_heads == 0, op, "query",
                  lambda: f"a head count N1 >= N2 and divisible by N2 ({kv_heads})", heads,
                  ValueError)
    checks.expect(key.shape[-1] == d, op, "key", lambda: f"the head dim of query ({d})",
                  key.shape[-1], RuntimeError)
    checks.expect(d in HEAD_DIMS, op, "query", f"a head dim D in {list(HEAD_DIMS)}", d,
                  ValueError)
    del product

    both = actual_seq_lengths is not None and actual_seq_lengths_kv is not None
    neither = actual_seq_lengths is None and actual_seq_lengths_kv is None
    if layout == "TND":
        # the requirements carry op-plugin's own words, which callers match on
        checks.expect(actual_seq_lengths is not None, op, "actual_seq_lengths",
                      "a list of per-batch query lengths (actual_seq_lengths must be "
                      "specified when q_input_layout is TND)", "None", ValueError)
        checks.expect(actual_seq_lengths_kv is not None, op, "actual_seq_lengths_kv",
                      "a list of per-batch key/value lengths (actual_seq_lengths_kv must be "
                      "specified when kv_input_layout is TND)", "None", ValueError)
        q_lens = _lengths(op, "actual_seq_lengths", actual_seq_lengths, None, None)
        kv_lens = _lengths(op, "actual_seq_lengths_kv", actual_seq_lengths_kv, len(q_lens),
                           None)
        checks.expect(sum(q_lens) == query.shape[0], op, "actual_seq_lengths",
                      lambda: f"lengths summing to query's token count {query.shape[0]}",
                      repr(list(q_lens)), ValueError)
        checks.expect(sum(kv_lens) == key.shape[0], op, "actual_seq_lengths_kv",
                      lambda: f"lengths summing to key's token count {key.shape[0]}",
                      repr(list(kv_lens)), ValueError)
        batch, sq, skv = len(q_lens), max(q_lens), max(kv_lens)
        q_blocks, kv_blocks = [_ceil(sq, bx)], [_ceil(skv, by)]
    else:
        checks.expect(both or neither, op, "actual_seq_lengths_kv",
                      "to be given together with actual_seq_lengths (both or neither)",
                      "only one of them", ValueError)
        batch, sq, skv = query.shape[0], query.shape[2], key.shape[2]
        checks.expect(key.shape[0] == batch, op, "key", lambda: f"the batch of query ({batch})",
                      key.shape[0], RuntimeError)
        if both:
            q_lens = _lengths(op, "actual_seq_lengths", actual_seq_lengths, batch, sq)
            kv_lens = _lengths(op, "actual_seq_lengths_kv", actual_seq_lengths_kv, batch, skv)
            q_blocks = [_ceil(sq, bx), _ceil(max(q_lens), bx)]
            kv_blocks = [_ceil(skv, by), _ceil(max(kv_lens), by)]
        else:
            q_lens, kv_lens = (sq,) * batch, (skv,) * batch
            q_blocks, kv_blocks = [_ceil(sq, bx)], [_ceil(skv, by)]

    mask = block_sparse_mask
    strict = targets.current() is not None
    checks.expect_dtype(mask, STRICT_MASK_DTYPES if strict else MASK_DTYPES, op,
                        "block_sparse_mask")
    checks.expect(mask.dim() == 4, op, "block_sparse_mask",
                  "a 4-D tensor [batch, headNum, qBlocks, kvBlocks]",
                  lambda: f"shape {tuple(mask.shape)}", ValueError)
    checks.expect(mask.shape[0] == batch and mask.shape[1] == heads
                  and any(mask.shape[2] == n for n in q_blocks)
                  and any(mask.shape[3] == n for n in kv_blocks), op,
                  "block_sparse_mask",
                  lambda: f"shape [{batch}, {heads}, ceilDiv(maxQSeqLength, {bx}), "
                          f"ceilDiv(maxKvSeqLength, {by})] = [{batch}, {heads}, "
                          f"{' or '.join(map(str, sorted(set(q_blocks))))}, "
                          f"{' or '.join(map(str, sorted(set(kv_blocks))))}]",
                  lambda: f"shape {tuple(mask.shape)}", RuntimeError)
    return BSAProblem(layout, batch, heads, kv_heads, sq, skv, d, bx, by, q_lens, kv_lens)


def lse_shape(query: torch.Tensor, p: BSAProblem) -> list:
    """``[B, N, S, 1]`` (BNSD) or ``[T, N, 1]`` (TND), as op-plugin's meta function."""
    return [*query.shape[:-1], 1]


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def rows(x: torch.Tensor, p: BSAProblem, b: int, start: int, kv: bool) -> torch.Tensor:
    """Batch ``b``'s ``[heads, len, D]`` slice of ``x`` (a view; TND rows begin at ``start``)."""
    n = (p.kv_lens if kv else p.q_lens)[b]
    if p.packed:
        return x[start:start + n].transpose(0, 1)
    return x[b, :, :n]
