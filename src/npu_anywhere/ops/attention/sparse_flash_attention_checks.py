"""The argument checks of npu_sparse_flash_attention (and the shared ones of its grad op).

Constraints from op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md
and seed 004; the per-product rules (strict mode) from the A2/A3 and Ascend 950 tilings the doc
lists.  Split from :mod:`.sparse_flash_attention`, which computes.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...targets import Product
from . import dsa_common as dsa

OP = "npu_sparse_flash_attention"
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_HALF = (torch.float16, torch.bfloat16)
_A2_A3_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)


def expect_sparse_selection(op, query, sparse_indices, k_heads, sparse_block_size):
    """``sparse_indices`` int32 ``query.shape[:-2] + (K heads, sparse_size > 0)`` and a
    ``sparse_block_size`` that is a power of 2 in [1, 128] (SFA and its kv-quant form)."""
    checks.expect_dtype(sparse_indices, (torch.int32,), op, "sparse_indices")
    want = list(query.shape[:-2]) + [k_heads]
    checks.expect(sparse_indices.dim() == len(want) + 1 and
                  list(sparse_indices.shape[:-1]) == want and sparse_indices.shape[-1] > 0,
                  op, "sparse_indices", lambda: f"shape {want + ['sparse_size > 0']}",
                  lambda: f"shape {tuple(sparse_indices.shape)}", ValueError)
    sbs = sparse_block_size
    checks.expect(1 <= sbs <= 128 and sbs & (sbs - 1) == 0, op, "sparse_block_size",
                  "a power of 2 in [1, 128]", repr(sbs), ValueError)


def _floats() -> tuple:
    return _HALF if targets.current() is not None else _HALF + (torch.float64,)


def _check_common(op, query, key, value, sparse_indices, *, block_table, lengths_q, lengths_kv,
                  query_rope, key_rope, sparse_block_size, layout_query, layout_kv,
                  sparse_mode, pre_tokens, next_tokens, attention_mode,
                  lengths_kv_name="actual_seq_lengths_kv", layout_kv_name="layout_kv",
                  layout_query_name="layout_query",
                  lengths_q_name="actual_seq_lengths_query"):
    checks.expect_dtype(query, _floats(), op, "query")
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    shapes = dsa.check_inputs(op, query, key, lengths_q=lengths_q, lengths_k=lengths_kv,
                              block_table=block_table, layout_query=layout_query,
                              layout_key=layout_kv, lengths_k_name=lengths_kv_name,
                              layout_key_name=layout_kv_name, pre_tokens=pre_tokens,
                              next_tokens=next_tokens, layout_query_name=layout_query_name,
                              lengths_q_name=lengths_q_name)
    checks.expect(key.shape[-1] == shapes.head_dim, op, "key",
                  lambda: f"query's head dim D = {shapes.head_dim}",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    checks.expect(tuple(value.shape) == tuple(key.shape), op, "value",
                  lambda: f"key's shape {tuple(key.shape)}", lambda: f"shape {tuple(value.shape)}",
                  ValueError)
    checks.expect((query_rope is None) == (key_rope is None), op, "query_rope",
                  "given together with key_rope", "only one of them", ValueError)
    if query_rope is not None:
        checks.expect_same_dtype({"query": query, "query_rope": query_rope,
                                  "key_rope": key_rope}, op)
        rope = query_rope.shape[-1] if query_rope.dim() else 0
        want_q = tuple(query.shape[:-1]) + (rope,)
        checks.expect(tuple(query_rope.shape) == want_q, op, "query_rope",
                      lambda: f"shape {list(want_q)} (query's shape with the rope dim)",
                      lambda: f"shape {tuple(query_rope.shape)}", ValueError)
        want_k = tuple(key.shape[:-1]) + (rope,)
        checks.expect(tuple(key_rope.shape) == want_k, op, "key_rope",
                      lambda: f"shape {list(want_k)} (key's shape with the rope dim)",
                      lambda: f"shape {tuple(key_rope.shape)}", ValueError)
    expect_sparse_selection(op, query, sparse_indices, shapes.k_heads, sparse_block_size)
    sbs = sparse_block_size
    if layout_kv == "PA_BSND":
        checks.expect(key.shape[1] % sbs == 0, op, "sparse_block_size",
                      lambda: f"a divisor of the paged block_size {key.shape[1]}", repr(sbs),
                      ValueError)
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode",
                  "0 (all) or 3 (rightDownCausal)", repr(sparse_mode), ValueError)
    checks.expect(attention_mode in (0, 2), op, "attention_mode",
                  "0 or 2 (MLA-absorb)", repr(attention_mode), ValueError)
    return shapes


def _strict_rules(op, shapes, query_rope, sparse_block_size, attention_mode, sinks, key,
                  layout_kv, product):
    if product is None:
        return
    # torch_npu doc constraints: MLA-absorb only, D = 512 with a rope dim of 64, KV_N = 1.
    checks.expect(attention_mode == 2, op, "attention_mode", "2 (MLA-absorb)",
                  repr(attention_mode), ValueError)
    checks.expect(shapes.k_heads == 1, op, "key", "a head count KV_N of 1", shapes.k_heads,
                  ValueError)
    checks.expect(shapes.head_dim == 512, op, "query", "a head dim D of 512", shapes.head_dim,
                  ValueError)
    rope = None if query_rope is None else query_rope.shape[-1]
    checks.expect(rope == 64, op, "query_rope", "a rope head dim of 64", rope, ValueError)
    if layout_kv == "PA_BSND":
        bs = key.shape[1]
        checks.expect(bs % 16 == 0 and bs <= 1024, op, "key",
                      "a paged block_size that is a multiple of 16, at most 1024", bs,
                      ValueError)
    if product is Product.ASCEND_950:
        checks.expect(1 <= shapes.q_heads <= 128, op, "query", "a head count N1 in [1, 128]",
                      shapes.q_heads, ValueError)
        checks.expect(sparse_block_size == 1, op, "sparse_block_size", "1 on the 950",
                      sparse_block_size, ValueError)
    else:
        checks.expect(shapes.q_heads in _A2_A3_HEADS, op, "query",
                      f"a head count N1 in {list(_A2_A3_HEADS)}", shapes.q_heads, ValueError)
        checks.expect(sinks is None, op, "sinks", "None on A2/A3", "a tensor", ValueError)


def check_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *,
                                 block_table=None, actual_seq_lengths_query=None,
                                 actual_seq_lengths_kv=None, query_rope=None, key_rope=None,
                                 sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
                                 sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                 next_tokens=dsa.MAX_TOKENS, attention_mode=0,
                                 return_softmax_lse=False, sinks=None):
    op = OP
    shapes = _check_common(
        op, query, key, value, sparse_indices, block_table=block_table,
        lengths_q=actual_seq_lengths_query, lengths_kv=actual_seq_lengths_kv,
        query_rope=query_rope, key_rope=key_rope, sparse_block_size=sparse_block_size,
        layout_query=layout_query, layout_kv=layout_kv, sparse_mode=sparse_mode,
        pre_tokens=pre_tokens, next_tokens=next_tokens, attention_mode=attention_mode)
    checks.expect(not (return_softmax_lse and layout_kv == "PA_BSND"), op,
                  "return_softmax_lse", "False when layout_kv is 'PA_BSND'", "True", ValueError)
    if sinks is not None:
        checks.expect_dtype(sinks, (torch.float32, torch.float64), op, "sinks")
        checks.expect(tuple(sinks.shape) == (shapes.q_heads,), op, "sinks",
                      lambda: f"shape [N1] = [{shapes.q_heads}]",
                      lambda: f"shape {tuple(sinks.shape)}", ValueError)
    tensors = {"query": query, "key": key, "value": value, "sparse_indices": sparse_indices}
    checks.expect_same_device(tensors, op)
    product = targets.expect_supported(op, _SUPPORTED)
    _strict_rules(op, shapes, query_rope, sparse_block_size, attention_mode, sinks, key,
                  layout_kv, product)
