"""Tests for npu_silu / npu_silu_ / npu_silu_backward and npu_mish / npu_mish_backward.

Spec (seed 004): npu_silu computes ``x * sigmoid(x)``; npu_mish ``x * tanh(softplus(x))`` with
``softplus(x) = ln(1 + e^x)``.  Goldens evaluate those lines in float64; gradients of the
goldens come from torch.autograd.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.float64]


def silu64(x):
    x = x.double()
    return x * (1.0 / (1.0 + torch.exp(-x)))


def mish64(x):
    x = x.double()
    return x * torch.tanh(torch.log(1 + torch.exp(x)))


def grad_of(f, grad, x):
    xs = x.detach().double().requires_grad_(True)
    (g,) = torch.autograd.grad(f(xs), xs, grad.double())
    return g


def make(shape, dtype, seed=0, scale=4.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# -- silu --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 8), (3, 1, 5), (7,), ()])
def test_silu_matches_doc(dtype, shape):
    x = make(shape, dtype, seed=len(shape))
    before = x.clone()
    out = na.npu_silu(x)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_golden(out, silu64(x), dtype=dtype)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_inplace_writes_self_and_returns_it(dtype):
    x = make((4, 6), dtype, seed=1)
    want = silu64(x)
    out = na.npu_silu_(x)
    assert out is x
    assert_close_to_golden(x, want, dtype=dtype)


def test_silu_inplace_on_view_and_op_namespace():
    base = make((4, 6), torch.float32, seed=2)
    keep = base.clone()
    view = base[:, ::2]
    torch.ops.npu.npu_silu_(view)
    assert_close_to_golden(base[:, ::2], silu64(keep[:, ::2]))
    assert torch.equal(base[:, 1::2], keep[:, 1::2])     # only the view was written


def test_silu_inplace_refuses_grad_and_bad_dtype_without_writing():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_silu_: expected inputs that do not require"):
        na.npu_silu_(x.clone())
    y = torch.randn(3).bfloat16()
    before = y.clone()
    with pytest.raises(TypeError, match="npu_silu_: expected self dtype"):
        na.npu_silu_(y)
    assert torch.equal(y, before)


def test_silu_gradcheck_and_backward_op():
    x = make((3, 4), torch.float64, seed=3).requires_grad_(True)
    assert torch.autograd.gradcheck(na.npu_silu, (x,))
    for dtype in DTYPES:
        x = make((5, 6), dtype, seed=4)
        g = make((5, 6), dtype, seed=5, scale=1.0)
        got = na.npu_silu_backward(g, x, na.npu_silu(x))
        assert got.dtype == dtype
        assert_close_to_golden(got, grad_of(silu64, g, x), dtype=dtype)


def test_silu_backward_reads_x0_not_x1():
    x = make((4,), torch.float32, seed=6)
    g = torch.ones(4)
    a = na.npu_silu_backward(g, x, na.npu_silu(x))
    b = na.npu_silu_backward(g, x, torch.zeros(4))
    assert torch.equal(a, b)
    # at x0 = 0 the derivative is 0.5 (no 0/0)
    assert na.npu_silu_backward(torch.ones(1), torch.zeros(1), torch.zeros(1)).item() == 0.5


def test_silu_extremes():
    x = torch.tensor([-1000.0, 1000.0, float("nan"), 0.0])
    out = na.npu_silu(x)
    assert out[0] == 0 and out[1] == 1000 and torch.isnan(out[2]) and out[3] == 0


# -- mish --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(10, 30, 10), (3, 7), (1,)])
def test_mish_matches_doc(dtype, shape):
    x = make(shape, dtype, seed=len(shape) + 10, scale=3.0)
    before = x.clone()
    out = na.npu_mish(x)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_golden(out, mish64(x), dtype=dtype)
    assert torch.equal(x, before)


def test_mish_large_inputs_do_not_overflow():
    x = torch.tensor([100.0, -100.0, 30.0])
    out = na.npu_mish(x)
    assert torch.isfinite(out).all()
    assert out[0] == 100.0 and abs(float(out[1])) < 1e-30


def test_mish_gradcheck_and_backward_op():
    x = make((3, 4), torch.float64, seed=12, scale=2.0).requires_grad_(True)
    assert torch.autograd.gradcheck(na.npu_mish, (x,))
    for dtype in DTYPES:
        x = make((5, 6), dtype, seed=13, scale=2.0)
        g = make((5, 6), dtype, seed=14, scale=1.0)
        got = na.npu_mish_backward(g, x)
        assert got.dtype == dtype and got.shape == x.shape
        assert_close_to_golden(got, grad_of(mish64, g, x), dtype=dtype)


def test_noncontiguous():
    x = make((6, 8), torch.float32, seed=15).t()
    assert_close_to_golden(na.npu_silu(x), silu64(x))
    assert_close_to_golden(na.npu_mish(x), mish64(x))


# -- errors and strict mode ------------------------------------------------------------------

@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_silu(torch.randn(3).bfloat16()), TypeError, "npu_silu: expected self dtype"),
    (lambda: na.npu_mish(torch.randn(3).bfloat16()), TypeError, "npu_mish: expected self dtype"),
    (lambda: na.npu_mish(torch.ones(3, dtype=torch.int64)), TypeError,
     "npu_mish: expected self dtype"),
    (lambda: na.npu_silu_backward(torch.randn(3), torch.randn(3), torch.randn(4)), RuntimeError,
     "npu_silu_backward: expected x1 the shape"),
    (lambda: na.npu_silu_backward(torch.randn(3), torch.randn(3).half(), torch.randn(3)),
     TypeError, "npu_silu_backward: expected x0 the same dtype"),
    (lambda: na.npu_mish_backward(torch.randn(4), torch.randn(3)), RuntimeError,
     "npu_mish_backward: expected grad the shape"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_strict_mode():
    x = torch.randn(3)
    for product in ("910", "310P", "A2", "A3"):
        with na.strict(product):
            na.npu_silu(x)
            na.npu_mish(x.half())
            with pytest.raises(TypeError):
                na.npu_silu(x.double())
    # The 950: aclnnSilu.md, aclnnSiluBackward.md, aclnnMish&aclnnInplaceMish.md and
    # aclnnMishBackward.md list it; op-plugin tests these ops without a product restriction.
    with na.strict("950"):
        torch.testing.assert_close(na.npu_silu(x), x * torch.sigmoid(x))
        torch.testing.assert_close(na.npu_mish(x), x * torch.tanh(torch.log1p(torch.exp(x))))
        y = x.clone()
        assert na.npu_silu_(y) is y
        xg = x.clone().requires_grad_()
        (na.npu_silu(xg).sum() + na.npu_mish(xg).sum()).backward()
        assert xg.grad is not None
        with pytest.raises(TypeError):
            na.npu_mish(x.bfloat16())        # the torch_npu pages list float16/float32 only
