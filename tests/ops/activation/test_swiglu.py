"""Tests for npu_swiglu / npu_swiglu_backward against goldens written from the doc.

Spec: seed 004, entry "npu_swiglu"::

    outputs = swiglu(x, dim=-1) = swish(A) * B = A * sigmoid(A) * B
    A, B: x cut in two along dim (A the first half)

Every expected value is computed from that line in float64 (never by the library); gradients of
the golden come from torch.autograd on the float64 formula.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def sigmoid64(t):
    return 1.0 / (1.0 + torch.exp(-t))


def golden_swiglu(x, dim=-1):
    x = x.double()
    n = x.shape[dim] // 2
    a, b = x.narrow(dim, 0, n), x.narrow(dim, n, n)
    return a * sigmoid64(a) * b


def golden_grad(grad, x, dim=-1):
    xs = x.detach().double().requires_grad_(True)
    (g,) = torch.autograd.grad(golden_swiglu(xs, dim), xs, grad.double())
    return g


def make(shape, dtype, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# -- forward ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", [((5, 14), -1), ((6, 3), 0), ((2, 4, 3), 1),
                                       ((3, 1, 2, 6), 2), ((10,), 0), ((1, 22), -1)])
def test_forward_matches_doc_formula(shape, dim, dtype):
    x = make(shape, dtype, seed=len(shape))
    before = x.clone()
    out = na.npu_swiglu(x, dim=dim)
    want_shape = list(shape)
    want_shape[dim] //= 2
    assert list(out.shape) == want_shape and out.dtype == dtype
    assert_close_to_golden(out, golden_swiglu(x, dim), dtype=dtype)
    assert torch.equal(x, before)


def test_first_half_is_the_gate():
    # A = [2, -1], B = [3, 5]: silu(A) * B differs from A * silu(B).
    x = torch.tensor([[2.0, -1.0, 3.0, 5.0]], dtype=torch.float64)
    out = na.npu_swiglu(x)
    a, b = x[:, :2], x[:, 2:]
    torch.testing.assert_close(out, a * sigmoid64(a) * b, rtol=1e-12, atol=0)
    assert not torch.allclose(out, b * sigmoid64(b) * a)


def test_default_dim_is_last_and_positional_dim():
    x = make((4, 6), torch.float32, seed=3)
    assert_close_to_golden(na.npu_swiglu(x), golden_swiglu(x, -1))
    assert_close_to_golden(na.npu_swiglu(x, 0), golden_swiglu(x, 0))
    assert_close_to_golden(torch.ops.npu.npu_swiglu(x, 0), golden_swiglu(x, 0))
    assert_close_to_golden(na.npu_swiglu(input=x), golden_swiglu(x, -1))


def test_noncontiguous_input():
    base = make((8, 6), torch.float32, seed=4)
    x = base.t()                      # (6, 8), non-contiguous
    assert not x.is_contiguous()
    assert_close_to_golden(na.npu_swiglu(x), golden_swiglu(x))
    assert_close_to_golden(na.npu_swiglu(x, 0), golden_swiglu(x, 0))


def test_bf16_rounds_once_from_fp32():
    # fp32 compute, single rounding: equal to the fp64 golden rounded to bf16 except where the
    # fp32 intermediate sits on the other side of a rounding boundary (rare).
    x = make((64, 128), torch.bfloat16, seed=5)
    out = na.npu_swiglu(x)
    want = golden_swiglu(x).to(torch.bfloat16)
    assert float((out == want).double().mean()) > 0.99


def test_nan_and_inf_propagate_elementwise():
    x = torch.tensor([[1.0, float("nan"), 2.0, 3.0], [float("inf"), 1.0, 2.0, 3.0]])
    out = na.npu_swiglu(x)
    assert torch.isnan(out[0, 1]) and torch.isfinite(out[0, 0])
    assert out[1, 0] == float("inf") and torch.isfinite(out[1, 1])


def test_large_negative_gate_is_zero_not_nan():
    x = torch.tensor([[-1000.0, 5.0]])
    assert na.npu_swiglu(x).item() == 0.0


def test_empty_rows_default_mode():
    out = na.npu_swiglu(torch.empty(0, 8))
    assert out.shape == (0, 4)


# -- backward --------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_gradcheck(dim):
    x = make((4, 6, 2), torch.float64, seed=10 + dim).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: na.npu_swiglu(t, dim), (x,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_backward_op_matches_golden_gradient(dtype, dim):
    x = make((6, 10), dtype, seed=20)
    shape = list(x.shape)
    shape[dim] //= 2
    g = make(shape, dtype, seed=21, scale=1.0)
    got = na.npu_swiglu_backward(g, x, dim)
    assert got.shape == x.shape and got.dtype == dtype
    assert_close_to_golden(got, golden_grad(g, x, dim), dtype=dtype)


def test_autograd_uses_backward_op_and_matches_golden():
    x = make((3, 8), torch.float32, seed=30).requires_grad_(True)
    out = na.npu_swiglu(x)
    g = make(out.shape, torch.float32, seed=31, scale=1.0)
    out.backward(g)
    assert_close_to_golden(x.grad, golden_grad(g, x.detach()))


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_swiglu(torch.randn(3, 5)), ValueError, "npu_swiglu: expected self an even"),
    (lambda: na.npu_swiglu(torch.randn(3, 4), 2), IndexError, "npu_swiglu: expected dim"),
    (lambda: na.npu_swiglu(torch.randn(3, 4), -3), IndexError, "npu_swiglu: expected dim"),
    (lambda: na.npu_swiglu(torch.ones(3, 4, dtype=torch.int64)), TypeError,
     "npu_swiglu: expected self dtype"),
    (lambda: na.npu_swiglu(torch.tensor(1.0)), ValueError, "npu_swiglu: expected self a tensor"),
    (lambda: na.npu_swiglu(torch.randn([1] * 8 + [2])), ValueError,
     "npu_swiglu: expected self a tensor with 1 to 8 dims"),
    (lambda: na.npu_swiglu_backward(torch.randn(3, 3), torch.randn(3, 4)), RuntimeError,
     "npu_swiglu_backward: expected grad_output the shape"),
    (lambda: na.npu_swiglu(torch.randn(2, 4), x=1), TypeError, "npu_swiglu() got an unexpected keyword argument"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_strict_mode_rules():
    x = torch.randn(2, 8)
    with na.strict("A2"):
        assert na.npu_swiglu(x).shape == (2, 4)
        with pytest.raises(TypeError, match="npu_swiglu: expected self dtype"):
            na.npu_swiglu(x.double())
        with pytest.raises(ValueError, match="npu_swiglu: expected self a non-empty tensor on A2"):
            na.npu_swiglu(torch.empty(0, 8))
    with na.strict("950"):
        assert na.npu_swiglu(torch.empty(0, 8)).shape == (0, 4)
    with na.strict("310P"):
        with pytest.raises(TypeError, match="bfloat16 on 310P"):
            na.npu_swiglu(x.bfloat16())
    with na.strict("910"):
        with pytest.raises(RuntimeError, match="npu_swiglu: expected a product the op supports"):
            na.npu_swiglu(x)


def test_failed_call_leaves_input_untouched():
    x = torch.randn(3, 5)
    before = x.clone()
    with pytest.raises(ValueError):
        na.npu_swiglu(x)
    assert torch.equal(x, before)
