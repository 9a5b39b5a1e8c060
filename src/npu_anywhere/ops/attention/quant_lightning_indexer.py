"""torch_npu.npu_quant_lightning_indexer: the lightning indexer on per-token-head quantized q/k.

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_quant_lightning_indexer.md)::

    score[s, t] = key_dequant_scale[t] * sum_h (weights[s, h] * query_dequant_scale[s, h])
                                             * relu(query[s, h] . key[t])
    out[s, :]   = the sparse_count keys of highest score, best first

Precision order (op-plugin test/test_custom_ops/test_npu_quant_lightning_indexer.py, the
golden followed):

- ``query . key`` exact (int8: integer products; float8: float32), ReLU, then divided by 1024
  and rounded to float16 (the kernel keeps the per-head scores in float16; the doc's
  "W * Scale_Q within float16 range" constraint comes from the same storage);
- ``weights * query_dequant_scale`` in the two inputs' promoted dtype (float16 for the A3's
  float16/float16 pair), rounded there;
- the head sum in float32, then the product with ``key_dequant_scale`` in float32;
- ranking, rightDownCausal masking and the -1 padding as npu_lightning_indexer (a stable
  descending sort: equal scores keep the lower key position first).

hifloat8 query/key come as uint8 codes with ``query_dtype`` / ``key_dtype`` =
``torch_npu.hifloat8``; they are decoded exactly before the product.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa
from .lightning_indexer import select_top

OP = "npu_quant_lightning_indexer"
SCHEMA = ("npu_quant_lightning_indexer(Tensor query, Tensor key, Tensor weights, "
          "Tensor query_dequant_scale, Tensor key_dequant_scale, int query_quant_mode, "
          "int key_quant_mode, *, Tensor? actual_seq_lengths_query=None, "
          "Tensor? actual_seq_lengths_key=None, Tensor? block_table=None, "
          "str layout_query=\"BSND\", str layout_key=\"BSND\", int sparse_count=2048, "
          "int sparse_mode=3, int pre_tokens=9223372036854775807, "
          "int next_tokens=9223372036854775807, int? query_dtype=None, int? key_dtype=None) "
          "-> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_STORED = (torch.int8, torch.float8_e4m3fn, torch.uint8)
_SCALES = (torch.float16, torch.float32)
_WEIGHTS = (torch.float16, torch.bfloat16)
_SCORE_SCALE = 1.0 / 1024.0


def _declared(op, name, t, code):
    """The element type ``t`` holds: its dtype, or hifloat8 for uint8 codes so declared."""
    if code is None:
        checks.expect(t.dtype != torch.uint8, op, f"{name[:-6]}", "int8 or float8_e4m3fn "
                      f"(uint8 only with {name}=torch_npu.hifloat8)", "uint8", TypeError)
        return t.dtype
    checks.expect(code == dtypes.HIFLOAT8 and t.dtype == torch.uint8 or
                  dtypes.code_to_dtype(code) == t.dtype, op, name,
                  lambda: f"the stored dtype of {name[:-6]} ({dtypes.name(t.dtype)}) or "
                  "torch_npu.hifloat8 for uint8 codes", dtypes.name(code), TypeError)
    return "hifloat8" if code == dtypes.HIFLOAT8 else t.dtype


def check_quant_lightning_indexer(query, key, weights, query_dequant_scale, key_dequant_scale,
                                  query_quant_mode, key_quant_mode, *,
                                  actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                                  block_table=None, layout_query="BSND", layout_key="BSND",
                                  sparse_count=2048, sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                  next_tokens=dsa.MAX_TOKENS, query_dtype=None, key_dtype=None):
    op = OP
    checks.expect_dtype(query, _STORED, op, "query")
    checks.expect_dtype(key, _STORED, op, "key")
    q_kind = _declared(op, "query_dtype", query, query_dtype)
    k_kind = _declared(op, "key_dtype", key, key_dtype)
    checks.expect(q_kind == k_kind, op, "key", lambda: f"query's element type ({q_kind})",
                  str(k_kind), TypeError)
    checks.expect_dtype(weights, _WEIGHTS, op, "weights")
    checks.expect_dtype(query_dequant_scale, _SCALES, op, "query_dequant_scale")
    checks.expect_dtype(key_dequant_scale, _SCALES, op, "key_dequant_scale")
    checks.expect(query_quant_mode == 0, op, "query_quant_mode", "0 (per-token-head)",
                  repr(query_quant_mode), ValueError)
    checks.expect(key_quant_mode == 0, op, "key_quant_mode", "0 (per-token-head)",
                  repr(key_quant_mode), ValueError)
    shapes = dsa.check_inputs(op, query, key, lengths_q=actual_seq_lengths_query,
                              lengths_k=actual_seq_lengths_key, block_table=block_table,
                              layout_query=layout_query, layout_key=layout_key,
                              pre_tokens=pre_tokens, next_tokens=next_tokens)
    checks.expect(key.shape[-1] == shapes.head_dim, op, "key",
                  lambda: f"query's head dim D = {shapes.head_dim}",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    for name, t, want in (("weights", weights, tuple(query.shape[:-1])),
                          ("query_dequant_scale", query_dequant_scale, tuple(query.shape[:-1])),
                          ("key_dequant_scale", key_dequant_scale, tuple(key.shape[:-1]))):
        checks.expect(tuple(t.shape) == want, op, name, lambda want=want: f"shape {list(want)}",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(1 <= sparse_count <= 2048, op, "sparse_count", "in [1, 2048]",
                  repr(sparse_count), ValueError)
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode",
                  "0 (defaultMask) or 3 (rightDownCausal)", repr(sparse_mode), ValueError)
    checks.expect_same_device({"query": query, "key": key, "weights": weights,
                               "query_dequant_scale": query_dequant_scale,
                               "key_dequant_scale": key_dequant_scale}, op)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is None:
        return
    # torch_npu doc constraints: N2 = 1, D = 128; the dtype combinations per product.
    checks.expect(shapes.k_heads == 1, op, "key", "a head count N2 of 1", shapes.k_heads,
                  ValueError)
    checks.expect(shapes.head_dim == 128, op, "query", "a head dim D of 128", shapes.head_dim,
                  ValueError)
    combo = (weights.dtype, query_dequant_scale.dtype, key_dequant_scale.dtype)
    half3 = (torch.float16,) * 3
    if product is Product.ASCEND_950:
        checks.expect(shapes.q_heads in (8, 16, 24, 32, 64), op, "query",
                      "a head count N1 in [8, 16, 24, 32, 64] on the 950", shapes.q_heads,
                      ValueError)
        allowed = {torch.int8: [half3], torch.float8_e4m3fn: [
            half3, (torch.bfloat16, torch.float32, torch.float32)],
            "hifloat8": [(torch.bfloat16, torch.float32, torch.float32)]}[q_kind]
    else:
        checks.expect(shapes.q_heads <= 64, op, "query", "a head count N1 of at most 64",
                      shapes.q_heads, ValueError)
        checks.expect(q_kind == torch.int8, op, "query", "int8 on A2/A3", str(q_kind),
                      TypeError)
        allowed = [half3]
    checks.expect(combo in allowed, op, "weights",
                  lambda: "weights / query_dequant_scale / key_dequant_scale dtypes in "
                  f"{[[str(d)[6:] for d in c] for c in allowed]}",
                  [str(d)[6:] for d in combo], TypeError)


def _decode(t, code):
    if code == dtypes.HIFLOAT8:
        from ..quant import hifloat8
        return hifloat8.decode_hifloat8(t).to(torch.float32)
    return t.to(torch.float32)


def quant_lightning_indexer_reference(query, key, weights, query_dequant_scale,
                                      key_dequant_scale, query_quant_mode, key_quant_mode, *,
                                      actual_seq_lengths_query=None,
                                      actual_seq_lengths_key=None, block_table=None,
                                      layout_query="BSND", layout_key="BSND", sparse_count=2048,
                                      sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                      next_tokens=dsa.MAX_TOKENS, query_dtype=None,
                                      key_dtype=None):
    n1, d = query.shape[-2], query.shape[-1]
    n2 = key.shape[-2]
    g = n1 // n2
    q_flat = query.reshape(-1, n1, d)
    head_weight = (weights * query_dequant_scale).reshape(-1, n1)      # rounded in its dtype
    keys = {}

    def score_rows(b, k_span, rows):
        if b not in keys:
            keys.clear()
            k = _decode(dsa.batch_rows(key, layout_key, k_span, b, block_table), key_dtype)
            scale = dsa.batch_rows(key_dequant_scale.unsqueeze(-1), layout_key, k_span, b,
                                   block_table)[..., 0].float()          # [keys, N2]
            keys[b] = (k, scale)
        k, k_scale = keys[b]
        q = _decode(q_flat[rows], query_dtype).view(-1, n2, g, d)
        count = q.shape[0]
        dots = torch.matmul(q.permute(1, 0, 2, 3).reshape(n2, count * g, d),
                            k.permute(1, 2, 0))                          # [N2, rows * g, keys]
        per_head = (dots.clamp_min(0) * _SCORE_SCALE).to(torch.float16).float()
        per_head = per_head.view(n2, count, g, -1)
        w = head_weight[rows].float().view(count, n2, g).permute(1, 0, 2).unsqueeze(-1)
        return (per_head * w).sum(2) * k_scale.t().unsqueeze(1)

    indices, _ = select_top(
        OP, query, key, lengths_q=actual_seq_lengths_query, lengths_k=actual_seq_lengths_key,
        block_table=block_table, layout_query=layout_query, layout_key=layout_key,
        sparse_count=sparse_count, sparse_mode=sparse_mode, score_rows=score_rows)
    return indices


def _fake(query, key, weights, query_dequant_scale, key_dequant_scale, query_quant_mode,
          key_quant_mode, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
          block_table=None, layout_query="BSND", layout_key="BSND", sparse_count=2048,
          sparse_mode=3, pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
          query_dtype=None, key_dtype=None):
    n2 = key.shape[-2]
    shape = [query.shape[0], query.shape[1], n2, sparse_count] if layout_query == "BSND" \
        else [query.shape[0], n2, sparse_count]
    return query.new_empty(shape, dtype=torch.int32)


quant_lightning_indexer_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                   check=check_quant_lightning_indexer,
                                   reference=quant_lightning_indexer_reference, fake=_fake,
                                   metadata_check=True, info=OpInfo(api="torch_npu"))
quant_lightning_indexer_op.forbid_autograd("torch_npu defines no backward for it")


def npu_quant_lightning_indexer(query, key, weights, query_dequant_scale, key_dequant_scale,
                                query_quant_mode=0, key_quant_mode=0, *,
                                actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                                block_table=None, layout_query="BSND", layout_key="BSND",
                                sparse_count=2048, sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                next_tokens=dsa.MAX_TOKENS, query_dtype=None, key_dtype=None):
    """Lightning indexer on per-token-head quantized query and key: top ``sparse_count`` keys.

    Formula (op-plugin torch_npu-npu_quant_lightning_indexer.md)::

        score[s, t] = kscale[t] * sum_h w[s, h] * qscale[s, h] * relu(q[s, h] . k[t])
        out[s]      = top-sparse_count of score[s, :], best first, -1 padded

    Parameters
    ----------
    query, key : Tensor
        int8, float8_e4m3fn, or uint8 hifloat8 codes (with ``query_dtype`` / ``key_dtype`` =
        ``torch_npu.hifloat8``); one element type.  Layouts as :func:`npu_lightning_indexer`
        (query BSND / TND, key BSND / TND / PA_BSND).
    weights : Tensor
        float16 / bfloat16, query's shape without D.
    query_dequant_scale : Tensor
        float16 / float32, query's shape without D (per token and head).
    key_dequant_scale : Tensor
        float16 / float32, key's shape without D (``[block_count, block_size, N2]`` paged).
    query_quant_mode, key_quant_mode : int
        0 (per-token-head), the only mode; the defaults of the seed's signature.
    sparse_count : int
        1 to 2048.
    Other arguments
        As :func:`npu_lightning_indexer`.

    Returns
    -------
    Tensor of int32
        ``[B, S1, N2, sparse_count]`` (BSND) or ``[T1, N2, sparse_count]`` (TND).

    Constraints
    -----------
    Strict mode (A2, A3, 950): ``N2 = 1``, ``D = 128``; A2/A3: int8 with float16 weights and
    scales, ``N1 <= 64``; 950: ``N1`` in {8, 16, 24, 32, 64}, int8 with float16/float16/float16,
    float8_e4m3fn with that or bfloat16/float32/float32, hifloat8 with bfloat16/float32/float32.

    Notes
    -----
    The per-head scores are stored in float16 after a 1/1024 scaling and the weight-scale
    product is rounded in its dtype, as op-plugin's golden
    (test/test_custom_ops/test_npu_quant_lightning_indexer.py) does; this decides the ranking
    of near-equal scores.  Inference only (no backward).
    """
    return quant_lightning_indexer_op(
        query, key, weights, query_dequant_scale, key_dequant_scale, query_quant_mode,
        key_quant_mode, actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_key=actual_seq_lengths_key, block_table=block_table,
        layout_query=layout_query, layout_key=layout_key, sparse_count=sparse_count,
        sparse_mode=sparse_mode, pre_tokens=pre_tokens, next_tokens=next_tokens,
        query_dtype=query_dtype, key_dtype=key_dtype)


TORCH_NPU_FUNCTIONS = {OP: npu_quant_lightning_indexer}
