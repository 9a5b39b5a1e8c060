"""The arithmetic of npu_block_sparse_attention and its backward.

For each batch ``b`` (its own query / key lengths), query row ``i`` and key column ``j``::

    selected(i, j) = block_sparse_mask[b, n, i // bx, j // by] != 0
    s    = scale * q_i . k_j            (unselected: -inf)
    m    = max_j s;   l = sum_j exp(s - m);   lse = m + log(l)
    out  = sum_j round(exp(s - m)) v_j / l

GQA: key / value head ``n // (N1 / N2)`` serves query head ``n`` (the kernel's
``kvHeadIdx = qNBlockIdx / qNBlockNumPerGroup``).  Numerics follow the Atlas A2 kernel
(hicann/ops-transformer attention/block_sparse_attention/op_kernel/
block_sparse_attention_kernel_interface.cpp and ..._kernel_regular_arch22.h): ``q k^T`` and
``P v`` accumulate in float32; P is rounded to the input dtype before the ``P v`` product
(ElementP = the input type); the output is rounded once.  ``inner_precise = 1`` (float16 only)
keeps S, the softmax and the unnormalised output in float16 (ElementS / ElementOTmp = half, the
scale cast to half): emulated by rounding scaled S, P, the row sum and ``P v`` to float16.

Rows are processed in blocks whose scores stay within a fixed budget, so memory grows with the
sequence length, not its square.  A row that selects no key (or lies in the padding beyond
its batch's length) gives output 0 and ``lse = -inf``: the NPU leaves such rows unwritten.
"""

from __future__ import annotations

import torch

from .bsa_problem import BSAProblem, lse_shape, rows, stats_dtype

SCORE_BUDGET = 1 << 22          # score elements per block (16 MiB of float32)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _selected(mask_b: torch.Tensor, i0: int, i1: int, skv: int, p: BSAProblem) -> torch.Tensor:
    """``[N, i1 - i0, skv]`` bool: which keys each of these query rows attends."""
    dev = mask_b.device
    q_block = torch.arange(i0, i1, device=dev) // p.bx
    kv_block = torch.arange(skv, device=dev) // p.by
    return mask_b.index_select(1, q_block).index_select(2, kv_block)


