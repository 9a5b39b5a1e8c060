"""npu_softmax_cross_entropy_with_logits (+ backward) against float64 goldens.

Golden: TensorFlow's SoftmaxCrossEntropyWithLogits as the docs state it, per row in Python
floats: ``loss = -sum_c y_c * log(softmax(x)_c)``, ``backprop = softmax(x) - y``.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def golden(x, y):
    loss, backprop = [], []
    for xr, yr in zip(x.double().tolist(), y.double().tolist()):
        m = max(xr)
        lse = m + math.log(sum(math.exp(v - m) for v in xr))
        loss.append(-sum(b * (a - lse) for a, b in zip(xr, yr)))
        backprop.append([math.exp(a - lse) - b for a, b in zip(xr, yr)])
    return torch.tensor(loss, dtype=torch.float64), torch.tensor(backprop, dtype=torch.float64)


def test_op_plugin_value():
    x = torch.tensor([[1., 2., 3., 4.]])
    out = na.npu_softmax_cross_entropy_with_logits(x, x.clone())
    assert_close_to_golden(out, torch.tensor([14.4019], dtype=torch.float64), rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_forward_and_backward_against_golden(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 11, generator=gen) * 2).to(dtype)
    y = torch.rand(5, 11, generator=gen).to(dtype)          # rows need not sum to 1
    grad = torch.randn(5, generator=gen).to(dtype)
    want_loss, want_backprop = golden(x, y)
    loss = na.npu_softmax_cross_entropy_with_logits(x, y)
    dx = na.npu_softmax_cross_entropy_with_logits_backward(grad, x, y)
    assert loss.dtype == dx.dtype == dtype and loss.shape == (5,) and dx.shape == x.shape
    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert_close_to_golden(loss, want_loss, rtol=rtol, atol=rtol)
    assert_close_to_golden(dx, want_backprop * grad.double().unsqueeze(-1), rtol=rtol, atol=rtol)


def test_autograd_uses_tf_backprop_and_non_contiguous_inputs():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 4, generator=gen, dtype=torch.float64).t().requires_grad_()
    y = torch.rand(4, 7, generator=gen, dtype=torch.float64)
    y = y / y.sum(-1, keepdim=True)                          # exact gradient when rows sum to 1
    torch.autograd.gradcheck(na.npu_softmax_cross_entropy_with_logits, (x, y))
    y2 = torch.rand(4, 7, generator=gen, dtype=torch.float64)
    loss = na.npu_softmax_cross_entropy_with_logits(x, y2)
    (dx,) = torch.autograd.grad(loss.sum(), x)
    assert_close_to_golden(dx, golden(x.detach(), y2)[1])    # softmax - y, as the NPU


def test_features_alias_and_errors():
    x = torch.randn(2, 3)
    assert torch.equal(na.npu_softmax_cross_entropy_with_logits(features=x, labels=x),
                       na.npu_softmax_cross_entropy_with_logits(x, x))
    with pytest.raises(RuntimeError, match="expected labels the shape"):
        torch.ops.npu.npu_softmax_cross_entropy_with_logits(x, torch.rand(2, 4))
