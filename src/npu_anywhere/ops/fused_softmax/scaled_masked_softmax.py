"""torch_npu.npu_scaled_masked_softmax and npu_scaled_masked_softmax_backward.

Formula (seed 004 "npu_scaled_masked_softmax"; ScaledMaskedSoftmaxV2 README)::

    m   = mask                               (fixed_triu_mask=False; broadcast to x)
    m   = triu(ones(H, W), diagonal=1)        (fixed_triu_mask=True: the future-token mask)
    z   = where(m, -10000, x * scale)         (masked, not -inf: a fully masked row is uniform)
    out = softmax(z, dim=-1)

    backward:  dx = where(m, 0, scale * y * (dy - sum(dy * y, -1)))

Precision follows the Ascend C kernels (hicann/ops-nn
scaled_masked_softmax_v2/op_kernel/scaled_masked_softmax_v2.h and
scaled_masked_softmax_grad_v2/op_kernel/scaled_masked_softmax_grad_v2_norm_headdim.h):
float16 scales in float16 (``fp16(x * fp16(scale))``), writes the float16 mask value, then
takes the softmax in float32 and rounds once; bfloat16 converts to float32 first and scales
there; float32 stays float32.  The backward converts ``y_grad`` and ``y`` to float32, applies
SoftmaxGrad, the scale and the mask there and rounds once.  The -10000 fill value is the
kernel's ``MASK_VAL`` and the value op-plugin's CPU golden (test_scaled_masked_softmax.py) uses.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common

OP = "npu_scaled_masked_softmax"
SCHEMA = ("npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, "
          "bool fixed_triu_mask=False) -> Tensor")
GRAD_OP = "npu_scaled_masked_softmax_backward"
GRAD_SCHEMA = ("npu_scaled_masked_softmax_backward(Tensor y_grad, Tensor y, Tensor mask, "
               "Scalar scale, bool fixed_triu_mask) -> Tensor")

MASK_VALUE = -10000.0
DTYPES = (torch.float16, torch.float32, torch.bfloat16)
# Seed 004 / the op-plugin doc: "H和W轴长度大于等于32、小于等于4096、且能被32整除".
MIN_HW, MAX_HW, HW_ALIGN = 32, 4096, 32

# op-plugin doc product table: 950, A3, A2, Atlas inference (310P) and Atlas training (910).
_SUPPORTED = frozenset({Product.ASCEND_950, Product.A3, Product.A2, Product.ATLAS_INFERENCE,
                        Product.ATLAS_TRAINING})


def _check_x(op: str, name: str, x: torch.Tensor) -> None:
    _common.expect_dtype(op, name, x, DTYPES)
    _common.expect_shape_4d(op, name, x)
    for axis, size in (("H", x.shape[2]), ("W", x.shape[3])):
        checks.expect(MIN_HW <= size <= MAX_HW and size % HW_ALIGN == 0, op, name,
                      lambda axis=axis: f"{axis} (dim {2 if axis == 'H' else 3}) a multiple of "
                      f"{HW_ALIGN} in [{MIN_HW}, {MAX_HW}]", lambda: f"shape {tuple(x.shape)}",
                      ValueError)


def _check_mask(op: str, mask: torch.Tensor, x: torch.Tensor) -> None:
    checks.expect_dtype(mask, (torch.bool,), op, "mask")
    checks.expect(_broadcasts_to(mask.shape, x.shape), op, "mask",
                  lambda: f"a shape that broadcasts to x's shape {tuple(x.shape)}",
                  lambda: f"shape {tuple(mask.shape)}")


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))):
        if s != t and s != 1:
            return False
    return True


def _check_common(op: str, mask, x, scale, fixed_triu_mask) -> None:
    _common.scalar_value(op, "scale", scale)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None:
        # The current doc: "fixed_triu_mask ... 预留参数，功能未完成 ... 当前只支持False".
        checks.expect(not fixed_triu_mask, op, "fixed_triu_mask",
                      f"False on {product.value} (the auto-generated triangular mask is a reserved "
                      "feature there)", repr(fixed_triu_mask), ValueError)
    _check_mask(op, mask, x)
    checks.expect_same_device({"x": x, "mask": mask}, op)


def check_scaled_masked_softmax(x, mask, scale=1, fixed_triu_mask=False):
    _check_x(OP, "x", x)
    _check_common(OP, mask, x, scale, fixed_triu_mask)


def check_scaled_masked_softmax_backward(y_grad, y, mask, scale, fixed_triu_mask):
    _check_x(GRAD_OP, "y_grad", y_grad)
    _common.expect_dtype(GRAD_OP, "y", y, DTYPES)
    _common.expect_same_shape(GRAD_OP, "y", y, "y_grad", y_grad)
    checks.expect_same_dtype({"y_grad": y_grad, "y": y}, GRAD_OP)
    checks.expect_same_device({"y_grad": y_grad, "y": y}, GRAD_OP)
    _check_common(GRAD_OP, mask, y_grad, scale, fixed_triu_mask)


def effective_mask(mask: torch.Tensor, x: torch.Tensor, fixed_triu_mask: bool) -> torch.Tensor:
    """The mask the kernel applies (True = masked out), broadcast to x's shape."""
    if fixed_triu_mask:
        h, w = x.shape[-2], x.shape[-1]
        tri = torch.ones(h, w, dtype=torch.bool, device=x.device).triu(1)
        return tri.expand(x.shape)
    return mask.expand(x.shape)


