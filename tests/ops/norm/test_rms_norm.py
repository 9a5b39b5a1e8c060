"""npu_rms_norm / npu_rms_norm_backward against float64 goldens written from the doc formula.

Spec (seed 004 ``npu_rms_norm``; aclnnRmsNorm; aclnnRmsNormGrad)::

    Rms(x)  = sqrt(mean(x_i^2) + eps)          over the trailing gamma.dim() dims
    y_i     = x_i / Rms(x) * g_i;   rstd = 1 / Rms(x)   (float32, keepdim shape)
    dx_i    = (dy_i*g_i - x_i/Rms * mean(dy*g*x/Rms)) / Rms;   dg_i = sum(dy_i * x_i / Rms)
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
DTYPES = [F32, F16, BF16, F64]


def make(shape, dtype=F32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def golden(x, gamma, eps=1e-6):
    """Doc formula in float64 on the (already rounded) inputs."""
    x, g = x.double(), gamma.double()
    k = gamma.dim()
    dims = tuple(range(x.dim() - k, x.dim()))
    rms = torch.sqrt((x * x).mean(dims, keepdim=True) + eps)
    return x / rms * g, 1.0 / rms


def golden_grads(dy, x, gamma, eps=1e-6):
    xs = x.detach().double().requires_grad_(True)
    gs = gamma.detach().double().requires_grad_(True)
    y, _ = golden(xs, gs, eps)
    return torch.autograd.grad(y, (xs, gs), dy.double())


# -- forward ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,k", [((3, 5, 16), 1), ((2, 3, 4, 8), 2), ((7, 33), 1),
                                     ((1, 129), 1), ((4, 6), 2), ((11,), 1), ((2, 1, 3, 5), 3)])
def test_forward_matches_doc_formula(shape, k, dtype):
    x = make(shape, dtype, seed=1)
    gamma = make(shape[len(shape) - k:], dtype, seed=2)
    x0, g0 = x.clone(), gamma.clone()
    y, rstd = na.npu_rms_norm(x, gamma, epsilon=1e-5)
    want_y, want_rstd = golden(x, gamma, 1e-5)
    assert y.dtype == dtype and y.shape == x.shape
    assert rstd.dtype == (F64 if dtype == F64 else F32)
    assert rstd.shape == tuple(shape[:len(shape) - k]) + (1,) * k
    assert_close_to_golden(y, want_y, dtype=dtype)
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5 if dtype != F64 else None)
    assert torch.equal(x, x0) and torch.equal(gamma, g0)


def test_default_epsilon_is_1e6():
    x = torch.full((2, 4), 1e-3, dtype=F64)
    gamma = torch.ones(4, dtype=F64)
    _, rstd = na.npu_rms_norm(x, gamma)
    assert rstd[0, 0].item() == pytest.approx(1 / (1e-6 + 1e-6) ** 0.5, rel=1e-12)


def test_known_values():
    x = torch.tensor([[3.0, 4.0]], dtype=F64)       # mean(x^2) = 12.5
    y, rstd = na.npu_rms_norm(x, torch.tensor([1.0, 2.0], dtype=F64), 0.0)
    assert rstd.item() == pytest.approx(12.5 ** -0.5)
    assert y.flatten().tolist() == pytest.approx([3 / 12.5 ** 0.5, 8 / 12.5 ** 0.5])


@pytest.mark.parametrize("xdt", [F16, BF16], ids=str)
def test_mixed_dtype_gamma_float32(xdt):
    # op-plugin test_rms_norm_mix_dtype: float16 x with float32 gamma; y keeps x's dtype.
    x = make((5, 64), xdt, seed=3)
    gamma = make((64,), F32, seed=4)
    y, rstd = na.npu_rms_norm(x, gamma)
    assert y.dtype == xdt and rstd.dtype == F32
    assert_close_to_golden(y, golden(x, gamma)[0], dtype=xdt)


def test_half_is_rounded_once():
    # y = round(x * rstd * gamma): compare with the float64 golden rounded once, elementwise.
    x = make((64, 256), F16, seed=5)
    gamma = make((256,), F16, seed=6)
    y, _ = na.npu_rms_norm(x, gamma)
    once = golden(x, gamma)[0].to(F16)
    assert (y == once).float().mean() > 0.999


def test_empty_rows_supported():
    y, rstd = na.npu_rms_norm(torch.empty(0, 3, 16), torch.ones(16))
    assert y.shape == (0, 3, 16) and rstd.shape == (0, 3, 1)


@pytest.mark.parametrize("case", ["transposed", "sliced", "stepped"])
def test_non_contiguous_input(case):
    base = make((6, 8, 40), F32, seed=7)
    x = {"transposed": base.transpose(0, 1), "sliced": base[:, :, 3:19],
         "stepped": base[::2, :, ::2]}[case]
    assert not x.is_contiguous()
    gamma = make((x.shape[-1],), F32, seed=8)
    y, rstd = na.npu_rms_norm(x, gamma)
    want_y, want_rstd = golden(x.contiguous(), gamma)
    assert_close_to_golden(y, want_y)
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5)


def test_nan_propagates_to_its_row_only():
    x = make((3, 8), F32, seed=9)
    x[1, 2] = float("nan")
    y, rstd = na.npu_rms_norm(x, torch.ones(8))
    assert torch.isnan(y[1]).all() and torch.isnan(rstd[1]).all()
    assert torch.isfinite(y[0]).all() and torch.isfinite(y[2]).all()


# -- autograd and the backward op ------------------------------------------------------------

@pytest.mark.parametrize("shape,k", [((3, 4, 6), 1), ((2, 3, 5), 2), ((4, 7), 2)])
def test_gradcheck(shape, k):
    x = make(shape, F64, seed=10).requires_grad_(True)
    gamma = make(shape[len(shape) - k:], F64, seed=11).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: na.npu_rms_norm(a, b, 1e-4)[0], (x, gamma))


def test_rstd_is_not_differentiable():
    x = make((3, 8), F64, seed=12).requires_grad_(True)
    y, rstd = na.npu_rms_norm(x, make((8,), F64, seed=13))
    assert y.requires_grad and not rstd.requires_grad


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_autograd_matches_golden_gradients(dtype):
    x = make((6, 32), dtype, seed=14).requires_grad_(True)
    gamma = make((32,), dtype, seed=15).requires_grad_(True)
    dy = make((6, 32), dtype, seed=16)
    y, _ = na.npu_rms_norm(x, gamma)
    y.backward(dy)
    want_dx, want_dg = golden_grads(dy, x, gamma)
    assert x.grad.dtype == dtype and gamma.grad.dtype == dtype
    assert_close_to_golden(x.grad, want_dx, dtype=dtype, atol=1e-4)
    assert_close_to_golden(gamma.grad, want_dg, dtype=dtype, atol=1e-4)


def test_autograd_mixed_gamma_gets_float32_grad():
    x = make((4, 16), BF16, seed=17).requires_grad_(True)
    gamma = make((16,), F32, seed=18).requires_grad_(True)
    na.npu_rms_norm(x, gamma)[0].sum().backward()
    assert x.grad.dtype == BF16 and gamma.grad.dtype == F32


@pytest.mark.parametrize("dtype", [F32, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,k", [((5, 12), 1), ((2, 3, 4), 2)])
def test_backward_op_matches_golden(shape, k, dtype):
    x = make(shape, dtype, seed=19)
    gamma = make(shape[len(shape) - k:], dtype, seed=20)
    dy = make(shape, dtype, seed=21)
    rstd = golden(x, gamma)[1].to(F64 if dtype == F64 else F32)
    dx, dgamma = na.npu_rms_norm_backward(dy, x, gamma, rstd)
    want_dx, want_dg = golden_grads(dy, x, gamma)
    assert dx.dtype == dtype and dx.shape == x.shape
    assert dgamma.dtype == (F64 if dtype == F64 else F32) and dgamma.shape == gamma.shape
    assert_close_to_golden(dx, want_dx, dtype=dtype, atol=1e-4)
    assert_close_to_golden(dgamma, want_dg, dtype=F32 if dtype != F64 else F64, rtol=1e-5
                           if dtype != F64 else None, atol=1e-4 if dtype != F64 else None)


def test_backward_op_uses_given_rstd_and_accepts_leading_shape():
    x, gamma, dy = make((3, 8), F32, 22), make((8,), F32, 23), make((3, 8), F32, 24)
    rstd = torch.full((3,), 2.0)                       # aclnn's rstd shape x.shape[:-k]
    dx, dgamma = na.npu_rms_norm_backward(dy, x, gamma, rstd)
    xhat = x.double() * 2.0
    dyg = dy.double() * gamma.double()
    want = (dyg - xhat * (dyg * xhat).mean(-1, keepdim=True)) * 2.0
    assert_close_to_golden(dx, want)
    assert_close_to_golden(dgamma, (dy.double() * xhat).sum(0), rtol=1e-5)


# -- bad inputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(4, 16), torch.randn(8)), RuntimeError, "expected gamma the trailing dims"),
    ((torch.randn(4, 16), torch.randn(16, dtype=F16)), TypeError, "expected gamma dtype in"),
    ((torch.randn(4, 16, dtype=F16), torch.randn(16, dtype=BF16)), TypeError,
     "expected gamma dtype in"),
    ((torch.randn(16), torch.randn(2, 16)), ValueError, "expected gamma a 1-D to 1-D"),
    ((torch.randn(*([1] * 9)), torch.randn(1)), ValueError, "expected self a 1-D to 8-D"),
    ((torch.ones(4, 16, dtype=torch.int64), torch.randn(16)), TypeError,
     "expected self dtype in"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_rms_norm: " + match):
        na.npu_rms_norm(*args)


def test_backward_bad_inputs():
    x, gamma = torch.randn(3, 16), torch.randn(16)
    with pytest.raises(RuntimeError, match="^npu_rms_norm_backward: expected dy the shape"):
        na.npu_rms_norm_backward(torch.randn(3, 8), x, gamma, torch.rand(3, 1))
    with pytest.raises(TypeError, match="^npu_rms_norm_backward: expected rstd dtype in"):
        na.npu_rms_norm_backward(x, x, gamma, torch.rand(3, 1, dtype=F16))


# -- strict mode -----------------------------------------------------------------------------

def test_strict_rejects_float64():
    with na.strict("A2"), pytest.raises(TypeError, match="expected self dtype in"):
        na.npu_rms_norm(torch.randn(2, 8, dtype=F64), torch.randn(8, dtype=F64))


@pytest.mark.parametrize("product", ["310P", "910"])
def test_strict_old_products_only_same_dtype_fp16_fp32(product):
    with na.strict(product):
        na.npu_rms_norm(torch.randn(2, 16, dtype=F16), torch.randn(16, dtype=F16))
        with pytest.raises(TypeError, match="expected gamma dtype in \\['float16'\\]"):
            na.npu_rms_norm(torch.randn(2, 16, dtype=F16), torch.randn(16))
        with pytest.raises(TypeError, match="expected self a dtype in the documented table"):
            na.npu_rms_norm(torch.randn(2, 16, dtype=BF16), torch.randn(16, dtype=BF16))
    with na.strict("A2"):
        na.npu_rms_norm(torch.randn(2, 16, dtype=F16), torch.randn(16))


def test_strict_310p_tail_at_least_32_bytes():
    with na.strict("310P"):
        na.npu_rms_norm(torch.randn(2, 16, dtype=F16), torch.randn(16, dtype=F16))
        with pytest.raises(ValueError, match="expected self a last dim of at least 32 bytes"):
            na.npu_rms_norm(torch.randn(2, 8, dtype=F16), torch.randn(8, dtype=F16))
    na.npu_rms_norm(torch.randn(2, 8, dtype=F16), torch.randn(8, dtype=F16))


def test_strict_910_rounds_normalized_value_before_gamma():
    # rms_norm_whole_reduce_sum.h (910): y = round(round(x * rstd) * gamma) for float16.
    x = make((64, 256), F16, seed=25)
    gamma = make((256,), F16, seed=26, scale=3.0)
    normed, _ = golden(x, torch.ones(256, dtype=F16))
    twice = (normed.to(F16).double() * gamma.double()).to(F16)
    once = golden(x, gamma)[0].to(F16)
    assert not torch.equal(twice, once)          # the two orders differ on these inputs
    with na.strict("910"):
        y910, _ = na.npu_rms_norm(x, gamma)
    y, _ = na.npu_rms_norm(x, gamma)
    assert (y910 == twice).float().mean() > 0.999
    assert (y == once).float().mean() > 0.999
    assert not torch.equal(y910, y)
