"""Tests for npu_fast_gelu / fast_gelu / npu_fast_gelu_backward.

Spec: seed 004 "npu_fast_gelu"::

    formula 2 (A2/A3):        x / (1 + e^(-1.702 x))
    formula 1 (910/310P):     x / (1 + e^(-1.702 |x|)) * e^(0.851 (x - |x|))

(seed 004 prints the second exponent as 0.851x(x-|x|); the kernel and CANN's FastGelu doc use
0.851 (x - |x|), which makes the two formulas the same function; see the op's docstring.)
The goldens evaluate each formula literally in float64.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
FUNCS = {"npu_fast_gelu": lambda x: na.npu_fast_gelu(x), "fast_gelu": lambda x: na.fast_gelu(x)}


def formula2(x):
    x = x.double()
    return x / (1 + torch.exp(-1.702 * x))


def formula1(x):
    x = x.double()
    return x / (1 + torch.exp(-1.702 * x.abs())) * torch.exp(0.851 * (x - x.abs()))


def grad_of(formula, grad, x):
    xs = x.detach().double().requires_grad_(True)
    (g,) = torch.autograd.grad(formula(xs), xs, grad.double())
    return g


def make(shape, dtype, seed=0, scale=4.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 17), (2, 3, 4, 5), (1,), ()])
def test_default_formula_is_a2(name, dtype, shape):
    x = make(shape, dtype, seed=len(shape))
    before = x.clone()
    out = FUNCS[name](x)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_golden(out, formula2(x), dtype=dtype)
    assert torch.equal(x, before)


@pytest.mark.parametrize("product", ["910", "310P"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_strict_910_310p_use_formula_1(product, dtype):
    x = make((6, 9), dtype, seed=3)
    with na.strict(product):
        out = na.npu_fast_gelu(x)
        back = na.npu_fast_gelu_backward(torch.ones_like(x), x)
    assert_close_to_golden(out, formula1(x), dtype=dtype)
    assert_close_to_golden(back, grad_of(formula1, torch.ones_like(x), x), dtype=dtype)


def test_formula_1_at_plus_inf_is_nan_formula_2_is_inf():
    x = torch.tensor([float("inf"), -float("inf"), -100.0, 100.0])
    f2 = na.npu_fast_gelu(x)
    with na.strict("910"):
        f1 = na.npu_fast_gelu(x)
    assert f2[0] == float("inf") and torch.isnan(f1[0])
    assert torch.isnan(f2[1]) and torch.isnan(f1[1])          # -inf * 0 in both formulas
    assert f2[2] == 0 and f1[2] == 0 and f2[3] == 100 and f1[3] == 100


def test_doc_example_values():
    # seed 004 fast_gelu example: [0.5991, 0.4094] -> [0.4403, 0.2733]
    out = na.fast_gelu(torch.tensor([0.5991, 0.4094]))
    torch.testing.assert_close(out, torch.tensor([0.4403, 0.2733]), rtol=0, atol=6e-5)


def test_noncontiguous_and_empty():
    x = make((8, 6), torch.float32, seed=4).t()
    assert_close_to_golden(na.npu_fast_gelu(x), formula2(x))
    assert na.npu_fast_gelu(torch.empty(0, 3)).shape == (0, 3)


@pytest.mark.parametrize("name", list(FUNCS))
def test_gradcheck(name):
    x = make((3, 5), torch.float64, seed=5).requires_grad_(True)
    assert torch.autograd.gradcheck(FUNCS[name], (x,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_op_matches_golden(dtype):
    x = make((4, 7), dtype, seed=6)
    g = make((4, 7), dtype, seed=7, scale=1.0)
    got = na.npu_fast_gelu_backward(g, x)
    assert got.dtype == dtype and got.shape == x.shape
    assert_close_to_golden(got, grad_of(formula2, g, x), dtype=dtype)


def test_autograd_under_strict_910_uses_formula_1_derivative():
    x = make((5,), torch.float32, seed=8).requires_grad_(True)
    with na.strict("910"):
        na.npu_fast_gelu(x).sum().backward()
    assert_close_to_golden(x.grad, grad_of(formula1, torch.ones(5), x.detach()))


@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_fast_gelu(torch.ones(3, dtype=torch.int32)), TypeError,
     "npu_fast_gelu: expected self dtype"),
    (lambda: na.fast_gelu(torch.randn([1] * 9)), ValueError,
     "fast_gelu: expected self a tensor with at most 8 dims"),
    (lambda: na.npu_fast_gelu_backward(torch.randn(3), torch.randn(4)), RuntimeError,
     "npu_fast_gelu_backward: expected grad the shape"),
    (lambda: na.npu_fast_gelu(torch.randn(3), other=1), TypeError,
     "npu_fast_gelu() got an unexpected keyword argument 'other'"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_strict_dtype_rules():
    x = torch.randn(4)
    with na.strict("A2"):
        na.npu_fast_gelu(x.bfloat16())
        with pytest.raises(TypeError, match="fast_gelu: expected self a dtype other than "
                                            "bfloat16 on A2"):
            na.fast_gelu(x.bfloat16())        # fast_gelu documents float16/float32 only
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(TypeError, match="bfloat16"):
            na.npu_fast_gelu(x.bfloat16())
    assert na.fast_gelu(x.bfloat16()).dtype == torch.bfloat16     # default mode


def test_strict_950_is_supported_with_formula_2():
    # aclnnFastGelu.md / aclnnFastGeluBackward.md list the 950 (float16, float32, bfloat16) with
    # x / (1 + exp(-1.702 x)); op-plugin tests fast_gelu without a product restriction.
    x = torch.linspace(-6, 6, 97, dtype=torch.float64).float()
    want = (x.double() / (1 + torch.exp(-1.702 * x.double())))
    with na.strict("950"):
        for fn in (na.npu_fast_gelu, na.fast_gelu):
            torch.testing.assert_close(fn(x).double(), want, rtol=2e-6, atol=1e-7)
        assert na.npu_fast_gelu(x.bfloat16()).dtype == torch.bfloat16
        xg = x.clone().requires_grad_()
        na.npu_fast_gelu(xg).sum().backward()
        assert xg.grad is not None


def test_fake_tensor_mode_doc_example():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.rand(2)
        y = na.fast_gelu(x)
    assert y.shape == (2,) and y.dtype == torch.float32
