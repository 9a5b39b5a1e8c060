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
sequence length, not its square.  With query blocks of 32 rows or more, each group of query
blocks gathers just the key / value blocks it selects (work and memory proportional to the
selected blocks, as on the NPU); smaller query blocks compute masked rows of the dense scores.
A row that selects no key (or lies in the padding beyond its batch's length) gives output 0
and ``lse = -inf`` (the log of an empty sum): the NPU leaves such rows unwritten.
"""

from __future__ import annotations

import torch

from .bsa_problem import BSAProblem, lse_shape, rows, stats_dtype

SCORE_BUDGET = 1 << 22          # score elements per block (16 MiB of float32)
GATHER_MIN_BLOCK_X = 32


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
    """``(out, l)`` of one block of masked, scaled scores ``s`` (its row max ``m``); ``s`` is
    overwritten (each pass over a block of scores costs about as much as its matmul)."""
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = s.sub_(m_safe.unsqueeze(-1)).exp_()            # float16 arithmetic when half_softmax
    if half_softmax:
        l = e.float().sum(-1).half()
        o = torch.matmul(e.float(), vb).half()
        out = torch.where(l.unsqueeze(-1) > 0, o / l.unsqueeze(-1).clamp_min(1e-7),
                          torch.zeros_like(o))
        return out, l.float()
    l = e.sum(-1)
    if dtype != e.dtype:
        e = e.to(dtype).to(e.dtype)                     # P rounded (ElementP)
    o = torch.matmul(e, vb)
    safe = torch.where(l > 0, l, torch.ones_like(l))
    out = torch.where(l.unsqueeze(-1) > 0, o / safe.unsqueeze(-1), torch.zeros_like(o))
    return out, l


def _scaled(s, scale: float, half_softmax: bool):
    if half_softmax:                   # S and the scale in float16 (ElementS = half)
        return s.half() * torch.tensor(scale, dtype=torch.float16)
    return s.mul_(scale)


def _lse(m, l, dtype):
    safe = torch.where(l > 0, l, torch.ones_like(l))
    return torch.where(l > 0, m.to(l.dtype) + torch.log(safe),
                       torch.full_like(l, float("-inf"))).to(dtype)


class _Gather:
    """The selected key blocks of a group of query blocks, gathered side by side.

    ``sel`` ``[N, G, nkb]``: for each head and query block, the blocks in ascending order
    (``order`` ``[N, G, c]``, c = the most any of them selects), their keys / values
    ``[N, G, c * by, D]`` and which gathered keys exist (``ok``: a selected block, and a
    position inside the batch's key length)."""

    def __init__(self, sel, k_blocks, v_blocks, nkv: int, by: int):
        n, g, _ = sel.shape
        dev = sel.device
        count = sel.sum(-1)
        c = int(count.max())
        self.order = torch.sort(sel.to(torch.int8), dim=-1, descending=True,
                                stable=True).indices[..., :c]
        valid = torch.arange(c, device=dev) < count.unsqueeze(-1)
        pos = self.order.unsqueeze(-1) * by + torch.arange(by, device=dev)
        self.ok = (valid.unsqueeze(-1) & (pos < nkv)).reshape(n, g, c * by)
        heads = torch.arange(n, device=dev).view(n, 1, 1)
        self.flat_index = (heads * k_blocks.shape[1] + self.order).reshape(-1)
        self.k = self._take(k_blocks, heads).reshape(n, g, c * by, k_blocks.shape[-1])
        self.v = self._take(v_blocks, heads).reshape(n, g, c * by, v_blocks.shape[-1])

    def _take(self, blocks, heads):
        """The selected ``[N, nkb, by, D]`` blocks, in ``order``."""
        return blocks[heads, self.order]


def _blocked(x: torch.Tensor, n_blocks: int, size: int) -> torch.Tensor:
    """``[N, L, D]`` zero-padded to ``n_blocks * size`` rows, as ``[N, n_blocks, size, D]``."""
    n, length, d = x.shape
    if length == n_blocks * size:
        return x.reshape(n, n_blocks, size, d)       # no padding: a view (only ever read)
    out = x.new_zeros(n, n_blocks * size, d)
    out[:, :length] = x
    return out.view(n, n_blocks, size, d)


def _group(p: BSAProblem, nkb: int) -> int:
    """Query blocks per gathered group: its scores and gathered keys stay within budget."""
    return max(1, SCORE_BUDGET // max(1, p.heads * nkb * p.by * max(p.bx, p.d)))


class _FlatGather(_Gather):
    """:class:`_Gather` for the fast provider: the blocks copied by ``index_select`` from the
    ``[N * nkb, by, D]`` block table (a row memcpy; advanced indexing of ``[N, nkb, ...]`` by
    two index tensors walks element by element and costs several times more)."""

    def _take(self, blocks, heads):
        return blocks.flatten(0, 1).index_select(0, self.flat_index)


def use_gather(p: BSAProblem) -> bool:
    """Gather the selected blocks when query blocks are tall enough that copying each one's
    keys costs little next to its product (else compute masked rows of the dense scores)."""
    return p.bx >= GATHER_MIN_BLOCK_X


def _forward_dense(qb, kb, vb, mask_b, p, scale, dtype, half, out_b, lse_b):
    nq, nkv = qb.shape[1], kb.shape[1]
    step = _step(p, nq, nkv)
    for i0 in range(0, nq, step):
        i1 = min(nq, i0 + step)
        sel = _selected(mask_b, i0, i1, nkv, p)
        s = _scaled(torch.matmul(qb[:, i0:i1], kb.transpose(-1, -2)), scale, half)
        s = s.masked_fill_(~sel, float("-inf"))
        m = s.amax(-1)
        o, l = _softmax_pv(s, vb, m, dtype, half)
        out_b[:, i0:i1] = o.to(dtype)
        lse_b[:, i0:i1] = _lse(m, l, lse_b.dtype)


def _forward_gather(qb, kb, vb, mask_b, p, scale, dtype, half, out_b, lse_b, fast=False):
    n, nq, d = qb.shape
    nkv = kb.shape[1]
    nqb, nkb = -(-nq // p.bx), -(-nkv // p.by)
    sel = mask_b[:, :nqb, :nkb]
    qp = _blocked(qb, nqb, p.bx)
    k_blocks, v_blocks = _blocked(kb, nkb, p.by), _blocked(vb, nkb, p.by)
    step = _group(p, nkb)
    gather = _FlatGather if fast else _Gather
    for a in range(0, nqb, step):
        z = min(nqb, a + step)
        if not bool(sel[:, a:z].any()):
            continue                     # rows that select nothing stay 0 / -inf
        gat = gather(sel[:, a:z], k_blocks, v_blocks, nkv, p.by)
        s = _scaled(torch.matmul(qp[:, a:z], gat.k.transpose(-1, -2)), scale, half)
        s = s.masked_fill_(~gat.ok.unsqueeze(2), float("-inf"))        # [N, g, bx, c*by]
        m = s.amax(-1)
        o, l = _softmax_pv(s, gat.v, m, dtype, half)
        r0, r1 = a * p.bx, min(nq, z * p.bx)
        out_b[:, r0:r1] = o.reshape(n, -1, d)[:, :r1 - r0].to(dtype)
        lse_b[:, r0:r1] = _lse(m, l, lse_b.dtype).reshape(n, -1)[:, :r1 - r0]


def forward(query, key, value, mask, p: BSAProblem, scale: float, inner_precise: int,
            fast: bool = False):
    """``(attention_out, softmax_lse)`` in the call's layout (``fast``: the gather solver's
    provider variant, same arithmetic)."""
    dtype = query.dtype
    ct = compute_dtype(dtype)
    half = inner_precise == 1 and dtype == torch.float16
    out = torch.zeros(query.shape, dtype=dtype, device=query.device)
    lse = torch.full(lse_shape(query, p), float("-inf"), dtype=stats_dtype(dtype),
                     device=query.device)
    solve = _forward_gather if use_gather(p) else _forward_dense
    extra = {"fast": True} if fast and use_gather(p) else {}
    qs = ks = 0
    for b in range(p.batch):
        nq, nkv = p.q_lens[b], p.kv_lens[b]
        if nq > 0 and nkv > 0:
            qb, kb, vb = _inputs(query, key, value, p, b, qs, ks, ct)
            solve(qb, kb, vb, mask[b] != 0, p, scale, dtype, half,
                  rows(out, p, b, qs, kv=False), _lse_rows(lse, p, b, qs), **extra)
        qs, ks = qs + nq, ks + nkv
    return out, lse


def _grads(q, k, v, do, o, lse, ok, scale):
    """``(dq, dk, dv)`` of one block of rows against its keys (``ok``: which keys count)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    prob = torch.where(ok, torch.exp(s - lse.unsqueeze(-1)), torch.zeros_like(s))
    dp = torch.matmul(do, v.transpose(-1, -2))
    ds = prob * (dp - (do * o).sum(-1, keepdim=True))
    return (torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-1, -2), q) * scale,
            torch.matmul(prob.transpose(-1, -2), do))


def _backward_dense(qb, kb, vb, dob, ob, lse_b, mask_b, p, scale, dq_b):
    nq, nkv = qb.shape[1], kb.shape[1]
    dk, dv = torch.zeros_like(kb), torch.zeros_like(vb)
    step = _step(p, nq, nkv)
    for i0 in range(0, nq, step):
        i1 = min(nq, i0 + step)
        sel = _selected(mask_b, i0, i1, nkv, p)
        dq_c, dk_c, dv_c = _grads(qb[:, i0:i1], kb, vb, dob[:, i0:i1], ob[:, i0:i1],
                                  lse_b[:, i0:i1], sel, scale)
        dq_b[:, i0:i1] = dq_c
        dk += dk_c
        dv += dv_c
    return dk, dv


def _index_add(blocks, gat, rows_):
    blocks.index_add_(0, gat.flat_index, rows_)


def _add_rows(blocks, gat, rows_):
    """``blocks[flat_index[r]] += rows_[r]`` for the gathered blocks that were selected.

    CPU ``index_add_`` of whole blocks runs as an element-wise scatter; one ``add_`` per
    selected block (a few hundred per group, each ``by * D`` contiguous elements) is several
    times faster and adds in the same order."""
    valid = gat.ok.view(*gat.order.shape, -1)[..., 0].reshape(-1)
    for r, target in zip(valid.nonzero()[:, 0].tolist(),
                         gat.flat_index[valid].tolist()):
        blocks[target].add_(rows_[r])


def _backward_gather(qb, kb, vb, dob, ob, lse_b, mask_b, p, scale, dq_b, fast=False):
    n, nq, d = qb.shape
    nkv = kb.shape[1]
    nqb, nkb = -(-nq // p.bx), -(-nkv // p.by)
    sel = mask_b[:, :nqb, :nkb]
    qp, dop, op = (_blocked(x, nqb, p.bx) for x in (qb, dob, ob))
    lsep = _blocked(lse_b.unsqueeze(-1), nqb, p.bx)[..., 0]            # [N, nqb, bx]
    k_blocks, v_blocks = _blocked(kb, nkb, p.by), _blocked(vb, nkb, p.by)
    dk_blocks = torch.zeros(n * nkb, p.by, d, dtype=kb.dtype, device=kb.device)
    dv_blocks = torch.zeros(n * nkb, p.by, vb.shape[-1], dtype=vb.dtype, device=vb.device)
    step = _group(p, nkb)
    gather = _FlatGather if fast else _Gather
    for a in range(0, nqb, step):
        z = min(nqb, a + step)
        if not bool(sel[:, a:z].any()):
            continue
        gat = gather(sel[:, a:z], k_blocks, v_blocks, nkv, p.by)
        # padding rows carry d_out = 0, so they add nothing to dk / dv
        dq_g, dk_g, dv_g = _grads(qp[:, a:z], gat.k, gat.v, dop[:, a:z], op[:, a:z],
                                  lsep[:, a:z], gat.ok.unsqueeze(2), scale)
        r0, r1 = a * p.bx, min(nq, z * p.bx)
        dq_b[:, r0:r1] = dq_g.reshape(n, -1, d)[:, :r1 - r0]
        add = _add_rows if fast and dk_blocks.device.type == "cpu" else _index_add
        add(dk_blocks, gat, dk_g.reshape(-1, p.by, d))
        add(dv_blocks, gat, dv_g.reshape(-1, p.by, dv_g.shape[-1]))
    dk = dk_blocks.view(n, nkb * p.by, d)[:, :nkv]
    dv = dv_blocks.view(n, nkb * p.by, -1)[:, :nkv]
    return dk, dv


def backward(d_out, query, key, value, attention_out, softmax_lse, mask, p: BSAProblem,
             scale: float, fast: bool = False):
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
    solve = _backward_gather if use_gather(p) else _backward_dense
    extra = {"fast": True} if fast and use_gather(p) else {}
    qs = ks = 0
    for b in range(p.batch):
        nq, nkv = p.q_lens[b], p.kv_lens[b]
        if nq > 0 and nkv > 0:
            qb, kb, vb = _inputs(query, key, value, p, b, qs, ks, ct)
            dob = rows(d_out, p, b, qs, kv=False).to(ct)
            ob = rows(attention_out, p, b, qs, kv=False).to(ct)
            lse_b = _lse_rows(softmax_lse, p, b, qs).to(ct)
            lse_b = torch.where(torch.isfinite(lse_b), lse_b, torch.zeros_like(lse_b))
            dk_b, dv_b = solve(qb, kb, vb, dob, ob, lse_b, mask[b] != 0, p, scale,
                               rows(dq, p, b, qs, kv=False), **extra)
            if group > 1:
                dk_b = dk_b.reshape(p.kv_heads, group, nkv, -1).sum(1)
                dv_b = dv_b.reshape(p.kv_heads, group, nkv, -1).sum(1)
            rows(dk, p, b, ks, kv=True).copy_(dk_b)
            rows(dv, p, b, ks, kv=True).copy_(dv_b)
        qs, ks = qs + nq, ks + nkv
    return dq.to(dtype), dk.to(dtype), dv.to(value.dtype)
