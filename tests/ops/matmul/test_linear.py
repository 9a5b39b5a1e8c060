"""npu_linear / npu_linear_backward against ``input @ weight^T + bias`` in float64."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2 ** -10),
                                       (torch.bfloat16, 2 ** -7)])
def test_forward_matches_formula(dtype, tol):
    x, w, b = (torch.randn(5, 33).to(dtype), torch.randn(7, 33).to(dtype),
               torch.randn(7).to(dtype))
    out = npu_anywhere.npu_linear(x, w, b)
    golden = x.double() @ w.double().t() + b.double()
    assert out.dtype == dtype and out.shape == (5, 7)
    torch.testing.assert_close(out.double(), golden, rtol=2 * tol, atol=2 * tol * 6)


def test_noncontiguous_and_seed_shapes():
    x = torch.rand(16, 2).t()
    w = torch.rand(4, 32)[:, ::2]
    out = npu_anywhere.npu_linear(x, w)
    torch.testing.assert_close(out.double(), x.double() @ w.double().t(), rtol=1e-5, atol=1e-5)


def test_backward_formula_and_gradcheck():
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(npu_anywhere.npu_linear, (x, w, b))
    g = torch.randn(3, 4, dtype=torch.float64)
    gi, gw = npu_anywhere.npu_linear_backward(g, x.detach(), w.detach())
    torch.testing.assert_close(gi, g @ w.detach())
    torch.testing.assert_close(gw, g.t() @ x.detach())
    npu_anywhere.npu_linear(x, w, b).backward(g)
    torch.testing.assert_close(b.grad, g.sum(0))
