"""torch_npu.npu_sparse_flash_attention and npu_sparse_flash_attention_grad (DeepSeek-V3.2 DSA).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md,
seed 004)::

    K~, V~ = the key / value tokens of the blocks listed in sparse_indices
             (index b selects tokens [b * sparse_block_size, (b + 1) * sparse_block_size))
    out    = softmax(scale_value * [Q, Q_rope] @ [K~, K~_rope]^T) @ V~

Followed for the details (hicann/ops-transformer attention/sparse_flash_attention/tests/pytest/
sparse_flash_attention_golden.py, the kernel's golden; op-plugin test/test_custom_ops/
test_npu_sparse_flash_attention.py agrees where both are defined):

- the visible limit of query row ``i`` (``Lq`` valid rows, ``Lkv`` valid keys) is
  ``Lkv`` (sparse_mode 0) or ``Lkv - Lq + i + 1`` (sparse_mode 3, rightDownCausal);
- of each row's sparse_indices only the first ``min(sparse_size, ceil(limit /
  sparse_block_size))`` slots are read, up to the first -1; a block's tokens are cut at the limit
  (and at ``Lkv``); a listed block twice counts twice;
- precision: scores, softmax and the output accumulation in float32, the probabilities rounded
  to query's dtype before the product with V, the output rounded once;
- ``sinks`` (float32 ``[N1]``) join each head's softmax as one extra logit with no value;
- rows that see nothing (no valid slot, or ``i < Lq - Lkv`` in mode 3) give zeros, and their
  softmax_max / softmax_sum stay 0 (with sinks and an empty selection: max = sink, sum = 1);
- ``softmax_max`` is the row max of the scaled, masked scores (sinks included) and
  ``softmax_sum`` the sum of ``exp(score - max)``, float32, ``[B, N2, S1, G]`` (BSND) or
  ``[N2, T1, G]`` (TND) with ``G = N1 / N2``.

The backward (op-plugin derivatives.yaml: query, key, value, query_rope and key_rope through
``npu_sparse_flash_attention_grad``) is the exact gradient of that forward in float32 (without
the probability rounding), each gradient rounded once to its input's dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import dsa_common as dsa
from .sparse_flash_attention_checks import (_HALF, _SUPPORTED, OP, _check_common,  # noqa: F401
                                            check_sparse_flash_attention)

SCHEMA = ("npu_sparse_flash_attention(Tensor query, Tensor key, Tensor value, "
          "Tensor sparse_indices, float scale_value, *, Tensor? block_table=None, "
          "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_kv=None, "
          "Tensor? query_rope=None, Tensor? key_rope=None, int sparse_block_size=1, "
          "str layout_query=\"BSND\", str layout_kv=\"BSND\", int sparse_mode=3, "
          "int pre_tokens=9223372036854775807, int next_tokens=9223372036854775807, "
          "int attention_mode=0, bool return_softmax_lse=False, Tensor? sinks=None) "
          "-> (Tensor, Tensor, Tensor)")
GRAD_OP = "npu_sparse_flash_attention_grad"
GRAD_SCHEMA = ("npu_sparse_flash_attention_grad(Tensor query, Tensor key, Tensor value, "
               "Tensor sparse_indices, Tensor d_out, Tensor out, Tensor softmax_max, "
               "Tensor softmax_sum, float scale_value, int sparse_block_size, "
               "Tensor? query_rope=None, Tensor? key_rope=None, Tensor? actual_seq_qlen=None, "
               "Tensor? actual_seq_kvlen=None, str? layout=\"BSND\", int? sparse_mode=3, "
               "int? pre_tokens=9223372036854775807, int? next_tokens=9223372036854775807, "
               "int? attention_mode=0) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")

# Gathered key elements per chunk of query rows: bounds the [rows, N2, slots, D] gathers.
_CHUNK_ELEMENTS = 1 << 23


def _compute_dtype(query) -> torch.dtype:
    return torch.float64 if query.dtype == torch.float64 else torch.float32


def _lse_shape(query, key, layout_query):
    n1, n2 = query.shape[-2], key.shape[-2]
    if layout_query == "BSND":
        return [query.shape[0], n2, query.shape[1], n1 // n2]
    return [n2, query.shape[0], n1 // n2]


def _row_tokens(idx, limit, sparse_block_size, k_len):
    """Token positions ``[rows, N2, slots * sbs]`` of the selected blocks and their validity.

    ``idx`` is ``[rows, N2, K]`` (long), ``limit`` ``[rows]`` the visible limit of each row.
    """
    sbs = sparse_block_size
    count = idx.shape[-1]
    slot = torch.arange(count, device=idx.device)
    readable = slot < torch.minimum(
        torch.full_like(limit, count), (limit.clamp_min(0) + sbs - 1) // sbs).unsqueeze(1)
    before_end = torch.cumprod((idx != -1).to(torch.int8), dim=-1).bool()
    use = readable.unsqueeze(1) & before_end & (idx >= 0)              # [rows, N2, K]
    tok = idx.unsqueeze(-1) * sbs + torch.arange(sbs, device=idx.device)
    ok = use.unsqueeze(-1) & (tok < limit.view(-1, 1, 1, 1)) & (tok < k_len)
    return tok.flatten(-2), ok.flatten(-2)


def _attend(q, k, v, tok, ok, scale, sinks, round_to):
    """One batch's rows: ``q [rows, N2, G, Dq]``, ``k [keys, N2, Dq]``, ``v [keys, N2, Dv]``,
    ``tok``/``ok`` ``[rows, N2, L]``; returns out ``[rows, N2, G, Dv]``, max and sum
    ``[rows, N2, G]`` (both 0 for a row with nothing visible and no sink)."""
    n2 = k.shape[1]
    heads = torch.arange(n2, device=tok.device).view(1, n2, 1)
    flat = tok.clamp(0, k.shape[0] - 1) * n2 + heads                   # rows of k.view(-1, D)
    k_sel = k.reshape(-1, k.shape[-1])[flat]                           # [rows, N2, L, Dq]
    v_sel = v.reshape(-1, v.shape[-1])[flat]
    scores = torch.einsum("sngd,snld->sngl", q, k_sel) * scale
    mask = ok.unsqueeze(2)
    scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.amax(-1)                                          # [rows, N2, G]
    if sinks is not None:
        row_max = torch.maximum(row_max, sinks)
    any_visible = mask.any(-1) | (sinks is not None)
    safe_max = torch.where(any_visible, row_max, torch.zeros_like(row_max))
    e = torch.exp(scores - safe_max.unsqueeze(-1))
    total = e.sum(-1)
    if sinks is not None:
        total = total + torch.exp(sinks - safe_max)
    p = e / torch.where(total > 0, total, torch.ones_like(total)).unsqueeze(-1)
    if round_to is not None:
        p = p.to(round_to).to(q.dtype)
    out = torch.einsum("sngl,snld->sngd", p, v_sel)
    return out, safe_max, total


def _forward(op, query, key, value, sparse_indices, scale_value, *, block_table, lengths_q,
             lengths_kv, query_rope, key_rope, sparse_block_size, layout_query, layout_kv,
             sparse_mode, sinks, round_p, lengths_kv_name="actual_seq_lengths_kv"):
    """float outputs in the compute dtype: out ``[rows, N1, Dv]``, max/sum ``[rows, N2, G]``."""
    ct = _compute_dtype(query)
    n1, n2 = query.shape[-2], key.shape[-2]
    g = n1 // n2
    q_spans = dsa.query_spans(op, query, layout_query, lengths_q)
    k_spans = dsa.key_spans(op, key, layout_kv, lengths_kv, block_table, len(q_spans),
                            lengths_kv_name)
    q_all = query if query_rope is None else torch.cat([query, query_rope], -1)
    q_flat = q_all.reshape(-1, n1, q_all.shape[-1])
    idx_flat = sparse_indices.reshape(-1, n2, sparse_indices.shape[-1])
    rows_total = q_flat.shape[0]
    dv = value.shape[-1]
    sink_g = None if sinks is None else sinks.to(ct).view(n2, g)
    round_to = query.dtype if (round_p and query.dtype in _HALF) else None
    outs, maxes, sums, starts = [], [], [], []
    for b, ((q_start, q_len), k_span) in enumerate(zip(q_spans, k_spans)):
        k_len = k_span[1]
        if q_len == 0:
            continue
        k = dsa.batch_rows(key, layout_kv, k_span, b, block_table)
        if key_rope is not None:
            k = torch.cat([k, dsa.batch_rows(key_rope, layout_kv, k_span, b, block_table)], -1)
        v = dsa.batch_rows(value, layout_kv, k_span, b, block_table)
        if k_len == 0:       # keep one zero key so the gathers have a row to point at
            k = k.new_zeros((1,) + k.shape[1:])
            v = v.new_zeros((1,) + v.shape[1:])
        k, v = k.to(ct), v.to(ct)
        i = torch.arange(q_len, device=query.device)
        limit = torch.full((q_len,), k_len, device=query.device) if sparse_mode == 0 else \
            k_len - q_len + i + 1
        width = idx_flat.shape[-1] * sparse_block_size * n2 * q_flat.shape[-1]
        step = max(1, _CHUNK_ELEMENTS // max(1, width))
        for lo in range(0, q_len, step):
            hi = min(q_len, lo + step)
            idx = idx_flat[q_start + lo:q_start + hi].long()
            tok, ok = _row_tokens(idx, limit[lo:hi], sparse_block_size, k_len)
            q = q_flat[q_start + lo:q_start + hi].to(ct).view(hi - lo, n2, g, -1)
            out, mx, sm = _attend(q, k, v, tok, ok, scale_value, sink_g, round_to)
            dead = (limit[lo:hi] <= 0).view(-1, 1, 1)                  # sees nothing at all
            mx = mx.masked_fill(dead, 0)
            sm = sm.masked_fill(dead, 0)
            outs.append(out.reshape(hi - lo, n1, dv))
            maxes.append(mx)
            sums.append(sm)
            starts.append(q_start + lo)
    out_all = torch.zeros((rows_total, n1, dv), dtype=ct, device=query.device)
    max_all = torch.zeros((rows_total, n2, g), dtype=ct, device=query.device)
    sum_all = torch.zeros((rows_total, n2, g), dtype=ct, device=query.device)
    if outs:
        rows = torch.cat([torch.arange(s, s + o.shape[0], device=query.device)
                          for s, o in zip(starts, outs)])
        out_all = out_all.index_put((rows,), torch.cat(outs))
        max_all = max_all.index_put((rows,), torch.cat(maxes))
        sum_all = sum_all.index_put((rows,), torch.cat(sums))
    return out_all, max_all, sum_all


def _lse_layout(x, query, layout_query):
    """``[rows, N2, G]`` -> ``[B, N2, S1, G]`` (BSND) or ``[N2, T1, G]`` (TND)."""
    if layout_query == "BSND":
        b, s1 = query.shape[0], query.shape[1]
        moved = x.view(b, s1, *x.shape[1:]).permute(0, 2, 1, 3)
    else:
        moved = x.permute(1, 0, 2)
    # A fresh tensor: .contiguous() would keep the permuted strides of size-1 dims.
    return torch.empty(moved.shape, dtype=torch.float32, device=x.device).copy_(moved)


def sparse_flash_attention_reference(query, key, value, sparse_indices, scale_value, *,
                                     block_table=None, actual_seq_lengths_query=None,
                                     actual_seq_lengths_kv=None, query_rope=None,
                                     key_rope=None, sparse_block_size=1, layout_query="BSND",
                                     layout_kv="BSND", sparse_mode=3,
                                     pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
                                     attention_mode=0, return_softmax_lse=False, sinks=None):
    out, mx, sm = _forward(
        OP, query, key, value, sparse_indices, scale_value, block_table=block_table,
        lengths_q=actual_seq_lengths_query, lengths_kv=actual_seq_lengths_kv,
        query_rope=query_rope, key_rope=key_rope, sparse_block_size=sparse_block_size,
        layout_query=layout_query, layout_kv=layout_kv, sparse_mode=sparse_mode, sinks=sinks,
        round_p=True)
    out = out.view(query.shape[:-1] + (value.shape[-1],)).to(query.dtype)
    if not return_softmax_lse:
        empty = query.new_empty((0,), dtype=torch.float32)
        return out, empty, empty.clone()
    return out, _lse_layout(mx, query, layout_query), _lse_layout(sm, query, layout_query)


def _fake(query, key, value, sparse_indices, scale_value, *, block_table=None,
          actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None,
          key_rope=None, sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
          sparse_mode=3, pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
          attention_mode=0, return_softmax_lse=False, sinks=None):
    out = query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))
    shape = _lse_shape(query, key, layout_query) if return_softmax_lse else [0]
    return (out, query.new_empty(shape, dtype=torch.float32),
            query.new_empty(shape, dtype=torch.float32))


def check_sparse_flash_attention_grad(query, key, value, sparse_indices, d_out, out,
                                      softmax_max, softmax_sum, scale_value, sparse_block_size,
                                      query_rope=None, key_rope=None, actual_seq_qlen=None,
                                      actual_seq_kvlen=None, layout="BSND", sparse_mode=3,
                                      pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
                                      attention_mode=0):
    op = GRAD_OP
    layout = "BSND" if layout is None else layout
    _check_common(
        op, query, key, value, sparse_indices, block_table=None, lengths_q=actual_seq_qlen,
        lengths_kv=actual_seq_kvlen, query_rope=query_rope, key_rope=key_rope,
        sparse_block_size=sparse_block_size, layout_query=layout, layout_kv=layout,
        sparse_mode=3 if sparse_mode is None else sparse_mode,
        pre_tokens=dsa.MAX_TOKENS if pre_tokens is None else pre_tokens,
        next_tokens=dsa.MAX_TOKENS if next_tokens is None else next_tokens,
        attention_mode=0 if attention_mode is None else attention_mode,
        lengths_kv_name="actual_seq_kvlen", layout_kv_name="layout",
        layout_query_name="layout", lengths_q_name="actual_seq_qlen")
    want = tuple(query.shape[:-1]) + (value.shape[-1],)
    for name, t in (("d_out", d_out), ("out", out)):
        checks.expect(tuple(t.shape) == want, op, name, lambda: f"shape {list(want)}",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect_same_dtype({"query": query, "d_out": d_out}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value, "d_out": d_out}, op)
    targets.expect_supported(op, _SUPPORTED)


def sparse_flash_attention_grad_reference(query, key, value, sparse_indices, d_out, out,
                                          softmax_max, softmax_sum, scale_value,
                                          sparse_block_size, query_rope=None, key_rope=None,
                                          actual_seq_qlen=None, actual_seq_kvlen=None,
                                          layout="BSND", sparse_mode=3,
                                          pre_tokens=dsa.MAX_TOKENS,
                                          next_tokens=dsa.MAX_TOKENS, attention_mode=0):
    # The forward's float32 steps recomputed (without the probability rounding) and
    # differentiated by hand; out and the softmax statistics are not needed for that (and are
    # empty unless the forward returned them).
    op = GRAD_OP
    layout = "BSND" if layout is None else layout
    sparse_mode = 3 if sparse_mode is None else sparse_mode
    ct = _compute_dtype(query)
    n1, n2 = query.shape[-2], key.shape[-2]
    g = n1 // n2
    dn = query.shape[-1]
    q_spans = dsa.query_spans(op, query, layout, actual_seq_qlen, "actual_seq_qlen")
    k_spans = dsa.key_spans(op, key, layout, actual_seq_kvlen, None, len(q_spans),
                            "actual_seq_kvlen")
    q_all = query if query_rope is None else torch.cat([query, query_rope], -1)
    k_all = key if key_rope is None else torch.cat([key, key_rope], -1)
    q_flat = q_all.reshape(-1, n1, q_all.shape[-1])
    k_flat = k_all.reshape(-1, n2, k_all.shape[-1])
    v_flat = value.reshape(-1, n2, value.shape[-1])
    do_flat = d_out.reshape(-1, n1, value.shape[-1])
    idx_flat = sparse_indices.reshape(-1, n2, sparse_indices.shape[-1])
    dq = torch.zeros(q_flat.shape, dtype=ct, device=query.device)
    dk = torch.zeros(k_flat.shape, dtype=ct, device=query.device)
    dv = torch.zeros(v_flat.shape, dtype=ct, device=query.device)
    heads = torch.arange(n2, device=query.device).view(1, n2, 1)
    for (q_start, q_len), (k_start, k_len) in zip(q_spans, k_spans):
        if q_len == 0 or k_len == 0:
            continue
        i = torch.arange(q_len, device=query.device)
        limit = torch.full((q_len,), k_len, device=query.device) if sparse_mode == 0 else \
            k_len - q_len + i + 1
        rows = slice(q_start, q_start + q_len)
        tok, ok = _row_tokens(idx_flat[rows].long(), limit, sparse_block_size, k_len)
        flat = (k_start + tok.clamp(0, k_len - 1)) * n2 + heads        # [s, N2, L]
        k_sel = k_flat.reshape(-1, k_flat.shape[-1])[flat].to(ct)
        v_sel = v_flat.reshape(-1, v_flat.shape[-1])[flat].to(ct)
        q = q_flat[rows].to(ct).view(q_len, n2, g, -1)
        do = do_flat[rows].to(ct).view(q_len, n2, g, -1)
        scores = torch.einsum("sngd,snld->sngl", q, k_sel) * scale_value
        scores = scores.masked_fill(~ok.unsqueeze(2), float("-inf"))
        row_max = scores.amax(-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        e = torch.exp(scores - row_max)
        total = e.sum(-1, keepdim=True)
        p = e / torch.where(total > 0, total, torch.ones_like(total))
        out = torch.einsum("sngl,snld->sngd", p, v_sel)
        dp = torch.einsum("sngd,snld->sngl", do, v_sel)
        ds = p * (dp - (do * out).sum(-1, keepdim=True)) * scale_value
        dq[rows] = torch.einsum("sngl,snld->sngd", ds, k_sel).reshape(q_len, n1, -1)
        dk_sel = torch.einsum("sngl,sngd->snld", ds, q)
        dv_sel = torch.einsum("sngl,sngd->snld", p, do)
        dk.view(-1, dk.shape[-1]).index_add_(0, flat.reshape(-1),
                                              dk_sel.reshape(-1, dk.shape[-1]))
        dv.view(-1, dv.shape[-1]).index_add_(0, flat.reshape(-1),
                                              dv_sel.reshape(-1, dv.shape[-1]))
    dq = dq.view(q_all.shape)
    dk = dk.view(k_all.shape)
    d_query, d_key = dq[..., :dn].to(query.dtype), dk[..., :dn].to(key.dtype)
    d_value = dv.view(value.shape).to(value.dtype)
    if query_rope is None:
        empty = query.new_empty((0,))
        return d_query, d_key, d_value, empty, empty.clone()
    return (d_query, d_key, d_value, dq[..., dn:].to(query_rope.dtype),
            dk[..., dn:].to(key_rope.dtype))


def _grad_fake(query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
               scale_value, sparse_block_size, query_rope=None, key_rope=None,
               actual_seq_qlen=None, actual_seq_kvlen=None, layout="BSND", sparse_mode=3,
               pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS, attention_mode=0):
    like = [torch.empty_like(t, memory_format=torch.contiguous_format)
            for t in (query, key, value)]
    if query_rope is None:
        return (*like, query.new_empty((0,)), query.new_empty((0,)))
    return (*like, torch.empty_like(query_rope, memory_format=torch.contiguous_format),
            torch.empty_like(key_rope, memory_format=torch.contiguous_format))


sparse_flash_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_sparse_flash_attention,
                                  reference=sparse_flash_attention_reference, fake=_fake,
                                  metadata_check=True, info=OpInfo(api="torch_npu"))
sparse_flash_attention_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                       check=check_sparse_flash_attention_grad,
                                       reference=sparse_flash_attention_grad_reference,
                                       fake=_grad_fake, metadata_check=True,
                                       info=OpInfo(api="torch_npu", backward_of=OP))

_NAMES = [a.name for a in sparse_flash_attention_op.overload._schema.arguments]


def _setup(ctx, inputs, output):
    a = dict(zip(_NAMES, inputs))
    ctx.a = {k: v for k, v in a.items() if not isinstance(v, torch.Tensor) and v is not None}
    tensors = ("query", "key", "value", "sparse_indices", "actual_seq_lengths_query",
               "actual_seq_lengths_kv", "query_rope", "key_rope", "sinks", "block_table")
    ctx.save_for_backward(*(a.get(n) for n in tensors), *output)


def _backward(ctx, d_out, _d_max, _d_sum):
    (query, key, value, indices, lq, lkv, q_rope, k_rope, sinks, table,
     out, mx, sm) = ctx.saved_tensors
    a = ctx.a
    checks.expect(table is None and a.get("layout_kv", "BSND") == a.get("layout_query", "BSND"),
                  OP, "layout_kv", "equal to layout_query (BSND or TND) for a backward "
                  "(npu_sparse_flash_attention_grad takes one layout and no block_table)",
                  repr(a.get("layout_kv", "BSND")), NotImplementedError)
    checks.expect(sinks is None, OP, "sinks", "None for a backward (npu_sparse_flash_"
                  "attention_grad has no sinks)", "a tensor", NotImplementedError)
    grads = sparse_flash_attention_grad_op(
        query, key, value, indices, d_out.contiguous(), out, mx, sm, a["scale_value"],
        a.get("sparse_block_size", 1), q_rope, k_rope, lq, lkv, a.get("layout_query", "BSND"),
        a.get("sparse_mode", 3), dsa.MAX_TOKENS, dsa.MAX_TOKENS, a.get("attention_mode", 0))
    result = dict(zip(("query", "key", "value", "query_rope", "key_rope"), grads))
    if q_rope is None:
        result.pop("query_rope")
        result.pop("key_rope")
    return tuple(result.get(n) for n in _NAMES)


sparse_flash_attention_op.set_autograd(setup_context=_setup, backward=_backward)
sparse_flash_attention_grad_op.forbid_autograd("torch_npu defines no double backward for it")


def npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value,
                               sparse_block_size=None, *, block_table=None,
                               actual_seq_lengths_query=None, actual_seq_lengths_kv=None,
                               query_rope=None, key_rope=None, layout_query="BSND",
                               layout_kv="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                               next_tokens=dsa.MAX_TOKENS, attention_mode=0,
                               return_softmax_lse=False, sinks=None):
    """Attention of each query token over the key blocks listed in ``sparse_indices`` (DSA).

    Formula (op-plugin torch_npu-npu_sparse_flash_attention.md)::

        K~, V~ = tokens [b * sparse_block_size, (b + 1) * sparse_block_size) for b in the row's
                 sparse_indices (up to the first -1), cut at the visible limit
        out    = softmax(scale_value * [Q, Q_rope] @ [K~, K~_rope]^T) @ V~

    Parameters
    ----------
    query : Tensor
        float16 / bfloat16, ``[B, S1, N1, D]`` (BSND) or ``[T1, N1, D]`` (TND).
    key, value : Tensor
        query's dtype and one shape: ``[B, S2, N2, D]``, ``[T2, N2, D]`` or ``[block_num,
        block_size, N2, D]`` (``layout_kv="PA_BSND"`` with ``block_table``).  In MLA-absorb
        use (``attention_mode=2``) the caller passes the same tensor for both.
    sparse_indices : Tensor of int32
        ``[B, S1, N2, sparse_size]`` / ``[T1, N2, sparse_size]`` block ids (e.g. from
        :func:`npu_lightning_indexer`), valid ids first, -1 after them.
    scale_value : float
        Multiplies ``Q @ K^T``.
    sparse_block_size : int
        Tokens per selected block, a power of 2 in [1, 128] (dividing the paged block size);
        accepted positionally (seed 004's spelling) or by keyword (op-plugin's).
    block_table, actual_seq_lengths_query, actual_seq_lengths_kv, layout_query, layout_kv :
        As :func:`npu_lightning_indexer` (``actual_seq_lengths_kv`` required for TND and
        PA_BSND keys; ``layout_kv`` equals ``layout_query`` unless it is PA_BSND).
    query_rope, key_rope : Tensor, optional
        The rope parts (query's / key's shape with the rope dim), concatenated to Q and K.
    sparse_mode : int
        0: every valid key; 3: rightDownCausal, row ``i`` sees keys ``j <= Lkv - Lq + i``.
    pre_tokens, next_tokens : int
        Only the default ``2**63 - 1``.
    attention_mode : int
        0 or 2 (MLA-absorb; the only value the NPU accepts, enforced in strict mode).
    return_softmax_lse : bool
        Also return softmax_max and softmax_sum (not with PA_BSND).
    sinks : Tensor of float32, optional
        ``[N1]`` attention-sink logits added to each head's softmax denominator.

    Returns
    -------
    (attention_out, softmax_max, softmax_sum)
        ``attention_out`` query's shape and dtype; softmax_max / softmax_sum float32
        ``[B, N2, S1, N1/N2]`` (BSND) or ``[N2, T1, N1/N2]`` (TND), empty ``(0,)`` tensors
        unless ``return_softmax_lse``.

    Constraints
    -----------
    query, key, value one dtype; ``N1`` a multiple of ``N2``.  Strict mode (A2, A3, 950):
    attention_mode 2, ``D = 512``, rope dim 64, ``KV_N = 1``; A2/A3: ``N1`` in 1, 2, 4, ...,
    128 and no sinks; 950: ``N1`` in [1, 128], sparse_block_size 1.

    Notes
    -----
    Follows the kernel golden hicann/ops-transformer attention/sparse_flash_attention/tests/
    pytest/sparse_flash_attention_golden.py: probabilities rounded to query's dtype before the
    product with V; rows with nothing visible give zeros with max = sum = 0.  Differentiable
    w.r.t. query, key, value and the rope parts through npu_sparse_flash_attention_grad
    (op-plugin derivatives.yaml), for BSND / TND keys without sinks.  Non-contiguous inputs
    are accepted.
    """
    return sparse_flash_attention_op(
        query, key, value, sparse_indices, scale_value, block_table=block_table,
        actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_kv=actual_seq_lengths_kv, query_rope=query_rope, key_rope=key_rope,
        sparse_block_size=1 if sparse_block_size is None else sparse_block_size,
        layout_query=layout_query, layout_kv=layout_kv, sparse_mode=sparse_mode,
        pre_tokens=pre_tokens, next_tokens=next_tokens, attention_mode=attention_mode,
        return_softmax_lse=return_softmax_lse, sinks=sinks)


def npu_sparse_flash_attention_grad(query, key, value, sparse_indices, d_out, out, softmax_max,
                                    softmax_sum, scale_value, sparse_block_size,
                                    query_rope=None, key_rope=None, actual_seq_qlen=None,
                                    actual_seq_kvlen=None, layout="BSND", sparse_mode=3,
                                    pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
                                    attention_mode=0):
    """Gradients of :func:`npu_sparse_flash_attention` w.r.t. query, key, value and the ropes.

    Formula: with ``P`` the forward's probabilities over the selected tokens,
    ``dV~ = P^T dO``, ``dS = P * (dO V~^T - rowsum(dO * O))``, ``d[Q, Q_rope] = scale dS
    [K~, K~_rope]``, ``d[K~, K~_rope] = scale dS^T [Q, Q_rope]``, scattered back to the key
    rows (a token selected twice gets both contributions).  ``layout`` (BSND or TND) applies to
    query and key.  Computed in float32 from the inputs (``out``, ``softmax_max`` and
    ``softmax_sum`` are accepted and not needed) and rounded once.  Returns ``(d_query, d_key,
    d_value, d_query_rope, d_key_rope)``; the rope gradients are empty ``(0,)`` tensors without
    rope inputs (op-plugin's meta function).
    """
    return sparse_flash_attention_grad_op(
        query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum, scale_value,
        sparse_block_size, query_rope, key_rope, actual_seq_qlen, actual_seq_kvlen, layout,
        sparse_mode, pre_tokens, next_tokens, attention_mode)


TORCH_NPU_FUNCTIONS = {
    OP: npu_sparse_flash_attention,
    GRAD_OP: npu_sparse_flash_attention_grad,
}
