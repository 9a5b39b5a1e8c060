"""The arithmetic of npu_fusion_attention and its grad in the internal ``[B, N, S, D]`` form.

Reference (the semantics and the test oracle), for one block of query rows at a time::

    s    = scale * (q k^T + pse)          masked positions -> -inf
    m    = max_j s  (and the sink logit)  l = sum_j exp(s - m) (+ exp(sink - m))
    P    = exp(s - m) / l                 Z = keep-mask / keep_prob (1 without dropout)
    out  = (P * Z) v
grad, from the forward's ``m``, ``l`` and ``out`` (``attention_in``)::

    D = rowsum(dy * out);  dP = (dy v^T) * Z;  dS = P * (dP - D)
    dq = scale dS k;  dk = scale dS^T q;  dv = (P * Z)^T dy;  dpse = scale dS
    dsink = -sum_rows P_sink * D

Rows are processed in blocks sized so that a block's scores stay within a fixed budget: the
memory of a long sequence grows with S, not S^2.  Float16 / bfloat16 inputs compute in float32
and round once (FlashAttentionScore accumulates in float32: hicann/ops-transformer
attention/flash_attention_score/op_kernel).  A row with no visible key (and no sink) yields
0, with ``m = -inf`` and ``l = 0``.

The fast path runs PyTorch's fused CPU flash kernels
(``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward) for the calls that map
onto them: dense layouts, no pse / sink / dropout, and no mask or a top-left causal one.  Those
kernels give only the log-sum-exp, so that path returns ``m = lse`` and ``l = 1``: the same
probabilities ``exp(s - m) / l`` and the same ``m + log l`` for ring merges, not the same pair.
"""

from __future__ import annotations

from typing import Optional

import torch

from .fa_masks import MaskPlan, keep_bits, keep_stream_rows, mask_elements

