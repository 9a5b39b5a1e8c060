"""torch_npu.npu_sparse_lightning_indexer_grad_kl_loss (sparse training of the lightning
indexer: its gradients fused with the KL loss against the main attention, both restricted
to the keys each query token selected in ``sparse_indices``).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/
torch_npu-npu_sparse_lightning_indexer_grad_kl_loss.md, seed 004), per batch and query token
``t`` over its selection slots ``k`` (key ``j = sparse_indices[t, 0, k]``; a slot is live when
``0 <= j <= S2 - S1 + t``, rightDownCausal, so the ``-1`` padding and keys past the diagonal
drop out)::

    p_h[t, k] = exp(scale_value * [q, q_rope]_{t,h} . [k, k_rope]_{j,h//G} - softmax_max)
                / softmax_sum
    p[t, k]   = mean_h p_h[t, k]                            (no sinks)
              = sum_h p_h[t, k] / sum_{h,k'} p_h[t, k']     (sinks: the sink mass renormalised away)
    S_h[t, k] = query_index_{t,h} . key_index_j,   I[t, k] = sum_h weights_{t,h} * relu(S_h)
    y[t, :]   = softmax over the live slots of I[t, :]
    loss      = sum_{t, k} p * (log max(p, 1e-8) - log max(y, 1e-8))
    dI = y - p,   d weights_h = sum_k dI * relu(S_h),   dS_h = dI * weights_h * [S_h > 0]
    d query_index_{t,h} = sum_k dS_h[t, k] key_index_j
    d key_index_j      += sum_h dS_h[t, k] query_index_{t,h}

Sources: the torch_npu doc above and aclnnSparseLightningIndexerGradKLLoss.md (formula,
shapes, dtypes), op-plugin's meta function (outputs: the inputs' shapes and dtypes, loss
float32 ``[1]``) and SparseLightningIndexerGradKLLossKernelNpuOpApi.cpp (sinks 1-D, routed to
the V2 kernel).  No kernel source or golden of this op is public: the precision steps follow
the dense sibling's golden (float32 math, ``dS`` rounded to query's dtype before its two
products, gradients rounded once); each selection slot counts on its own (a key picked twice
is scattered twice), and the index softmax is computed here, over the live slots, since this
op gets no index statistics.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa
from . import nsa_common as nsa
from .lightning_indexer_kl_dense_grad import (_CLIP, _expect_shape, check_indexer_inputs,
                                              per_batch)

OP = "npu_sparse_lightning_indexer_grad_kl_loss"
SCHEMA = ("npu_sparse_lightning_indexer_grad_kl_loss(Tensor query, Tensor key, "
          "Tensor query_index, Tensor key_index, Tensor weights, Tensor sparse_indices, "
          "Tensor softmax_max, Tensor softmax_sum, float scale_value, *, "
          "Tensor? query_rope=None, Tensor? key_rope=None, SymInt[]? actual_seq_qlen=None, "
          "SymInt[]? actual_seq_klen=None, str? layout='BSND', int? sparse_mode=3, "
          "int? pre_tokens=9223372036854775807, int? next_tokens=9223372036854775807, "
          "Tensor? sinks=None) -> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def check_sparse_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights,
                                                sparse_indices, softmax_max, softmax_sum,
                                                scale_value, *, query_rope=None,
                                                key_rope=None, actual_seq_qlen=None,
                                                actual_seq_klen=None, layout="BSND",
                                                sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                                next_tokens=dsa.MAX_TOKENS, sinks=None):
    op = OP
    layout = "BSND" if layout is None else layout
    # weights: float32, or the dtype of the other four
    dims, n1, n2, ni2, stats = check_indexer_inputs(
        op, query, key, query_index, key_index, weights, query_rope=query_rope,
        key_rope=key_rope, actual_seq_qlen=actual_seq_qlen, actual_seq_klen=actual_seq_klen,
        layout=layout, sparse_mode=sparse_mode, weights_dtypes=(query.dtype, torch.float32),
        rope_same_dtype=True, devices={"sparse_indices": sparse_indices})
    checks.expect_dtype(sparse_indices, (torch.int32,), op, "sparse_indices")
    checks.expect_dim(sparse_indices, dims, op, "sparse_indices")
    _expect_shape(op, "sparse_indices", sparse_indices,
                  tuple(query.shape[:-2]) + (ni2, sparse_indices.shape[-1]))
    for name, t in (("softmax_max", softmax_max), ("softmax_sum", softmax_sum)):
        checks.expect_dtype(t, (torch.float32, torch.float64), op, name)
        _expect_shape(op, name, t, stats)
    if sinks is not None:
        checks.expect_dtype(sinks, (torch.float32, torch.float64), op, "sinks")
        _expect_shape(op, "sinks", sinks, (n1,))
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(n2 == 1, op, "key", "a head count N2 of 1", n2, ValueError)
        checks.expect(ni2 == 1, op, "key_index", "a head count N2index of 1", ni2, ValueError)


def _target(q, k, picks, live, mx, sm, scale, sinks):
    """The main attention's distribution over the selection slots, [S1, K]."""
    s1, n1, dq = q.shape
    n2 = k.shape[1]
    # grouped product: the selected keys are gathered once per key head, not per query head
    logits = torch.einsum("tngd,tknd->ngtk", q.reshape(s1, n2, n1 // n2, dq), k[picks])
    logits = logits.reshape(n1, s1, picks.shape[1]) * scale                   # [N1, S1, K]
    row_max = mx.permute(0, 2, 1).reshape(n1, -1, 1)                          # [N1, S1, 1]
    row_sum = sm.permute(0, 2, 1).reshape(n1, -1, 1)
    heads = torch.where(live, torch.exp(logits - row_max) / row_sum, 0.0).sum(dim=0)
    if sinks is None:
        return heads / n1
    # the statistics hold each head's sink logit: renormalise the selection's share to 1
    total = heads.sum(dim=-1, keepdim=True)
    return heads / torch.where(total > 0, total, 1.0)


def _batch_grads(q, k, qi, ki, w, picks_all, mx, sm, scale, sinks, out_dtype):
    """One batch: q [S1, N1, Dq], k [S2, N2, Dq], qi [S1, Ni1, D], ki [S2, Ni2, D],
    w [S1, Ni1], picks_all [S1, Ni2, K], mx / sm [N2, S1, G] -> grads and the loss term."""
    s1, ni1, d = qi.shape
    s2, ni2 = ki.shape[0], ki.shape[1]
    picks = picks_all[:, 0].long()                                            # [S1, K]
    live = (picks >= 0) & (picks < dsa.causal_limit(s1, s2, q.device).unsqueeze(1))
    picks = torch.where(live, picks, 0)
    p = _target(q, k, picks, live, mx, sm, scale, sinks)
    gi, topk = ni1 // ni2, picks.shape[1]
    index_keys = ki[picks]                                                    # [S1, K, Ni2, D]
    grouped_qi = qi.reshape(s1, ni2, gi, d)
    score = torch.einsum("tngd,tknd->ngtk", grouped_qi, index_keys).reshape(ni1, s1, topk)
    relu = score.clamp_min(0)
    index = (relu * w.t().unsqueeze(-1)).sum(dim=0).masked_fill(~live, float("-inf"))
    top = index.amax(dim=-1, keepdim=True)
    exp = torch.exp(index - torch.where(torch.isinf(top), 0.0, top))
    # a row with no live slot has y = 0 and adds nothing
    y = exp / exp.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(exp.dtype).tiny)
    loss = (p * (torch.log(p.clamp_min(_CLIP)) - torch.log(y.clamp_min(_CLIP)))).sum()
    d_index = torch.where(live, y - p, 0.0)                                   # [S1, K]
    d_w = (d_index.unsqueeze(0) * relu).sum(dim=-1).t()                       # [S1, Ni1]
    d_score = d_index.unsqueeze(0) * w.t().unsqueeze(-1) * (score > 0)
    d_score = d_score.to(out_dtype).to(q.dtype)
    d_score = d_score.reshape(ni2, gi, s1, topk)
    d_qi = torch.einsum("ngtk,tknd->tngd", d_score, index_keys).reshape(s1, ni1, d)
    # each slot's share of d key_index, summed over the heads of its group: [S1 * K, Ni2, D]
    per_slot = torch.einsum("ngtk,tngd->tknd", d_score, grouped_qi).reshape(-1, ni2, d)
    d_ki = ki.new_zeros(s2, ni2, d).index_add(0, picks.reshape(-1), per_slot)
    return d_qi, d_ki, d_w, loss


def sparse_lightning_indexer_grad_kl_loss_reference(query, key, query_index, key_index, weights,
                                                    sparse_indices, softmax_max, softmax_sum,
                                                    scale_value, *, query_rope=None,
                                                    key_rope=None, actual_seq_qlen=None,
                                                    actual_seq_klen=None, layout="BSND",
                                                    sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                                    next_tokens=dsa.MAX_TOKENS, sinks=None):
    layout = "BSND" if layout is None else layout
    ct = nsa.compute_dtype(query)
    if query_rope is not None:
        query, key = torch.cat([query, query_rope], -1), torch.cat([key, key_rope], -1)
    q, k, qi, ki, w = (t.to(ct) for t in (query, key, query_index, key_index, weights))
    sinks = None if sinks is None else sinks.to(ct)
    d_qi, d_ki, d_w, loss = per_batch(
        qi, ki, w, [softmax_max.to(ct), softmax_sum.to(ct)], layout, actual_seq_qlen,
        actual_seq_klen,
        lambda rows, keys, st: _batch_grads(q[rows], k[keys], qi[rows], ki[keys], w[rows],
                                            sparse_indices[rows], *st, scale_value, sinks,
                                            query.dtype))
    return (d_qi.to(query_index.dtype), d_ki.to(key_index.dtype), d_w.to(weights.dtype),
            loss.reshape(1).to(torch.float32))


sparse_kl_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                     check=check_sparse_lightning_indexer_grad_kl_loss,
                     reference=sparse_lightning_indexer_grad_kl_loss_reference,
                     metadata_check=True, info=OpInfo(api="torch_npu"))
