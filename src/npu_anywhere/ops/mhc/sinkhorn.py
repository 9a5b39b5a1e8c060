"""torch_npu.npu_mhc_sinkhorn and npu_mhc_sinkhorn_backward (doubly stochastic H_res).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mhc_sinkhorn.md; order and eps
placement checked against the kernel, ops-transformer mhc/mhc_sinkhorn/op_kernel/arch35/
mhc_sinkhorn_arch35.h, and op-plugin's CPU golden test/test_custom_ops/test_npu_mhc_sinkhorn.py),
per token on the last two dims, in float32:

    norm[0] = softmax(x, dim=-1)
    sum[1]  = sum_rows(norm[0] + eps) + eps          # column sums (over dim -2)
    norm[1] = (norm[0] + eps) / sum[1]
    for i in 1 .. num_iters - 1:
        sum[2i]    = sum_cols(norm[2i-1]) + eps      # row sums (over dim -1)
        norm[2i]   = norm[2i-1] / sum[2i]
        sum[2i+1]  = sum_rows(norm[2i]) + eps
        norm[2i+1] = norm[2i] / sum[2i+1]
    y = norm[2 * num_iters - 1]

So the column normalisation comes first and last.  ``out_flag=1`` also returns ``norm`` and
``sum`` in the kernel's flat layout (:mod:`.sinkhorn_layout`), which the backward op reads.

Backward (op-plugin test/test_custom_ops/test_npu_mhc_sinkhorn_backward.py golden): walking the
steps back, a normalisation ``out = a / s`` passes ``(g - sum(g * out)) / s`` (sums along the
normalised dim), and the softmax ``norm[0] * (g - sum(g * norm[0], -1))``.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import _common, sinkhorn_layout

OP = "npu_mhc_sinkhorn"
SCHEMA = ("npu_mhc_sinkhorn(Tensor x, *, float eps=1e-6, SymInt num_iters=20, int out_flag=0) "
          "-> (Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_mhc_sinkhorn_backward"
BACKWARD_SCHEMA = "npu_mhc_sinkhorn_backward(Tensor grad_y, Tensor norm, Tensor sum) -> Tensor"
MAX_ITERS = 100


def _check_matrices(op, name, t):
    _common.expect_dtype(op, name, t, _common.FLOAT32)
    _common.expect_dims(op, name, t, (3, 4))
    checks.expect(t.shape[-1] == t.shape[-2], op, name, "square [n, n] matrices in its last dims",
                  lambda: f"shape {list(t.shape)}", RuntimeError)
    _common.expect_stream_count(op, name, t.shape[-1])
    checks.expect_nonempty(t, op, name)


def check_mhc_sinkhorn(x, *, eps=1e-6, num_iters=20, out_flag=0):
    _check_matrices(OP, "x", x)
    checks.expect(1 <= num_iters <= MAX_ITERS, op=OP, param="num_iters",
                  requirement=f"in [1, {MAX_ITERS}]", actual=num_iters, error=ValueError)
    _common.expect_flag(OP, "out_flag", out_flag)
    targets.expect_supported(OP, _common.SUPPORTED)


def _tokens(t):
    return t.numel() // (t.shape[-1] * t.shape[-1])


def _iterate(x, eps, num_iters, keep):
    """The Sinkhorn steps on ``[T, n, n]``; ``keep`` collects the intermediates."""
    ct = _common.compute_dtype(x.dtype)
    prob = torch.softmax(x.to(ct), dim=-1)
    cur = prob + eps
    col = cur.sum(-2, keepdim=True) + eps
    cur = cur / col
    norms, rows, cols = [prob, cur], [torch.ones_like(col).transpose(-1, -2)], [col]
    for _ in range(num_iters - 1):
        row = cur.sum(-1, keepdim=True) + eps
        cur = cur / row
        col = cur.sum(-2, keepdim=True) + eps
        if keep:
            norms.append(cur)
        cur = cur / col
        if keep:
            norms.append(cur)
            rows.append(row)
            cols.append(col)
    return cur, norms, rows, cols


def mhc_sinkhorn_reference(x, *, eps=1e-6, num_iters=20, out_flag=0):
    n = x.shape[-1]
    y, norms, rows, cols = _iterate(x.reshape(-1, n, n), eps, num_iters, out_flag == 1)
    y = y.reshape(x.shape).to(x.dtype)
    if out_flag != 1:
        # The NPU returns undefined tensors (Python None); a schema output must be a tensor.
        return y, x.new_empty((0,)), x.new_empty((0,))
    norm, sums = sinkhorn_layout.pack(torch.stack(norms), torch.stack(rows).squeeze(-1),
                                      torch.stack(cols).squeeze(-2))
    return y, norm.to(x.dtype), sums.to(x.dtype)


def _fake_sinkhorn(x, *, eps=1e-6, num_iters=20, out_flag=0):
    check_mhc_sinkhorn(x, eps=eps, num_iters=num_iters, out_flag=out_flag)
    tokens = _tokens(x)
    n = x.shape[-1]
    align = sinkhorn_layout.N_ALIGN
    if out_flag != 1:
        return x.new_empty(x.shape), x.new_empty((0,)), x.new_empty((0,))
    return (x.new_empty(x.shape), x.new_empty((2 * num_iters * tokens * n * align,)),
            x.new_empty((2 * num_iters * tokens * align,)))


def check_mhc_sinkhorn_backward(grad_y, norm, sum):
    op = BACKWARD_OP
    _check_matrices(op, "grad_y", grad_y)
    tokens, n = _tokens(grad_y), grad_y.shape[-1]
    align = sinkhorn_layout.N_ALIGN
    per_iter = 2 * tokens * n * align
    for name, t in (("norm", norm), ("sum", sum)):
        _common.expect_dtype(op, name, t, _common.FLOAT32)
        checks.expect(t.dim() == 1, op, name, "a 1-D tensor (the forward's flat layout)",
                      lambda t=t: f"shape {list(t.shape)}", ValueError)
    checks.expect(norm.numel() % per_iter == 0 and 1 <= norm.numel() // per_iter <= MAX_ITERS,
                  op, "norm", lambda: f"2 * num_iters * T * n * {align} elements "
                  f"(T = {tokens}, n = {n}, num_iters in [1, {MAX_ITERS}])",
                  lambda: f"{norm.numel()} elements", RuntimeError)
    iters = norm.numel() // per_iter
    checks.expect(sum.numel() == 2 * iters * tokens * align, op, "sum",
                  lambda: f"2 * num_iters * T * {align} = {2 * iters * tokens * align} elements "
                  f"(num_iters = {iters} from norm)", lambda: f"{sum.numel()} elements",
                  RuntimeError)
    _common.expect_devices(op, {"grad_y": grad_y, "norm": norm, "sum": sum})
    targets.expect_supported(op, _common.SUPPORTED)


def mhc_sinkhorn_backward_reference(grad_y, norm, sum):
    n = grad_y.shape[-1]
    tokens = _tokens(grad_y)
    iters = norm.numel() // (2 * tokens * n * sinkhorn_layout.N_ALIGN)
    ct = _common.compute_dtype(grad_y.dtype)
    norms, rows, cols = sinkhorn_layout.unpack(norm.to(ct), sum.to(ct), tokens, n, iters)
    g = grad_y.reshape(tokens, n, n).to(ct)
    for i in range(iters - 1, 0, -1):
        g = (g - (g * norms[2 * i + 1]).sum(-2, keepdim=True)) / cols[i].unsqueeze(-2)
        g = (g - (g * norms[2 * i]).sum(-1, keepdim=True)) / rows[i].unsqueeze(-1)
    g = (g - (g * norms[1]).sum(-2, keepdim=True)) / cols[0].unsqueeze(-2)
    prob = norms[0]
    grad_x = prob * (g - (g * prob).sum(-1, keepdim=True))
    return grad_x.reshape(grad_y.shape).to(grad_y.dtype)


def _fake_sinkhorn_backward(grad_y, norm, sum):
    check_mhc_sinkhorn_backward(grad_y, norm, sum)
    return grad_y.new_empty(grad_y.shape)


mhc_sinkhorn_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mhc_sinkhorn,
                        reference=mhc_sinkhorn_reference, fake=_fake_sinkhorn,
                        metadata_check=True, info=OpInfo(api="torch_npu"))
mhc_sinkhorn_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_mhc_sinkhorn_backward,
                                 reference=mhc_sinkhorn_backward_reference,
                                 fake=_fake_sinkhorn_backward, metadata_check=True,
                                 info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, eps, num_iters, out_flag = inputs
    _y, norm, sums = output
    ctx.eps, ctx.num_iters, ctx.recompute = eps, num_iters, out_flag != 1
    # derivatives.yaml passes the saved norm / sum; with out_flag=0 there are none, so x is
    # kept and they are recomputed at backward time.
    ctx.save_for_backward(x if ctx.recompute else None, norm, sums)
    ctx.mark_non_differentiable(norm, sums)


def _backward(ctx, grad_y, *_unused):
    x, norm, sums = ctx.saved_tensors
    if ctx.recompute:
        _, norm, sums = mhc_sinkhorn_op(x, eps=ctx.eps, num_iters=ctx.num_iters, out_flag=1)
    return mhc_sinkhorn_backward_op(grad_y.contiguous(), norm, sums), None, None, None


mhc_sinkhorn_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_mhc_sinkhorn(x, *, eps=1e-6, num_iters=20, out_flag=0):
    """Sinkhorn-Knopp normalisation of each ``[n, n]`` H_res' into a doubly stochastic matrix.

    Formula (torch_npu-npu_mhc_sinkhorn.md)::

        norm[0] = softmax(x, -1);  norm[1] = (norm[0] + eps) / (colsum(norm[0] + eps) + eps)
        i = 1 .. num_iters-1:  norm[2i] = norm[2i-1] / (rowsum(norm[2i-1]) + eps)
                               norm[2i+1] = norm[2i] / (colsum(norm[2i]) + eps)
        y = norm[2 * num_iters - 1]

    Parameters
    ----------
    x : Tensor
        float32 (float64 outside strict mode) ``[B, S, n, n]`` or ``[T, n, n]``, n in {4, 6, 8}.
    eps : float
        Added to the softmax and to every sum.
    num_iters : int
        Row/column rounds, in [1, 100].
    out_flag : int
        1: also return the intermediates the backward op needs.

    Returns
    -------
    (y, norm_out, sum_out)
        ``y`` of x's shape; with ``out_flag=1`` the 1-D ``norm_out`` (``2 * num_iters * T * n *
        8`` values) and ``sum_out`` (``2 * num_iters * T * 8``) in the kernel's tiled, padded
        layout (see ``sinkhorn_layout``; the doc's ``[2 num_iters, n, n, T]`` is its logical
        content), else two empty tensors (the NPU returns None there).

    Constraints
    -----------
    Ascend 950 only (strict mode).

    Notes
    -----
    Differentiable in x through :func:`npu_mhc_sinkhorn_backward`; with ``out_flag=0`` the
    intermediates are recomputed for the backward.

    Examples
    --------
    >>> y, _, _ = npu_anywhere.npu_mhc_sinkhorn(torch.randn(2, 4, 4))
    >>> torch.allclose(y.sum(-1), torch.ones(2, 4), atol=1e-4)
    True
    """
    return mhc_sinkhorn_op(x, eps=eps, num_iters=num_iters, out_flag=out_flag)


def npu_mhc_sinkhorn_backward(grad_y, norm, sum):
    """Gradient of :func:`npu_mhc_sinkhorn` w.r.t. x from ``grad_y`` and the forward's
    ``norm_out`` / ``sum_out`` (``out_flag=1``, the kernel's flat layout; ``num_iters`` is
    implied by their size).  Returns float32 of ``grad_y``'s shape."""
    return mhc_sinkhorn_backward_op(grad_y, norm, sum)


TORCH_NPU_FUNCTIONS = {OP: npu_mhc_sinkhorn, BACKWARD_OP: npu_mhc_sinkhorn_backward}