def scaled_masked_softmax_reference(x, mask, scale=1, fixed_triu_mask=False):
    m = effective_mask(mask, x, fixed_triu_mask)
    ct = _common.compute_dtype(x.dtype)
    if x.dtype == torch.float16:
        # float16 scales and masks in float16 before the float32 softmax.
        scaled = (x.to(ct) * _common.as_compute_scalar(scale, torch.float16)).to(torch.float16)
        z = scaled.masked_fill(m, MASK_VALUE).to(ct)
    else:
        z = (x.to(ct) * _common.as_compute_scalar(scale, ct)).masked_fill(m, MASK_VALUE)
    return torch.softmax(z, dim=-1).to(x.dtype)


def scaled_masked_softmax_backward_reference(y_grad, y, mask, scale, fixed_triu_mask):
    m = effective_mask(mask, y_grad, fixed_triu_mask)
    ct = _common.compute_dtype(y_grad.dtype)
    dx = _common.softmax_grad(y_grad.to(ct), y.to(ct)) * _common.as_compute_scalar(scale, ct)
    return dx.masked_fill(m, 0.0).to(y_grad.dtype)


scaled_masked_softmax_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_scaled_masked_softmax,
                                 reference=scaled_masked_softmax_reference, metadata_check=True,
                                 info=OpInfo(api="torch_npu"))
scaled_masked_softmax_backward_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                          check=check_scaled_masked_softmax_backward,
                                          reference=scaled_masked_softmax_backward_reference,
                                          metadata_check=True,
                                          info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    _, mask, scale, fixed_triu_mask = inputs
    ctx.args = (scale, fixed_triu_mask)
    # derivatives.yaml: x: npu_scaled_masked_softmax_backward(grad, result, mask, ...).
    ctx.save_for_backward(output, mask)


def _backward(ctx, grad):
    y, mask = ctx.saved_tensors
    if grad is None:
        return None, None, None, None
    return scaled_masked_softmax_backward_op(grad, y, mask, *ctx.args), None, None, None


scaled_masked_softmax_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_scaled_masked_softmax(x=None, mask=None, scale=1.0, fixed_triu_mask=False, **kwargs):
    """Softmax over the last dim of ``x * scale`` with the ``mask`` positions filled with -10000.

    Formula (seed 004; ScaledMaskedSoftmaxV2)::

        m   = mask broadcast to x            (fixed_triu_mask=False)
        m   = triu(ones(H, W), diagonal=1)   (fixed_triu_mask=True; ``mask`` is then ignored)
        out = softmax(where(m, -10000, x * scale), dim=-1)

    Parameters
    ----------
    x : Tensor
        Logits, 4-D (N, C, H, W), float16, float32 or bfloat16 (float64 also accepted outside
        strict mode); H and W multiples of 32 in [32, 4096].  ``self=`` is accepted as an alias.
    mask : Tensor
        bool, True where a position is masked out; any shape that broadcasts to ``x``.
    scale : float, default 1.0
        Multiplies ``x`` before masking.
    fixed_triu_mask : bool, default False
        Use the strict upper triangle (key after query) as the mask instead of ``mask``.

    Returns
    -------
    Tensor of ``x``'s shape and dtype.

    Constraints
    -----------
    All products (950, A3, A2, 310P, 910).  Strict mode: ``fixed_triu_mask`` must be False (the
    current doc calls it a reserved parameter that only supports False).

    Notes
    -----
    Masked positions get -10000, not -inf, as the kernel does: a fully masked row comes out
    uniform (1 / W) and its gradient is zero.  float16 scales and masks in float16 before the
    float32 softmax (scaled_masked_softmax_v2.h); every dtype is rounded once at the end.
    Differentiable in ``x`` through ``npu_scaled_masked_softmax_backward`` (derivatives.yaml).

    Examples
    --------
    >>> x = torch.rand(4, 4, 64, 64)
    >>> mask = torch.zeros_like(x).bool()
    >>> npu_anywhere.npu_scaled_masked_softmax(x, mask, 1.0, False).shape
    torch.Size([4, 4, 64, 64])
    """
    if kwargs:
        x = accept_alias(OP, "x", x, "self", kwargs)
    return scaled_masked_softmax_op(x, mask, scale, fixed_triu_mask)


def npu_scaled_masked_softmax_backward(y_grad, y, mask, scale, fixed_triu_mask):
    """Gradient of :func:`npu_scaled_masked_softmax` w.r.t. ``x`` (ScaledMaskedSoftmaxGrad).

    Formula::

        dx = where(m, 0, scale * y * (y_grad - sum(y_grad * y, dim=-1)))

    ``y`` is the forward output; ``y_grad`` and ``y`` share shape and dtype; the mask ``m`` is
    built as in the forward.  Computed in float32 and rounded once to ``y_grad``'s dtype.
    """
    return scaled_masked_softmax_backward_op(y_grad, y, mask, scale, fixed_triu_mask)


TORCH_NPU_FUNCTIONS = {
    "npu_scaled_masked_softmax": npu_scaled_masked_softmax,
    "npu_scaled_masked_softmax_backward": npu_scaled_masked_softmax_backward,
}
