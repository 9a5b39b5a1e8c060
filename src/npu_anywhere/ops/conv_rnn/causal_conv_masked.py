"""torch_npu.npu_masked_causal_conv1d and npu_masked_causal_conv1d_backward.

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_masked_causal_conv1d.md; input
[S, B, H], weight [W, H] with W = 3, mask [B, S], True = keep)::

    output[s, b, h] = sum_{k=0}^{W-1} weight[k, h] * input[s - (W - 1 - k), b, h]
                      (input before s = 0 is zero: causal zero padding)
    output[s, b, :] = 0 where mask[b, s] is False

Backward (op-plugin test/test_custom_ops/test_npu_masked_causal_conv1d_backward.py golden;
derivatives.yaml ``input, weight: npu_masked_causal_conv1d_backward(grad, input, weight,
mask)``), with ``g = grad_output`` zeroed where the mask is False::

    grad_input[s]  = sum_k weight[k] * g[s + (W - 1 - k)]
    grad_weight[k] = sum_{s, b} g[s] * input[s - (W - 1 - k)]

Everything is computed in float32 (float64 kept) and rounded once, as the goldens do.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_masked_causal_conv1d"
SCHEMA = "npu_masked_causal_conv1d(Tensor input, Tensor weight, *, Tensor? mask=None) -> Tensor"
BACKWARD_OP = "npu_masked_causal_conv1d_backward"
BACKWARD_SCHEMA = ("npu_masked_causal_conv1d_backward(Tensor grad_output, Tensor input, "
                   "Tensor weight, *, Tensor? mask=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.ASCEND_950})
_DOC_DTYPES = (torch.float16, torch.bfloat16)
# float32 / float64 outside strict mode, for fp32 callers and gradcheck.
_DTYPES = _DOC_DTYPES + (torch.float32, torch.float64)
WINDOW = 3


def _check(op: str, input, weight, mask, grad=None) -> None:
    strict = targets.expect_supported(op, _SUPPORTED) is not None
    allowed = _DOC_DTYPES if strict else _DTYPES
    checks.expect_dtype(input, allowed, op, "input")
    checks.expect_dim(input, 3, op, "input")
    s, b, h = input.shape
    checks.expect_dim(weight, 2, op, "weight")
    checks.expect(tuple(weight.shape) == (WINDOW, h), op, "weight",
                  lambda: f"the shape [W, H] = ({WINDOW}, {h}) (W = 3 only)",
                  lambda: f"shape {tuple(weight.shape)}", RuntimeError)
    named = {"input": input, "weight": weight}
    if grad is not None:
        checks.expect(grad.shape == input.shape, op, "grad_output",
                      lambda: f"the shape of input {tuple(input.shape)}",
                      lambda: f"shape {tuple(grad.shape)}", RuntimeError)
        named["grad_output"] = grad
    checks.expect_same_dtype(named, op)
    if mask is not None:
        checks.expect_dtype(mask, (torch.bool,), op, "mask")
        checks.expect(tuple(mask.shape) == (b, s), op, "mask",
                      lambda: f"the shape [B, S] = ({b}, {s})",
                      lambda: f"shape {tuple(mask.shape)}", RuntimeError)
        named["mask"] = mask
    checks.expect_same_device(named, op)


def check_masked_causal_conv1d(input, weight, *, mask=None):
    _check(OP, input, weight, mask)


def check_masked_causal_conv1d_backward(grad_output, input, weight, *, mask=None):
    _check(BACKWARD_OP, input, weight, mask, grad_output)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _keep(mask, ct):
    """[S, B, 1] multiplier of the mask (None: keep all)."""
    return None if mask is None else mask.transpose(0, 1).unsqueeze(-1).to(ct)


def masked_causal_conv1d_reference(input, weight, *, mask=None):
    ct = _compute_dtype(input.dtype)
    s = input.shape[0]
    x = torch.nn.functional.pad(input.to(ct), (0, 0, 0, 0, WINDOW - 1, 0))  # [S + W - 1, B, H]
    w = weight.to(ct)
    out = sum(x[k:k + s] * w[k] for k in range(WINDOW))
    keep = _keep(mask, ct)
    if keep is not None:
        out = out * keep
    return out.to(input.dtype)


def masked_causal_conv1d_backward_reference(grad_output, input, weight, *, mask=None):
    ct = _compute_dtype(input.dtype)
    s = input.shape[0]
    g = grad_output.to(ct)
    keep = _keep(mask, ct)
    if keep is not None:
        g = g * keep
    w = weight.to(ct)
    # Output s reads input s - (W-1-k) with weight k, so input s feeds outputs s + (W-1-k).
    g_pad = torch.nn.functional.pad(g, (0, 0, 0, 0, 0, WINDOW - 1))       # [S + W - 1, B, H]
    grad_input = sum(g_pad[WINDOW - 1 - k:WINDOW - 1 - k + s] * w[k] for k in range(WINDOW))
    x_pad = torch.nn.functional.pad(input.to(ct), (0, 0, 0, 0, WINDOW - 1, 0))
    grad_weight = torch.stack([(g * x_pad[k:k + s]).sum(dim=(0, 1)) for k in range(WINDOW)])
    return grad_input.to(grad_output.dtype), grad_weight.to(grad_output.dtype)


masked_causal_conv1d_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                check=check_masked_causal_conv1d,
                                reference=masked_causal_conv1d_reference, metadata_check=True,
                                info=OpInfo(api="torch_npu"))
masked_causal_conv1d_backward_op = NpuOp(
    BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_masked_causal_conv1d_backward,
    reference=masked_causal_conv1d_backward_reference, metadata_check=True,
    info=OpInfo(api="torch_npu", backward_of=OP))


def _setup(ctx, inputs, output):
    input, weight, mask = inputs
    ctx.save_for_backward(input, weight, mask)


def _backward(ctx, grad):
    input, weight, mask = ctx.saved_tensors
    grad_input, grad_weight = masked_causal_conv1d_backward_op(grad.contiguous(), input, weight,
                                                               mask=mask)
    need = ctx.needs_input_grad
    return (grad_input if need[0] else None, grad_weight if need[1] else None, None)


masked_causal_conv1d_op.set_autograd(setup_context=_setup, backward=_backward)


def npu_masked_causal_conv1d(input, weight, *, mask=None):
    """Causal depthwise 1-D convolution (window 3) over ``[S, B, H]``, masked by ``[B, S]``.

    Formula (torch_npu-npu_masked_causal_conv1d.md)::

        output[s, b, h] = sum_{k=0}^{2} weight[k, h] * input[s - 2 + k, b, h]
                          (input[s < 0] = 0)
        output[s, b, :] = 0   where mask[b, s] is False

    Parameters
    ----------
    input : Tensor
        ``[S, B, H]``, float16 or bfloat16 (float32 / float64 accepted outside strict mode).
    weight : Tensor
        ``[W, H]`` with ``W = 3``, input's dtype.
    mask : Tensor, optional
        ``[B, S]`` bool, True where the output is kept.

    Returns
    -------
    Tensor
        ``[S, B, H]``, input's dtype; computed in float32 and rounded once.

    Constraints
    -----------
    Ascend 950 only (strict mode).  W = 3.

    Notes
    -----
    Differentiable in input and weight through ``npu_masked_causal_conv1d_backward``.

    Examples
    --------
    >>> x = torch.randn(16, 2, 8, dtype=torch.bfloat16)
    >>> w = torch.randn(3, 8, dtype=torch.bfloat16)
    >>> npu_anywhere.npu_masked_causal_conv1d(x, w, mask=torch.rand(2, 16) > 0.3).shape
    torch.Size([16, 2, 8])
    """
    return masked_causal_conv1d_op(input, weight, mask=mask)


def npu_masked_causal_conv1d_backward(grad_output, input, weight, *, mask=None):
    """Gradients of :func:`npu_masked_causal_conv1d`: ``(grad_input, grad_weight)``.

    Formula (``g = grad_output * mask[b, s]``)::

        grad_input[s]  = sum_k weight[k] * g[s + 2 - k]      (g beyond S is zero)
        grad_weight[k] = sum_{s, b} g[s] * input[s - 2 + k]

    Both have grad_output's dtype (float32 accumulation, rounded once); grad_weight is
    ``[3, H]``.
    """
    return masked_causal_conv1d_backward_op(grad_output, input, weight, mask=mask)


TORCH_NPU_FUNCTIONS = {
    OP: npu_masked_causal_conv1d,
    BACKWARD_OP: npu_masked_causal_conv1d_backward,
}
