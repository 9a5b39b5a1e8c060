"""torch_npu.npu_nsa_select_attention and npu_nsa_select_attention_grad (NSA, training).

Formula (seed 004; hicann/ops-transformer attention/nsa_selected_attention/docs/
aclnnNsaSelectedAttention.md), per batch (TND, cumulative ``actual_seq_qlen`` /
``actual_seq_kvlen``), query token ``i`` and query head ``h`` of key head ``n = h // G``::

    keys(i, n)  = blocks topk_indices[i, n, :] of the batch's keys, select_block_size each
    P           = softmax(scale_value * query[i, h] @ key[keys]^T)        (masked as below)
    out[i, h]   = P @ value[keys]
    softmax_max[i, h, :] = max of the scores, softmax_sum[i, h, :] = sum of exp(score - max)
                  (8 equal copies, float32)

Followed for the details (the kernel, op_kernel/nsa_selected_attention.h, and its host tiling):
torch_npu runs the kernel with sparse mode 2, and the tiling turns the mask off when
``atten_mask`` is None; with a mask the kernel applies its own left-up causal rule (key
position ``p`` within the batch is seen by query row ``i`` iff ``p <= i``, whatever the mask
holds).  Masked scores become float32's lowest value; the softmax is in float32 and its result
is cast to the inputs' dtype before the product with the values.

The backward (op-plugin derivatives.yaml, ``npu_nsa_select_attention_grad``; golden
test/test_custom_ops/test_npu_nsa_select_attention_grad.py) always applies the causal rule:
torch_npu passes sparse mode 2 and the grad kernel's tiling (op_host/
nsa_selected_attention_grad_tiling_bs1*.cpp) enables the mask from the sparse mode alone,
whether or not ``atten_mask`` is given.  So with ``atten_mask=None`` the forward attends to
every selected key while the gradients are those of the causal forward, as on the NPU.
It rebuilds ``P`` from
``softmax_max`` / ``softmax_sum`` and differentiates with the selection fixed:
``dS = P * (dy @ V^T - sum(dy * out))``, ``dq = scale * dS @ K``, ``dk = scale * dS^T @ q`` and
``dv = P^T @ dy``, scattered back to the selected key positions (repeats add up), in float32
and rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import nsa_common as nsa
from . import nsa_select_math as math

OP = "npu_nsa_select_attention"
SCHEMA = ("npu_nsa_select_attention(Tensor query, Tensor key, Tensor value, Tensor topk_indices, "
          "float scale_value, int head_num, int select_block_size, int select_block_count, *, "
          "Tensor? atten_mask=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None) "
          "-> (Tensor, Tensor, Tensor)")
GRAD_OP = "npu_nsa_select_attention_grad"
GRAD_SCHEMA = ("npu_nsa_select_attention_grad(Tensor grad, Tensor query, Tensor key, "
               "Tensor value, Tensor attention_out, Tensor softmax_max, Tensor softmax_sum, "
               "Tensor topk_indices, float scale_value, int head_num, int select_block_size, "
               "int select_block_count, *, Tensor? atten_mask=None, int[]? actual_seq_qlen=None, "
               "int[]? actual_seq_kvlen=None) -> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2})
_STATS = 8   # softmax_max / softmax_sum hold 8 equal float32 copies per row


def _check_common(op, query, key, value, topk_indices, head_num, select_block_size,
                  select_block_count, atten_mask, actual_seq_qlen, actual_seq_kvlen):
    for name, t in (("query", query), ("key", key), ("value", value)):
        nsa.expect_tensor(op, name, t, 3)
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value,
                               "topk_indices": topk_indices}, op)
    t1, n1, d = query.shape
    t2, n2, _ = key.shape
    checks.expect(head_num == n1, op, "head_num", lambda: f"query's head count N1 = {n1}",
                  head_num, ValueError)
    checks.expect(value.shape[0] == t2 and value.shape[1] == n2, op, "value",
                  lambda: f"key's T2 and N2 ({t2}, {n2})", lambda: f"shape {tuple(value.shape)}",
                  RuntimeError)
    checks.expect(n1 % n2 == 0, op, "query", lambda: f"a head count N1 divisible by N2 = {n2}",
                  n1, ValueError)
    checks.expect(key.shape[2] == d, op, "key", lambda: f"query's head dim D = {d}",
                  lambda: f"shape {tuple(key.shape)}", RuntimeError)
    checks.expect(value.shape[2] <= d, op, "value", lambda: f"a head dim of at most D = {d}",
                  value.shape[2], ValueError)
    checks.expect(select_block_size > 0, op, "select_block_size", "a positive int",
                  select_block_size, ValueError)
    checks.expect(select_block_count > 0, op, "select_block_count", "a positive int",
                  select_block_count, ValueError)
    checks.expect_dtype(topk_indices, (torch.int32,), op, "topk_indices")
    want = (t1, n2, select_block_count)
    checks.expect(tuple(topk_indices.shape) == want, op, "topk_indices",
                  lambda: f"shape {list(want)} ([T1, N2, select_block_count])",
                  lambda: f"shape {tuple(topk_indices.shape)}", RuntimeError)
    if atten_mask is not None:
        checks.expect_dtype(atten_mask, (torch.bool, torch.uint8), op, "atten_mask")
        checks.expect_dim(atten_mask, 2, op, "atten_mask")
    q_lens = nsa.expect_cumulative(op, "actual_seq_qlen", actual_seq_qlen, t1)
    kv_lens = nsa.expect_cumulative(op, "actual_seq_kvlen", actual_seq_kvlen, t2)
    checks.expect(len(q_lens) == len(kv_lens), op, "actual_seq_kvlen",
                  lambda: f"one entry per batch of actual_seq_qlen ({len(q_lens)})",
                  len(kv_lens), ValueError)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        # The A2 kernel's limits (seed 004 constraints 5 and 7, D_qk = 192, D_v = 128).
        checks.expect(select_block_size == 64 and select_block_count == 16, op,
                      "select_block_size", "64 with select_block_count 16",
                      f"{select_block_size} and {select_block_count}", ValueError)
        checks.expect(n1 // n2 <= 32 and n1 <= 128, op, "query",
                      "a group G = N1 / N2 of at most 32 and N1 of at most 128",
                      f"N1 = {n1}, N2 = {n2}", ValueError)
        checks.expect(d == 192 and value.shape[2] == 128, op, "query",
                      "a head dim of 192 with value's 128", f"{d} and {value.shape[2]}",
                      ValueError)


def check_nsa_select_attention(query, key, value, topk_indices, scale_value, head_num,
                               select_block_size, select_block_count, *, atten_mask=None,
                               actual_seq_qlen=None, actual_seq_kvlen=None):
    _check_common(OP, query, key, value, topk_indices, head_num, select_block_size,
                  select_block_count, atten_mask, actual_seq_qlen, actual_seq_kvlen)


def _stats_dtype(query) -> torch.dtype:
    # float32 as documented; float64 inputs (outside strict mode) keep float64 statistics so
    # that the backward can be checked against finite differences.
    return torch.float64 if query.dtype == torch.float64 else torch.float32


def check_nsa_select_attention_grad(grad, query, key, value, attention_out, softmax_max,
                                    softmax_sum, topk_indices, scale_value, head_num,
                                    select_block_size, select_block_count, *, atten_mask=None,
                                    actual_seq_qlen=None, actual_seq_kvlen=None):
    _check_common(GRAD_OP, query, key, value, topk_indices, head_num, select_block_size,
                  select_block_count, atten_mask, actual_seq_qlen, actual_seq_kvlen)
    out_shape = (query.shape[0], query.shape[1], value.shape[2])
    for name, t in (("grad", grad), ("attention_out", attention_out)):
        checks.expect(tuple(t.shape) == out_shape, GRAD_OP, name,
                      lambda: f"shape {list(out_shape)} ([T1, N1, Dv])",
                      lambda: f"shape {tuple(t.shape)}", RuntimeError)
    checks.expect_same_dtype({"query": query, "grad": grad, "attention_out": attention_out},
                             GRAD_OP)
    stats_shape = (query.shape[0], query.shape[1], _STATS)
    for name, t in (("softmax_max", softmax_max), ("softmax_sum", softmax_sum)):
        checks.expect(tuple(t.shape) == stats_shape, GRAD_OP, name,
                      lambda: f"shape {list(stats_shape)} ([T1, N1, 8])",
                      lambda: f"shape {tuple(t.shape)}", RuntimeError)
        checks.expect_dtype(t, (torch.float32, torch.float64), GRAD_OP, name)


def _batches(query, key, value, actual_seq_qlen, actual_seq_kvlen):
    """Per batch: query rows ``[L1, N2, G, D]`` slice, key / value rows."""
    n2 = key.shape[1]
    g = query.shape[1] // n2
    for (qs, ql), (ks, kl) in zip(nsa.spans(actual_seq_qlen), nsa.spans(actual_seq_kvlen)):
        yield (slice(qs, qs + ql), query[qs:qs + ql].reshape(ql, n2, g, query.shape[2]),
               key[ks:ks + kl], value[ks:ks + kl], slice(ks, ks + kl))


def nsa_select_attention_reference(query, key, value, topk_indices, scale_value, head_num,
                                   select_block_size, select_block_count, *, atten_mask=None,
                                   actual_seq_qlen=None, actual_seq_kvlen=None):
    ct = nsa.compute_dtype(query)
    t1, n1, _ = query.shape
    dv = value.shape[2]
    out = query.new_zeros((t1, n1, dv), dtype=ct)
    row_max = query.new_zeros((t1, n1), dtype=ct)
    row_sum = query.new_zeros((t1, n1), dtype=ct)
    for rows, q, k, v, _ in _batches(query.to(ct), key.to(ct), value.to(ct), actual_seq_qlen,
                                     actual_seq_kvlen):
        o, m, s = math.forward(q, k, v, topk_indices[rows], block=select_block_size,
                               scale=scale_value, causal=atten_mask is not None,
                               round_dtype=query.dtype)
        out[rows] = o.reshape(-1, n1, dv)
        row_max[rows] = m.reshape(-1, n1)
        row_sum[rows] = s.reshape(-1, n1)
    stats = _stats_dtype(query)
    return (out.to(query.dtype),
            row_max.to(stats).unsqueeze(-1).expand(t1, n1, _STATS).contiguous(),
            row_sum.to(stats).unsqueeze(-1).expand(t1, n1, _STATS).contiguous())


def nsa_select_attention_grad_reference(grad, query, key, value, attention_out, softmax_max,
                                        softmax_sum, topk_indices, scale_value, head_num,
                                        select_block_size, select_block_count, *,
                                        atten_mask=None, actual_seq_qlen=None,
                                        actual_seq_kvlen=None):
    ct = nsa.compute_dtype(query)
    n1 = query.shape[1]
    n2 = key.shape[1]
    g = n1 // n2
    dq = query.new_zeros(query.shape, dtype=ct)
    dk = key.new_zeros(key.shape, dtype=ct)
    dv = value.new_zeros(value.shape, dtype=ct)
    dy_all, out_all = grad.to(ct), attention_out.to(ct)
    max_all, sum_all = softmax_max[..., 0].to(ct), softmax_sum[..., 0].to(ct)
    for rows, q, k, v, keys in _batches(query.to(ct), key.to(ct), value.to(ct),
                                        actual_seq_qlen, actual_seq_kvlen):
        ql = q.shape[0]

        def grouped(t):
            return t[rows].reshape(ql, n2, g, *t.shape[2:])

        d_q, d_k, d_v = math.backward(grouped(dy_all), q, k, v, grouped(out_all),
                                      grouped(max_all), grouped(sum_all), topk_indices[rows],
                                      block=select_block_size, scale=scale_value,
                                      causal=True)
        dq[rows] = d_q.reshape(ql, n1, -1)
        dk[keys] += d_k
        dv[keys] += d_v
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


select_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nsa_select_attention,
                  reference=nsa_select_attention_reference, metadata_check=True,
                  info=OpInfo(api="torch_npu"))
select_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                       check=check_nsa_select_attention_grad,
                       reference=nsa_select_attention_grad_reference, metadata_check=True,
                       info=OpInfo(api="torch_npu", backward_of=OP))

_FORWARD_KWARGS = ("atten_mask", "actual_seq_qlen", "actual_seq_kvlen")


def _setup_context(ctx, inputs, output):
    query, key, value, topk = inputs[:4]
    ctx.save_for_backward(query, key, value, topk, *output)
    ctx.params = inputs[4:8]
    ctx.kwargs = dict(zip(_FORWARD_KWARGS, inputs[8:]))
    ctx.mark_non_differentiable(output[1], output[2])


def _backward(ctx, grad_out, _grad_max, _grad_sum):
    query, key, value, topk, out, row_max, row_sum = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = select_grad_op(grad_out.contiguous(), query, key, value, out, row_max, row_sum,
                                topk, *ctx.params, **ctx.kwargs)
    return (dq, dk, dv) + (None,) * 8


select_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_nsa_select_attention(query, key, value, topk_indices, scale_value, head_num,
                             select_block_size, select_block_count, *, atten_mask=None,
                             actual_seq_qlen=None, actual_seq_kvlen=None):
    """NSA selection attention: each query token attends to the key blocks it selected.

    Formula (seed 004; ops-transformer aclnnNsaSelectedAttention.md)::

        selected = blocks topk_indices[i, n, :] (select_block_size keys each) of the batch
        out[i, h] = softmax(Mask(scale_value * query[i, h] @ key[selected, n]^T))
                    @ value[selected, n]                                   n = h // (N1 / N2)

    Parameters
    ----------
    query : Tensor
        ``[T1, N1, D]`` (TND), float16 or bfloat16 (float32 / float64 outside strict mode).
    key, value : Tensor
        ``[T2, N2, D]`` and ``[T2, N2, Dv]`` (``Dv <= D``), ``query``'s dtype; ``N1 % N2 == 0``.
    topk_indices : Tensor
        int32 ``[T1, N2, select_block_count]``: block numbers within the batch (block ``c``
        holds its keys ``[c * select_block_size, (c + 1) * select_block_size)``).  Keys past
        the batch's end, or of a negative block number, are masked.
    scale_value : float
        Score scale, usually ``D ** -0.5``.
    head_num : int
        ``N1``.
    select_block_size, select_block_count : int
        Keys per block and blocks per query token.
    atten_mask : Tensor, optional
        bool / uint8 2-D.  When given, the kernel's causal rule applies (key position ``p``
        of the batch is seen by its query row ``i`` iff ``p <= i``); its values are not read.
    actual_seq_qlen, actual_seq_kvlen : list of int
        Cumulative token counts of the batches of query and key/value; required.

    Returns
    -------
    (Tensor, Tensor, Tensor)
        ``attention_out [T1, N1, Dv]`` in ``query``'s dtype; ``softmax_max`` and
        ``softmax_sum`` ``[T1, N1, 8]`` float32 (8 equal copies; float64 for float64 inputs).

    Constraints
    -----------
    Atlas A2 training.  Strict mode adds the kernel's limits: ``select_block_size = 64``,
    ``select_block_count = 16``, ``G = N1 / N2 <= 32``, ``N1 <= 128``, ``D = 192``, ``Dv = 128``.

    Notes
    -----
    Differentiable in ``query``, ``key`` and ``value`` (:func:`npu_nsa_select_attention_grad`);
    the softmax statistics are not.  As on the NPU the backward always applies the causal rule,
    so the gradients match this forward only when ``atten_mask`` is given.  The softmax is float32, rounded to the inputs' dtype
    before the product with the values, as the kernel does.

    Examples
    --------
    >>> q = torch.randn(4, 2, 16); k = torch.randn(8, 1, 16); v = torch.randn(8, 1, 8)
    >>> topk = torch.tensor([[[0, 1]]] * 4, dtype=torch.int32)
    >>> out, mx, sm = npu_anywhere.npu_nsa_select_attention(
    ...     q, k, v, topk, 0.25, 2, 4, 2, actual_seq_qlen=[4], actual_seq_kvlen=[8])
    >>> out.shape, mx.shape
    (torch.Size([4, 2, 8]), torch.Size([4, 2, 8]))
    """
    return select_op(query, key, value, topk_indices, scale_value, head_num, select_block_size,
                     select_block_count, atten_mask=atten_mask, actual_seq_qlen=actual_seq_qlen,
                     actual_seq_kvlen=actual_seq_kvlen)


def npu_nsa_select_attention_grad(grad, query, key, value, attention_out, softmax_max,
                                  softmax_sum, topk_indices, scale_value, head_num,
                                  select_block_size, select_block_count, *, atten_mask=None,
                                  actual_seq_qlen=None, actual_seq_kvlen=None):
    """Gradients of :func:`npu_nsa_select_attention` w.r.t. query, key and value.

    Formula (op-plugin test_npu_nsa_select_attention_grad.py), with ``P`` rebuilt from
    ``softmax_max`` / ``softmax_sum`` over the selected keys::

        dS = P * (grad @ V^T - sum(grad * attention_out, -1))
        dq = scale_value * dS @ K;  dk = scale_value * dS^T @ q;  dv = P^T @ grad

    ``dk`` / ``dv`` are scattered to the selected key positions (repeated blocks add up; keys
    never selected get zero).  The causal rule (key ``p`` seen by query row ``i`` iff ``p <=
    i``) always applies, as in the grad kernel (sparse mode 2); ``atten_mask`` is not read.  Returns ``(dq, dk, dv)`` in the inputs' dtypes, float32 math.
    """
    return select_grad_op(grad, query, key, value, attention_out, softmax_max, softmax_sum,
                          topk_indices, scale_value, head_num, select_block_size,
                          select_block_count, atten_mask=atten_mask,
                          actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_select_attention, GRAD_OP: npu_nsa_select_attention_grad}
