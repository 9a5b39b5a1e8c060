"""torch_npu.npu_mish and npu_mish_backward.

Formula (seed 004, ``npu_mish``)::

    mish(x) = x * tanh(softplus(x)),   softplus(x) = ln(1 + e^x)

Precision: float16 computed in float32 and rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import compute_dtype

OP = "npu_mish"
SCHEMA = "npu_mish(Tensor self) -> Tensor"
BACKWARD_OP = "npu_mish_backward"
BACKWARD_SCHEMA = "npu_mish_backward(Tensor grad, Tensor input) -> Tensor"

DTYPES = _common.HALF_AND_FLOAT
# op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_mish.md: A3, A2, Atlas training,
# Atlas inference; the 950 from hicann/ops-nn activation/mish/docs/aclnnMish&aclnnInplaceMish.md
# and activation/mish_grad/docs/aclnnMishBackward.md.
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE,
                        Product.ASCEND_950})


def check_mish(self):
    _common.expect_float(OP, "self", self, DTYPES)
    targets.expect_supported(OP, _SUPPORTED)


def check_mish_backward(grad, input):
    op = BACKWARD_OP
    _common.expect_float(op, "grad", grad, DTYPES)
    _common.expect_float(op, "input", input, DTYPES)
    named = {"input": input, "grad": grad}
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    _common.expect_same_shape(op, "grad", grad, "input", input)
    targets.expect_supported(op, _SUPPORTED)


def _softplus(x: torch.Tensor) -> torch.Tensor:
    # ln(1 + e^x), without overflow of e^x for large x
    return torch.nn.functional.softplus(x)


def mish_reference(self):
    x = self.to(compute_dtype(self.dtype))
    return (x * torch.tanh(_softplus(x))).to(self.dtype)


def mish_backward_reference(grad, input):
    """grad * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)),  sp = softplus(x)."""
    ct = compute_dtype(input.dtype)
    x = input.to(ct)
    t = torch.tanh(_softplus(x))
    return (grad.to(ct) * (t + x * torch.sigmoid(x) * (1 - t * t))).to(input.dtype)


mish_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mish, reference=mish_reference,
                metadata_check=True, info=OpInfo(api="torch_npu"))
mish_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_mish_backward,
                         reference=mish_backward_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return mish_backward_op(grad, x)


mish_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_mish(self=None, **kwargs):
    """Mish, elementwise: ``x * tanh(softplus(x))`` with ``softplus(x) = ln(1 + e^x)``.

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
    Seed 004 documents float16 and float32 only, so bfloat16 raises TypeError.  Strict mode:
    A3, A2, Atlas training (910), Atlas inference (310P) (op-plugin doc) and the 950 (ops-nn
    aclnnMish&aclnnInplaceMish.md, aclnnMishBackward.md).

    Notes
    -----
    Seed 004 gives no prototype; the schema is op-plugin's ``npu_mish(Tensor self)``.
    Differentiable through ``npu_mish_backward`` (derivatives.yaml).  The op-plugin doc marks
    the API for deprecation in favour of ``torch.nn.functional.mish``.

    Examples
    --------
    >>> x = torch.rand(10, 30, 10)
    >>> npu_anywhere.npu_mish(x).shape
    torch.Size([10, 30, 10])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return mish_op(self)


def npu_mish_backward(grad, input):
    """Gradient of :func:`npu_mish`::

        grad * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)),   sp = softplus(x), x = input

    ``grad`` and ``input`` share shape and dtype (float16/float32), which the result has.
    """
    return mish_backward_op(grad, input)


compiled.register(mish_op, key=lambda self: (self.dtype, self.device.type))
compiled.register(mish_backward_op, key=lambda grad, input: (input.dtype, input.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_mish": npu_mish,
    "npu_mish_backward": npu_mish_backward,
}
