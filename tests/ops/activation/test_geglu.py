"""Tests for npu_geglu / npu_geglu_grad against goldens written from the docs.

Spec: seed 004 "npu_geglu" (dim, approximate: 0 none / 1 tanh; out and outGelu have dim halved)
and aclnnGeGluV3 (hicann/ops-nn activation/ge_glu_v2/docs/aclnnGeGluV3.md) for the half::

    activate_left=True:   out = Gelu(A) * B
    activate_left=False:  out = A * Gelu(B)         (A, B: left and right halves)
    none: Gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
    tanh: Gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

The float16 kernel rounds Gelu to float16 before the product (ge_glu_v2_fp16_align.h); the fp16
golden below applies that one rounding to the float64 Gelu and nothing else.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def gelu64(x, approximate):
    x = x.double()
    if approximate == 1:
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def halves(x, dim):
    n = x.shape[dim] // 2
    return x.narrow(dim, 0, n), x.narrow(dim, n, n)


def golden_geglu(x, dim=-1, approximate=1, activate_left=False):
    a, b = halves(x.double(), dim)
    if activate_left:
        g = gelu64(a, approximate)
        return g * b, g
    g = gelu64(b, approximate)
    return a * g, g


def golden_grad(grad, x, dim=-1, approximate=1, activate_left=False):
    xs = x.detach().double().requires_grad_(True)
    out, _ = golden_geglu(xs, dim, approximate, activate_left)
    (g,) = torch.autograd.grad(out, xs, grad.double())
    return g


def make(shape, dtype, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", [0, 1])
@pytest.mark.parametrize("activate_left", [False, True])
@pytest.mark.parametrize("shape,dim", [((5, 18), -1), ((4, 3), 0), ((2, 6, 3), 1), ((1, 2), -1)])
def test_forward_matches_doc_formula(shape, dim, approximate, activate_left, dtype):
    x = make(shape, dtype, seed=sum(shape))
    before = x.clone()
    out, g = na.npu_geglu(x, dim, approximate, activate_left)
    want_out, want_g = golden_geglu(x, dim, approximate, activate_left)
    half = list(shape)
    half[dim] //= 2
    assert list(out.shape) == half and list(g.shape) == half
    assert out.dtype == g.dtype == dtype
    assert_close_to_golden(g, want_g, dtype=dtype)
    if dtype == torch.float16:
        # the product is taken of the float16-rounded Gelu
        a, b = halves(x.double(), dim)
        linear = b if activate_left else a
        want_out = linear * want_g.to(torch.float16).double()
    assert_close_to_golden(out, want_out, dtype=dtype)
    assert torch.equal(x, before)


def test_default_activates_right_half_with_tanh():
    x = torch.tensor([[0.5, -1.0, 2.0, -0.3]], dtype=torch.float64)
    out, g = na.npu_geglu(x)
    a, b = x[:, :2], x[:, 2:]
    torch.testing.assert_close(g, gelu64(b, 1), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(out, a * gelu64(b, 1), rtol=1e-12, atol=1e-15)
    out_left, _ = na.npu_geglu(x, activate_left=True)
    assert not torch.allclose(out, out_left)
    # erf and tanh forms differ (so the mode assertion can discriminate)
    assert not torch.allclose(na.npu_geglu(x, approximate=0)[1], g, rtol=1e-9, atol=0)


def test_keyword_alias_and_op_namespace():
    x = make((3, 4), torch.float32, seed=1)
    a = na.npu_geglu(input=x, dim=-1, approximate=0)
    b = torch.ops.npu.npu_geglu(x, -1, 0, False)
    for p, q in zip(a, b):
        assert torch.equal(p, q)


def test_noncontiguous():
    x = make((6, 8), torch.float32, seed=2).t()
    out, g = na.npu_geglu(x, dim=0, approximate=0)
    want_out, want_g = golden_geglu(x, 0, 0)
    assert_close_to_golden(out, want_out)
    assert_close_to_golden(g, want_g)


def test_doc_example_shape_fp16():
    # seed 004: x (24, 9216, 2560) float16 in [-2, 2); a smaller leading size keeps it fast.
    x = (torch.rand(2, 16, 2560, generator=torch.Generator().manual_seed(3)) * 4 - 2).half()
    y, y_gelu = na.npu_geglu(x, dim=-1, approximate=1)
    assert y.shape == (2, 16, 1280) and y_gelu.shape == (2, 16, 1280)
    assert y.dtype == y_gelu.dtype == torch.float16


@pytest.mark.parametrize("approximate", [0, 1])
@pytest.mark.parametrize("activate_left", [False, True])
@pytest.mark.parametrize("dim", [-1, 0])
def test_gradcheck(approximate, activate_left, dim):
    x = make((4, 6), torch.float64, seed=7).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda t: na.npu_geglu(t, dim, approximate, activate_left)[0], (x,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", [0, 1])
@pytest.mark.parametrize("activate_left", [False, True])
def test_grad_op_matches_golden(dtype, approximate, activate_left):
    x = make((5, 12), dtype, seed=11)
    grad = make((5, 6), dtype, seed=12, scale=1.0)
    _, gelu_out = golden_geglu(x, -1, approximate, activate_left)
    got = na.npu_geglu_grad(grad, x, gelu_out.to(dtype), -1, approximate, activate_left)
    assert got.shape == x.shape and got.dtype == dtype
    assert_close_to_golden(got, golden_grad(grad, x, -1, approximate, activate_left),
                           dtype=dtype)


def test_gelu_output_is_not_differentiable():
    x = make((2, 4), torch.float64, seed=13).requires_grad_(True)
    out, g = na.npu_geglu(x)
    assert out.requires_grad and not g.requires_grad
    out.sum().backward()
    assert_close_to_golden(x.grad, golden_grad(torch.ones(2, 2), x.detach()))


@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_geglu(torch.randn(3, 8), -1, 2), ValueError,
     "npu_geglu: expected approximate"),
    (lambda: na.npu_geglu(torch.randn(3, 7)), ValueError, "npu_geglu: expected self an even"),
    (lambda: na.npu_geglu(torch.randn(3, 8), 2), IndexError, "npu_geglu: expected dim"),
    (lambda: na.npu_geglu(torch.tensor(3.0)), ValueError, "npu_geglu: expected self a tensor"),
    (lambda: na.npu_geglu(torch.ones(2, 2, dtype=torch.int32)), TypeError,
     "npu_geglu: expected self dtype"),
    (lambda: na.npu_geglu_grad(torch.randn(3, 4), torch.randn(3, 8), torch.randn(3, 3)),
     RuntimeError, "npu_geglu_grad: expected gelu the shape"),
    (lambda: na.npu_geglu_grad(torch.randn(3, 4).half(), torch.randn(3, 8), torch.randn(3, 4)),
     TypeError, "npu_geglu_grad: expected grad_output the same dtype"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_strict_mode_rules():
    x = torch.randn(2, 8)
    with na.strict("310P"):
        with pytest.raises(TypeError, match="bfloat16 on 310P"):
            na.npu_geglu(x.bfloat16())
        na.npu_geglu(x, approximate=0)              # forward: both forms
        with pytest.raises(ValueError, match="npu_geglu_grad: expected approximate 1"):
            na.npu_geglu_grad(torch.randn(2, 4), x, torch.randn(2, 4), -1, 0)
        with pytest.raises(ValueError, match=r"npu_geglu \(autograd\): expected approximate 1"):
            na.npu_geglu(x.clone().requires_grad_(True), approximate=0)
    with na.strict("910"):
        with pytest.raises(RuntimeError, match="npu_geglu: expected a product"):
            na.npu_geglu(x)
    with na.strict("A2"):
        na.npu_geglu(x.bfloat16())
        with pytest.raises(TypeError):
            na.npu_geglu(x.double())
