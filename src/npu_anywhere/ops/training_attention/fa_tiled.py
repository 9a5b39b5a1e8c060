"""A tiled (online-softmax) forward and grad of npu_fusion_attention for any mask, pse and dropout.

Same arithmetic as the row-blocked reference of :mod:`.fa_math` (float32 accumulation, the
same ``softmax_max`` / ``softmax_sum`` pair), but the keys are cut into column blocks too and
the softmax is accumulated across them (the FlashAttention recurrence, Dao et al. 2022, which
FlashAttentionScore runs on the NPU: hicann/ops-transformer
attention/flash_attention_score/op_kernel/flash_attention_score_s1s2_bn2gs1.h)::

    s   = scale * (q k_j^T + pse_j)     masked -> -inf
    m'  = max(m, rowmax s);  a = exp(m - m')
    l   = a l + rowsum exp(s - m');     acc = a acc + (exp(s - m') * Z_j) v_j
    out = acc / l   (sink: one more logit folded in at the end)

Tiles the mask leaves fully masked are skipped and fully visible ones are not masked, so a
causal or band call does only the work of its visible tiles, and no ``[Sq, Skv]`` matrix is
ever held: memory grows with S, not S^2.  The grad recomputes each tile's probabilities from
the forward's ``m`` and ``l``, as the reference and the NPU's grad do.
"""

from __future__ import annotations

import torch

from .fa_masks import ALL, MaskPlan
from .fa_math import Dropout, _expand_kv, _finite, _inverse, compute_dtype

# Score elements of one tile (all heads): 32 MiB of float32.  Large tiles on purpose: each
# tile costs ~15 PyTorch calls whatever its size, and on a busy CPU each call may wait for its
# worker threads (measured: 1024 x 1024 x 8 heads ran an S = 4096 band 1.7x faster than
# 512 x 512).  Memory stays independent of S.
TILE_BUDGET = 1 << 23
MAX_COLS = 1024


