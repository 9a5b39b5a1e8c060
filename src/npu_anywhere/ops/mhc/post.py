"""torch_npu.npu_mhc_post and npu_mhc_post_backward (mHC post-mixing).

Formula (seed 004 and op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mhc_post.md; the
contraction index from op-plugin's CPU golden test/test_custom_ops/test_npu_mhc_post.py, which
sums ``h_res[i, j] * x[i]`` over i, i.e. the transpose the seed writes), per token in float32:

    y[j] = sum_i h_res[i, j] * x[i] + h_post[j] * h_out        (h_res given)
    y[j] = x[j] + h_post[j] * h_out                            (h_res None)

rounded once to x's dtype.  Backward (ops-transformer mhc/mhc_post_backward/tests/assets/
golden.py; checks and messages of op-plugin op_plugin/ops/opapi/MhcPostBackwardNpuOpApi.cpp):

    grad_x      = h_res @ grad_y      (grad_y itself without h_res)
    grad_h_res  = x @ grad_y^T        (float32; computed even without h_res)
    grad_h_out  = sum_j h_post[j] * grad_y[j]
    grad_h_post = sum_d grad_y[:, d] * h_out[d]   (float32)
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import _common

OP = "npu_mhc_post"
SCHEMA = "npu_mhc_post(Tensor x, Tensor? h_res, Tensor h_out, Tensor h_post) -> Tensor"
BACKWARD_OP = "npu_mhc_post_backward"
BACKWARD_SCHEMA = ("npu_mhc_post_backward(Tensor grad_y, Tensor x, Tensor? h_res, Tensor h_out, "
                   "Tensor h_post) -> (Tensor, Tensor, Tensor, Tensor)")


def _native(words: str) -> str:
    # op-plugin's own wording is kept in brackets: Ascend's tests match on it.
    return f" ({words})"


def _check_operands(op, x, h_res, h_out, h_post):
    checks.expect(x.dtype in _common.allowed(_common.HALF_TYPES), op, "x",
                  "dtype float16 or bfloat16" + _native("x dtype must be FLOAT16 or BFLOAT16"),
                  lambda: str(x.dtype).replace("torch.", ""), TypeError)
    checks.expect(h_out.dtype == x.dtype, op, "h_out",
                  "the dtype of x" + _native("h_out dtype must be the same as x"),
                  lambda: str(h_out.dtype).replace("torch.", ""), TypeError)
    f32 = _common.allowed(_common.FLOAT32)
    checks.expect(h_post.dtype in f32, op, "h_post",
                  "dtype float32" + _native("h_post dtype must be FLOAT32"),
                  lambda: str(h_post.dtype).replace("torch.", ""), TypeError)
    checks.expect(x.dim() in (3, 4), op, "x", "a 3-D or 4-D tensor" + _native(
                  "x dim must be 3 or 4"), lambda: f"shape {list(x.shape)}", ValueError)
    lead, n, d = tuple(x.shape[:-2]), x.shape[-2], x.shape[-1]
    dims = x.dim() - 1
    checks.expect(tuple(h_out.shape) == lead + (d,), op, "h_out", lambda: f"the shape "
                  f"{list(lead + (d,))} of x without n" + _native(f"h_out dim must be {dims}"),
                  lambda: f"shape {list(h_out.shape)}", RuntimeError)
    checks.expect(tuple(h_post.shape) == lead + (n,), op, "h_post", lambda: f"the shape "
                  f"{list(lead + (n,))} of x without D" + _native(f"h_post dim must be {dims}"),
                  lambda: f"shape {list(h_post.shape)}", RuntimeError)
    if h_res is not None:
        checks.expect(h_res.dtype in f32, op, "h_res",
                      "dtype float32" + _native("h_res dtype must be FLOAT32"),
                      lambda: str(h_res.dtype).replace("torch.", ""), TypeError)
        want = lead + (n, n)
        checks.expect(tuple(h_res.shape) == want, op, "h_res", lambda: f"the shape {list(want)}"
                      + _native(f"h_res shape must be {list(want)}"),
                      lambda: f"shape {list(h_res.shape)}", RuntimeError)
    _common.expect_devices(op, {"x": x, "h_res": h_res, "h_out": h_out, "h_post": h_post})
    targets.expect_supported(op, _common.SUPPORTED)


def check_mhc_post(x, h_res, h_out, h_post):
    _check_operands(OP, x, h_res, h_out, h_post)


def mhc_post_reference(x, h_res, h_out, h_post):
    ct = _common.compute_dtype(x.dtype)
    xf = x.to(ct)
    mixed = xf if h_res is None else torch.matmul(h_res.to(ct).transpose(-1, -2), xf)
    y = mixed + h_post.to(ct).unsqueeze(-1) * h_out.to(ct).unsqueeze(-2)
    return y.to(x.dtype)


def check_mhc_post_backward(grad_y, x, h_res, h_out, h_post):
    op = BACKWARD_OP
    _common.expect_nonempty(op, {"grad_y": grad_y, "x": x, "h_res": h_res, "h_out": h_out,
                                 "h_post": h_post})
    _check_operands(op, x, h_res, h_out, h_post)
    checks.expect(grad_y.dtype == x.dtype, op, "grad_y",
                  "the dtype of x" + _native("grad_y dtype must be the same as x"),
                  lambda: str(grad_y.dtype).replace("torch.", ""), TypeError)
    checks.expect(grad_y.shape == x.shape, op, "grad_y", lambda: f"the shape {list(x.shape)} of x"
                  + _native("grad_y shape must be the same as x shape"),
                  lambda: f"shape {list(grad_y.shape)}", RuntimeError)
    _common.expect_devices(op, {"grad_y": grad_y, "x": x})


def mhc_post_backward_reference(grad_y, x, h_res, h_out, h_post):
    ct = _common.compute_dtype(x.dtype)
    g, xf = grad_y.to(ct), x.to(ct)
    grad_x = g if h_res is None else torch.matmul(h_res.to(ct), g)
    grad_h_res = torch.matmul(xf, g.transpose(-1, -2))
    grad_h_out = (g * h_post.to(ct).unsqueeze(-1)).sum(-2)
    grad_h_post = (g * h_out.to(ct).unsqueeze(-2)).sum(-1)
    return grad_x.to(x.dtype), grad_h_res, grad_h_out.to(x.dtype), grad_h_post


mhc_post_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mhc_post,
                    reference=mhc_post_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
mhc_post_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                             check=check_mhc_post_backward,
                             reference=mhc_post_backward_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, h_res, h_out, h_post = inputs
    ctx.has_res = h_res is not None
    ctx.save_for_backward(x, h_res, h_out, h_post)


def _backward(ctx, grad_y):
    x, h_res, h_out, h_post = ctx.saved_tensors
    grad_x, grad_h_res, grad_h_out, grad_h_post = mhc_post_backward_op(
        grad_y.to(x.dtype), x, h_res, h_out, h_post)
    return grad_x, grad_h_res if ctx.has_res else None, grad_h_out, grad_h_post


mhc_post_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_mhc_post(x, h_res, h_out, h_post):
    """mHC post-mixing: the layer output gated into the n streams plus the mixed residual.

    Formula (seed 004; index order of op-plugin's CPU golden)::

        x_{l+1} = H_res^T x_l + h_out (outer) H_post      (H_res given)
        x_{l+1} = x_l + h_out (outer) H_post              (h_res None)

    Parameters
    ----------
    x : Tensor
        ``[B, S, n, D]`` or ``[T, n, D]``, float16 or bfloat16 (float64 outside strict mode);
        empty tensors accepted.
    h_res : Tensor or None
        float32 ``[..., n, n]``, the doubly stochastic matrix from :func:`npu_mhc_sinkhorn`;
        None skips the residual mixing.
    h_out : Tensor
        The attention / MLP output ``[..., D]``, x's dtype.
    h_post : Tensor
        float32 ``[..., n]``.

    Returns
    -------
    Tensor
        x's shape and dtype, computed in float32 and rounded once.

    Constraints
    -----------
    Ascend 950 only (strict mode).

    Notes
    -----
    Differentiable in all four inputs through :func:`npu_mhc_post_backward`.

    Examples
    --------
    >>> x = torch.rand(1, 4, 512, dtype=torch.float16)
    >>> y = npu_anywhere.npu_mhc_post(x, torch.rand(1, 4, 4), torch.rand(1, 512).half(),
    ...                               torch.rand(1, 4))
    >>> y.shape, y.dtype
    (torch.Size([1, 4, 512]), torch.float16)
    """
    return mhc_post_op(x, h_res, h_out, h_post)


def npu_mhc_post_backward(grad_y, x, h_res, h_out, h_post):
    """Gradients of :func:`npu_mhc_post`: ``(grad_x, grad_h_res, grad_h_out, grad_h_post)``.

    ``grad_x = h_res @ grad_y`` (``grad_y`` without h_res) and ``grad_h_out`` in x's dtype;
    ``grad_h_res = x @ grad_y^T`` (float32 ``[..., n, n]``, also without h_res) and
    ``grad_h_post`` float32.  Inputs must be non-empty; messages carry the NPU's own words.
    """
    return mhc_post_backward_op(grad_y, x, h_res, h_out, h_post)


TORCH_NPU_FUNCTIONS = {OP: npu_mhc_post, BACKWARD_OP: npu_mhc_post_backward}
