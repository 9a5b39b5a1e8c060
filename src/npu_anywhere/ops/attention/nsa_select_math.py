"""The math of NSA selection attention, shared by npu_nsa_select_attention (training, TND),
its backward and npu_nsa_select_attention_infer (paged decode).

One batch at a time: ``q [L1, N2, G, D]`` (query rows of the batch, heads grouped by key head),
``k [L2, N2, D]`` and ``v [L2, N2, Dv]`` (the batch's keys and values) and ``topk [L1, N2, C]``
(selected block numbers).  Query row ``i`` of key head ``n`` attends to the ``C *
select_block_size`` keys ``p = topk[i, n, c] * select_block_size + j`` in that order.  Keys
outside the batch (a negative block number, or past ``L2``), and with ``causal`` the keys
``p > i + offset``, are masked the kernel's way: the score becomes float32's lowest value, so
they get zero weight (a row with every key masked weighs its keys equally, as on the NPU).
"""

from __future__ import annotations

import torch

# Query rows handled at once: bounds the [rows, N2, C * block, D] gathered keys.
_CHUNK_ELEMENTS = 1 << 23


def _gather(rows_topk, k, v, block: int):
    """Selected keys / values of each row, and which of them exist: ``[R, N2, K, *]``."""
    r, n2, count = rows_topk.shape
    offsets = torch.arange(block, device=k.device)
    pos = (rows_topk.long().unsqueeze(-1) * block + offsets).reshape(r, n2, count * block)
    valid = (rows_topk.long().unsqueeze(-1) >= 0).expand(r, n2, count, block) \
        .reshape(r, n2, count * block) & (pos < k.shape[0])
    safe = pos.clamp(0, max(k.shape[0] - 1, 0))
    heads = torch.arange(n2, device=k.device).view(1, n2, 1)
    return k[safe, heads], v[safe, heads], pos, valid, safe


def _scores(q, ks, pos, valid, scale: float, causal: bool, row0: int):
    """``[R, N2, G, K]`` scaled scores with masked keys at float32's lowest value, and the
    ``[R, N2, 1, K]`` mask of the kept keys."""
    s = torch.einsum("rngd,rnkd->rngk", q, ks) * scale
    keep = valid
    if causal:
        rows = torch.arange(row0, row0 + q.shape[0], device=q.device).view(-1, 1, 1)
        keep = keep & (pos <= rows)
    lowest = torch.finfo(torch.float32).min
    keep = keep.unsqueeze(2)
    return s.masked_fill(~keep, lowest), keep


def forward(q, k, v, topk, *, block: int, scale: float, causal: bool, round_dtype):
    """``(out [L1, N2, G, Dv], max [L1, N2, G], sum [L1, N2, G])`` in the compute dtype.

    The probabilities are rounded to ``round_dtype`` (the inputs' dtype) before the product
    with the values, as the kernel casts its softmax result before the second matmul.
    """
    l1, n2, g, _ = q.shape
    dv = v.shape[-1]
    out = q.new_zeros((l1, n2, g, dv))
    row_max = q.new_zeros((l1, n2, g))
    row_sum = q.new_zeros((l1, n2, g))
    step = max(1, _CHUNK_ELEMENTS // max(1, n2 * topk.shape[-1] * block * q.shape[-1]))
    for lo in range(0, l1, step):
        hi = min(l1, lo + step)
        ks, vs, pos, valid, _ = _gather(topk[lo:hi], k, v, block)
        s, _ = _scores(q[lo:hi], ks, pos, valid, scale, causal, lo)
        m = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - m)
        total = e.sum(dim=-1, keepdim=True)
        p = (e / total).to(round_dtype).to(q.dtype)
        out[lo:hi] = torch.einsum("rngk,rnkd->rngd", p, vs)
        row_max[lo:hi] = m.squeeze(-1)
        row_sum[lo:hi] = total.squeeze(-1)
    return out, row_max, row_sum


def backward(dy, q, k, v, out, row_max, row_sum, topk, *, block: int, scale: float,
             causal: bool):
    """``(dq, dk, dv)`` of one batch in the compute dtype; the probabilities are rebuilt from
    the forward's ``row_max`` / ``row_sum`` ``[L1, N2, G]``."""
    l1, n2, g, _ = q.shape
    dq = q.new_zeros(q.shape)
    dk = k.new_zeros(k.shape)
    dv = v.new_zeros(v.shape)
    heads = torch.arange(n2, device=k.device).view(1, n2, 1)
    step = max(1, _CHUNK_ELEMENTS // max(1, n2 * topk.shape[-1] * block * q.shape[-1]))
    for lo in range(0, l1, step):
        hi = min(l1, lo + step)
        ks, vs, pos, valid, safe = _gather(topk[lo:hi], k, v, block)
        s, keep = _scores(q[lo:hi], ks, pos, valid, scale, causal, lo)
        p = torch.exp(s - row_max[lo:hi].unsqueeze(-1)) / row_sum[lo:hi].unsqueeze(-1)
        g_out = dy[lo:hi]
        dp = torch.einsum("rngd,rnkd->rngk", g_out, vs)
        delta = (g_out * out[lo:hi]).sum(dim=-1, keepdim=True)
        # A masked score is a constant: no gradient flows through it.
        ds = (p * (dp - delta)).masked_fill(~keep, 0.0)
        dq[lo:hi] = torch.einsum("rngk,rnkd->rngd", ds, ks) * scale
        d_keys = torch.einsum("rngk,rngd->rnkd", ds, q[lo:hi]) * scale
        d_values = torch.einsum("rngk,rngd->rnkd", p, g_out)
        # Repeated blocks accumulate; masked keys carry p = 0 unless the whole row is masked.
        flat = (safe * n2 + heads).reshape(-1)
        dk.view(-1, k.shape[-1]).index_add_(0, flat, d_keys.reshape(-1, k.shape[-1]))
        dv.view(-1, v.shape[-1]).index_add_(0, flat, d_values.reshape(-1, v.shape[-1]))
    return dq, dk, dv
