"""torch_npu.npu_multi_head_attention and npu_multi_head_attention_backward.

Formula (seed 004; op-plugin MultiHeadAttentionKernelNpu.cpp for the output shapes and
test/test_base_ops/test_multi_head_attention.py for the order of the steps)::

    E = attn_head_num * attn_dim_per_head;  B = query.shape[0] / tgt_len
    query_res = (query @ Wq^T + bq) * attn_dim_per_head ** -0.5      -> (B, N, T, D)
    key_res   = key @ Wk^T + bk;   value_res = value @ Wv^T + bv      -> (B, N, S, D)
    attn_scores = softmax(query_res @ key_res^T + attn_mask)          (B, N, T, S)
    attn_res  = attn_scores * keep_mask / (1 - dropout_prob)
    context   = attn_res @ value_res  -> (B, T, N, D) -> (B * T, E)
    y         = context @ Wo^T + bo

Returns ``(y, dropout_mask, query_res, key_res, value_res, attn_scores, attn_res, context)``.
``attn_scores`` is float32 when ``softmax_use_float`` (the golden's float32 softmax), else the
input dtype.  ``dropout_mask`` is bit-packed as the NPU's (B*N*T*S / 8 bytes); its bit order
here is least-significant bit first, a choice of ours (the NPU's generator is not public).
Precision follows the golden: every step is a float16 op (float32 accumulation, one rounding
per step); the softmax is taken in float32.  The input ``dropout_mask`` is accepted and not
read (the doc example passes an unrelated tensor; the kernel draws its own mask).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common
from ._common import softmax_grad

OP = "npu_multi_head_attention"
GRAD_OP = "npu_multi_head_attention_backward"
SCHEMA = ("npu_multi_head_attention(Tensor query, Tensor key, Tensor value, Tensor query_weight, "
          "Tensor key_weight, Tensor value_weight, Tensor attn_mask, Tensor out_proj_weight, "
          "Tensor? query_bias, Tensor? key_bias, Tensor? value_bias, Tensor? out_proj_bias, "
          "Tensor? dropout_mask, int attn_head_num, int attn_dim_per_head, int src_len, "
          "int tgt_len, float dropout_prob, bool softmax_use_float) "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
GRAD_SCHEMA = ("npu_multi_head_attention_backward(Tensor query, Tensor key, Tensor value, "
               "Tensor query_weight, Tensor key_weight, Tensor value_weight, "
               "Tensor out_proj_weight, Tensor? query_bias, Tensor? key_bias, "
               "Tensor? value_bias, Tensor? out_proj_bias, Tensor query_res, Tensor key_res, "
               "Tensor value_res, Tensor attn_scores, Tensor attn_res, Tensor context, "
               "Tensor y_grad, Tensor dropout_mask, int attn_head_num, int attn_dim_per_head, "
               "int src_len, int tgt_len, float dropout_prob, bool softmax_use_float) "
               "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
               "Tensor, Tensor)")

DTYPES = (torch.float16,)            # seed 004: every tensor "仅支持float16"
ALIGN = 16                           # seed 004: the four int attributes "需16对齐"
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.A2, Product.A3})


def _check_sizes(op, query, key, value, weights, heads, dim, src_len, tgt_len, dropout_prob):
    for name, v in (("attn_head_num", heads), ("attn_dim_per_head", dim), ("src_len", src_len),
                    ("tgt_len", tgt_len)):
        checks.expect(v > 0 and v % ALIGN == 0, op, name, f"a positive multiple of {ALIGN}",
                      repr(v), ValueError)
    e = heads * dim
    for name, t in (("query", query), ("key", key), ("value", value)):
        _common.expect_dtype(op, name, t, DTYPES)
        checks.expect(t.dim() == 2 and t.shape[1] == e, op, name,
                      f"a 2-D tensor (rows, attn_head_num * attn_dim_per_head = {e})",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(query.shape[0] % tgt_len == 0, op, "query", f"a row count divisible by "
                  f"tgt_len ({tgt_len})", lambda: f"shape {tuple(query.shape)}", RuntimeError)
    b = query.shape[0] // tgt_len
    for name, t in (("key", key), ("value", value)):
        checks.expect(t.shape[0] == b * src_len, op, name, f"batch * src_len = {b * src_len} rows",
                      lambda t=t: f"shape {tuple(t.shape)}")
    for name, w in weights.items():
        _common.expect_dtype(op, name, w, DTYPES)
        checks.expect(tuple(w.shape) == (e, e), op, name, f"the shape {(e, e)}",
                      lambda w=w: f"shape {tuple(w.shape)}")
    checks.expect_same_dtype({"query": query, "key": key, "value": value, **weights}, op)
    checks.expect(0.0 <= dropout_prob < 1.0, op, "dropout_prob", "a drop rate in [0, 1)",
                  repr(dropout_prob), ValueError)
    targets.expect_supported(op, _SUPPORTED)
    return b, e


def _check_biases(op, biases: dict, dtype, e) -> None:
    for name, t in biases.items():
        if t is not None:
            checks.expect(t.dtype == dtype, op, name, "the dtype of query", str(t.dtype),
                          TypeError)
            checks.expect(t.numel() == e, op, name, f"{e} elements", lambda t=t: tuple(t.shape))


def check_multi_head_attention(query, key, value, query_weight, key_weight, value_weight,
                               attn_mask, out_proj_weight, query_bias, key_bias, value_bias,
                               out_proj_bias, dropout_mask, attn_head_num, attn_dim_per_head,
                               src_len, tgt_len, dropout_prob, softmax_use_float):
    weights = {"query_weight": query_weight, "key_weight": key_weight,
               "value_weight": value_weight, "out_proj_weight": out_proj_weight}
    b, e = _check_sizes(OP, query, key, value, weights, attn_head_num, attn_dim_per_head,
                        src_len, tgt_len, dropout_prob)
    _common.expect_dtype(OP, "attn_mask", attn_mask, DTYPES)
    want = (b, attn_head_num, tgt_len, src_len)
    checks.expect(_broadcasts_to(attn_mask.shape, want), op=OP, param="attn_mask",
                  requirement=f"a shape that broadcasts to (batch, heads, tgt_len, src_len) = "
                  f"{want}", actual=lambda: f"shape {tuple(attn_mask.shape)}")
    _check_biases(OP, {"query_bias": query_bias, "key_bias": key_bias,
                       "value_bias": value_bias, "out_proj_bias": out_proj_bias}, query.dtype, e)


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (t, 1) for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))))


def check_multi_head_attention_backward(query, key, value, query_weight, key_weight,
                                        value_weight, out_proj_weight, query_bias, key_bias,
                                        value_bias, out_proj_bias, query_res, key_res,
                                        value_res, attn_scores, attn_res, context, y_grad,
                                        dropout_mask, attn_head_num, attn_dim_per_head, src_len,
                                        tgt_len, dropout_prob, softmax_use_float):
    weights = {"query_weight": query_weight, "key_weight": key_weight,
               "value_weight": value_weight, "out_proj_weight": out_proj_weight}
    b, e = _check_sizes(GRAD_OP, query, key, value, weights, attn_head_num, attn_dim_per_head,
                        src_len, tgt_len, dropout_prob)
    _check_biases(GRAD_OP, {"query_bias": query_bias, "key_bias": key_bias,
                            "value_bias": value_bias, "out_proj_bias": out_proj_bias},
                  query.dtype, e)
    n, d, s, t = attn_head_num, attn_dim_per_head, src_len, tgt_len
    for name, ten, shape in (("query_res", query_res, (b, n, t, d)),
                             ("key_res", key_res, (b, n, s, d)),
                             ("value_res", value_res, (b, n, s, d)),
                             ("attn_scores", attn_scores, (b, n, t, s)),
                             ("attn_res", attn_res, (b, n, t, s)),
                             ("context", context, (b * t, e)), ("y_grad", y_grad, (b * t, e)),
                             ("dropout_mask", dropout_mask, (b * n * t * s // 8,))):
        checks.expect(tuple(ten.shape) == shape, GRAD_OP, name, f"the shape {shape}",
                      lambda ten=ten: f"shape {tuple(ten.shape)}")
    checks.expect_dtype(dropout_mask, (torch.uint8,), GRAD_OP, "dropout_mask")


_BITS = (1, 2, 4, 8, 16, 32, 64, 128)


def _pack_bits(keep: torch.Tensor) -> torch.Tensor:
    """Flat bool -> uint8, eight elements a byte, least-significant bit first."""
    weights = torch.tensor(_BITS, dtype=torch.int32, device=keep.device)
    return (keep.reshape(-1, 8).to(torch.int32) * weights).sum(1).to(torch.uint8)


def _unpack_bits(mask: torch.Tensor, shape) -> torch.Tensor:
    weights = torch.tensor(_BITS, dtype=torch.int32, device=mask.device)
    bits = (mask.to(torch.int32).unsqueeze(1) & weights) != 0
    return bits.reshape(shape)


def _linear(x, w, bias, ct, dtype):
    y = x.to(ct) @ w.to(ct).transpose(0, 1)
    if bias is not None:
        y = y + bias.reshape(-1).to(ct)
    return y.to(dtype)


def multi_head_attention_reference(query, key, value, query_weight, key_weight, value_weight,
                                   attn_mask, out_proj_weight, query_bias, key_bias, value_bias,
                                   out_proj_bias, dropout_mask, attn_head_num,
                                   attn_dim_per_head, src_len, tgt_len, dropout_prob,
                                   softmax_use_float):
    dtype = query.dtype
    ct = _common.compute_dtype(dtype)
    n, d, s, t = attn_head_num, attn_dim_per_head, src_len, tgt_len
    b = query.shape[0] // t
    scale = _common.as_compute_scalar(d ** -0.5, dtype)

    def heads(x, rows):   # (B * rows, E) -> (B, N, rows, D)
        return x.reshape(b, rows, n, d).permute(0, 2, 1, 3).contiguous()

    q = heads((_linear(query, query_weight, query_bias, ct, dtype).to(ct) * scale).to(dtype), t)
    k = heads(_linear(key, key_weight, key_bias, ct, dtype), s)
    v = heads(_linear(value, value_weight, value_bias, ct, dtype), s)
    weights = (q.to(ct) @ k.to(ct).transpose(-1, -2)).to(dtype)
    adds = (weights.to(ct) + attn_mask.to(ct)).to(dtype)
    probs32 = torch.softmax(adds.to(ct), dim=-1)
    attn_scores = probs32 if softmax_use_float else probs32.to(dtype)
    probs = probs32.to(dtype)
    numel = b * n * t * s
    keep_prob = 1.0 - dropout_prob
    if dropout_prob > 0:
        keep = torch.rand(numel, device=query.device) < keep_prob
    else:
        keep = torch.ones(numel, dtype=torch.bool, device=query.device)
    mask_out = _pack_bits(keep)
    attn_res = (probs.to(ct) * keep.reshape(b, n, t, s).to(ct)
                * _common.as_compute_scalar(1.0 / keep_prob, ct)).to(dtype)
    ctx4 = (attn_res.to(ct) @ v.to(ct)).to(dtype)
    context = ctx4.permute(0, 2, 1, 3).reshape(b * t, n * d)
    y = _linear(context, out_proj_weight, out_proj_bias, ct, dtype)
    return y, mask_out, q, k, v, attn_scores, attn_res, context


def multi_head_attention_backward_reference(query, key, value, query_weight, key_weight,
                                            value_weight, out_proj_weight, query_bias, key_bias,
                                            value_bias, out_proj_bias, query_res, key_res,
                                            value_res, attn_scores, attn_res, context, y_grad,
                                            dropout_mask, attn_head_num, attn_dim_per_head,
                                            src_len, tgt_len, dropout_prob, softmax_use_float):
    dtype = query.dtype
    ct = _common.compute_dtype(dtype)
    n, d, s, t = attn_head_num, attn_dim_per_head, src_len, tgt_len
    b = query.shape[0] // t
    e = n * d
    g = y_grad.to(ct)
    d_wo = g.transpose(0, 1) @ context.to(ct)
    d_bo = g.sum(0, keepdim=True)
    d_ctx = (g @ out_proj_weight.to(ct)).reshape(b, t, n, d).permute(0, 2, 1, 3)
    d_res = d_ctx @ value_res.to(ct).transpose(-1, -2)
    d_v = attn_res.to(ct).transpose(-1, -2) @ d_ctx
    keep = _unpack_bits(dropout_mask, (b, n, t, s)).to(ct)
    d_p = d_res * keep * _common.as_compute_scalar(1.0 / (1.0 - dropout_prob), ct)
    d_a = softmax_grad(d_p, attn_scores.to(ct))
    d_q = d_a @ key_res.to(ct) * _common.as_compute_scalar(d ** -0.5, dtype)
    d_k = d_a.transpose(-1, -2) @ query_res.to(ct)

    def rows(x, r):   # (B, N, r, D) -> (B * r, E)
        return x.permute(0, 2, 1, 3).reshape(b * r, e)

    out = []
    for dx, x, w in ((rows(d_q, t), query, query_weight), (rows(d_k, s), key, key_weight),
                     (rows(d_v, s), value, value_weight)):
        out.append((dx.transpose(0, 1) @ x.to(ct), dx @ w.to(ct), dx.sum(0, keepdim=True)))
    (d_wq, d_query, d_bq), (d_wk, d_key, d_bk), (d_wv, d_value, d_bv) = out
    grads = (d_wq, d_wk, d_wv, d_wo, d_query, d_key, d_value, d_bq, d_bk, d_bv, d_bo)
    return tuple(x.to(dtype) for x in grads)


multi_head_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                check=check_multi_head_attention,
                                reference=multi_head_attention_reference, metadata_check=True,
                                random=True, info=OpInfo(api="torch_npu"))
multi_head_attention_backward_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                         check=check_multi_head_attention_backward,
                                         reference=multi_head_attention_backward_reference,
                                         metadata_check=True,
                                         info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    (query, key, value, wq, wk, wv, _, wo, bq, bk, bv, bo, _, *ints) = inputs
    ctx.ints = tuple(ints)
    ctx.has_bias = tuple(x is not None for x in (bq, bk, bv, bo))
    # derivatives.yaml: output_differentiability [true, false x 7].
    ctx.mark_non_differentiable(*output[1:])
    ctx.save_for_backward(query, key, value, wq, wk, wv, wo, bq, bk, bv, bo, *output[1:])


def _backward(ctx, grad_y, *unused):
    nones = (None,) * 19
    if grad_y is None:
        return nones
    (query, key, value, wq, wk, wv, wo, bq, bk, bv, bo, mask, q_res, k_res, v_res, scores,
     res, context) = ctx.saved_tensors
    g = multi_head_attention_backward_op(query, key, value, wq, wk, wv, wo, bq, bk, bv, bo,
                                         q_res, k_res, v_res, scores, res, context,
                                         grad_y.contiguous(), mask, *ctx.ints)
    d_wq, d_wk, d_wv, d_wo, d_query, d_key, d_value, d_bq, d_bk, d_bv, d_bo = g
    biases = []
    for has, grad, bias in zip(ctx.has_bias, (d_bq, d_bk, d_bv, d_bo), (bq, bk, bv, bo)):
        biases.append(grad.reshape(bias.shape) if has else None)
    return (d_query, d_key, d_value, d_wq, d_wk, d_wv, None, d_wo, *biases,
            None, None, None, None, None, None, None)


multi_head_attention_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_multi_head_attention(query, key, value, query_weight, key_weight, value_weight,
                             attn_mask, out_proj_weight, query_bias, key_bias, value_bias,
                             out_proj_bias, dropout_mask, attn_head_num, attn_dim_per_head,
                             src_len, tgt_len, dropout_prob, softmax_use_float):
    """Transformer multi-head attention: q/k/v projections, masked softmax, dropout, output
    projection (seed 004).

    Formula (E = attn_head_num * attn_dim_per_head, B = query rows / tgt_len)::

        q = (query @ Wq^T + bq) / sqrt(D);  k = key @ Wk^T + bk;  v = value @ Wv^T + bv
        P = softmax(q @ k^T + attn_mask);   A = P * keep / (1 - dropout_prob)
        context = (A @ v) as (B * tgt_len, E);   y = context @ Wo^T + bo

    Parameters
    ----------
    query : Tensor (B * tgt_len, E);  key, value : Tensor (B * src_len, E)
    query_weight, key_weight, value_weight, out_proj_weight : Tensor (E, E)
    attn_mask : Tensor broadcasting to (B, attn_head_num, tgt_len, src_len), added to scores
    query_bias, key_bias, value_bias, out_proj_bias : Tensor (E,) or None
    dropout_mask : Tensor or None -- accepted, not read (the kernel draws its own mask)
    attn_head_num, attn_dim_per_head, src_len, tgt_len : int, positive multiples of 16
    dropout_prob : float -- the drop rate (op-plugin passes keep_prob = 1 - dropout_prob)
    softmax_use_float : bool -- ``attn_scores`` returned in float32

    All tensors float16 (float64 also accepted outside strict mode).  Strict mode: the
    training products (910, A2, A3).

    Returns
    -------
    (y, dropout_mask, query_res, key_res, value_res, attn_scores, attn_res, context); only
    ``y`` is differentiable (derivatives.yaml), through ``npu_multi_head_attention_backward``.
    """
    return multi_head_attention_op(query, key, value, query_weight, key_weight, value_weight,
                                   attn_mask, out_proj_weight, query_bias, key_bias, value_bias,
                                   out_proj_bias, dropout_mask, attn_head_num, attn_dim_per_head,
                                   src_len, tgt_len, dropout_prob, softmax_use_float)


def npu_multi_head_attention_backward(query, key, value, query_weight, key_weight, value_weight,
                                      out_proj_weight, query_bias, key_bias, value_bias,
                                      out_proj_bias, query_res, key_res, value_res, attn_scores,
                                      attn_res, context, y_grad, dropout_mask, attn_head_num,
                                      attn_dim_per_head, src_len, tgt_len, dropout_prob,
                                      softmax_use_float):
    """Gradients of :func:`npu_multi_head_attention`'s ``y`` (MultiHeadAttentionGrad).

    Returns ``(query_weight, key_weight, value_weight, out_proj_weight, query, key, value,
    query_bias, key_bias, value_bias, out_proj_bias)`` gradients; bias gradients are (1, E).
    The saved forward outputs (query_res ... context, dropout_mask) are reused, not recomputed.
    """
    return multi_head_attention_backward_op(
        query, key, value, query_weight, key_weight, value_weight, out_proj_weight, query_bias,
        key_bias, value_bias, out_proj_bias, query_res, key_res, value_res, attn_scores,
        attn_res, context, y_grad, dropout_mask, attn_head_num, attn_dim_per_head, src_len,
        tgt_len, dropout_prob, softmax_use_float)


TORCH_NPU_FUNCTIONS = {
    "npu_multi_head_attention": npu_multi_head_attention,
    "npu_multi_head_attention_backward": npu_multi_head_attention_backward,
}
