"""An independent float64 golden of npu_fusion_attention, written from seed 004's formula.

Everything is materialized ([B, N, Sq, Skv] scores, one Python loop per batch for the masks),
which is exactly what the op's row-blocked reference avoids, and differentiable with autograd.
"""

from __future__ import annotations

import math

import torch


def visible(mode, sq, skv, pre=2147483647, nxt=2147483647, mask=None, prefix_n=0, band=False):
    """Bool [sq, skv] of the positions one batch computes (True = visible), per seed 004."""
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(skv).view(1, -1)
    if mode == 0:
        vis = (j - i <= nxt) & (j - i >= -pre)
        return vis if mask is None else vis & ~mask
    if mode in (1, 5):
        return ~mask
    if mode == 2:
        return j <= i
    if mode == 3:
        return j <= i + (skv - sq)
    if mode == 4 or band:
        d = j - i - (skv - sq)
        return (d <= nxt) & (d >= -pre)
    if mode == 6:
        return (j <= i + (skv - sq)) | (j < prefix_n)
    if mode == 7:
        return j <= i + (skv - sq)
    if mode == 8:
        return j <= i
    raise ValueError(mode)


def attention(q, k, v, scale, vis=None, pse=None, sink=None, keep=None, keep_prob=1.0):
    """q [B,N,Sq,D], k/v [B,Nkv,Skv,D] float64; vis bool broadcastable to [B,N,Sq,Skv].

    Returns (out, row max, row exp-sum) with the doc's scale * (q k^T + pse).
    """
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, 1)
    v = v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2)
    if pse is not None:
        s = s + pse
    s = s * scale
    if vis is not None:
        s = s.masked_fill(~vis, -math.inf)
    if sink is not None:
        col = sink.view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1).to(s.dtype)
        s = torch.cat([s, col], dim=-1)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    p = e / l
    if sink is not None:
        p = p[..., :-1]
    if keep is not None:
        p = p * keep / keep_prob
    return p @ v, m[..., 0], l[..., 0]
