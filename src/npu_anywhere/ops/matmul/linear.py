"""torch_npu.npu_linear and npu_linear_backward.

Formula (seed 004: "将矩阵a乘以矩阵b"; its example multiplies a (2, 16) input by a (4, 16)
weight into (2, 4))::

    out = input @ weight^T + bias

Backward (op-plugin ``derivatives.yaml``: ``input, weight: npu_linear_backward(grad, input,
weight)``, ``bias: grad``)::

    grad_input = grad @ weight;  grad_weight = grad^T @ input;  grad_bias = sum_rows(grad)

Precision: float16 / bfloat16 operands are multiplied in float32 (the cube unit accumulates in
float32), the bias added in float32, and the result rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_linear"
SCHEMA = "npu_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
GRAD_OP = "npu_linear_backward"
GRAD_SCHEMA = ("npu_linear_backward(Tensor grad, Tensor input, Tensor weight) "
               "-> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})
_FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_DOC_INT = (torch.int8, torch.int32)


def _check_operand(op: str, name: str, t: torch.Tensor) -> None:
    checks.expect(t.dtype not in _DOC_INT, op, name,
                  "a floating tensor (int8 / int32 inputs are listed, but the doc gives no "
                  "output dtype for them; not implemented)", lambda: f"dtype {t.dtype}",
                  NotImplementedError)
    checks.expect_dtype(t, _FLOAT, op, name)
    checks.expect_dim(t, 2, op, name)


def check_linear(input, weight, bias=None):
    _check_operand(OP, "input", input)
    _check_operand(OP, "weight", weight)
    named = {"input": input, "weight": weight}
    checks.expect(weight.shape[1] == input.shape[1], OP, "weight",
                  lambda: f"shape (n, {input.shape[1]}) (the last dim of input)",
                  lambda: tuple(weight.shape), RuntimeError)
    if bias is not None:
        checks.expect(tuple(bias.shape) == (weight.shape[0],), OP, "bias",
                      lambda: f"shape ({weight.shape[0]},)", lambda: tuple(bias.shape),
                      ValueError)
        named["bias"] = bias
    checks.expect_same_dtype(named, OP)
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, _SUPPORTED)


def check_linear_backward(grad, input, weight):
    for name, t in (("grad", grad), ("input", input), ("weight", weight)):
        _check_operand(GRAD_OP, name, t)
    checks.expect(grad.shape == (input.shape[0], weight.shape[0])
                  and input.shape[1] == weight.shape[1], GRAD_OP, "grad",
                  lambda: f"shape ({input.shape[0]}, {weight.shape[0]}) with input and weight "
                  "sharing their last dim",
                  lambda: f"{tuple(grad.shape)}, {tuple(input.shape)}, {tuple(weight.shape)}",
                  RuntimeError)
    named = {"grad": grad, "input": input, "weight": weight}
    checks.expect_same_dtype(named, GRAD_OP)
    checks.expect_same_device(named, GRAD_OP)
    targets.expect_supported(GRAD_OP, _SUPPORTED)


def _ct(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def linear_reference(input, weight, bias=None):
    ct = _ct(input.dtype)
    y = input.to(ct) @ weight.to(ct).t()
    if bias is not None:
        y = y + bias.to(ct)
    return y.to(input.dtype)


def linear_backward_reference(grad, input, weight):
    ct = _ct(grad.dtype)
    g = grad.to(ct)
    grad_input = (g @ weight.to(ct)).to(input.dtype)
    grad_weight = (g.t() @ input.to(ct)).to(weight.dtype)
    return grad_input, grad_weight


linear_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_linear, reference=linear_reference,
                  metadata_check=True, info=OpInfo(api="torch_npu"))
linear_backward_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_linear_backward,
                           reference=linear_backward_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, weight, bias = inputs
    ctx.has_bias = bias is not None
    ctx.save_for_backward(input, weight)


def _backward(ctx, grad):
    input, weight = ctx.saved_tensors
    grad_input, grad_weight = linear_backward_op(grad.contiguous(), input, weight)
    grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return grad_input, grad_weight, grad_bias


linear_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_linear(input, weight, bias=None):
    """Fully connected layer: ``input @ weight^T + bias``.

    Parameters
    ----------
    input : Tensor
        2-D ``(m, k)``: float32 or float16 (bfloat16 / float64 also accepted).
    weight : Tensor
        2-D ``(n, k)``, input's dtype.
    bias : Tensor, optional
        1-D ``(n,)``, input's dtype.

    Returns
    -------
    Tensor ``(m, n)`` of input's dtype.

    Notes
    -----
    float16 / bfloat16 are multiplied in float32 and rounded once.  The doc lists int8 / int32
    inputs without saying the output dtype: they raise NotImplementedError.  Differentiable
    through ``npu_linear_backward`` (derivatives.yaml).

    Examples
    --------
    >>> x, w, b = torch.rand(2, 16), torch.rand(4, 16), torch.rand(4)
    >>> npu_anywhere.npu_linear(x, w, b).shape
    torch.Size([2, 4])
    """
    return linear_op(input, weight, bias)


def npu_linear_backward(grad, input, weight):
    """Gradients of :func:`npu_linear`: ``(grad @ weight, grad^T @ input)``."""
    return linear_backward_op(grad, input, weight)


TORCH_NPU_FUNCTIONS = {"npu_linear": npu_linear, "npu_linear_backward": npu_linear_backward}
