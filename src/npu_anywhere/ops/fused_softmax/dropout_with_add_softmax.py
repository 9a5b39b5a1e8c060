"""torch_npu.npu_dropout_with_add_softmax and npu_dropout_with_add_softmax_backward.

Formula (seed 004 "npu_dropout_with_add_softmax": axpy_v2, softmax_v2, drop_out_domask_v3)::

    y       = x1 + self * alpha
    softmax = softmax(y, dim)
    out     = softmax * mask / (1 - prob)        # prob: the drop rate; mask: 1 = kept

    backward (DropoutWithMulsAndSoftmaxGrad):
    g       = grad * mask / (1 - prob)
    d self  = alpha * softmax * (g - sum(g * softmax, dim))

Returns ``(mask, softmax, out)``.  ``mask`` is DropOutGenMaskV3's: one uint8 per element (1 =
kept) in a flat tensor of ``numel`` rounded up to a multiple of 128 (op-plugin
DropoutWithAddSoftmaxKernelNpu.cpp; the documented shapes always have a multiple of 128), the
padding zero.  Precision follows op-plugin's CPU golden (test_dropout_with_add_softmax.py):
the axpy and softmax in float32, the softmax rounded to the input dtype, the dropout applied to
that rounded softmax in float32 and rounded again.  The keep-mask is drawn from torch's default
generator (``torch.manual_seed`` repeats it), not the NPU's Philox stream.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common
from ._common import softmax_grad

OP = "npu_dropout_with_add_softmax"
SCHEMA = ("npu_dropout_with_add_softmax(Tensor self, Tensor x1, Scalar alpha, float prob, "
          "int dim) -> (Tensor, Tensor, Tensor)")
GRAD_OP = "npu_dropout_with_add_softmax_backward"
GRAD_SCHEMA = ("npu_dropout_with_add_softmax_backward(Tensor grad, Tensor mask, "
               "Tensor softmax_out, Scalar alpha, float prob, int dim) -> (Tensor, Tensor)")

# AxpyWithSoftmaxAndDropOutDoMask: float16 and float32 (op-plugin's tests use those two).
DTYPES = (torch.float16, torch.float32)
HW_SIZES = (128, 256, 384, 512)      # seed 004: "H和W是[128, 256, 384, 512]其中之一"
NC_ALIGN = 32                        # seed 004: "(N * C)%32结果为0"
MASK_ALIGN = 128                     # DropOutGenMaskV3's length alignment (LENGTH_DATA_ALIGN)

# The aclop path of op-plugin (acl_op: all_version); its doc lists no product table, and the
# fused TBE kernels exist on the training products.
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.A2, Product.A3})


def mask_length(numel: int) -> int:
    return (numel + MASK_ALIGN - 1) // MASK_ALIGN * MASK_ALIGN


def _check_prob_dim(op: str, prob: float, dim: int) -> None:
    checks.expect(0.0 <= prob <= 1.0, op, "prob", "a drop rate in [0, 1]", repr(prob),
                  ValueError)
    # keep = 1 - prob = 0 divides by zero in the kernel; what it returns is not documented.
    checks.expect(prob < 1.0, op, "prob", "below 1 (a drop rate of 1 leaves keep = 0, whose "
                  "result the NPU does not document)", repr(prob), NotImplementedError)
    checks.expect(dim == -1, op, "dim", "-1 (seed 004: dim为-1)", repr(dim), ValueError)


def _check_x(op: str, name: str, t: torch.Tensor) -> None:
    _common.expect_dtype(op, name, t, DTYPES)
    _common.expect_shape_4d(op, name, t)
    n, c, h, w = t.shape
    checks.expect(h in HW_SIZES and w in HW_SIZES, op, name,
                  f"H and W each one of {list(HW_SIZES)}", lambda: f"shape {tuple(t.shape)}",
                  ValueError)
    checks.expect((n * c) % NC_ALIGN == 0, op, name, f"N * C a multiple of {NC_ALIGN}",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def check_dropout_with_add_softmax(self, x1, alpha, prob, dim):
    _check_x(OP, "self", self)
    _check_x(OP, "x1", x1)
    _common.expect_same_shape(OP, "x1", x1, "self", self)
    checks.expect_same_dtype({"self": self, "x1": x1}, OP)
    checks.expect_same_device({"self": self, "x1": x1}, OP)
    _common.scalar_value(OP, "alpha", alpha)
    _check_prob_dim(OP, prob, dim)
    targets.expect_supported(OP, _SUPPORTED)


def check_dropout_with_add_softmax_backward(grad, mask, softmax_out, alpha, prob, dim):
    op = GRAD_OP
    _check_x(op, "softmax_out", softmax_out)
    _common.expect_dtype(op, "grad", grad, DTYPES)
    _common.expect_same_shape(op, "grad", grad, "softmax_out", softmax_out)
    checks.expect_same_dtype({"softmax_out": softmax_out, "grad": grad}, op)
    checks.expect_dtype(mask, (torch.uint8,), op, "mask")
    want = mask_length(softmax_out.numel())
    checks.expect(mask.dim() == 1 and mask.shape[0] == want, op, "mask",
                  lambda: f"a 1-D tensor of {want} elements (softmax_out's numel rounded up to "
                  f"{MASK_ALIGN}, as the forward returns it)", lambda: f"shape {tuple(mask.shape)}",
                  RuntimeError)
    checks.expect_same_device({"softmax_out": softmax_out, "grad": grad, "mask": mask}, op)
    _common.scalar_value(op, "alpha", alpha)
    _check_prob_dim(op, prob, dim)
    targets.expect_supported(op, _SUPPORTED)


def _keep_mask(shape, keep: float, device) -> torch.Tensor:
    """The flat uint8 keep-mask (1 = kept) padded with zeros to a multiple of 128."""
    numel = 1
    for s in shape:
        numel *= s
    flat = torch.zeros(mask_length(numel), dtype=torch.uint8, device=device)
    if keep >= 1.0:
        flat[:numel] = 1                 # nothing dropped: no random numbers drawn
    else:
        flat[:numel] = (torch.rand(numel, device=device) < keep).to(torch.uint8)
    return flat


def _unflatten_mask(mask: torch.Tensor, like: torch.Tensor, ct) -> torch.Tensor:
    return mask[:like.numel()].reshape(like.shape).to(ct)


def dropout_with_add_softmax_reference(self, x1, alpha, prob, dim):
    ct = _common.compute_dtype(self.dtype)
    keep = 1.0 - prob
    y = x1.to(ct) + self.to(ct) * _common.as_compute_scalar(alpha, ct)
    soft = torch.softmax(y, dim=dim).to(self.dtype)
    mask = _keep_mask(self.shape, keep, self.device)
    if keep >= 1.0:
        # nothing dropped: soft * 1 * 1.0 rounds back to soft itself, so skip the passes
        return mask, soft, soft.clone()
    scale = _common.as_compute_scalar(1.0 / keep, ct)
    out = (soft.to(ct) * _unflatten_mask(mask, soft, ct) * scale).to(self.dtype)
    return mask, soft, out


def dropout_with_add_softmax_backward_reference(grad, mask, softmax_out, alpha, prob, dim):
    ct = _common.compute_dtype(softmax_out.dtype)
    scale = _common.as_compute_scalar(1.0 / (1.0 - prob), ct)
    g = grad.to(ct) * _unflatten_mask(mask, softmax_out, ct) * scale
    d = softmax_grad(g, softmax_out.to(ct), dim) * _common.as_compute_scalar(alpha, ct)
    # The NPU returns the incoming ``grad`` itself as the second output (op-plugin
    # npu_dropout_with_add_softmax_backward: ``std::tie(result, grad)``).
    return d.to(softmax_out.dtype), grad.clone()


dropout_with_add_softmax_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_dropout_with_add_softmax,
                                    reference=dropout_with_add_softmax_reference,
                                    metadata_check=True, random=True,
                                    info=OpInfo(api="torch_npu"))
dropout_with_add_softmax_backward_op = NpuOp(
    GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_dropout_with_add_softmax_backward,
    reference=dropout_with_add_softmax_backward_reference, metadata_check=True,
    info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    _, _, alpha, prob, dim = inputs
    mask, soft, _ = output
    ctx.args = (alpha, prob, dim)
    # derivatives.yaml: output_differentiability [false, false, true].
    ctx.mark_non_differentiable(mask, soft)
    ctx.save_for_backward(mask, soft)


def _backward(ctx, grad_mask, grad_soft, grad_out):
    mask, soft = ctx.saved_tensors
    if grad_out is None:
        return None, None, None, None, None
    alpha, prob, dim = ctx.args
    d_self, _ = dropout_with_add_softmax_backward_op(grad_out, mask, soft, alpha, prob, dim)
    # y = x1 + alpha * self: x1's gradient is the same softmax gradient without alpha.  (The
    # NPU's derivatives.yaml hands x1 the backward's second output, the raw incoming grad.)
    d_x1, _ = dropout_with_add_softmax_backward_op(grad_out, mask, soft, 1.0, prob, dim)
    return d_self, d_x1, None, None, None


dropout_with_add_softmax_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_dropout_with_add_softmax(self, x1, alpha, prob, dim):
    """Fused ``x1 + alpha * self``, softmax over ``dim`` and dropout with drop rate ``prob``.

    Formula (seed 004)::

        y       = x1 + self * alpha
        softmax = exp(y_i) / sum_j exp(y_j)           (along dim)
        out     = softmax * mask * (1 / (1 - prob))   (mask: 1 = kept, drawn with P = 1 - prob)

    Parameters
    ----------
    self, x1 : Tensor
        4-D (N, C, H, W) of one shape and dtype (float16 or float32; float64 also accepted
        outside strict mode); H and W each one of 128, 256, 384, 512; N * C a multiple of 32.
    alpha : Scalar
        Multiplies ``self``.
    prob : float
        The drop rate, in [0, 1); 0 keeps everything and draws no random numbers.
    dim : int
        Must be -1.

    Returns
    -------
    (mask, softmax, out)
        ``mask``: flat uint8 keep-mask, ``numel`` rounded up to 128 elements; ``softmax`` and
        ``out``: the input shape and dtype.

    Constraints
    -----------
    Strict mode: Atlas training (910), A2 and A3.

    Notes
    -----
    The keep-mask is drawn from torch's default generator, so it differs from the NPU's but
    repeats under ``torch.manual_seed``.  Only ``out`` is differentiable (derivatives.yaml),
    through ``npu_dropout_with_add_softmax_backward``, which reuses the forward's ``mask``.
    The NPU's autograd hands ``x1`` the incoming gradient unchanged (the backward's second
    output); here ``x1`` gets its true gradient, the softmax gradient without ``alpha``.
    ``prob=1`` (keep = 0) raises NotImplementedError: the NPU's result is not documented.

    Examples
    --------
    >>> self = torch.rand(16, 2, 128, 128)
    >>> x1 = torch.rand(16, 2, 128, 128)
    >>> _, _, out = npu_anywhere.npu_dropout_with_add_softmax(self, x1, 2, 0.9, -1)
    """
    return dropout_with_add_softmax_op(self, x1, alpha, prob, dim)


def npu_dropout_with_add_softmax_backward(grad, mask, softmax_out, alpha, prob, dim):
    """Backward of :func:`npu_dropout_with_add_softmax` (DropoutWithMulsAndSoftmaxGrad).

    Formula::

        g      = grad * mask / (1 - prob)
        result = alpha * softmax_out * (g - sum(g * softmax_out, dim))

    Returns ``(result, grad)``: like the NPU, the second output is the incoming ``grad``.
    ``mask`` is the forward's first output; computed in float32, rounded once.
    """
    return dropout_with_add_softmax_backward_op(grad, mask, softmax_out, alpha, prob, dim)


TORCH_NPU_FUNCTIONS = {
    "npu_dropout_with_add_softmax": npu_dropout_with_add_softmax,
    "npu_dropout_with_add_softmax_backward": npu_dropout_with_add_softmax_backward,
}
