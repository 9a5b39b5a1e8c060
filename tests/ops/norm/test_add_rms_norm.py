"""npu_add_rms_norm and npu_add_rms_norm_cast against float64 goldens of the doc formula::

    x = x1 + x2;  rstd = 1 / sqrt(mean(x^2) + eps);  y = x * rstd * gamma
    cast: (y1 = float(y), y2 = y, rstd, x)

Precision order under test (hicann/ops-nn norm/add_rms_norm, golden v1 = A2/A3, v2 = 950):
A2/A3 (default): x rounded to the input dtype, norm of the rounded x, x*rstd rounded to the
input dtype before the gamma multiply.  950: norm of the exact sum, y rounded once.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def rms(x, k, eps):
    dims = tuple(range(x.dim() - k, x.dim()))
    return torch.sqrt((x * x).mean(dims, keepdim=True) + eps)


def golden_a2(x1, x2, gamma, eps=1e-6):
    """A2/A3 order: every intermediate the kernel stores in the input dtype is rounded."""
    dtype = x1.dtype
    x = (x1.double() + x2.double()).to(dtype)
    r = rms(x.double(), gamma.dim(), eps)
    normed = (x.double() / r).to(dtype).double()
    return normed * gamma.double(), 1.0 / r, x


def golden_950(x1, x2, gamma, eps=1e-6):
    s = x1.double() + x2.double()
    r = rms(s, gamma.dim(), eps)
    return s / r * gamma.double(), 1.0 / r, s.to(x1.dtype)


SHAPES = [((3, 5, 16), 1), ((2, 3, 4, 8), 2), ((7, 33), 1), ((1, 130), 1), ((6,), 1)]


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,k", SHAPES)
def test_forward_matches_doc_formula(shape, k, dtype):
    x1, x2 = make(shape, dtype, 1), make(shape, dtype, 2)
    gamma = make(shape[len(shape) - k:], dtype, 3)
    before = [t.clone() for t in (x1, x2, gamma)]
    y, rstd, x = na.npu_add_rms_norm(x1, x2, gamma, 1e-5)
    want_y, want_rstd, want_x = golden_a2(x1, x2, gamma, 1e-5)
    assert (y.dtype, rstd.dtype, x.dtype) == (dtype, F64 if dtype == F64 else F32, dtype)
    assert rstd.shape == tuple(shape[:len(shape) - k]) + (1,) * k
    # y is rounded twice (x*rstd, then *gamma): allow one more unit of the dtype.
    rtol = {F16: 2e-3}.get(dtype)
    assert_close_to_golden(y, want_y, dtype=dtype, rtol=rtol)
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5 if dtype != F64 else None)
    assert torch.equal(x, want_x)
    assert all(torch.equal(a, b) for a, b in zip(before, (x1, x2, gamma)))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_a2_order_sum_and_normalized_value_are_rounded(dtype):
    x1, x2 = make((64, 256), dtype, 4, 3.0), make((64, 256), dtype, 5, 3.0)
    gamma = make((256,), dtype, 6, 3.0)
    y, _, x = na.npu_add_rms_norm(x1, x2, gamma)
    a2 = golden_a2(x1, x2, gamma)[0].to(dtype)
    once = golden_950(x1, x2, gamma)[0].to(dtype)
    assert not torch.equal(a2, once)                # the orders are distinguishable here
    assert (y == a2).float().mean() > 0.999
    assert not torch.equal(y, once)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_strict_950_normalizes_the_exact_sum_and_rounds_once(dtype):
    x1, x2 = make((64, 256), dtype, 7, 3.0), make((64, 256), dtype, 8, 3.0)
    gamma = make((256,), dtype, 9, 3.0)
    with na.strict("950"):
        y, rstd, x = na.npu_add_rms_norm(x1, x2, gamma)
    want_y, want_rstd, want_x = golden_950(x1, x2, gamma)
    assert (y == want_y.to(dtype)).float().mean() > 0.999
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5)
    assert torch.equal(x, want_x)


def test_doc_example_shapes_and_dtypes():
    x1 = torch.rand(4, 8, dtype=F16) * 100
    x2 = torch.rand(4, 8, dtype=F16) * 100
    gamma = torch.rand(8, dtype=F16) * 100
    y, rstd, x = na.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6)
    assert (y.shape, rstd.shape, x.shape) == ((4, 8), (4, 1), (4, 8))
    assert (y.dtype, rstd.dtype, x.dtype) == (F16, F32, F16)
    assert_close_to_golden(y, golden_a2(x1, x2, gamma)[0], dtype=F16, rtol=2e-3)


def test_non_contiguous_inputs():
    a = make((8, 6, 40), F32, 10).transpose(0, 1)
    b = make((6, 8, 80), F32, 11)[:, :, ::2]
    g = make((40,), F32, 12)
    y, rstd, x = na.npu_add_rms_norm(a, b, g)
    want = golden_a2(a, b, g)
    assert_close_to_golden(y, want[0])
    assert torch.equal(x, want[2])


def test_nan_propagates():
    x1 = make((2, 8), F32, 13)
    x1[0, 3] = float("nan")
    y, rstd, x = na.npu_add_rms_norm(x1, make((2, 8), F32, 14), torch.ones(8))
    assert torch.isnan(y[0]).all() and torch.isnan(x[0, 3]) and torch.isfinite(y[1]).all()


def test_no_autograd():
    x1 = make((2, 8), F64, 15).requires_grad_(True)
    with pytest.raises(RuntimeError, match="npu_add_rms_norm: expected inputs that do not"):
        na.npu_add_rms_norm(x1, make((2, 8), F64, 16), make((8,), F64, 17))


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(4, 16), torch.randn(4, 8), torch.randn(16)), RuntimeError,
     "expected x2 the shape of x1"),
    ((torch.randn(4, 16), torch.randn(4, 16, dtype=F16), torch.randn(16)), TypeError,
     "expected x2 the same dtype as x1"),
    ((torch.randn(4, 16, dtype=F16), torch.randn(4, 16, dtype=F16), torch.randn(16)), TypeError,
     "expected gamma the same dtype as x1"),
    ((torch.randn(4, 16), torch.randn(4, 16), torch.randn(4)), RuntimeError,
     "expected gamma the trailing dims of x1"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_add_rms_norm: " + match):
        na.npu_add_rms_norm(*args)


def test_strict_rules():
    bf = [torch.randn(2, 16, dtype=BF16) for _ in range(2)] + [torch.randn(16, dtype=BF16)]
    with na.strict("A2"):
        na.npu_add_rms_norm(*bf)
        with pytest.raises(ValueError, match="expected x1 a non-empty tensor"):
            na.npu_add_rms_norm(torch.empty(0, 16), torch.empty(0, 16), torch.ones(16))
    with na.strict("310P"), pytest.raises(TypeError, match="other than bfloat16 on 310P"):
        na.npu_add_rms_norm(*bf)
    with na.strict("910"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_add_rms_norm(*bf)
    assert na.npu_add_rms_norm(torch.empty(0, 16), torch.empty(0, 16),
                               torch.ones(16))[0].shape == (0, 16)


# -- npu_add_rms_norm_cast -------------------------------------------------------------------

def golden_cast_a2_bf16(x1, x2, gamma, eps=1e-6, split_d=False):
    """A2/A3 bfloat16 cast templates: rstd of the float32 (here exact) sum, y rounded once;
    the split-D template multiplies the rounded x instead of the sum."""
    s = x1.double() + x2.double()
    r = rms(s, gamma.dim(), eps)
    src = s.to(BF16).double() if split_d else s
    return src / r * gamma.double(), 1.0 / r, s.to(BF16)


def ulps_bf16(got, want):
    """Distance in bfloat16 units of the last place between got and want rounded to bf16."""
    a = got.view(torch.int16).int()
    b = want.to(BF16).view(torch.int16).int()
    return (a - b).abs()


@pytest.mark.parametrize("shape,k", SHAPES[:4])
def test_cast_outputs_f16(shape, k):
    x1, x2 = make(shape, F16, 20), make(shape, F16, 21)
    gamma = make(shape[len(shape) - k:], F16, 22)
    y1, y2, rstd, x = na.npu_add_rms_norm_cast(x1, x2, gamma)
    want_y, want_rstd, want_x = golden_a2(x1, x2, gamma)
    assert (y1.dtype, y2.dtype, rstd.dtype, x.dtype) == (F32, F16, F32, F16)
    assert y1.shape == y2.shape == x.shape == x1.shape
    assert torch.equal(y1, y2.float())               # A2/A3: y1 = float(y2)
    assert_close_to_golden(y2, want_y, dtype=F16, rtol=2e-3)
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5)
    assert torch.equal(x, want_x)
    y, r, xx = na.npu_add_rms_norm(x1, x2, gamma)
    assert torch.equal(y, y2) and torch.equal(r, rstd) and torch.equal(xx, x)


@pytest.mark.parametrize("shape,k,split_d", [(s, k, False) for s, k in SHAPES[:4]]
                         + [((2, 8800), 1, True), ((3, 2, 4400), 2, True)])
def test_cast_outputs_bf16_follow_the_bf16_templates(shape, k, split_d):
    x1, x2 = make(shape, BF16, 20), make(shape, BF16, 21)
    gamma = make(shape[len(shape) - k:], BF16, 22)
    y1, y2, rstd, x = na.npu_add_rms_norm_cast(x1, x2, gamma)
    want_y, want_rstd, want_x = golden_cast_a2_bf16(x1, x2, gamma, split_d=split_d)
    assert (y1.dtype, y2.dtype, rstd.dtype, x.dtype) == (F32, BF16, F32, BF16)
    assert torch.equal(y1, y2.float())
    assert torch.equal(x, want_x)
    # rstd of the unrounded sum: the rounded sum would be off by ~1e-4 relative.
    assert_close_to_golden(rstd, want_rstd, rtol=1e-6)
    # y rounded once from float32: within one unit, and off by one only on rounding ties
    # that float32 arithmetic resolves differently from float64 (a few in a thousand).
    ulps = ulps_bf16(y2, want_y)
    assert int(ulps.max()) <= 1
    assert float((ulps != 0).double().mean()) < 0.01


def test_cast_strict_950_y1_is_the_unrounded_value():
    x1, x2 = make((16, 64), BF16, 23), make((16, 64), BF16, 24)
    gamma = make((64,), BF16, 25)
    with na.strict("950"):
        y1, y2, rstd, x = na.npu_add_rms_norm_cast(x1, x2, gamma)
    want_y = golden_950(x1, x2, gamma)[0]
    assert_close_to_golden(y1, want_y, rtol=1e-5)
    assert torch.equal(y2, y1.to(BF16))
    assert not torch.equal(y1, y2.float())


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(4, 16), torch.randn(4, 16), torch.randn(16)), TypeError,
     "expected x1 dtype in \\['float16', 'bfloat16'\\]"),
    ((torch.randn(4, 16, dtype=F16), torch.randn(4, 16, dtype=F16),
      torch.randn(16, dtype=BF16)), TypeError, "expected gamma the same dtype as x1"),
])
def test_cast_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_add_rms_norm_cast: " + match):
        na.npu_add_rms_norm_cast(*args)


def test_cast_strict_products():
    args = [torch.randn(2, 16, dtype=F16) for _ in range(2)] + [torch.randn(16, dtype=F16)]
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            na.npu_add_rms_norm_cast(*args)
    with na.strict("310P"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_add_rms_norm_cast(*args)
