"""torch_npu.npu_dense_lightning_indexer_grad_kl_loss (warm-up training of the lightning
indexer: its gradients fused with the KL loss against the main attention).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/
torch_npu-npu_dense_lightning_indexer_grad_kl_loss.md, seed 004), per batch and query token
``t`` over the keys it sees (sparse_mode 3, rightDownCausal: ``u <= S2 - S1 + t``)::

    p[t, u]  = mean_h softmax(scale_value * [q, q_rope]_h . [k, k_rope]_{h // G})[u]
               (rebuilt from the given softmax_max / softmax_sum)
    S_h      = query_index_h . key_index,  I = sum_h weights_h * relu(S_h)
    y[t, u]  = exp(I - softmax_max_index) / softmax_sum_index
    loss     = sum_{t, u} p * (log max(p, 1e-8) - log max(y, 1e-8))
    dI       = y - p
    d weights_h = sum_u dI * relu(S_h),  dS_h = dI * weights_h * [S_h > 0]
    d query_index_h = dS_h @ key_index,  d key_index = sum_h dS_h^T @ query_index_h

Followed for the details: op-plugin test/test_custom_ops/
test_npu_dense_lightning_indexer_grad_kl_loss.py (the golden) and the meta function: float32
math, ``dS`` rounded to query's dtype before its two products, gradients rounded once to
their inputs' dtypes, ``loss`` float32 ``[1]``; softmax_max / softmax_sum are ``[B, N2, S1,
G]`` (TND ``[N2, T1, G]``), the index statistics ``[B, N2index, S1]`` (TND ``[N2index, T1]``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa
from . import nsa_common as nsa

OP = "npu_dense_lightning_indexer_grad_kl_loss"
SCHEMA = ("npu_dense_lightning_indexer_grad_kl_loss(Tensor query, Tensor key, "
          "Tensor query_index, Tensor key_index, Tensor weights, Tensor softmax_max, "
          "Tensor softmax_sum, Tensor softmax_max_index, Tensor softmax_sum_index, "
          "float scale_value, *, Tensor? query_rope=None, Tensor? key_rope=None, "
          "SymInt[]? actual_seq_qlen=None, SymInt[]? actual_seq_klen=None, str? layout='BSND', "
          "int? sparse_mode=3, int? pre_tokens=9223372036854775807, "
          "int? next_tokens=9223372036854775807) -> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_CLIP = 1e-8


def _expect_shape(op, name, t, want):
    checks.expect(tuple(t.shape) == tuple(want), op, name, lambda: f"shape {list(want)}",
                  lambda: f"shape {tuple(t.shape)}", RuntimeError)


def check_indexer_inputs(op, query, key, query_index, key_index, weights, *, query_rope,
                         key_rope, actual_seq_qlen, actual_seq_klen, layout, sparse_mode,
                         weights_dtypes, rope_same_dtype=False, devices=None):
    """The checks the dense and sparse KL-loss ops share: layout and sparse mode, the four
    attention / indexer tensors (ranks, dtypes, heads, head dims, tokens), weights, the rope
    pair and the batch structure (BSND batch, TND cumulative lengths).  Returns ``(dims, n1,
    n2, ni2, stats)``: the layout's rank, the head counts and the main attention statistics'
    shape."""
    dims = 4 if layout == "BSND" else 3
    checks.expect_one_of(layout, ("BSND", "TND"), op, "layout")
    checks.expect(sparse_mode in (None, 3), op, "sparse_mode", "3 (rightDownCausal)",
                  repr(sparse_mode), ValueError)
    named = {"query": query, "key": key, "query_index": query_index, "key_index": key_index}
    for name, t in named.items():
        checks.expect_dim(t, dims, op, name)
        checks.expect_dtype(t, nsa.floats(), op, name)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(dict(named, weights=weights, **(devices or {})), op)
    checks.expect_dtype(weights, weights_dtypes, op, "weights")
    n1, n2 = query.shape[-2], key.shape[-2]
    ni1, ni2 = query_index.shape[-2], key_index.shape[-2]
    checks.expect(n1 % n2 == 0, op, "query", lambda: f"a head count divisible by N2 = {n2}",
                  n1, ValueError)
    checks.expect(ni1 % ni2 == 0, op, "query_index",
                  lambda: f"a head count divisible by key_index's {ni2}", ni1, ValueError)
    checks.expect(key.shape[-1] == query.shape[-1], op, "key",
                  lambda: f"query's head dim {query.shape[-1]}", key.shape[-1], RuntimeError)
    checks.expect(key_index.shape[-1] == query_index.shape[-1], op, "key_index",
                  lambda: f"query_index's head dim {query_index.shape[-1]}",
                  key_index.shape[-1], RuntimeError)
    checks.expect((query_rope is None) == (key_rope is None), op, "query_rope",
                  "given together with key_rope", "only one of them", ValueError)
    if query_rope is not None:
        if rope_same_dtype:
            checks.expect_same_dtype({"query": query, "query_rope": query_rope,
                                      "key_rope": key_rope}, op)
        _expect_shape(op, "query_rope", query_rope, tuple(query.shape[:-1])
                      + (query_rope.shape[-1],))
        _expect_shape(op, "key_rope", key_rope, tuple(key.shape[:-1]) + (query_rope.shape[-1],))
    rows = tuple(query.shape[:-2])                     # (B, S1) or (T1,)
    checks.expect(tuple(query_index.shape[:-2]) == rows, op, "query_index",
                  lambda: f"query's tokens {list(rows)}", lambda: f"shape "
                  f"{tuple(query_index.shape)}", RuntimeError)
    checks.expect(tuple(key_index.shape[:-2]) == tuple(key.shape[:-2]), op, "key_index",
                  lambda: f"key's tokens {list(key.shape[:-2])}", lambda: f"shape "
                  f"{tuple(key_index.shape)}", RuntimeError)
    _expect_shape(op, "weights", weights, query_index.shape[:-1])
    if layout == "BSND":
        checks.expect(key.shape[0] == query.shape[0], op, "key",
                      lambda: f"query's batch B = {query.shape[0]}", key.shape[0], RuntimeError)
        stats = (query.shape[0], n2, query.shape[1], n1 // n2)
    else:
        q_lens = nsa.expect_cumulative(op, "actual_seq_qlen", actual_seq_qlen, query.shape[0])
        k_lens = nsa.expect_cumulative(op, "actual_seq_klen", actual_seq_klen, key.shape[0])
        checks.expect(len(q_lens) == len(k_lens), op, "actual_seq_klen",
                      lambda: f"one entry per batch of actual_seq_qlen ({len(q_lens)})",
                      len(k_lens), ValueError)
        stats = (n2, query.shape[0], n1 // n2)
    return dims, n1, n2, ni2, stats


def check_dense_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights,
                                               softmax_max, softmax_sum, softmax_max_index,
                                               softmax_sum_index, scale_value, *,
                                               query_rope=None, key_rope=None,
                                               actual_seq_qlen=None, actual_seq_klen=None,
                                               layout="BSND", sparse_mode=3,
                                               pre_tokens=dsa.MAX_TOKENS,
                                               next_tokens=dsa.MAX_TOKENS):
    op = OP
    layout = "BSND" if layout is None else layout
    _, _, _, ni2, stats = check_indexer_inputs(
        op, query, key, query_index, key_index, weights, query_rope=query_rope,
        key_rope=key_rope, actual_seq_qlen=actual_seq_qlen, actual_seq_klen=actual_seq_klen,
        layout=layout, sparse_mode=sparse_mode, weights_dtypes=nsa.floats() + (torch.float32,))
    index_stats = ((query.shape[0], ni2, query.shape[1]) if layout == "BSND"
                   else (ni2, query.shape[0]))
    for name, t, want in (("softmax_max", softmax_max, stats), ("softmax_sum", softmax_sum, stats),
                          ("softmax_max_index", softmax_max_index, index_stats),
                          ("softmax_sum_index", softmax_sum_index, index_stats)):
        checks.expect_dtype(t, (torch.float32, torch.float64), op, name)
        _expect_shape(op, name, t, want)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(ni2 == 1, op, "key_index", "a head count N2index of 1", ni2, ValueError)


def _batch_grads(q, k, qi, ki, w, mx, sm, mxi, smi, scale, out_dtype):
    """One batch: q [S1, N1, Dq], k [S2, N2, Dq], qi [S1, Ni1, D], ki [S2, Ni2, D],
    w [S1, Ni1], mx / sm [N2, S1, G], mxi / smi [Ni2, S1] -> grads and the loss term."""
    s1, n1, _ = q.shape
    s2, n2, _ = k.shape
    ni1, ni2 = qi.shape[1], ki.shape[1]
    seen = dsa.causal_limit(s1, s2, q.device)
    hidden = torch.arange(s2, device=q.device) >= seen.unsqueeze(1)          # [S1, S2]
    logits = torch.einsum("shd,thd->hst", q, k.repeat_interleave(n1 // n2, dim=1)) * scale
    logits = logits.masked_fill(hidden, float("-inf"))
    row_max = mx.permute(0, 2, 1).reshape(n1, s1, 1)                          # [N1, S1, 1]
    row_sum = sm.permute(0, 2, 1).reshape(n1, s1, 1)
    p = (torch.exp(logits - row_max) / row_sum).mean(dim=0)                   # [S1, S2]
    ki_heads = ki.repeat_interleave(ni1 // ni2, dim=1)                        # [S2, Ni1, D]
    score = torch.einsum("shd,thd->hst", qi, ki_heads)                        # [Ni1, S1, S2]
    relu = score.clamp_min(0)
    index = (relu * w.t().unsqueeze(-1)).sum(dim=0).masked_fill(hidden, float("-inf"))
    # one index softmax per query row (the statistics of N2index = 1; heads share it)
    y = torch.exp(index - mxi[0].unsqueeze(-1)) / smi[0].unsqueeze(-1)
    loss = (p * (torch.log(p.clamp_min(_CLIP)) - torch.log(y.clamp_min(_CLIP)))).sum()
    d_index = y - p                                                           # [S1, S2]
    d_w = (d_index.unsqueeze(0) * relu).sum(dim=-1).t()                       # [S1, Ni1]
    d_score = d_index.unsqueeze(0) * w.t().unsqueeze(-1) * (score > 0)
    d_score = d_score.to(out_dtype).to(q.dtype)
    d_qi = torch.einsum("hst,thd->shd", d_score, ki_heads)
    d_ki = torch.einsum("hst,shd->thd", d_score, qi).reshape(s2, ni2, ni1 // ni2, -1).sum(2)
    return d_qi, d_ki, d_w, loss


def per_batch(qi, ki, w, stats, layout, actual_seq_qlen, actual_seq_klen, grads):
    """Run ``grads(rows, keys, stats_of_the_batch) -> (d_qi, d_ki, d_w, loss)`` per batch
    (BSND: index b; TND: the cumulative-length spans) and gather the gradients and the summed
    loss.  ``stats`` are ``[B, N, S1, ...]`` (BSND) or ``[N, T1, ...]`` (TND) tensors."""
    d_qi, d_ki, d_w = torch.zeros_like(qi), torch.zeros_like(ki), torch.zeros_like(w)
    loss = qi.new_zeros(())
    if layout == "BSND":
        pieces = [((b,), (b,), [t[b] for t in stats]) for b in range(qi.shape[0])]
    else:
        pieces = [((slice(qs, qs + ql),), (slice(ks, ks + kl),),
                   [t[:, qs:qs + ql] for t in stats])
                  for (qs, ql), (ks, kl) in zip(nsa.spans(actual_seq_qlen),
                                                nsa.spans(actual_seq_klen))]
    for rows, keys, batch_stats in pieces:
        g_qi, g_ki, g_w, part = grads(rows, keys, batch_stats)
        d_qi[rows] = g_qi
        d_ki[keys] = g_ki
        d_w[rows] = g_w
        loss = loss + part
    return d_qi, d_ki, d_w, loss


def dense_lightning_indexer_grad_kl_loss_reference(query, key, query_index, key_index, weights,
                                                   softmax_max, softmax_sum, softmax_max_index,
                                                   softmax_sum_index, scale_value, *,
                                                   query_rope=None, key_rope=None,
                                                   actual_seq_qlen=None, actual_seq_klen=None,
                                                   layout="BSND", sparse_mode=3,
                                                   pre_tokens=dsa.MAX_TOKENS,
                                                   next_tokens=dsa.MAX_TOKENS):
    layout = "BSND" if layout is None else layout
    ct = nsa.compute_dtype(query)
    if query_rope is not None:
        query, key = torch.cat([query, query_rope], -1), torch.cat([key, key_rope], -1)
    q, k, qi, ki, w = (t.to(ct) for t in (query, key, query_index, key_index, weights))
    stats = [t.to(ct) for t in (softmax_max, softmax_sum, softmax_max_index,
                                softmax_sum_index)]
    d_qi, d_ki, d_w, loss = per_batch(
        qi, ki, w, stats, layout, actual_seq_qlen, actual_seq_klen,
        lambda rows, keys, st: _batch_grads(q[rows], k[keys], qi[rows], ki[keys], w[rows], *st,
                                            scale_value, query.dtype))
    return (d_qi.to(query_index.dtype), d_ki.to(key_index.dtype), d_w.to(weights.dtype),
            loss.reshape(1).to(torch.float32))


dense_kl_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                    check=check_dense_lightning_indexer_grad_kl_loss,
                    reference=dense_lightning_indexer_grad_kl_loss_reference,
                    metadata_check=True, info=OpInfo(api="torch_npu"))
dense_kl_op.forbid_autograd(f"{OP} is itself a backward (it returns the indexer's gradients)")


def npu_dense_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights,
                                             softmax_max, softmax_sum, softmax_max_index,
                                             softmax_sum_index, scale_value, *, query_rope=None,
                                             key_rope=None, actual_seq_qlen=None,
                                             actual_seq_klen=None, layout="BSND",
                                             sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                             next_tokens=dsa.MAX_TOKENS):
    """Lightning-indexer gradients and KL loss against the main attention (dense warm-up).

    Formula (seed 004; op-plugin test_npu_dense_lightning_indexer_grad_kl_loss.py)::

        p = mean over heads of softmax(scale_value * [q, q_rope] @ [k, k_rope]^T)
        y = softmax(sum_h weights_h * relu(query_index_h @ key_index^T))
        loss = sum p * (log max(p, 1e-8) - log max(y, 1e-8));   dI = y - p
        d_weights_h = dI @ relu(S_h)^T,  d_query_index = dS @ key_index,
        d_key_index = dS^T @ query_index,  dS_h = dI * weights_h * [S_h > 0]

    both softmaxes rebuilt from the given statistics, masked rightDownCausal.

    Parameters
    ----------
    query, key : Tensor
        Main attention ``[B, S1, N1, D]`` / ``[B, S2, N2, D]`` (TND: ``[T, N, D]``), float16 or
        bfloat16 (float32 / float64 outside strict mode).
    query_index, key_index : Tensor
        The indexer's ``[B, S1, N1index, D]`` / ``[B, S2, N2index, D]``, same dtype.
    weights : Tensor
        ``[B, S1, N1index]`` (TND ``[T1, N1index]``).
    softmax_max, softmax_sum : Tensor
        float32 ``[B, N2, S1, G]`` (TND ``[N2, T1, G]``), ``G = N1 / N2``: the main
        attention's statistics (max of the scaled scores, sum of exponentials).
    softmax_max_index, softmax_sum_index : Tensor
        float32 ``[B, N2index, S1]`` (TND ``[N2index, T1]``), from
        :func:`npu_dense_lightning_indexer_softmax_lse`.
    scale_value : float
        Main attention's score scale.
    query_rope, key_rope : Tensor, optional
        Rope parts ``[..., N1, Dr]`` / ``[..., N2, Dr]`` appended to query / key.
    actual_seq_qlen, actual_seq_klen : list of int, optional
        TND cumulative lengths (required there).
    layout : str
        ``"BSND"`` or ``"TND"``.
    sparse_mode : int
        3 only.
    pre_tokens, next_tokens : int
        Accepted, not used.

    Returns
    -------
    (Tensor, Tensor, Tensor, Tensor)
        ``d_query_index``, ``d_key_index``, ``d_weights`` (their inputs' shapes and dtypes)
        and ``loss``, float32 ``[1]`` (the sum over all batches and tokens).

    Constraints
    -----------
    Atlas A2 / A3 training.  Strict mode: ``N2index = 1``.

    Notes
    -----
    No backward of its own.  The index softmax statistics are per query row; with
    ``N2index > 1`` the first key head's are used (the documented configuration has one).

    Examples
    --------
    >>> q = torch.randn(1, 4, 2, 16); k = torch.randn(1, 6, 2, 16)
    >>> qi = torch.randn(1, 4, 3, 16); ki = torch.randn(1, 6, 1, 16); w = torch.randn(1, 4, 3)
    >>> mx, sm = npu_anywhere.npu_dense_lightning_indexer_softmax_lse(qi, ki, w)
    >>> outs = npu_anywhere.npu_dense_lightning_indexer_grad_kl_loss(
    ...     q, k, qi, ki, w, torch.zeros(1, 2, 4, 1), torch.ones(1, 2, 4, 1), mx, sm, 0.25)
    >>> outs[3].shape
    torch.Size([1])
    """
    return dense_kl_op(query, key, query_index, key_index, weights, softmax_max, softmax_sum,
                       softmax_max_index, softmax_sum_index, scale_value, query_rope=query_rope,
                       key_rope=key_rope, actual_seq_qlen=actual_seq_qlen,
                       actual_seq_klen=actual_seq_klen, layout=layout, sparse_mode=sparse_mode,
                       pre_tokens=pre_tokens, next_tokens=next_tokens)


TORCH_NPU_FUNCTIONS = {OP: npu_dense_lightning_indexer_grad_kl_loss}