def _tiles(b: int, n: int, sq: int, skv: int) -> tuple[int, int]:
    """(rows, cols) of a tile: columns first (long rows amortize the per-tile overhead),
    then as many rows as the budget allows (a multiple of 64, the keep-mask chunk)."""
    cols = min(skv, MAX_COLS)
    rows = max(64, (TILE_BUDGET // max(1, b * n * cols)) // 64 * 64)
    return min(sq, rows), cols


def _tile_scores(q_scaled, k_blk, pse, scale, masked, i0, i1, j0, j1):
    """``scale q k^T + scale pse`` from a pre-scaled query (one pass fewer over the scores
    than scaling the sum; the same value up to float32 rounding)."""
    s = torch.matmul(q_scaled, k_blk.transpose(-1, -2))
    if pse is not None:
        s.add_(pse.tile(i0, i1, j0, j1), alpha=scale)
    if masked is not None:
        s.masked_fill_(masked, float("-inf"))
    return s


def forward(q, k, v, *, scale: float, pse, sink, plan: MaskPlan, dropout: Dropout):
    """``(out [B,N,Sq,Dv], m [B,N,Sq], l [B,N,Sq])`` in the compute dtype."""
    ct = compute_dtype(q.dtype)
    b, n, sq, _ = q.shape
    q, k, v = q.to(ct), _expand_kv(k.to(ct), n), _expand_kv(v.to(ct), n)
    skv, dv = k.shape[2], v.shape[-1]
    out = q.new_empty(b, n, sq, dv)
    m_all, l_all = q.new_empty(b, n, sq), q.new_empty(b, n, sq)
    q_scaled = q * scale
    rows, cols = _tiles(b, n, sq, skv)
    for i0 in range(0, sq, rows):
        i1 = min(sq, i0 + rows)
        q_blk = q_scaled[:, :, i0:i1]
        m = q.new_full((b, n, i1 - i0), float("-inf"))
        l = q.new_zeros(b, n, i1 - i0)
        acc = q.new_zeros(b, n, i1 - i0, dv)
        z = dropout.factor((b, n, skv), i0, i1, q.device, ct) if dropout.active else None
        for j0 in range(0, skv, cols):
            j1 = min(skv, j0 + cols)
            masked = plan.tile(i0, i1, j0, j1)
            if masked is ALL:
                continue
            s = _tile_scores(q_blk, k[:, :, j0:j1], pse, scale, masked, i0, i1, j0, j1)
            m_new = torch.maximum(m, s.amax(dim=-1))
            offset = _finite(m_new)
            alpha = torch.exp(m - offset)
            p = s.sub_(offset.unsqueeze(-1)).exp_()
            l = l.mul_(alpha).add_(p.sum(dim=-1))
            if z is not None:
                p.mul_(z[..., j0:j1])
            acc.mul_(alpha.unsqueeze(-1)).add_(torch.matmul(p, v[:, :, j0:j1]))
            m = m_new
        if sink is not None:
            col = sink.to(ct).view(1, n, 1).expand_as(m)
            m_new = torch.maximum(m, col)
            offset = _finite(m_new)
            alpha = torch.exp(m - offset)
            l = l * alpha + torch.exp(col - offset)
            acc.mul_(alpha.unsqueeze(-1))
            m = m_new
        out[:, :, i0:i1] = acc.mul_(_inverse(l).unsqueeze(-1))
        m_all[:, :, i0:i1] = m
        l_all[:, :, i0:i1] = l
    return out, m_all, l_all


def backward(q, k, v, dy, out, m, l, *, scale: float, pse, sink, plan: MaskPlan,
             dropout: Dropout):
    """``(dq, dk, dv, dpse or None, dsink or None)`` in the compute dtype (dk/dv per KV head)."""
    ct = compute_dtype(q.dtype)
    b, n, sq, _ = q.shape
    kv_heads = k.shape[1]
    q, dy, out = q.to(ct), dy.to(ct), out.to(ct)
    k, v = _expand_kv(k.to(ct), n), _expand_kv(v.to(ct), n)
    m, l = m.to(ct), l.to(ct)
    skv = k.shape[2]
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    dpse = None if pse is None else pse.grad_buffer()
    dsink = None if sink is None else torch.zeros(n, dtype=ct, device=q.device)
    big_d = (dy * out).sum(dim=-1)                          # [B, N, Sq]
    q_scaled = q * scale
    rows, cols = _tiles(b, n, sq, skv)
    for i0 in range(0, sq, rows):
        i1 = min(sq, i0 + rows)
        q_blk, dy_blk = q_scaled[:, :, i0:i1], dy[:, :, i0:i1]
        d_blk = big_d[:, :, i0:i1].unsqueeze(-1)
        offset = _finite(m[:, :, i0:i1]).unsqueeze(-1)
        inv = _inverse(l[:, :, i0:i1]).unsqueeze(-1)
        z = dropout.factor((b, n, skv), i0, i1, q.device, ct) if dropout.active else None
        dq_blk = dq[:, :, i0:i1]
        for j0 in range(0, skv, cols):
            j1 = min(skv, j0 + cols)
            masked = plan.tile(i0, i1, j0, j1)
            if masked is ALL:
                continue
            k_blk, v_blk = k[:, :, j0:j1], v[:, :, j0:j1]
            s = _tile_scores(q_blk, k_blk, pse, scale, masked, i0, i1, j0, j1)
            p = s.sub_(offset).exp_().mul_(inv)
            dp = torch.matmul(dy_blk, v_blk.transpose(-1, -2))
            if z is not None:
                zt = z[..., j0:j1]
                dv[:, :, j0:j1] += torch.matmul((p * zt).transpose(-1, -2), dy_blk)
                dp.mul_(zt)
            else:
                dv[:, :, j0:j1] += torch.matmul(p.transpose(-1, -2), dy_blk)
            ds = dp.sub_(d_blk).mul_(p)
            dq_blk += torch.matmul(ds, k_blk)
            dk[:, :, j0:j1] += torch.matmul(ds.transpose(-1, -2), q_blk)
            if dpse is not None:
                pse.accumulate(dpse, ds * scale, i0, i1, j0, j1)
        dq_blk.mul_(scale)
        if dsink is not None:
            p_sink = torch.exp(sink.to(ct).view(1, n, 1, 1) - offset) * inv
            dsink -= (p_sink * d_blk).sum(dim=(0, 2, 3))
    if kv_heads != n:
        dk = dk.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
        dv = dv.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
    if dpse is not None:
        dpse = pse.finish(dpse)
    return dq, dk, dv, dpse, dsink
