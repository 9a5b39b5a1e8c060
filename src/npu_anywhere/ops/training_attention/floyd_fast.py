"""The ``strided_bmm`` provider of npu_fused_floyd_attention and its backward.

The same arithmetic as the references in :mod:`.floyd_attention` (float32 scores, the
unnormalised ``exp(s - max)`` rounded to the input dtype before both value products, the
division by the row sum after them, one rounding of each output), laid out so that no
score-sized tensor is ever copied into another layout.

Why it is faster.  Half of the Floyd products batch over the pivot row ``m`` (``q k_ij^T``,
``P v_ij``) and the other half over the column ``n`` (``q k_jk^T``, ``P v_jk``).  The reference
hands the ``n``-batched ones to ``torch.matmul`` as permuted 5-D views, which first copies the
``[B, H, m, N, K]`` probabilities (and the gradients' ``dS``) into ``[B, H, N, m, K]`` order.
Per (batch, head) those views are plain strided 3-D batches -- every matrix keeps a unit stride
-- which ``torch.bmm`` multiplies in place; only their ``[N, m, D]`` / ``[N, m, K]`` results
are added back through a transposed view.  The scale is folded into the float32 copy of the
query (``(scale q) . k`` instead of ``scale (q . k)``: a float32 rounding, exact for powers of
two), and every pass over the scores is done in place.
"""

from __future__ import annotations

import torch