def _step(p: BSAProblem, nq: int, nkv: int) -> int:
    return max(1, min(nq, SCORE_BUDGET // max(1, p.heads * nkv)))


def _lse_rows(lse: torch.Tensor, p: BSAProblem, b: int, start: int) -> torch.Tensor:
    """Batch ``b``'s ``[N, len]`` view of the lse output."""
    return rows(lse[..., 0], p, b, start, kv=False) if p.packed else \
        lse[b, :, :p.q_lens[b], 0]


def _inputs(query, key, value, p: BSAProblem, b: int, qs: int, ks: int, ct):
    group = p.heads // p.kv_heads
    qb = rows(query, p, b, qs, kv=False).to(ct)
    kb = rows(key, p, b, ks, kv=True).to(ct)
    vb = rows(value, p, b, ks, kv=True).to(ct)
    if group > 1:
        kb, vb = kb.repeat_interleave(group, 0), vb.repeat_interleave(group, 0)
    return qb, kb, vb


def _softmax_pv(s, vb, m, dtype, half_softmax: bool):
    """``(out, l)`` of one block of masked, scaled scores ``s`` (its row max ``m``)."""
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    if half_softmax:
        e = torch.exp(s - m_safe.unsqueeze(-1))                 # float16 arithmetic
        l = e.float().sum(-1).half()
        o = torch.matmul(e.float(), vb).half()
        out = torch.where(l.unsqueeze(-1) > 0, o / l.unsqueeze(-1).clamp_min(1e-7),
                          torch.zeros_like(o))
        return out, l.float()
    e = torch.exp(s - m_safe.unsqueeze(-1))
    l = e.sum(-1)
    o = torch.matmul(e.to(dtype).to(s.dtype), vb)               # P rounded (ElementP)
    safe = torch.where(l > 0, l, torch.ones_like(l))
    out = torch.where(l.unsqueeze(-1) > 0, o / safe.unsqueeze(-1), torch.zeros_like(o))
    return out, l


def forward(query, key, value, mask, p: BSAProblem, scale: float, inner_precise: int):
    """``(attention_out, softmax_lse)`` in the call's layout."""
    dtype = query.dtype
    ct = compute_dtype(dtype)
    half_softmax = inner_precise == 1 and dtype == torch.float16
    out = torch.zeros(query.shape, dtype=dtype, device=query.device)
    lse = torch.full(lse_shape(query, p), float("-inf"), dtype=stats_dtype(dtype),
                     device=query.device)
    qs = ks = 0
    for b in range(p.batch):
        nq, nkv = p.q_lens[b], p.kv_lens[b]
        if nq > 0 and nkv > 0:
            qb, kb, vb = _inputs(query, key, value, p, b, qs, ks, ct)
            mask_b = mask[b] != 0
            out_b = rows(out, p, b, qs, kv=False)
            lse_b = _lse_rows(lse, p, b, qs)
            step = _step(p, nq, nkv)
            for i0 in range(0, nq, step):
                i1 = min(nq, i0 + step)
                sel = _selected(mask_b, i0, i1, nkv, p)
                s = torch.matmul(qb[:, i0:i1], kb.transpose(-1, -2))
                if half_softmax:
                    s = s.half() * torch.tensor(scale, dtype=torch.float16)
                else:
                    s = s.mul_(scale)
                s = s.masked_fill(~sel, float("-inf"))
                m = s.amax(-1)
                o, l = _softmax_pv(s, vb, m, dtype, half_softmax)
                out_b[:, i0:i1] = o.to(dtype)
                safe = torch.where(l > 0, l, torch.ones_like(l))
                lse_b[:, i0:i1] = torch.where(l > 0, m.to(l.dtype) + torch.log(safe),
                                              torch.full_like(l, float("-inf"))).to(lse.dtype)
        qs, ks = qs + nq, ks + nkv
    return out, lse


def backward(d_out, query, key, value, attention_out, softmax_lse, mask, p: BSAProblem,
             scale: float):
    """``(d_query, d_key, d_value)`` from the forward's output and log-sum-exp::

        P  = exp(s - lse) on selected positions;   D = rowsum(d_out * attention_out)
        dS = P * (d_out v^T - D);   dq = scale dS k;   dk = scale dS^T q;   dv = P^T d_out
    """
    dtype = query.dtype
    ct = compute_dtype(dtype)
    group = p.heads // p.kv_heads
    dq = torch.zeros(query.shape, dtype=ct, device=query.device)
    dk = torch.zeros(key.shape, dtype=ct, device=query.device)
    dv = torch.zeros(value.shape, dtype=ct, device=query.device)
    qs = ks = 0
    for b in range(p.batch):
        nq, nkv = p.q_lens[b], p.kv_lens[b]
        if nq > 0 and nkv > 0:
            qb, kb, vb = _inputs(query, key, value, p, b, qs, ks, ct)
            dob = rows(d_out, p, b, qs, kv=False).to(ct)
            ob = rows(attention_out, p, b, qs, kv=False).to(ct)
            lse_b = _lse_rows(softmax_lse, p, b, qs).to(ct)
            lse_b = torch.where(torch.isfinite(lse_b), lse_b, torch.zeros_like(lse_b))
            mask_b = mask[b] != 0
            dq_b = rows(dq, p, b, qs, kv=False)
            dk_acc, dv_acc = torch.zeros_like(kb), torch.zeros_like(vb)
            step = _step(p, nq, nkv)
            for i0 in range(0, nq, step):
                i1 = min(nq, i0 + step)
                sel = _selected(mask_b, i0, i1, nkv, p)
                q_c, do_c = qb[:, i0:i1], dob[:, i0:i1]
                s = torch.matmul(q_c, kb.transpose(-1, -2)) * scale
                prob = torch.where(sel, torch.exp(s - lse_b[:, i0:i1].unsqueeze(-1)),
                                   torch.zeros_like(s))
                dp = torch.matmul(do_c, vb.transpose(-1, -2))
                big_d = (do_c * ob[:, i0:i1]).sum(-1, keepdim=True)
                ds = prob * (dp - big_d)
                dq_b[:, i0:i1] = torch.matmul(ds, kb) * scale
                dk_acc += torch.matmul(ds.transpose(-1, -2), q_c) * scale
                dv_acc += torch.matmul(prob.transpose(-1, -2), do_c)
            if group > 1:
                dk_acc = dk_acc.view(p.kv_heads, group, nkv, -1).sum(1)
                dv_acc = dv_acc.view(p.kv_heads, group, nkv, -1).sum(1)
            rows(dk, p, b, ks, kv=True).copy_(dk_acc)
            rows(dv, p, b, ks, kv=True).copy_(dv_acc)
        qs, ks = qs + nq, ks + nkv
    return dq.to(dtype), dk.to(dtype), dv.to(value.dtype)
