"""torch_npu.npu_softmax_cross_entropy_with_logits and its backward (TensorFlow semantics).

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/（beta）torch_npu-npu_softmax_cross_
entropy_with_logits.md; ops-nn activation/softmax_cross_entropy_with_logits/docs/
aclnnSoftmaxCrossEntropyWithLogits.md, whose golden is TensorFlow's op)::

    loss[n]        = -sum_c labels[n, c] * log_softmax(features[n])[c]
    backprop[n, c] = softmax(features[n])[c] - labels[n, c]

The backward is op-plugin's (op_plugin/ops/aclops/SoftmaxCrossEntropyWithLogitsKernelNpu.cpp):
``backprop * grad[:, None]``, TensorFlow's gradient, which is the exact gradient of ``loss`` only
when each row of ``labels`` sums to 1 (the exact one is ``softmax * sum(labels) - labels``).
Computed in float32 (float64 kept), rounded once to the input dtype; the loss has ``features``'
dtype, as the kernel allocates it (op-plugin's meta function says float32).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common

OP = "npu_softmax_cross_entropy_with_logits"
SCHEMA = "npu_softmax_cross_entropy_with_logits(Tensor self, Tensor labels) -> Tensor"
BACKWARD_OP = "npu_softmax_cross_entropy_with_logits_backward"
BACKWARD_SCHEMA = ("npu_softmax_cross_entropy_with_logits_backward(Tensor grad, Tensor self, "
                   "Tensor labels) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE,
                        Product.ASCEND_950})
_NO_BF16 = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE})


def _check_pair(op: str, features, labels) -> None:
    _common.expect_float(op, "self", features)
    _common.expect_dim(op, "self", features, 2)
    _common.expect_shape(op, "labels", labels, features.shape, "of self")
    checks.expect_same_dtype({"self": features, "labels": labels}, op)
    _common.expect_devices(op, {"self": features, "labels": labels})
    product = targets.expect_supported(op, _SUPPORTED)
    if product in _NO_BF16:
        checks.expect(features.dtype != torch.bfloat16, op, "self",
                      f"a dtype other than bfloat16 on {product.value}", "bfloat16", TypeError)


def check_softmax_cross_entropy_with_logits(self, labels):
    _check_pair(OP, self, labels)


def check_softmax_cross_entropy_with_logits_backward(grad, self, labels):
    _check_pair(BACKWARD_OP, self, labels)
    _common.expect_float(BACKWARD_OP, "grad", grad)
    _common.expect_shape(BACKWARD_OP, "grad", grad, self.shape[:1], "[N] of self")
    checks.expect_same_dtype({"self": self, "grad": grad}, BACKWARD_OP)
    _common.expect_devices(BACKWARD_OP, {"self": self, "grad": grad})


def _log_softmax(features):
    return torch.log_softmax(features.to(_common.compute_dtype(features.dtype)), dim=-1)


def softmax_cross_entropy_with_logits_reference(self, labels):
    log_p = _log_softmax(self)
    return (-(labels.to(log_p.dtype) * log_p).sum(dim=-1)).to(self.dtype)


def softmax_cross_entropy_with_logits_backward_reference(grad, self, labels):
    log_p = _log_softmax(self)
    backprop = log_p.exp() - labels.to(log_p.dtype)
    return (backprop * grad.to(log_p.dtype).unsqueeze(-1)).to(self.dtype)


softmax_ce_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                      check=check_softmax_cross_entropy_with_logits,
                      reference=softmax_cross_entropy_with_logits_reference, metadata_check=True,
                      info=OpInfo(api="torch_npu"))
softmax_ce_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_softmax_cross_entropy_with_logits_backward,
                               reference=softmax_cross_entropy_with_logits_backward_reference,
                               metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    features, labels = inputs
    ctx.save_for_backward(features, labels)


def _backward(ctx, grad):
    features, labels = ctx.saved_tensors
    # derivatives.yaml differentiates self only; labels get no gradient.
    return softmax_ce_backward_op(grad, features, labels), None


softmax_ce_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_softmax_cross_entropy_with_logits(self=None, labels=None, **kwargs):
    """Softmax cross-entropy of each row of logits against a row of label weights (TF's op).

    Formula (seed 004)::

        loss[n] = -sum_c labels[n, c] * log(softmax(features[n])[c])

    Parameters
    ----------
    self : Tensor
        ``[N, C]`` logits (``features=``, the doc's name, is accepted too), float16, bfloat16 or
        float32 (float64 outside strict mode); non-contiguous and empty tensors accepted.
    labels : Tensor
        ``self``'s shape and dtype (probabilities; rows need not sum to 1).

    Returns
    -------
    Tensor
        ``[N]`` in ``self``'s dtype, computed in float32 and rounded once.

    Constraints
    -----------
    Strict mode: A2, A3, Atlas training / inference (no bfloat16 on those two) and the 950.

    Notes
    -----
    The gradient w.r.t. ``self`` is TensorFlow's and op-plugin's
    ``(softmax(self) - labels) * grad[:, None]`` (:func:`npu_softmax_cross_entropy_with_logits_
    backward`), exact only when rows of ``labels`` sum to 1; ``labels`` gets no gradient.
    op-plugin's meta function gives the loss float32; its kernel gives ``self``'s dtype, kept here.

    Examples
    --------
    >>> npu_anywhere.npu_softmax_cross_entropy_with_logits(torch.tensor([[1., 2., 3., 4.]]),
    ...                                                    torch.tensor([[1., 2., 3., 4.]]))
    tensor([14.4019])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "features", kwargs)
    return softmax_ce_op(self, labels)


def npu_softmax_cross_entropy_with_logits_backward(grad=None, self=None, labels=None, **kwargs):
    """Gradient of :func:`npu_softmax_cross_entropy_with_logits` w.r.t. ``self`` (TF's).

    Formula (op-plugin SoftmaxCrossEntropyWithLogitsKernelNpu.cpp)::

        result = (softmax(self) - labels) * grad[:, None]

    ``grad`` is ``[N]``; the result has ``self``'s shape and dtype (float32 math, one rounding).
    """
    if kwargs:
        self = accept_alias(BACKWARD_OP, "self", self, "features", kwargs)
    return softmax_ce_backward_op(grad, self, labels)


TORCH_NPU_FUNCTIONS = {
    OP: npu_softmax_cross_entropy_with_logits,
    BACKWARD_OP: npu_softmax_cross_entropy_with_logits_backward,
}
