"""torch_npu.npu_kv_quant_sparse_flash_attention: sparse flash attention on a per-tile int8 KV.

The key holds, per token and head, ``[int8 k_nope (Dn) | k_rope (rope_head_dim values of
query's dtype, as bytes) | float32 dequant scales (Dn / tile_size, as bytes)]`` along its last
axis ("combine" storage, quant_scale_repo_mode 1); the query is ``[q_nope | q_rope]``.  In the
MLA-absorb mode (attention_mode 2) the value is the dequantized key's nope part::

    k_nope = round_to_query_dtype(int8 k_nope * repeat(scale, tile_size))
    out    = npu_sparse_flash_attention(q_nope, k_nope, k_nope, sparse_indices, scale_value,
                                        query_rope=q_rope, key_rope=k_rope, ...)

Sources: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_quant_sparse_flash_attention.md
and the golden test/test_custom_ops/test_npu_kv_quant_sparse_flash_attention.py (the layout of
the combined key, the dequantization rounded to query's dtype, value = dequantized key); the
attention itself is npu_sparse_flash_attention's (float32 scores and softmax, probabilities
rounded to query's dtype).  hifloat8 keys (uint8 codes, key_dtype = torch_npu.hifloat8) are
decoded exactly before the scale.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa
from .sparse_flash_attention import _HALF, _forward
from .sparse_flash_attention_checks import expect_sparse_selection

OP = "npu_kv_quant_sparse_flash_attention"
SCHEMA = ("npu_kv_quant_sparse_flash_attention(Tensor query, Tensor key, Tensor value, "
          "Tensor sparse_indices, float scale_value, int key_quant_mode, int value_quant_mode, "
          "*, Tensor? key_dequant_scale=None, Tensor? value_dequant_scale=None, "
          "Tensor? block_table=None, Tensor? actual_seq_lengths_query=None, "
          "Tensor? actual_seq_lengths_kv=None, int sparse_block_size=1, "
          "str layout_query=\"BSND\", str layout_kv=\"BSND\", int sparse_mode=3, "
          "int pre_tokens=9223372036854775807, int next_tokens=9223372036854775807, "
          "int attention_mode=0, int quant_scale_repo_mode=1, int tile_size=128, "
          "int rope_head_dim=64, int? key_dtype=None, int? value_dtype=None, "
          "Tensor? sinks=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def _split(query, rope_head_dim, tile_size):
    """(nope dim, rope bytes, scale count, packed key width) for this query."""
    dn = query.shape[-1] - rope_head_dim
    rope_bytes = rope_head_dim * query.element_size()
    tiles = dn // tile_size if tile_size > 0 else 0
    return dn, rope_bytes, tiles, dn + rope_bytes + 4 * tiles


def check_kv_quant_sparse_flash_attention(
        query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode, *,
        key_dequant_scale=None, value_dequant_scale=None, block_table=None,
        actual_seq_lengths_query=None, actual_seq_lengths_kv=None, sparse_block_size=1,
        layout_query="BSND", layout_kv="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
        next_tokens=dsa.MAX_TOKENS, attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
        rope_head_dim=64, key_dtype=None, value_dtype=None, sinks=None):
    op = OP
    checks.expect_dtype(query, _HALF, op, "query")
    checks.expect_dtype(key, (torch.int8, torch.uint8), op, "key")
    checks.expect_dtype(value, (torch.int8, torch.uint8), op, "value")
    hif8 = key_dtype == dtypes.HIFLOAT8
    checks.expect(key_dtype is None or hif8 or dtypes.code_to_dtype(key_dtype) == torch.int8,
                  op, "key_dtype", "None, int8 or torch_npu.hifloat8", dtypes.name(key_dtype),
                  TypeError)
    checks.expect((key.dtype == torch.uint8) == hif8, op, "key",
                  "uint8 codes exactly when key_dtype is torch_npu.hifloat8 (int8 otherwise)",
                  dtypes.name(key.dtype), TypeError)
    checks.expect(key_quant_mode == 2, op, "key_quant_mode", "2 (per-tile)",
                  repr(key_quant_mode), ValueError)
    checks.expect(value_quant_mode == 2, op, "value_quant_mode", "2 (per-tile)",
                  repr(value_quant_mode), ValueError)
    checks.expect(key_dequant_scale is None, op, "key_dequant_scale",
                  "None (reserved: the scales are stored in key)", "a tensor", ValueError)
    checks.expect(value_dequant_scale is None, op, "value_dequant_scale",
                  "None (reserved: the scales are stored in key)", "a tensor", ValueError)
    checks.expect(quant_scale_repo_mode == 1, op, "quant_scale_repo_mode",
                  "1 (combine: scales stored inside key)", repr(quant_scale_repo_mode),
                  ValueError)
    checks.expect(attention_mode == 2, op, "attention_mode", "2 (MLA-absorb)",
                  repr(attention_mode), ValueError)
    checks.expect(0 < rope_head_dim < query.shape[-1], op, "rope_head_dim",
                  lambda: f"in (0, query's D = {query.shape[-1]})", repr(rope_head_dim),
                  ValueError)
    dn, _, _, width = _split(query, rope_head_dim, tile_size)
    checks.expect(tile_size > 0 and dn % tile_size == 0, op, "tile_size",
                  lambda: f"a positive divisor of the nope dim {dn}", repr(tile_size),
                  ValueError)
    shapes = dsa.check_inputs(op, query, key, lengths_q=actual_seq_lengths_query,
                              lengths_k=actual_seq_lengths_kv, block_table=block_table,
                              layout_query=layout_query, layout_key=layout_kv,
                              lengths_k_name="actual_seq_lengths_kv",
                              layout_key_name="layout_kv", pre_tokens=pre_tokens,
                              next_tokens=next_tokens)
    checks.expect(key.shape[-1] == width, op, "key",
                  lambda: f"a last dim of {width} bytes (int8 nope {dn} + rope "
                  f"{rope_head_dim} x {query.element_size()} + {dn // tile_size} float32 "
                  "scales)", lambda: f"shape {tuple(key.shape)}", ValueError)
    checks.expect(tuple(value.shape[:-1]) == tuple(key.shape[:-1]), op, "value",
                  lambda: f"key's leading shape {tuple(key.shape[:-1])}",
                  lambda: f"shape {tuple(value.shape)}", ValueError)
    expect_sparse_selection(op, query, sparse_indices, shapes.k_heads, sparse_block_size)
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode", "0 (all) or 3 (rightDownCausal)",
                  repr(sparse_mode), ValueError)
    if sinks is not None:
        checks.expect_dtype(sinks, (torch.float32,), op, "sinks")
        checks.expect(tuple(sinks.shape) == (shapes.q_heads,), op, "sinks",
                      lambda: f"shape [N1] = [{shapes.q_heads}]",
                      lambda: f"shape {tuple(sinks.shape)}", ValueError)
    checks.expect_same_device({"query": query, "key": key, "value": value,
                               "sparse_indices": sparse_indices}, op)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None:
        # torch_npu doc: bfloat16 query, paged kv, KV_N = 1, tile 128 over a 512 nope dim.
        checks.expect(query.dtype == torch.bfloat16, op, "query", "bfloat16",
                      dtypes.name(query.dtype), TypeError)
        checks.expect(layout_kv == "PA_BSND", op, "layout_kv", "'PA_BSND'", repr(layout_kv),
                      ValueError)
        checks.expect(shapes.k_heads == 1, op, "key", "a head count KV_N of 1",
                      shapes.k_heads, ValueError)
        checks.expect(tile_size == 128 and dn == 512 and rope_head_dim == 64, op, "query",
                      "a nope dim of 512 (tile_size 128) and rope_head_dim 64",
                      f"nope {dn}, tile {tile_size}, rope {rope_head_dim}", ValueError)


def dequantize_key(key, query, rope_head_dim, tile_size, key_dtype=None):
    """``(k_nope, k_rope)`` in query's dtype from the combined key bytes."""
    dn, rope_bytes, tiles, _ = _split(query, rope_head_dim, tile_size)
    raw = key[..., :dn]
    if key_dtype == dtypes.HIFLOAT8:
        from ..quant import hifloat8
        nope = hifloat8.decode_hifloat8(raw.contiguous()).to(torch.float32)
    else:
        nope = raw.to(torch.float32)
    as_bytes = key.contiguous().view(torch.uint8) if key.dtype != torch.uint8 else key.contiguous()
    rope = as_bytes[..., dn:dn + rope_bytes].contiguous().view(query.dtype)
    scales = as_bytes[..., dn + rope_bytes:].contiguous().view(torch.float32)
    nope = (nope * scales.repeat_interleave(tile_size, dim=-1)).to(query.dtype)
    return nope, rope