def _per_head(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, a, b, c]`` -> ``[B*H, a, b, c]`` (a view when the head axes are contiguous)."""
    return x.reshape(-1, *x.shape[2:])


def _add_n_batched(dest, a, b):
    """``dest[bh, m, n] += a[bh, :, n] @ b[bh, n]`` for each (batch, head) and column ``n``.

    ``dest`` ``[BH, m, N, X]`` and ``a`` ``[BH, m, N, Y]`` are row-major; ``b`` ``[BH, N, Y, X]``
    any strides with a unit one.  ``a[bh].transpose(0, 1)`` is a strided ``[N, m, Y]`` batch
    that ``bmm`` reads as it is."""
    for i in range(dest.shape[0]):
        dest[i].transpose(0, 1).add_(torch.bmm(a[i].transpose(0, 1), b[i]))


class _PivotViews:
    """key_jk / value_jk converted once; per (batch, head) views in the layouts bmm needs.

    ``nk`` ``[BH, N, K, D]`` (what P multiplies) and ``nt`` ``[BH, N, D, K]`` (what q
    multiplies), both strided views of the ``[BH, K, N, D]`` tensor: no copy."""

    def __init__(self, x: torch.Tensor, ct: torch.dtype):
        self.base = _per_head(x.to(ct))                       # [BH, K, N, D]
        self.nk = self.base.transpose(1, 2)
        self.nt = self.base.permute(0, 2, 3, 1)


def _scores(q_scaled, k_ij, k_jk: _PivotViews, mask, masked_value):
    """Scaled, masked ``[B, H, m, N, K]`` scores of one block of rows (written once)."""
    s = torch.matmul(q_scaled, k_ij.transpose(-1, -2))
    _add_n_batched(_per_head(s), _per_head(q_scaled), k_jk.nt)
    if mask is not None:
        s.masked_fill_(mask.bool(), masked_value)
    return s


def _values(p, v_ij, v_jk: _PivotViews):
    """``P v_ij + P v_jk`` (``[B, H, m, N, D]``) without reordering ``p``."""
    o = torch.matmul(p, v_ij)
    _add_n_batched(_per_head(o), _per_head(p), v_jk.nk)
    return o


def forward(query_ik, key_ij, value_ij, key_jk, value_jk, mask_rows, scale, step,
            masked_value, ct, stat_dtype):
    """``(softmax_max, softmax_sum, attention_out)``; ``mask_rows(i0, i1)`` slices the mask."""
    b, h, m, n, _ = query_ik.shape
    dtype = query_ik.dtype
    k_jk, v_jk = _PivotViews(key_jk, ct), _PivotViews(value_jk, ct)
    out = torch.empty(query_ik.shape, dtype=dtype, device=query_ik.device)
    smax = torch.empty(b, h, m, n, dtype=stat_dtype, device=query_ik.device)
    ssum = torch.empty_like(smax)
    for i0 in range(0, m, step):
        i1 = min(m, i0 + step)
        q = query_ik[:, :, i0:i1].to(ct) * scale
        s = _scores(q, key_ij[:, :, i0:i1].to(ct), k_jk, mask_rows(i0, i1), masked_value)
        mx = s.amax(-1, keepdim=True)
        e = s.sub_(mx).exp_()
        sm = e.sum(-1, keepdim=True)
        if dtype != ct:          # the unnormalised exp enters the value products rounded
            e.copy_(e.to(dtype))
        o = _values(e, value_ij[:, :, i0:i1].to(ct), v_jk)
        out[:, :, i0:i1] = o.div_(sm)
        smax[:, :, i0:i1] = mx[..., 0]
        ssum[:, :, i0:i1] = sm[..., 0]
    expand = lambda x: x.unsqueeze(-1).expand(b, h, m, n, 8).contiguous()   # noqa: E731
    return expand(smax), expand(ssum), out


def backward(grad_output, query_ik, key_ij, value_ij, key_jk, value_jk, attention_out,
             softmax_max, softmax_sum, mask_rows, scale, step, masked_value, ct):
    """``(dq, dk_ij, dv_ij, dk_jk, dv_jk)``: the reference's formulas, no reordered copies."""
    b, h, m, n, d = query_ik.shape
    k = key_ij.shape[3]
    dev = query_ik.device
    k_jk, v_jk = _PivotViews(key_jk, ct), _PivotViews(value_jk, ct)
    dq = torch.empty(query_ik.shape, dtype=ct, device=dev)
    dk_ij = torch.empty(key_ij.shape, dtype=ct, device=dev)
    dv_ij = torch.empty(value_ij.shape, dtype=ct, device=dev)
    # [BH, N, K, D] accumulators: the row sums of each block land in their natural layout
    dk_jk = torch.zeros(b * h, n, k, d, dtype=ct, device=dev)
    dv_jk = torch.zeros_like(dk_jk)
    for i0 in range(0, m, step):
        i1 = min(m, i0 + step)
        q = query_ik[:, :, i0:i1].to(ct)
        kij, vij = key_ij[:, :, i0:i1].to(ct), value_ij[:, :, i0:i1].to(ct)
        do = grad_output[:, :, i0:i1].to(ct)
        s = _scores(q * scale, kij, k_jk, mask_rows(i0, i1), masked_value)
        p = s.sub_(softmax_max[:, :, i0:i1, :, :1].to(ct)).exp_()
        p.div_(softmax_sum[:, :, i0:i1, :, :1].to(ct))                    # [B,H,m,N,K]
        big_d = (do * attention_out[:, :, i0:i1].to(ct)).sum(-1, keepdim=True)
        dp = torch.matmul(do, vij.transpose(-1, -2))
        _add_n_batched(_per_head(dp), _per_head(do), v_jk.nt)
        ds = dp.sub_(big_d).mul_(p)                                        # P * (dP - D)
        dq[:, :, i0:i1] = _values(ds, kij, k_jk).mul_(scale)
        dk_ij[:, :, i0:i1] = torch.matmul(ds.transpose(-1, -2), q).mul_(scale)
        dv_ij[:, :, i0:i1] = torch.matmul(p.transpose(-1, -2), do)
        # the sums over this block's rows m, batched over n: [N, K, m] @ [N, m, D]
        ds_h, p_h, q_h, do_h = (_per_head(t) for t in (ds, p, q, do))
        for i in range(b * h):
            dk_jk[i].baddbmm_(ds_h[i].permute(1, 2, 0), q_h[i].transpose(0, 1), alpha=scale)
            dv_jk[i].baddbmm_(p_h[i].permute(1, 2, 0), do_h[i].transpose(0, 1))
    dtype = query_ik.dtype
    return (dq.to(dtype), dk_ij.to(dtype), dv_ij.to(dtype), _as_pivot(dk_jk, key_jk),
            _as_pivot(dv_jk, value_jk))


def _as_pivot(g: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A ``[BH, N, K, D]`` accumulator as a contiguous ``[B, H, K, N, D]`` grad of ``like``'s
    dtype, transposed and rounded in one pass (``.to`` keeps the transposed strides, so
    ``.to(dtype).contiguous()`` would copy the score-sized tensor twice)."""
    b, h, k, n, d = like.shape
    out = torch.empty((b, h, k, n, d), dtype=like.dtype, device=like.device)
    out.copy_(g.view(b, h, n, k, d).transpose(2, 3))
    return out