SCORE_BUDGET = 1 << 24          # score elements per block (64 MiB of float32)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """GQA: KV head ``n // (Nq / Nkv)`` serves query head ``n``."""
    group = heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def _block_rows(b: int, n: int, sq: int, skv: int) -> int:
    return max(1, min(sq, SCORE_BUDGET // max(1, b * n * skv)))


class Dropout:
    """The keep-mask source of one call (None-like when keep_prob == 1): the op's own
    generator from (seed, offset), or the caller's bit-packed ``dropout_mask``."""

    def __init__(self, keep_prob: float, seed: int, offset: int, bits=None, problem=None):
        self.keep_prob, self.seed, self.offset = keep_prob, seed, offset
        self.bits, self.problem = bits, problem

    @property
    def active(self) -> bool:
        return self.keep_prob < 1.0

    def factor(self, shape, i0, i1, device, dtype) -> torch.Tensor:
        """``keep / keep_prob`` for query rows ``[i0, i1)`` as ``[B, N, rows, Skv]`` (``shape``
        is ``[B, N, Skv]``; TND positions past a sequence's lengths are 0)."""
        p = self.problem
        if self.bits is None:
            keep = keep_stream_rows(self.seed, self.offset, self.keep_prob, p, i0, i1, device)
        else:
            e, valid = mask_elements(p, i0, i1, device)
            keep = keep_bits(self.bits, e)
            if valid is not None:
                keep = keep & valid
        return keep.to(dtype) / self.keep_prob


def _scores(q_blk, k, pse_blk, scale, masked):
    """``scale * (q k^T + pse)`` with masked positions at -inf (one fresh buffer, updated in
    place: each pass over a block of scores costs as much as the matmul on CPU)."""
    s = torch.matmul(q_blk, k.transpose(-1, -2))
    if pse_blk is not None:
        s.add_(pse_blk)
    s.mul_(scale)
    if masked is not None:
        s.masked_fill_(masked, float("-inf"))
    return s


def _finite(m):
    """Row maxima usable as exponent offsets: 0 for rows that saw nothing (-inf)."""
    return torch.nan_to_num(m, nan=0.0, posinf=0.0, neginf=0.0)


def _inverse(l):
    """``1 / l``, 0 for rows that saw nothing (``l == 0``)."""
    safe = torch.where(l > 0, l, torch.ones_like(l))
    return torch.where(l > 0, 1.0 / safe, torch.zeros_like(l))


def _probs_(s, m, l):
    """``exp(s - m) / l`` written over ``s``."""
    return s.sub_(_finite(m).unsqueeze(-1)).exp_().mul_(_inverse(l).unsqueeze(-1))


def forward(q, k, v, *, scale: float, pse, sink, plan: MaskPlan, dropout: Dropout):
    """``(out [B,N,Sq,Dv], m [B,N,Sq], l [B,N,Sq])`` in the compute dtype (``pse``: a
    :class:`~.fa_pse.PseSource` or None)."""
    ct = compute_dtype(q.dtype)
    b, n, sq, _ = q.shape
    q, k, v = q.to(ct), _expand_kv(k.to(ct), n), _expand_kv(v.to(ct), n)
    skv = k.shape[2]
    out = q.new_empty(b, n, sq, v.shape[-1])
    m_all, l_all = q.new_empty(b, n, sq), q.new_empty(b, n, sq)
    sink_col = None if sink is None else sink.to(ct).view(1, n, 1)
    step = _block_rows(b, n, sq, skv)
    for i0 in range(0, sq, step):
        i1 = min(sq, i0 + step)
        s = _scores(q[:, :, i0:i1], k, None if pse is None else pse.rows(i0, i1), scale,
                    plan.rows(i0, i1))
        m = s.amax(dim=-1)
        if sink_col is not None:
            m = torch.maximum(m, sink_col.expand_as(m))
        m_safe = _finite(m)
        p = s.sub_(m_safe.unsqueeze(-1)).exp_()
        l = p.sum(dim=-1)
        if sink_col is not None:
            l = l + torch.exp(sink_col - m_safe)
        p.mul_(_inverse(l).unsqueeze(-1))
        if dropout.active:
            p.mul_(dropout.factor((b, n, skv), i0, i1, q.device, ct))
        out[:, :, i0:i1] = torch.matmul(p, v)
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
    step = _block_rows(b, n, sq, skv)
    for i0 in range(0, sq, step):
        i1 = min(sq, i0 + step)
        q_blk, dy_blk, d_blk = q[:, :, i0:i1], dy[:, :, i0:i1], big_d[:, :, i0:i1]
        s = _scores(q_blk, k, None if pse is None else pse.rows(i0, i1), scale,
                    plan.rows(i0, i1))
        p = _probs_(s, m[:, :, i0:i1], l[:, :, i0:i1])
        dp = torch.matmul(dy_blk, v.transpose(-1, -2))
        if dropout.active:
            z = dropout.factor((b, n, skv), i0, i1, q.device, ct)
            dv += torch.matmul((p * z).transpose(-1, -2), dy_blk)
            dp.mul_(z)
        else:
            dv += torch.matmul(p.transpose(-1, -2), dy_blk)
        ds = dp.sub_(d_blk.unsqueeze(-1)).mul_(p)
        dq[:, :, i0:i1] = torch.matmul(ds, k) * scale
        dk += torch.matmul(ds.transpose(-1, -2), q_blk) * scale
        if dpse is not None:
            pse.accumulate(dpse, ds * scale, i0, i1, 0, skv)
        if dsink is not None:
            mb, lb = m[:, :, i0:i1], l[:, :, i0:i1]
            p_sink = _probs_(sink.to(ct).view(1, n, 1, 1).expand(b, n, i1 - i0, 1).clone(),
                             mb, lb)
            dsink -= (p_sink[..., 0] * d_blk).sum(dim=(0, 2))
    if kv_heads != n:
        dk = dk.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
        dv = dv.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
    if dpse is not None:
        dpse = pse.finish(dpse)
    return dq, dk, dv, dpse, dsink


# -- the fused CPU flash kernels -------------------------------------------------------------

def flash_causal(p, atten_mask, sparse_mode: int) -> Optional[bool]:
    """``is_causal`` for a call the flash kernels compute exactly, else None."""
    if atten_mask is None:
        return False
    if sparse_mode == 2 or (sparse_mode == 3 and p.sq == p.skv):
        return True
    return None


def flash_forward(q, k, v, scale: float, causal: bool):
    """``(out, lse)`` from the fused kernel; GQA heads are handled inside it."""
    # bfloat16 / float16 go in as they are: the kernel accumulates in float32 itself
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, scale=scale)


def flash_backward(q, k, v, dy, out, lse, scale: float, causal: bool):
    n, kv_heads = q.shape[1], k.shape[1]
    ke, ve = _expand_kv(k, n), _expand_kv(v, n)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dy.to(q.dtype), q, ke, ve, out.to(q.dtype),
        # the kernel wants its lse in float32, float64 for float64 inputs (the statistics
        # outputs are float32 whatever the input)
        lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32), 0.0, causal,
        scale=scale)
    if kv_heads != n:
        b, _, skv, _ = k.shape
        dk = dk.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
        dv = dv.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
    return dq, dk, dv