sparse_kl_op.forbid_autograd(f"{OP} is itself a backward (it returns the indexer's gradients)")


def npu_sparse_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights,
                                              sparse_indices, softmax_max, softmax_sum,
                                              scale_value, *, query_rope=None, key_rope=None,
                                              actual_seq_qlen=None, actual_seq_klen=None,
                                              layout="BSND", sparse_mode=3,
                                              pre_tokens=dsa.MAX_TOKENS,
                                              next_tokens=dsa.MAX_TOKENS, sinks=None):
    """Lightning-indexer gradients and KL loss against the main attention, over the top-k
    keys of ``sparse_indices`` (sparse training stage).

    Formula (seed 004; op-plugin torch_npu-npu_sparse_lightning_indexer_grad_kl_loss.md), per
    query token ``t`` over its live selection slots (``0 <= j <= S2 - S1 + t``; ``-1`` pads)::

        p = mean over heads of exp(scale_value * [q, q_rope] . [k, k_rope]_j - softmax_max)
            / softmax_sum            (with sinks: the head sum renormalised to 1)
        I = sum_h weights_h * relu(query_index_h . key_index_j),  y = softmax(I)
        loss = sum p * (log max(p, 1e-8) - log max(y, 1e-8));   dI = y - p
        d_weights_h = dI @ relu(S_h)^T,  d_query_index = dS @ key_index_sel,
        d_key_index[j] += dS^T @ query_index,  dS_h = dI * weights_h * [S_h > 0]

    Parameters
    ----------
    query, key : Tensor
        Main attention ``[B, S1, N1, D]`` / ``[B, S2, N2, D]`` (TND: ``[T, N, D]``), float16 or
        bfloat16 (float32 / float64 outside strict mode).
    query_index, key_index : Tensor
        The indexer's ``[B, S1, N1index, Di]`` / ``[B, S2, N2index, Di]``, query's dtype.
    weights : Tensor
        ``[B, S1, N1index]`` (TND ``[T1, N1index]``), query's dtype or float32.
    sparse_indices : Tensor
        int32 ``[B, S1, N2index, K]`` (TND ``[T1, N2index, K]``): the key tokens each query
        token selected (batch-local positions), ``-1`` padded.
    softmax_max, softmax_sum : Tensor
        float32 ``[B, N2, S1, G]`` (TND ``[N2, T1, G]``), ``G = N1 / N2``: the sparse main
        attention's statistics over the same selection (e.g. from
        ``npu_sparse_flash_attention(..., return_softmax_lse=True)``).
    scale_value : float
        Main attention's score scale.
    query_rope, key_rope : Tensor, optional
        Rope parts ``[..., N1, Dr]`` / ``[..., N2, Dr]`` appended to query / key.
    actual_seq_qlen, actual_seq_klen : list of int, optional
        TND cumulative lengths (required there).
    layout : str
        ``"BSND"`` or ``"TND"``.
    sparse_mode : int
        3 only (rightDownCausal).
    pre_tokens, next_tokens : int
        Accepted, not used (the causal bound is sparse_mode 3's).
    sinks : Tensor, optional
        float32 ``[N1]``, the attention sinks the statistics were computed with.

    Returns
    -------
    (Tensor, Tensor, Tensor, Tensor)
        ``d_query_index``, ``d_key_index``, ``d_weights`` (their inputs' shapes and dtypes)
        and ``loss``, float32 ``[1]`` (the sum over all batches and tokens).

    Constraints
    -----------
    Atlas A2 / A3 training.  Strict mode: ``N2 = N2index = 1``.

    Notes
    -----
    No backward of its own.  All index heads use the selection of key-index head 0 (the
    documented configuration has one).  Each slot counts on its own, so a key selected twice
    weighs twice.  How the kernel corrects for sinks is not published; here the head sum of
    ``p`` is renormalised over the selection, the reading of "sinks-corrected L1
    normalisation" that leaves the loss a KL divergence between two distributions.

    Examples
    --------
    >>> q = torch.randn(1, 4, 2, 16); k = torch.randn(1, 6, 1, 16)
    >>> qi = torch.randn(1, 4, 3, 16); ki = torch.randn(1, 6, 1, 16); w = torch.randn(1, 4, 3)
    >>> idx = torch.tensor([[0, 1, 2], [3, 0, -1], [4, -1, -1], [5, 2, 1]],
    ...                    dtype=torch.int32).reshape(1, 4, 1, 3)
    >>> outs = npu_anywhere.npu_sparse_lightning_indexer_grad_kl_loss(
    ...     q, k, qi, ki, w, idx, torch.zeros(1, 1, 4, 2), torch.ones(1, 1, 4, 2), 0.25)
    >>> outs[3].shape
    torch.Size([1])
    """
    return sparse_kl_op(query, key, query_index, key_index, weights, sparse_indices,
                        softmax_max, softmax_sum, scale_value, query_rope=query_rope,
                        key_rope=key_rope, actual_seq_qlen=actual_seq_qlen,
                        actual_seq_klen=actual_seq_klen, layout=layout,
                        sparse_mode=sparse_mode, pre_tokens=pre_tokens,
                        next_tokens=next_tokens, sinks=sinks)


TORCH_NPU_FUNCTIONS = {OP: npu_sparse_lightning_indexer_grad_kl_loss}
