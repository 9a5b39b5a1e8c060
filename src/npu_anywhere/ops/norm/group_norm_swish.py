"""torch_npu.npu_group_norm_swish and npu_group_norm_swish_grad.

Formula (aclnnGroupNormSwish / aclnnGroupNormSwishGrad, hicann/ops-nn ``norm/group_norm_swish``)::

    y    = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta      over each of num_groups groups
    out  = y / (1 + exp(-swish_scale * y))                      (Swish)
    mean = E[x];  rstd = 1 / sqrt(Var[x] + eps)                 shape (N, num_groups)
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from .group_core import check_affine, check_group_input, group_norm_fp32, group_view_shape
from .rms_core import compute_dtype

OP = "npu_group_norm_swish"
SCHEMA = ("npu_group_norm_swish(Tensor input, int num_groups, Tensor weight, Tensor bias, "
          "float? eps=1e-5, float? swish_scale=1.0) -> (Tensor, Tensor, Tensor)")
GRAD_OP = "npu_group_norm_swish_grad"
GRAD_SCHEMA = ("npu_group_norm_swish_grad(Tensor grad, Tensor input, int num_groups, "
               "Tensor weight, Tensor bias, Tensor mean, Tensor rstd, "
               "bool[3] grad_input_mask, float? swish_scale=1.0) "
               "-> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
MAX_CHANNELS_PER_GROUP = 4000      # aclnnGroupNormSwishGrad: C / num_groups <= 4000


def _allowed():
    return FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE


def _check_common(op, input, num_groups, weight, bias):
    allowed = _allowed()
    check_group_input(op, input, num_groups, "num_groups", allowed)
    checks.expect(input.numel() != 0, op, "input", "a non-empty tensor",
                  lambda: f"shape {tuple(input.shape)}", ValueError)
    check_affine(op, input, "weight", weight, allowed)
    check_affine(op, input, "bias", bias, allowed)
    checks.expect_same_dtype({"weight": weight, "bias": bias}, op)


def check_group_norm_swish(input, num_groups, weight, bias, eps=1e-05, swish_scale=1.0):
    op = OP
    _check_common(op, input, num_groups, weight, bias)
    checks.expect_same_device({"input": input, "weight": weight, "bias": bias}, op)
    targets.expect_supported(op, _SUPPORTED)


def _swish_forward(input, num_groups, weight, bias, eps, swish_scale):
    eps = 1e-05 if eps is None else eps
    scale = 1.0 if swish_scale is None else swish_scale
    y, mean, rstd = group_norm_fp32(input, weight, bias, num_groups, eps)
    out = y * torch.sigmoid(y * scale)
    # mean/rstd have weight's dtype (op-plugin gen_opapi; aclnnGroupNormSwish: "与gamma相同").
    return out.to(input.dtype), mean.to(weight.dtype), rstd.to(weight.dtype)


def group_norm_swish_reference(input, num_groups, weight, bias, eps=1e-05, swish_scale=1.0):
    return _swish_forward(input, num_groups, weight, bias, eps, swish_scale)


def check_group_norm_swish_grad(grad, input, num_groups, weight, bias, mean, rstd,
                                grad_input_mask, swish_scale=1.0):
    op = GRAD_OP
    _check_common(op, input, num_groups, weight, bias)
    checks.expect(grad.dtype == input.dtype, op, "grad",
                  lambda: f"the dtype of input ({str(input.dtype)[6:]})",
                  lambda: str(grad.dtype)[6:], TypeError)
    checks.expect(grad.shape == input.shape, op, "grad",
                  lambda: f"the shape of input {tuple(input.shape)}", lambda: tuple(grad.shape))
    n = input.shape[0]
    for name, t in (("mean", mean), ("rstd", rstd)):
        checks.expect(t.dtype == weight.dtype, op, name,
                      lambda: f"the dtype of weight ({str(weight.dtype)[6:]})",
                      lambda t=t: str(t.dtype)[6:], TypeError)
        checks.expect(tuple(t.shape) == (n, num_groups), op, name,
                      lambda: f"shape {(n, num_groups)} (N, num_groups)",
                      lambda t=t: tuple(t.shape))
    checks.expect(len(grad_input_mask) == 3, op, "grad_input_mask", "3 booleans",
                  lambda: list(grad_input_mask), ValueError)
    per_group = input.shape[1] // num_groups
    checks.expect(per_group <= MAX_CHANNELS_PER_GROUP, op, "num_groups",
                  lambda: f"C / num_groups <= {MAX_CHANNELS_PER_GROUP}",
                  lambda: f"C / num_groups = {per_group}", ValueError)
    checks.expect_same_device({"grad": grad, "input": input, "weight": weight, "bias": bias,
                               "mean": mean, "rstd": rstd}, op)
    targets.expect_supported(op, _SUPPORTED)


def group_norm_swish_grad_reference(grad, input, num_groups, weight, bias, mean, rstd,
                                    grad_input_mask, swish_scale=1.0):
    """Exact gradient of out = swish(group_norm(x)) using the given mean/rstd.

    z = xhat * gamma + beta;  s = sigmoid(scale * z)
    dz = grad * s * (1 + scale * z * (1 - s))
    dbeta = sum dz;  dgamma = sum dz * xhat           (over N and the spatial dims)
    dx = rstd * (dxhat - mean_g(dxhat) - xhat * mean_g(dxhat * xhat)),  dxhat = dz * gamma
    """
    scale = 1.0 if swish_scale is None else swish_scale
    ct = compute_dtype(input.dtype)
    n, c = input.shape[0], input.shape[1]
    _, g, m = group_view_shape(input.shape, num_groups)
    cg = c // num_groups
    shape4 = (n, num_groups, cg, m // cg if cg else 0)
    x = input.to(ct).reshape(shape4)
    dy = grad.to(ct).reshape(shape4)
    mu = mean.to(ct).reshape(n, num_groups, 1, 1)
    r = rstd.to(ct).reshape(n, num_groups, 1, 1)
    w = weight.to(ct).reshape(1, num_groups, cg, 1)
    b = bias.to(ct).reshape(1, num_groups, cg, 1)
    xhat = (x - mu) * r
    z = xhat * w + b
    s = torch.sigmoid(z * scale)
    dz = dy * s * (1 + scale * z * (1 - s))
    dxhat = dz * w
    dx = r * (dxhat - dxhat.mean(dim=(2, 3), keepdim=True)
              - xhat * (dxhat * xhat).mean(dim=(2, 3), keepdim=True))
    dgamma = (dz * xhat).sum(dim=(0, 3)).reshape(c)
    dbeta = dz.sum(dim=(0, 3)).reshape(c)
    dgamma = dgamma.to(weight.dtype) if grad_input_mask[1] else torch.zeros_like(weight)
    dbeta = dbeta.to(bias.dtype) if grad_input_mask[2] else torch.zeros_like(bias)
    return dx.reshape(input.shape).to(input.dtype), dgamma, dbeta


group_norm_swish_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_group_norm_swish,
                            reference=group_norm_swish_reference, metadata_check=True,
                            info=OpInfo(api="torch_npu"))
group_norm_swish_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_group_norm_swish_grad,
                                 reference=group_norm_swish_grad_reference, metadata_check=True,
                                 info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, num_groups, weight, bias, _eps, swish_scale = inputs
    _, mean, rstd = output
    # derivatives.yaml differentiates `out` only (its formula uses `grad`); mean and rstd get
    # no gradient, so they are marked non-differentiable rather than silently dropped.
    ctx.mark_non_differentiable(mean, rstd)
    ctx.num_groups = num_groups
    ctx.swish_scale = 1.0 if swish_scale is None else swish_scale
    ctx.save_for_backward(input, weight, bias, mean, rstd)


def _backward(ctx, grad, _dmean, _drstd):
    input, weight, bias, mean, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not (need[0] or need[2] or need[3]):
        return None, None, None, None, None, None
    dx, dw, db = group_norm_swish_grad_op(grad.to(input.dtype), input, ctx.num_groups, weight,
                                          bias, mean, rstd, [need[0], need[2], need[3]],
                                          ctx.swish_scale)
    return (dx if need[0] else None, None, dw if need[2] else None, db if need[3] else None,
            None, None)


group_norm_swish_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_group_norm_swish(input, num_groups, weight, bias, eps=1e-05, swish_scale=1.0):
    """GroupNorm + Swish: returns ``(out, mean, rstd)``.

    Formula (aclnnGroupNormSwish)::

        over each (n, g), g = 0..num_groups-1, the C/num_groups channels and spatial elements:
        mean = E[x];  var = E[(x - mean)^2];  rstd = 1 / sqrt(var + eps)
        y    = (x - mean) * rstd * weight[c] + bias[c]
        out  = y / (1 + exp(-swish_scale * y))

    Parameters
    ----------
    input : Tensor
        (N, C, ...), 2-D to 8-D, not empty; float16, float32 or bfloat16 (float64 outside
        strict mode).
    num_groups : int
        > 0, divides C.
    weight, bias : Tensor
        1-D with C elements, one dtype: input's (seed 004) or float32 (aclnn doc).
    eps : float, optional
        Default 1e-5 (None means the default).
    swish_scale : float, optional
        Default 1.0 (None means the default).

    Returns
    -------
    out : Tensor
        input's shape and dtype (float32 math, one rounding).
    mean, rstd : Tensor
        Shape (N, num_groups), weight's dtype.

    Constraints
    -----------
    Products: A2 (seed 004), A3 and 950 (aclnn doc).  Strict mode rejects float64.

    Notes
    -----
    Autograd of ``out`` w.r.t. input, weight and bias through ``npu_group_norm_swish_grad``
    (op-plugin derivatives.yaml); ``mean`` and ``rstd`` are not differentiable.  mean/rstd
    take weight's dtype as op-plugin's ``gen_opapi`` allocates them (its meta registration
    says input's dtype; they differ only for float32 weights with a 16-bit input).

    Examples
    --------
    >>> x = torch.randn(3, 4, 6); w = torch.randn(4); b = torch.randn(4)
    >>> out, mean, rstd = npu_anywhere.npu_group_norm_swish(x, 4, w, b, eps=1e-5)
    >>> out.shape, mean.shape
    (torch.Size([3, 4, 6]), torch.Size([3, 4]))
    """
    return group_norm_swish_op(input, num_groups, weight, bias, eps, swish_scale)


def npu_group_norm_swish_grad(grad, input, num_groups, weight, bias, mean, rstd,
                              grad_input_mask, swish_scale=1.0):
    """Gradients of :func:`npu_group_norm_swish`'s ``out``: ``(grad_x, grad_weight, grad_bias)``.

    Formula (aclnnGroupNormSwishGrad)::

        z = (x - mean) * rstd * weight + bias;  s = sigmoid(swish_scale * z)
        dz = grad * s * (1 + swish_scale * z * (1 - s))
        grad_bias = sum(dz);  grad_weight = sum(dz * xhat)      (over N and spatial dims)
        grad_x = rstd * (dz*w - mean_g(dz*w) - xhat * mean_g(dz*w * xhat))

    ``mean``/``rstd`` are the forward's outputs (used as given, not recomputed);
    ``grad_input_mask`` = [input, weight, bias]: grad_x is always computed, grad_weight /
    grad_bias are zeros when their flag is False (the NPU leaves them unwritten).  Constraint:
    C / num_groups <= 4000.  grad_x has input's dtype, grad_weight/grad_bias weight's/bias's.
    """
    return group_norm_swish_grad_op(grad, input, num_groups, weight, bias, mean, rstd,
                                    list(grad_input_mask), swish_scale)


TORCH_NPU_FUNCTIONS = {
    "npu_group_norm_swish": npu_group_norm_swish,
    "npu_group_norm_swish_grad": npu_group_norm_swish_grad,
}