def kv_quant_sparse_flash_attention_reference(
        query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode, *,
        key_dequant_scale=None, value_dequant_scale=None, block_table=None,
        actual_seq_lengths_query=None, actual_seq_lengths_kv=None, sparse_block_size=1,
        layout_query="BSND", layout_kv="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
        next_tokens=dsa.MAX_TOKENS, attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
        rope_head_dim=64, key_dtype=None, value_dtype=None, sinks=None):
    dn = query.shape[-1] - rope_head_dim
    k_nope, k_rope = dequantize_key(key, query, rope_head_dim, tile_size, key_dtype)
    out, _, _ = _forward(
        OP, query[..., :dn], k_nope, k_nope, sparse_indices, scale_value,
        block_table=block_table, lengths_q=actual_seq_lengths_query,
        lengths_kv=actual_seq_lengths_kv, query_rope=query[..., dn:], key_rope=k_rope,
        sparse_block_size=sparse_block_size, layout_query=layout_query, layout_kv=layout_kv,
        sparse_mode=sparse_mode, sinks=sinks, round_p=True)
    return out.view(tuple(query.shape[:-1]) + (dn,)).to(query.dtype)


def _fake(query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode, *,
          key_dequant_scale=None, value_dequant_scale=None, block_table=None,
          actual_seq_lengths_query=None, actual_seq_lengths_kv=None, sparse_block_size=1,
          layout_query="BSND", layout_kv="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
          next_tokens=dsa.MAX_TOKENS, attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
          rope_head_dim=64, key_dtype=None, value_dtype=None, sinks=None):
    return query.new_empty(tuple(query.shape[:-1]) + (query.shape[-1] - rope_head_dim,))


