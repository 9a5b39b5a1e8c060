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

Where the time goes on CPU: the two tile matmuls and about six passes over the tile's scores.
So the score (and the grad's ``dP``) tiles are written into one reused buffer (``out=``: a
fresh 32 MiB tensor per tile costs its page faults, measured ~40 % of a matmul), the forward
normalizes a tile in one pass (torch's softmax kernel) and merges a block's tiles once, and
the grad's probabilities are ``exp(s - lse)`` (no division pass; ``lse = m + log l``).  A
block of rows that reads an alibi-compressed pse through its diagonals is computed with its
query rows in reverse order: its pse tile is then a plain window of the stored row (unit
strides, see :meth:`.fa_pse.PseSource.tile_reversed`) instead of a flipped copy; only the row
statistics and outputs, ``[rows]`` and ``[rows, D]``, are flipped back.
"""

from __future__ import annotations

import torch

from .fa_masks import ALL, MaskPlan
from .fa_math import Dropout, _expand_kv, _finite, _inverse, compute_dtype

# Score elements of one tile (all heads): 32 MiB of float32.  Large tiles on purpose: each
# tile costs ~15 PyTorch calls whatever its size, and on a busy CPU each call may wait for its
# worker threads (measured: 1024 x 1024 x 8 heads ran an S = 4096 band 1.7x faster than
# 512 x 512, an alibi forward 1.8x faster than 256 x 1024).  Memory stays independent of S.
TILE_BUDGET = 1 << 23
MAX_COLS = 1024


def _tiles(b: int, n: int, sq: int, skv: int) -> tuple[int, int]:
    """(rows, cols) of a tile: columns first (long rows amortize the per-tile overhead),
    then as many rows as the budget allows (a multiple of 64, the keep-mask chunk)."""
    cols = min(skv, MAX_COLS)
    rows = max(64, (TILE_BUDGET // max(1, b * n * cols)) // 64 * 64)
    return min(sq, rows), cols


def _row_blocks(sq: int, rows: int, pse):
    """``(i0, i1)`` blocks of at most ``rows`` rows; none straddles the first row an
    alibi-compressed pse stores directly (the blocks above it run reversed)."""
    cut = None if pse is None else pse.first_direct_row()
    edges = [0] + ([cut] if cut is not None and 0 < cut < sq else []) + [sq]
    for lo, hi in zip(edges, edges[1:]):
        for i0 in range(lo, hi, rows):
            yield i0, min(hi, i0 + rows)


def _col_blocks(skv: int, cols: int):
    return [(j0, min(skv, j0 + cols)) for j0 in range(0, skv, cols)]


def _pse_masks_causal(plan: MaskPlan, pse, scale: float) -> bool:
    """Whether an alibi-compressed pse read through its diagonals masks the call by itself:
    its -inf entries are exactly ``j > i`` (:meth:`.fa_pse.PseSource.tile_reversed`), which
    is the whole mask of sparse_mode 2, and of 3 with the equal lengths the form requires
    (not TND: padding is masked too); ``scale > 0`` keeps ``scale * -inf`` at -inf."""
    return (pse is not None and pse.kind == "alibi" and plan.active and plan.mode in (2, 3)
            and not plan.p.packed and scale > 0)


def _tile_mask(plan: MaskPlan, i0: int, i1: int, j0: int, j1: int, causal_by_pse: bool):
    """:meth:`MaskPlan.tile`; where the pse masks ``j > i`` itself, only whether the tile
    is above the diagonal (skipped) or not (nothing more to mask), without building a mask."""
    if causal_by_pse:
        return ALL if j0 > i1 - 1 else None
    return plan.tile(i0, i1, j0, j1)


class _Rows:
    """Row blocks of a ``[B, N, S, ...]`` tensor, in order or reversed (the reversed copy
    made once, on first use: it is S-sized, not S^2)."""

    def __init__(self, x: torch.Tensor):
        self.x, self._flipped = x, None

    def block(self, i0: int, i1: int, reverse: bool) -> torch.Tensor:
        if not reverse:
            return self.x[:, :, i0:i1]
        if self._flipped is None:
            self._flipped = self.x.flip(2)
        s = self.x.shape[2]
        return self._flipped[:, :, s - i1:s - i0]


class _Scratch:
    """One reused buffer handed out as contiguous tensors of any shape up to its size."""

    def __init__(self, like: torch.Tensor):
        self.like, self.buf = like, None

    def get(self, *shape: int) -> torch.Tensor:
        numel = 1
        for d in shape:
            numel *= d
        if self.buf is None or self.buf.numel() < numel:
            self.buf = self.like.new_empty(numel)
        return self.buf[:numel].view(shape)


def _tile_scores(scratch, q_blk, k_blk, pse, scale, masked, i0, i1, j0, j1, reverse):
    """``scale q k^T + scale pse`` (masked: -inf) from a pre-scaled query (one pass fewer
    over the scores than scaling the sum; the same value up to float32 rounding)."""
    b, n, rows, _ = q_blk.shape
    s = torch.matmul(q_blk, k_blk.transpose(-1, -2),
                     out=scratch.get(b, n, rows, k_blk.shape[2]))
    if pse is not None:
        tile = pse.tile_reversed(i0, i1, j0, j1) if reverse else pse.tile(i0, i1, j0, j1)
        s.add_(tile, alpha=scale)
    if masked is not None:
        s.masked_fill_(masked.flip(-2) if reverse else masked, float("-inf"))
    return s


def _dropout_rows(dropout: Dropout, shape, i0, i1, device, ct, reverse):
    if not dropout.active:
        return None
    z = dropout.factor(shape, i0, i1, device, ct)
    return z.flip(2) if reverse else z


def _tile_softmax_(s: torch.Tensor, tile_max: torch.Tensor, arg: torch.Tensor,
                   at_max: torch.Tensor) -> None:
    """Normalize each row of ``s`` in place; ``tile_max`` gets its max and ``at_max`` the
    normalized value at its argmax, ``exp(0) / sum exp(s - max)`` (one rounding), from
    which the row's exp-sum is read back.

    torch's softmax kernel does the max, exp and sum of a row while it sits in cache: one
    pass over the tile instead of four (amax, subtract, exp, sum).  Rows with nothing
    visible come out NaN; :func:`_merge_tiles` drops them."""
    torch.max(s, -1, keepdim=True, out=(tile_max.unsqueeze(-1), arg))
    torch.ops.aten._softmax.out(s, -1, False, out=s)
    torch.gather(s, -1, arg, out=at_max.unsqueeze(-1))


def _merge_tiles(maxes, at_max, pvs):
    """The recurrence of the module docstring done once per row block: ``(m, l, acc)`` from
    each visible tile's row max ``[T, ...]``, normalized value at the max and normalized
    product ``P_t v_t`` ``[T, ..., Dv]`` (weights ``l_t exp(m_t - m)``)."""
    m = maxes.amax(dim=0)
    unseen = maxes == float("-inf")
    weight = torch.exp(maxes - _finite(m)).div_(at_max).masked_fill_(unseen, 0.0)
    l = weight.sum(dim=0)
    acc = pvs.masked_fill_(unseen.unsqueeze(-1), 0.0).mul_(weight.unsqueeze(-1)).sum(dim=0)
    return m, l, acc


def forward(q, k, v, *, scale: float, pse, sink, plan: MaskPlan, dropout: Dropout):
    """``(out [B,N,Sq,Dv], m [B,N,Sq], l [B,N,Sq])`` in the compute dtype.

    Each visible tile is normalized on its own and its product ``P_t v_t`` kept; a block's
    tiles are merged at its end (or whenever a tile-sized buffer of products is full), so the
    per-tile work is a handful of large calls: on a busy CPU every call may wait for the
    worker threads, whatever its size."""
    ct = compute_dtype(q.dtype)
    b, n, sq, _ = q.shape
    q, k, v = q.to(ct), _expand_kv(k.to(ct), n), _expand_kv(v.to(ct), n)
    skv, dv = k.shape[2], v.shape[-1]
    out = q.new_empty(b, n, sq, dv)
    m_all, l_all = q.new_empty(b, n, sq), q.new_empty(b, n, sq)
    queries = _Rows(q * scale)
    scratch, stats, products = _Scratch(q), _Scratch(q), _Scratch(q)
    rows, cols = _tiles(b, n, sq, skv)
    pse_masks = _pse_masks_causal(plan, pse, scale)
    for i0, i1 in _row_blocks(sq, rows, pse):
        r = i1 - i0
        reverse = pse is not None and pse.reads_diagonals(i0, i1)
        q_blk = queries.block(i0, i1, reverse)
        z = _dropout_rows(dropout, (b, n, skv), i0, i1, q.device, ct, reverse)
        tiles = [(j0, j1, masked) for j0, j1 in _col_blocks(skv, cols)
                 for masked in [_tile_mask(plan, i0, i1, j0, j1, reverse and pse_masks)]
                 if masked is not ALL]
        if tiles:
            # slots of products merged at once: bounded like a score tile, so memory stays
            # independent of Skv; a full set is merged and its result kept as slot 0
            group = min(len(tiles), max(2, TILE_BUDGET // max(1, b * n * r * dv)))
            st = stats.get(2, group, b, n, r)
            maxes, at_max = st[0], st[1]
            arg = torch.empty(b, n, r, 1, dtype=torch.long, device=q.device)
            pvs = products.get(group, b, n, r, dv)
            slot = 0
            for j0, j1, masked in tiles:
                if slot == group:
                    m, l, acc = _merge_tiles(maxes, at_max, pvs)
                    maxes[0], at_max[0] = m, l.reciprocal()
                    pvs[0] = acc.mul_(_inverse(l).unsqueeze(-1))
                    slot = 1
                s = _tile_scores(scratch, q_blk, k[:, :, j0:j1], pse, scale, masked, i0, i1,
                                 j0, j1, reverse)
                _tile_softmax_(s, maxes[slot], arg, at_max[slot])
                if z is not None:         # l normalizes P before dropout
                    s.mul_(z[..., j0:j1])
                torch.matmul(s, v[:, :, j0:j1], out=pvs[slot])
                slot += 1
            m, l, acc = _merge_tiles(maxes[:slot], at_max[:slot], pvs[:slot])
        else:                             # every key of these rows is masked
            m = q.new_full((b, n, r), float("-inf"))
            l = q.new_zeros(b, n, r)
            acc = q.new_zeros(b, n, r, dv)
        if sink is not None:
            col = sink.to(ct).view(1, n, 1).expand_as(m)
            m_new = torch.maximum(m, col)
            offset = _finite(m_new)
            alpha = torch.exp(m - offset)
            l = l * alpha + torch.exp(col - offset)
            acc.mul_(alpha.unsqueeze(-1))
            m = m_new
        acc.mul_(_inverse(l).unsqueeze(-1))
        if reverse:
            acc, m, l = acc.flip(2), m.flip(-1), l.flip(-1)
        out[:, :, i0:i1] = acc
        m_all[:, :, i0:i1] = m
        l_all[:, :, i0:i1] = l
    return out, m_all, l_all


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[B, N, r, c]`` -> ``[B*N, r, c]``; a view for the row / column slices of the
    contiguous accumulators (the in-place ``add_`` writes through it)."""
    return x.reshape(-1, *x.shape[2:])


def _add_product(dest: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scratch) -> None:
    """``dest += a @ b`` (3-D batches) through a reused buffer: an in-place ``baddbmm_``
    with a transposed ``a`` runs batch by batch on CPU (measured 1.5x slower)."""
    dest.add_(torch.bmm(a, b, out=scratch.get(a.shape[0], a.shape[1], b.shape[2])))


def backward(q, k, v, dy, out, m, l, *, scale: float, pse, sink, plan: MaskPlan,
             dropout: Dropout):
    """``(dq, dk, dv, dpse or None, dsink or None)`` in the compute dtype (dk/dv per KV head)."""
    ct = compute_dtype(q.dtype)
    b, n, sq, _ = q.shape
    kv_heads = k.shape[1]
    q, dy, out = q.to(ct), dy.to(ct), out.to(ct)
    # contiguous once, so that each tile's [B*N, cols, D] view of them needs no copy
    k = _expand_kv(k.to(ct), n).contiguous()
    v = _expand_kv(v.to(ct), n).contiguous()
    m, l = m.to(ct), l.to(ct)
    skv = k.shape[2]
    dq = torch.empty(q.shape, dtype=ct, device=q.device)
    dk = torch.zeros(k.shape, dtype=ct, device=q.device)
    dv = torch.zeros(v.shape, dtype=ct, device=q.device)
    dpse = None if pse is None else pse.grad_buffer()
    dsink = None if sink is None else torch.zeros(n, dtype=ct, device=q.device)
    big_d = (dy * out).sum(dim=-1, keepdim=True)            # [B, N, Sq, 1]
    queries, grads = _Rows(q * scale), _Rows(dy.contiguous())
    # P = exp(s - m) / l as exp(s - (m + log l)): one pass fewer per tile; +inf for rows
    # that saw nothing (P = 0 there)
    lse = torch.where(l > 0, _finite(m) + torch.log(l), torch.full_like(l, float("inf")))
    row_lse = _Rows(lse.unsqueeze(-1))
    rows_d = _Rows(big_d)
    scores, dp_buf, products = _Scratch(q), _Scratch(q), _Scratch(q)
    rows, cols = _tiles(b, n, sq, skv)
    pse_masks = _pse_masks_causal(plan, pse, scale)
    for i0, i1 in _row_blocks(sq, rows, pse):
        reverse = pse is not None and pse.reads_diagonals(i0, i1)
        q_blk, dy_blk = queries.block(i0, i1, reverse), grads.block(i0, i1, reverse)
        d_blk = rows_d.block(i0, i1, reverse)
        lse_blk = row_lse.block(i0, i1, reverse)
        z = _dropout_rows(dropout, (b, n, skv), i0, i1, q.device, ct, reverse)
        dq_blk = torch.zeros(b, n, i1 - i0, q.shape[-1], dtype=ct, device=q.device)
        for j0, j1 in _col_blocks(skv, cols):
            masked = _tile_mask(plan, i0, i1, j0, j1, reverse and pse_masks)
            if masked is ALL:
                continue
            k_blk, v_blk = k[:, :, j0:j1], v[:, :, j0:j1]
            s = _tile_scores(scores, q_blk, k_blk, pse, scale, masked, i0, i1, j0, j1,
                             reverse)
            p = s.sub_(lse_blk).exp_()
            dp = torch.matmul(dy_blk, v_blk.transpose(-1, -2),
                              out=dp_buf.get(b, n, i1 - i0, j1 - j0))
            dv_tile = _flat(dv[:, :, j0:j1])
            if z is not None:
                zt = z[..., j0:j1]
                _add_product(dv_tile, _flat(p * zt).transpose(1, 2), _flat(dy_blk), products)
                dp.mul_(zt)
            else:
                _add_product(dv_tile, _flat(p).transpose(1, 2), _flat(dy_blk), products)
            ds = dp.sub_(d_blk).mul_(p)
            _add_product(_flat(dq_blk), _flat(ds), _flat(k_blk), products)
            _add_product(_flat(dk[:, :, j0:j1]), _flat(ds).transpose(1, 2), _flat(q_blk),
                         products)
            if dpse is not None:          # scaled once at the end
                if reverse:
                    pse.accumulate_reversed(dpse, ds, i0, i1, j0, j1)
                else:
                    pse.accumulate(dpse, ds, i0, i1, j0, j1)
        dq_blk.mul_(scale)
        dq[:, :, i0:i1] = dq_blk.flip(2) if reverse else dq_blk
        if dsink is not None:
            p_sink = torch.exp(sink.to(ct).view(1, n, 1, 1) - lse_blk)
            dsink -= (p_sink * d_blk).sum(dim=(0, 2, 3))
    if kv_heads != n:
        dk = dk.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
        dv = dv.view(b, kv_heads, n // kv_heads, skv, -1).sum(dim=2)
    if dpse is not None:
        dpse = pse.finish(dpse.mul_(scale))
    return dq, dk, dv, dpse, dsink
