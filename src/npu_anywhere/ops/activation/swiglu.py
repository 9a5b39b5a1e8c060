"""torch_npu.npu_swiglu and npu_swiglu_backward.

Formula (seed 004, ``npu_swiglu``)::

    A, B = chunk(x, 2, dim)            # A: first (left) half, B: second half
    out  = swish(A) * B = A * sigmoid(A) * B

Precision: float16/bfloat16 inputs are computed in float32 and rounded once to the input dtype
(op-plugin test/test_custom_ops/test_npu_swi_glu.py: ``silu(A.float()) * B.float()`` then cast).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import swiglu_fp32, swiglu_grad_fp32

OP = "npu_swiglu"
SCHEMA = "npu_swiglu(Tensor self, int dim=-1) -> Tensor"
BACKWARD_OP = "npu_swiglu_backward"
BACKWARD_SCHEMA = "npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor"

# torch_npu doc: Atlas A2; aclnnSwiGlu (hicann/ops-nn activation/swi_glu/docs/aclnnSwiGlu.md):
# also A3, Atlas inference (310P) and 950.
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})
_NO_EMPTY = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE})


def _check_input(op: str, x: torch.Tensor, dim: int) -> int:
    _common.expect_float(op, "self", x)
    _common.expect_rank(op, "self", x, 1, 8)
    d = _common.expect_split_dim(op, "self", x, dim)
    product = targets.expect_supported(op, _SUPPORTED)
    # seed 004 (A2): no empty tensors; aclnnSwiGlu: none on 310P, and no bfloat16 there.
    _common.expect_nonempty_on(op, "self", x, product, _NO_EMPTY)
    _common.expect_no_bf16_on(op, "self", x, product, {Product.ATLAS_INFERENCE})
    return d


def check_swiglu(self, dim=-1):
    _check_input(OP, self, dim)


def check_swiglu_backward(grad_output, self, dim=-1):
    op = BACKWARD_OP
    _common.expect_float(op, "grad_output", grad_output)
    d = _check_input(op, self, dim)
    checks.expect_same_dtype({"self": self, "grad_output": grad_output}, op)
    checks.expect_same_device({"self": self, "grad_output": grad_output}, op)
    _common.expect_halved(op, "grad_output", grad_output, "self", self, d)


def swiglu_reference(self, dim=-1):
    return swiglu_fp32(self, dim, activate_left=True).to(self.dtype)


def swiglu_backward_reference(grad_output, self, dim=-1):
    """d A = g * B * silu'(A);  d B = g * silu(A);  concatenated along dim."""
    return swiglu_grad_fp32(grad_output, self, dim, activate_left=True).to(self.dtype)


swiglu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_swiglu,
                  reference=swiglu_reference, metadata_check=True,
                  info=OpInfo(api="torch_npu"))
swiglu_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                           check=check_swiglu_backward, reference=swiglu_backward_reference,
                           metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, dim = inputs
    ctx.dim = dim
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return swiglu_backward_op(grad, x, ctx.dim), None


swiglu_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_swiglu(self=None, dim=-1, **kwargs):
    """SwiGLU: ``swish(A) * B`` where ``A``, ``B`` are the two halves of ``self`` along ``dim``.

    Formula (seed 004)::

        A, B = torch.chunk(self, 2, dim)          # A: first half, B: second half
        out  = A * sigmoid(A) * B

    Parameters
    ----------
    self : Tensor
        1-D to 8-D, float16, bfloat16 or float32 (float64 also accepted outside strict mode);
        its size along ``dim`` must be even.  ``input=`` (the op-plugin doc's name) is accepted
        as an alias.
    dim : int, default -1
        The axis cut in two, in ``[-self.dim(), self.dim() - 1]``.

    Returns
    -------
    Tensor
        ``self``'s shape with ``dim`` halved, ``self``'s dtype; computed in float32 and rounded
        once (float64 stays float64).

    Constraints
    -----------
    Strict mode: the products are A2 (seed 004), A3, Atlas inference (310P) and 950
    (aclnnSwiGlu); empty tensors are rejected on A2/A3 (seed 004: "不支持空Tensor") and 310P,
    accepted on the 950; no bfloat16 on 310P.  aclnnSwiGlu also requires 64-byte-aligned shapes
    on 310P; that rule is not checked (its exact meaning is not documented).

    Notes
    -----
    The first half is the gate (SiLU is applied to it), as seed 004's ``swish(A) * B`` and the
    op-plugin golden (test/test_custom_ops/test_npu_swi_glu.py: ``silu(chunk[0]) * chunk[1]``)
    say; in the ``activate_left`` terms of npu_swiglu_quant this is ``activate_left=True``.
    Differentiable through ``npu_swiglu_backward`` (op-plugin derivatives.yaml).  The NPU does
    not accept non-contiguous input; we do.

    Examples
    --------
    >>> x = torch.randn(2, 32, 6, 6)
    >>> npu_anywhere.npu_swiglu(x, dim=-1).shape
    torch.Size([2, 32, 6, 3])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return swiglu_op(self, dim)


def npu_swiglu_backward(grad_output, self=None, dim=-1, **kwargs):
    """Gradient of :func:`npu_swiglu` w.r.t. its input.

    Formula (``s = sigmoid(A)``)::

        d A = grad_output * B * s * (1 + A * (1 - s))
        d B = grad_output * A * s
        result = cat((d A, d B), dim)

    ``grad_output`` has ``self``'s shape with ``dim`` halved and ``self``'s dtype; the result
    has ``self``'s shape and dtype, computed in float32 and rounded once (op-plugin golden
    test/test_custom_ops/test_npu_swi_glu_backward.py).
    """
    if kwargs:
        self = accept_alias(BACKWARD_OP, "self", self, "input", kwargs)
    return swiglu_backward_op(grad_output, self, dim)


# -- fast providers --------------------------------------------------------------------------

# The size of the cut axis is part of the key: it is fixed per model, so each specialization
# keeps it static (the halves' offsets are constants in the fused loop) while the token count
# turns dynamic on its first change.
compiled.register(swiglu_op, key=lambda self, dim=-1:
                  (dim, self.shape[dim], self.dtype, self.device.type))
compiled.register(swiglu_backward_op, key=lambda grad_output, self, dim=-1:
                  (dim, self.shape[dim], self.dtype, self.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_swiglu": npu_swiglu,
    "npu_swiglu_backward": npu_swiglu_backward,
}
