"""torch_npu.npu_silu, npu_silu_ (in place) and npu_silu_backward.

Formula (seed 004, ``npu_silu``): ``x * sigmoid(x)``.

op-plugin's yaml lists three ops for the name: ``npu_silu``, the in-place ``npu_silu_`` and
``npu_silu_backward(grad_output, x0, x1)`` (x0: the forward input, x1: its result, as
derivatives.yaml passes ``npu_silu_backward(grad, self, result)``).

Precision: float16 computed in float32 and rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import compute_dtype, silu, silu_derivative

OP = "npu_silu"
SCHEMA = "npu_silu(Tensor self) -> Tensor"
INPLACE_PUBLIC_OP = "npu_silu_"
INPLACE_PUBLIC_SCHEMA = "npu_silu_(Tensor(a!) self) -> Tensor(a!)"
INPLACE_OP = "_npu_silu_inplace"
INPLACE_SCHEMA = "_npu_silu_inplace(Tensor(a!) self) -> ()"
BACKWARD_OP = "npu_silu_backward"
BACKWARD_SCHEMA = "npu_silu_backward(Tensor grad_output, Tensor x0, Tensor x1) -> Tensor"

# Seed 004 / op-plugin doc ((beta)torch_npu-npu_silu.md): float16 and float32 on A3, A2, Atlas
# training and Atlas inference; the 950 from hicann/ops-nn activation/swish/docs/aclnnSilu.md and
# activation/silu_grad/docs/aclnnSiluBackward.md.
DTYPES = _common.HALF_AND_FLOAT
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE,
                        Product.ASCEND_950})


def _check_self(op: str, self: torch.Tensor) -> None:
    _common.expect_float(op, "self", self, DTYPES)
    targets.expect_supported(op, _SUPPORTED)


def check_silu(self):
    _check_self(OP, self)


def check_silu_inplace(self):
    _check_self(INPLACE_PUBLIC_OP, self)


def check_silu_backward(grad_output, x0, x1):
    op = BACKWARD_OP
    named = {"grad_output": grad_output, "x0": x0, "x1": x1}
    for name, t in named.items():
        _common.expect_float(op, name, t, DTYPES)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    _common.expect_same_shape(op, "x0", x0, "grad_output", grad_output)
    _common.expect_same_shape(op, "x1", x1, "grad_output", grad_output)
    targets.expect_supported(op, _SUPPORTED)


def silu_reference(self):
    return silu(self.to(compute_dtype(self.dtype))).to(self.dtype)


def silu_backward_reference(grad_output, x0, x1):
    """grad_output * sigmoid(x0) * (1 + x0 * (1 - sigmoid(x0))); x1 is not read (see below)."""
    ct = compute_dtype(grad_output.dtype)
    return (grad_output.to(ct) * silu_derivative(x0.to(ct))).to(grad_output.dtype)


def silu_inplace_reference(self):
    self.copy_(silu_reference(self))


def _inplace_fake(self):
    return None


silu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_silu, reference=silu_reference,
                metadata_check=True, info=OpInfo(api="torch_npu"))
silu_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_silu_backward,
                         reference=silu_backward_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))
silu_inplace_op = NpuOp(INPLACE_SCHEMA, namespace=INTERNAL_NS, check=check_silu_inplace,
                        reference=silu_inplace_reference, fake=_inplace_fake,
                        metadata_check=True, info=OpInfo(api="internal", public=False))
silu_inplace_op.forbid_autograd(
    "derivatives.yaml lists a backward for npu_silu only; use npu_silu for training",
    public_name=INPLACE_PUBLIC_OP)


def _silu_inplace_composite(self):
    silu_inplace_op(self)
    return self


silu_inplace_public_op = NpuOp(INPLACE_PUBLIC_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_silu_inplace, composite=_silu_inplace_composite,
                               info=OpInfo(api="torch_npu"))
silu_inplace_public_op.autograd = "no (raises)"


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _backward(ctx, grad):
    x, result = ctx.saved_tensors
    return silu_backward_op(grad, x, result)


silu_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_silu(self=None, **kwargs):
    """SiLU (Swish), elementwise: ``x * sigmoid(x)``.

    Parameters
    ----------
    self : Tensor
        float16 or float32 (float64 accepted outside strict mode).  ``input=`` is accepted as an
        alias.

    Returns
    -------
    Tensor of the same shape and dtype, computed in float32 and rounded once.

    Constraints
    -----------
    Seed 004 documents float16 and float32 only, so bfloat16 raises TypeError.  Strict mode: A3,
    A2, Atlas training (910) and Atlas inference (310P), and the 950 (ops-nn aclnnSilu.md,
    aclnnSiluBackward.md).

    Notes
    -----
    Differentiable through ``npu_silu_backward(grad, self, result)`` (derivatives.yaml).  The
    op-plugin doc marks the API for deprecation in favour of ``torch.nn.functional.silu``.

    Examples
    --------
    >>> a = torch.rand(2, 8)
    >>> npu_anywhere.npu_silu(a).shape
    torch.Size([2, 8])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return silu_op(self)


def npu_silu_(self=None, **kwargs):
    """In-place :func:`npu_silu`: writes ``self * sigmoid(self)`` into ``self`` and returns it.

    Same dtypes and products as :func:`npu_silu`.  No backward (derivatives.yaml lists none for
    the in-place op): calling it on a tensor that requires grad raises RuntimeError.  When the
    call raises, ``self`` is left untouched.
    """
    if kwargs:
        self = accept_alias(INPLACE_PUBLIC_OP, "self", self, "input", kwargs)
    return silu_inplace_public_op(self)


def npu_silu_backward(grad_output, x0, x1):
    """Gradient of :func:`npu_silu`: ``grad_output * sigmoid(x0) * (1 + x0 * (1 - sigmoid(x0)))``.

    ``x0`` is the forward input, ``x1`` the forward result (op-plugin's SwishGrad kernel takes
    both); all three have one shape and dtype, which the result has too.

    Notes
    -----
    ``x1`` is checked but not read: the derivative is computed from ``x0``, as the dynamic-shape
    SwishGrad kernel does (``sigmoid * (1 + scale * x * (1 - sigmoid))``).  The older static
    kernel used ``x1 / x0``, which differs only when ``x1`` is not ``silu(x0)`` (and at x0 = 0,
    where it divides by zero).
    """
    return silu_backward_op(grad_output, x0, x1)


# -- fast providers --------------------------------------------------------------------------

compiled.register(silu_op, key=lambda self: (self.dtype, self.device.type))
compiled.register(silu_inplace_op, key=lambda self: (self.dtype, self.device.type))
compiled.register(silu_backward_op,
                  key=lambda grad_output, x0, x1: (grad_output.dtype, grad_output.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_silu": npu_silu,
    "npu_silu_": npu_silu_,
    "npu_silu_backward": npu_silu_backward,
}