kv_quant_sparse_flash_attention_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_kv_quant_sparse_flash_attention,
    reference=kv_quant_sparse_flash_attention_reference, fake=_fake, metadata_check=True,
    info=OpInfo(api="torch_npu"))
kv_quant_sparse_flash_attention_op.forbid_autograd("torch_npu defines no backward for it")


def npu_kv_quant_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *args,
                                        key_dequant_scale=None, value_dequant_scale=None,
                                        block_table=None, actual_seq_lengths_query=None,
                                        actual_seq_lengths_kv=None, sparse_block_size=None,
                                        layout_query="BSND", layout_kv="BSND", sparse_mode=3,
                                        pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
                                        attention_mode=0, quant_scale_repo_mode=1,
                                        tile_size=128, rope_head_dim=64, key_dtype=None,
                                        value_dtype=None, sinks=None, key_quant_mode=None,
                                        value_quant_mode=None):
    """Sparse flash attention (MLA-absorb) over an int8 per-tile quantized, combined KV cache.

    Formula (op-plugin torch_npu-npu_kv_quant_sparse_flash_attention.md and its golden)::

        k_nope = bf16(int8 k_nope * repeat(scale, tile_size));  V = k_nope
        out    = softmax(scale_value * [q_nope, q_rope] @ [k_nope, k_rope]^T over the
                         selected tokens) @ V            (as npu_sparse_flash_attention)

    Parameters
    ----------
    query : Tensor
        bfloat16 / float16 ``[..., Dn + rope_head_dim]``: q_nope then q_rope (BSND / TND).
    key : Tensor
        int8 (or uint8 hifloat8 codes with ``key_dtype=torch_npu.hifloat8``) ``[..., N2,
        Dn + rope_head_dim * itemsize + 4 * Dn / tile_size]``: the int8 nope part, the rope
        part's bytes (query's dtype) and the float32 per-tile scales' bytes.  BSND, TND or
        PA_BSND (with ``block_table``).
    value : Tensor
        int8 / uint8 with key's leading shape; MLA-absorb reads the values from ``key``.
    sparse_indices, scale_value, sparse_block_size, sparse_mode, sinks, the lengths, layouts :
        As :func:`npu_sparse_flash_attention`.
    key_quant_mode, value_quant_mode : int
        2 (per-tile), the only mode.  Positional after ``scale_value``: op-plugin's order
        ``(key_quant_mode, value_quant_mode)``, or seed 004's ``(sparse_block_size,
        key_quant_mode, value_quant_mode)`` when three values are given.
    key_dequant_scale, value_dequant_scale : None
        Reserved (the scales are inside ``key``).
    attention_mode : int
        2 (MLA-absorb), the only mode.
    quant_scale_repo_mode : int
        1 (combine), the only mode.
    tile_size, rope_head_dim : int
        Elements per scale (dividing Dn) and the rope dim (op-plugin defaults 128 and 64).

    Returns
    -------
    Tensor
        query's shape with D = Dn, query's dtype.

    Constraints
    -----------
    Strict mode (A2, A3, 950): bfloat16 query, PA_BSND kv, ``KV_N = 1``, ``Dn = 512``,
    tile_size 128, rope_head_dim 64.

    Notes
    -----
    The seed's defaults (quant_scale_repo_mode 0, tile_size 0, rope_head_dim 0) are rejected
    there too: only combine storage, a positive tile and a rope dim are documented to work;
    op-plugin's yaml defaults (1, 128, 64) are used.  Inference only (no backward).
    """
    if len(args) == 3:
        sparse_block_size, key_quant_mode, value_quant_mode = args
    elif len(args) == 2:
        key_quant_mode, value_quant_mode = args
    else:
        checks.expect(len(args) == 0 and key_quant_mode is not None and
                      value_quant_mode is not None, OP, "key_quant_mode",
                      "and value_quant_mode given (positionally or by keyword)",
                      f"{len(args)} extra positional arguments", TypeError)
    return kv_quant_sparse_flash_attention_op(
        query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode,
        key_dequant_scale=key_dequant_scale, value_dequant_scale=value_dequant_scale,
        block_table=block_table, actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_kv=actual_seq_lengths_kv,
        sparse_block_size=1 if sparse_block_size is None else sparse_block_size,
        layout_query=layout_query, layout_kv=layout_kv, sparse_mode=sparse_mode,
        pre_tokens=pre_tokens, next_tokens=next_tokens, attention_mode=attention_mode,
        quant_scale_repo_mode=quant_scale_repo_mode, tile_size=tile_size,
        rope_head_dim=rope_head_dim, key_dtype=key_dtype, value_dtype=value_dtype, sinks=sinks)


TORCH_NPU_FUNCTIONS = {OP: npu_kv_quant_sparse_flash_attention}
