"""torch_npu.npu_nsa_compress_attention (Native Sparse Attention, training).

Formula (seed 004; hicann/ops-transformer attention/nsa_compress_attention/docs/
aclnnNsaCompressAttention.md), per batch ``b`` (TND; cumulative ``actual_seq_qlen``,
``actual_cmp_seq_kvlen``, ``actual_sel_seq_kvlen``) and query head ``h`` of key head
``n = h // G``::

    P[h]   = softmax(scale_value * query[h] @ key[n]^T + atten_mask * (-40000))
    out[h] = P[h] @ value[n]
    score[n, i, s] = sum_{h of n} sum_{j < m + n_c - 1} c_j * P[h, i, m * (s + 1) - j]
    topk_indices[i, n, :] = the select_block_count blocks s of highest score (stable, best
                            first), blocks where topk_mask is True forced in (score 23333)

with ``m = select_block_size // compress_stride``, ``n_c = compress_block_size //
compress_stride`` and the overlap counts ``c_j = min(n_c, j + 1, m + n_c - 1 - j)``
(how many compressed tokens that start in the selection block overlap it); terms whose
compressed index is outside ``[0, cmp_len)`` are left out.  ``atten_mask`` and ``topk_mask``
are ``[S1, S2]`` masks read from their top-left corner for each batch.

Followed for the details: op-plugin test/test_custom_ops/test_npu_nsa_compress_attention.py
(the golden the kernel is judged by): float32 math, the additive -40000 mask, ``out`` rounded
once to query's dtype; ``softmax_max`` / ``softmax_sum`` ``[T1, N1, 8]`` float32 whose rows
are head-major within each batch (the ``L_b * N1`` rows of batch ``b`` hold head 0's tokens,
then head 1's...), the order the golden writes and ``npu_fusion_attention_grad`` reads.

The backward is op-plugin derivatives.yaml's: ``npu_fusion_attention_grad`` in TND with the
forward's statistics and output, ``sparse_mode=1`` (the given mask), ``actual_seq_kvlen =
actual_cmp_seq_kvlen``; ``topk_indices`` and the statistics are not differentiable.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import REGISTRY, TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import nsa_common as nsa

OP = "npu_nsa_compress_attention"
SCHEMA = ("npu_nsa_compress_attention(Tensor query, Tensor key, Tensor value, float scale_value, "
          "int head_num, int compress_block_size, int compress_stride, int select_block_size, "
          "int select_block_count, *, Tensor? topk_mask=None, Tensor? atten_mask=None, "
          "int[]? actual_seq_qlen=None, int[]? actual_cmp_seq_kvlen=None, "
          "int[]? actual_sel_seq_kvlen=None) -> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2})
_STATS = 8
_MASK_VALUE = -40000.0
_FORCED_SCORE = 23333.0
_INT_MAX = 2147483647


def _check_mask(op, name, mask, rows, cols):
    if mask is None:
        return
    checks.expect_dtype(mask, (torch.bool, torch.uint8), op, name)
    checks.expect_dim(mask, 2, op, name)
    checks.expect(mask.shape[0] >= rows and mask.shape[1] >= cols, op, name,
                  lambda: f"a shape of at least [{rows}, {cols}] (the longest batches)",
                  lambda: f"shape {tuple(mask.shape)}", RuntimeError)


def check_nsa_compress_attention(query, key, value, scale_value, head_num, compress_block_size,
                                 compress_stride, select_block_size, select_block_count, *,
                                 topk_mask=None, atten_mask=None, actual_seq_qlen=None,
                                 actual_cmp_seq_kvlen=None, actual_sel_seq_kvlen=None):
    op = OP
    for name, t in (("query", query), ("key", key), ("value", value)):
        nsa.expect_tensor(op, name, t, 3)
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value}, op)
    t1, n1, d = query.shape
    t2, n2, _ = key.shape
    checks.expect(head_num == n1, op, "head_num", lambda: f"query's head count N1 = {n1}",
                  head_num, ValueError)
    checks.expect(value.shape[:2] == key.shape[:2], op, "value",
                  lambda: f"key's T and N2 ({t2}, {n2})", lambda: f"shape {tuple(value.shape)}",
                  RuntimeError)
    checks.expect(n1 % n2 == 0, op, "query", lambda: f"a head count N1 divisible by N2 = {n2}",
                  n1, ValueError)
    checks.expect(key.shape[2] == d and value.shape[2] <= d, op, "key",
                  lambda: f"query's head dim D = {d} (and value's at most D)",
                  lambda: f"head dims {key.shape[2]} and {value.shape[2]}", RuntimeError)
    nsa.expect_block_sizes(op, compress_block_size, compress_stride, select_block_size)
    nsa.expect_positive(op, select_block_count=select_block_count)
    q_lens = nsa.expect_cumulative(op, "actual_seq_qlen", actual_seq_qlen, t1)
    cmp_lens = nsa.expect_cumulative(op, "actual_cmp_seq_kvlen", actual_cmp_seq_kvlen, t2)
    sel_lens = nsa.expect_cumulative(op, "actual_sel_seq_kvlen", actual_sel_seq_kvlen)
    checks.expect(len(q_lens) == len(cmp_lens) == len(sel_lens), op, "actual_cmp_seq_kvlen",
                  lambda: f"one entry per batch of actual_seq_qlen ({len(q_lens)}), as "
                          "actual_sel_seq_kvlen",
                  f"{len(cmp_lens)} and {len(sel_lens)}", ValueError)
    ratio = select_block_size // compress_stride
    q_spans, c_spans, s_spans = nsa.spans(q_lens), nsa.spans(cmp_lens), nsa.spans(sel_lens)
    for (_, cmp), (_, sel) in zip(c_spans, s_spans):
        want = -(-cmp // ratio)
        checks.expect(sel == want, op, "actual_sel_seq_kvlen",
                      lambda: f"CeilDiv(cmp_skv, select_block_size // compress_stride) = {want}"
                              " for each batch", sel, ValueError)
        checks.expect(select_block_count <= sel, op, "select_block_count",
                      lambda: f"at most each batch's selection length ({sel})",
                      select_block_count, ValueError)
    _check_mask(op, "atten_mask", atten_mask, max(l for _, l in q_spans),
                max(l for _, l in c_spans))
    _check_mask(op, "topk_mask", topk_mask, max(l for _, l in q_spans),
                max(l for _, l in s_spans))
    if targets.expect_supported(op, _SUPPORTED) is not None:
        # Seed 004: the only configuration the A2 kernel runs, G < 128 with 128 % G == 0.
        got = (compress_block_size, compress_stride, select_block_size, select_block_count)
        checks.expect(got == (32, 16, 64, 16), op, "compress_block_size",
                      "32 with compress_stride 16, select_block_size 64, select_block_count 16",
                      repr(got), ValueError)
        g = n1 // n2
        checks.expect(g < 128 and 128 % g == 0, op, "query",
                      "a group G = N1 / N2 below 128 that divides 128", g, ValueError)
        checks.expect(all(c <= 14000 for _, c in c_spans), op, "actual_cmp_seq_kvlen",
                      "batch lengths of at most 14000", repr(cmp_lens), ValueError)


def overlap_weights(cmp_len: int, sel_len: int, m: int, n_c: int, dtype, device):
    """``[cmp_len, sel_len]``: weight ``c_j`` of compressed token ``t`` in selection block
    ``s``, where ``j = m * (s + 1) - t`` (zero outside ``0 <= j < m + n_c - 1``)."""
    taps = m + n_c - 1
    t = torch.arange(cmp_len, device=device).unsqueeze(1)
    j = m * (torch.arange(sel_len, device=device) + 1).unsqueeze(0) - t
    c = torch.minimum(torch.minimum(j + 1, taps - j), torch.full_like(j, n_c))
    return torch.where((j >= 0) & (j < taps), c, torch.zeros_like(j)).to(dtype)


def nsa_compress_attention_reference(query, key, value, scale_value, head_num,
                                     compress_block_size, compress_stride, select_block_size,
                                     select_block_count, *, topk_mask=None, atten_mask=None,
                                     actual_seq_qlen=None, actual_cmp_seq_kvlen=None,
                                     actual_sel_seq_kvlen=None):
    ct = nsa.compute_dtype(query)
    t1, n1, _ = query.shape
    n2 = key.shape[1]
    g = n1 // n2
    m, n_c = select_block_size // compress_stride, compress_block_size // compress_stride
    out = query.new_zeros((t1, n1, value.shape[2]), dtype=ct)
    row_max = query.new_zeros((t1, n1), dtype=ct)
    row_sum = query.new_zeros((t1, n1), dtype=ct)
    topk = torch.zeros((t1, n2, select_block_count), dtype=torch.int32, device=query.device)
    q_all, k_all, v_all = query.to(ct), key.to(ct), value.to(ct)
    for (qs, ql), (ks, kl), (_, sl) in zip(nsa.spans(actual_seq_qlen),
                                           nsa.spans(actual_cmp_seq_kvlen),
                                           nsa.spans(actual_sel_seq_kvlen)):
        if ql == 0:
            continue
        q = q_all[qs:qs + ql].transpose(0, 1)                               # [N1, L1, D]
        k = k_all[ks:ks + kl].transpose(0, 1).repeat_interleave(g, dim=0)   # [N1, L2, D]
        v = v_all[ks:ks + kl].transpose(0, 1).repeat_interleave(g, dim=0)
        s = torch.matmul(q, k.transpose(1, 2)) * scale_value
        if atten_mask is not None:
            s = s + atten_mask[:ql, :kl].to(torch.bool).to(ct) * _MASK_VALUE
        mx = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - mx)
        total = e.sum(dim=-1, keepdim=True)
        p = e / total
        out[qs:qs + ql] = torch.matmul(p, v).transpose(0, 1)
        # Statistics rows are head-major within each batch (the golden's and
        # npu_fusion_attention's TND order): batch rows hold head 0's tokens, then head 1's...
        row_max[qs:qs + ql] = mx.reshape(ql, n1)
        row_sum[qs:qs + ql] = total.reshape(ql, n1)
        weights = overlap_weights(kl, sl, m, n_c, ct, query.device)
        score = torch.matmul(p, weights).view(n2, g, ql, sl).sum(dim=1)     # [N2, L1, sel]
        if topk_mask is not None:
            score = score.masked_fill(topk_mask[:ql, :sl].to(torch.bool), _FORCED_SCORE)
        order = torch.sort(score, dim=-1, descending=True, stable=True).indices
        topk[qs:qs + ql] = order[..., :select_block_count].transpose(0, 1).to(torch.int32)
    stats = torch.float64 if query.dtype == torch.float64 else torch.float32
    return (out.to(query.dtype), topk,
            row_max.to(stats).unsqueeze(-1).expand(t1, n1, _STATS).contiguous(),
            row_sum.to(stats).unsqueeze(-1).expand(t1, n1, _STATS).contiguous())


compress_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nsa_compress_attention,
                              reference=nsa_compress_attention_reference, metadata_check=True,
                              info=OpInfo(api="torch_npu"))


def _setup_context(ctx, inputs, output):
    query, key, value, scale, head_num = inputs[:5]
    out, _, row_max, row_sum = output
    # inputs hold every schema argument in order: [9] topk_mask, [10] atten_mask,
    # [11] actual_seq_qlen, [12] actual_cmp_seq_kvlen.
    ctx.save_for_backward(query, key, value, out, row_max, row_sum, inputs[10])
    ctx.params = (scale, head_num, inputs[11], inputs[12])
    ctx.mark_non_differentiable(output[1], row_max, row_sum)


def _backward(ctx, grad_out, _grad_topk, _grad_max, _grad_sum):
    query, key, value, out, row_max, row_sum, atten_mask = ctx.saved_tensors
    scale, head_num, q_lens, cmp_lens = ctx.params
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = REGISTRY["npu_fusion_attention_grad"](
        query, key, value, grad_out.contiguous(), head_num, "TND", atten_mask=atten_mask,
        softmax_max=row_max, softmax_sum=row_sum, attention_in=out, scale_value=scale,
        keep_prob=1.0, pre_tockens=_INT_MAX, next_tockens=_INT_MAX, inner_precise=0,
        actual_seq_qlen=q_lens, actual_seq_kvlen=cmp_lens,
        sparse_mode=1 if atten_mask is not None else 0)[:3]
    return (dq, dk, dv) + (None,) * 11


compress_attention_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_nsa_compress_attention(query, key, value, scale_value, head_num, compress_block_size,
                               compress_stride, select_block_size, select_block_count, *,
                               topk_mask=None, atten_mask=None, actual_seq_qlen=None,
                               actual_cmp_seq_kvlen=None, actual_sel_seq_kvlen=None):
    """NSA attention over compressed KV, which also picks the blocks for selection attention.

    Formula (seed 004; ops-transformer aclnnNsaCompressAttention.md; op-plugin
    test_npu_nsa_compress_attention.py), per batch and query head ``h`` of key head ``n``::

        P = softmax(scale_value * q_h @ k_n^T + atten_mask * (-40000)),  out_h = P @ v_n
        score[n, i, s] = sum_{h of n} sum_j c_j * P[h, i, m * (s + 1) - j]
        topk_indices[i, n] = argsort(score[n, i], descending, stable)[:select_block_count]

    with ``m = select_block_size // compress_stride``, ``n_c = compress_block_size //
    compress_stride``, ``c_j = min(n_c, j + 1, m + n_c - 1 - j)`` for ``j < m + n_c - 1``;
    ``topk_mask`` True forces a block in (score 23333).

    Parameters
    ----------
    query : Tensor
        ``[T1, N1, D]`` (TND), float16 or bfloat16 (float32 / float64 outside strict mode).
    key, value : Tensor
        Compressed KV ``[T2, N2, D]`` and ``[T2, N2, Dv]`` (``Dv <= D``), query's dtype.
    scale_value : float
        Score scale, usually ``D ** -0.5``.
    head_num : int
        ``N1`` (a multiple of ``N2``).
    compress_block_size, compress_stride, select_block_size, select_block_count : int
        ``compress_block_size >= compress_stride``, ``select_block_size >=
        compress_block_size``, ``select_block_size % compress_stride == 0``.
    topk_mask : Tensor, optional
        bool / uint8 ``[S1, S_sel]``: True forces that selection block in.
    atten_mask : Tensor, optional
        bool / uint8 ``[S1, S_cmp]``: True (1) masks the score.
    actual_seq_qlen, actual_cmp_seq_kvlen, actual_sel_seq_kvlen : list of int
        Cumulative lengths of the query, compressed KV and selection-block sequences;
        ``sel_skv[i] = CeilDiv(cmp_skv[i], select_block_size // compress_stride)`` and
        ``select_block_count <= sel_skv[i]``.

    Returns
    -------
    (Tensor, Tensor, Tensor, Tensor)
        ``attention_out [T1, N1, Dv]`` (query's dtype), ``topk_indices [T1, N2,
        select_block_count]`` int32, ``softmax_max`` and ``softmax_sum`` ``[T1, N1, 8]``
        float32 (8 equal copies; float64 for float64 inputs), rows head-major within each
        batch as ``npu_fusion_attention``'s TND statistics.

    Constraints
    -----------
    Atlas A2 training.  Strict mode adds: only ``compress_block_size=32, compress_stride=16,
    select_block_size=64, select_block_count=16``; ``G = N1 / N2 < 128`` dividing 128;
    ``cmp_skv[i] <= 14000``.

    Notes
    -----
    Differentiable in query, key and value through ``npu_fusion_attention_grad`` (as
    torch_npu's autograd does); the indices and statistics are not.

    Examples
    --------
    >>> q = torch.randn(8, 2, 16); k = torch.randn(12, 1, 16); v = torch.randn(12, 1, 16)
    >>> out, topk, mx, sm = npu_anywhere.npu_nsa_compress_attention(
    ...     q, k, v, 0.25, 2, 32, 16, 64, 2, actual_seq_qlen=[8], actual_cmp_seq_kvlen=[12],
    ...     actual_sel_seq_kvlen=[3])
    >>> topk.shape
    torch.Size([8, 1, 2])
    """
    return compress_attention_op(query, key, value, scale_value, head_num, compress_block_size,
                                 compress_stride, select_block_size, select_block_count,
                                 topk_mask=topk_mask, atten_mask=atten_mask,
                                 actual_seq_qlen=actual_seq_qlen,
                                 actual_cmp_seq_kvlen=actual_cmp_seq_kvlen,
                                 actual_sel_seq_kvlen=actual_sel_seq_kvlen)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_compress_attention}
