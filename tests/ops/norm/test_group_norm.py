"""npu_group_norm_silu, npu_group_norm_swish and npu_group_norm_swish_grad against float64
goldens written from the aclnn formulas (looping over the groups explicitly)::

    per (n, g):  mean = E[x];  var = E[(x - mean)^2];  rstd = 1 / sqrt(var + eps)
    y = (x - mean) * rstd * gamma[c] + beta[c]
    silu:  out = y / (1 + exp(-y));    swish: out = y / (1 + exp(-scale * y))
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=F64) + 0.5 if positive else \
        torch.randn(shape, generator=g, dtype=F64)
    return t.to(dtype)


def golden_group_norm(x, weight, bias, groups, eps):
    x = x.double()
    n, c = x.shape[:2]
    cg = c // groups
    y = torch.empty_like(x)
    mean = torch.empty(n, groups, dtype=F64)
    rstd = torch.empty(n, groups, dtype=F64)
    for i in range(n):
        for g in range(groups):
            block = x[i, g * cg:(g + 1) * cg]
            m = block.mean()
            v = ((block - m) ** 2).mean()
            r = 1.0 / torch.sqrt(v + eps)
            mean[i, g], rstd[i, g] = m, r
            y[i, g * cg:(g + 1) * cg] = (block - m) * r
    shape = (1, c) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().reshape(shape)
    if bias is not None:
        y = y + bias.double().reshape(shape)
    return y, mean, rstd


def golden_swish(x, weight, bias, groups, eps, scale):
    y, mean, rstd = golden_group_norm(x, weight, bias, groups, eps)
    return y / (1 + torch.exp(-scale * y)), mean, rstd


SHAPES = [((2, 8, 3, 3), 4), ((3, 6), 3), ((2, 4, 5), 1), ((1, 6, 2, 1, 3), 6)]


# -- npu_group_norm_silu ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,groups", SHAPES)
def test_silu_matches_formula(shape, groups, dtype):
    x = make(shape, dtype, 1)
    w, b = make(shape[1], dtype, 2), make(shape[1], dtype, 3)
    before = [t.clone() for t in (x, w, b)]
    out, mean, rstd = na.npu_group_norm_silu(x, w, b, group=groups, eps=1e-5)
    y, want_mean, want_rstd = golden_group_norm(x, w, b, groups, 1e-5)
    assert out.dtype == mean.dtype == rstd.dtype == dtype
    assert mean.shape == rstd.shape == (shape[0], groups)
    assert_close_to_golden(out, y / (1 + torch.exp(-y)), dtype=dtype, atol=1e-4)
    assert_close_to_golden(mean, want_mean, dtype=dtype, atol=1e-5)
    assert_close_to_golden(rstd, want_rstd, dtype=dtype, rtol=1e-5 if dtype == F32 else None)
    assert all(torch.equal(p, q) for p, q in zip(before, (x, w, b)))


@pytest.mark.parametrize("product", [None, "A2", "950"])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_silu_rounds_once_on_every_product(product, dtype):
    """Both kernels keep the group norm in float32 up to the SiLU and round once (ops-nn
    norm/group_norm_silu/op_kernel/group_norm_silu_b16.h CalcSilu; arch35/
    group_norm_silu_regbase_base.h VFInnerNormalizeAndSwish).  op-plugin's test golden rounds
    the norm to float16 first: that double rounding misses about a quarter of these."""
    x = make((2, 32, 12, 12), dtype, 11)
    w, b = make(32, dtype, 12), make(32, dtype, 13)
    ctx = na.strict(product) if product else contextlib.nullcontext()
    with ctx:
        out, _, _ = na.npu_group_norm_silu(x, w, b, 8, 1e-5)
    y = golden_group_norm(x, w, b, 8, 1e-5)[0]
    once = (y / (1 + torch.exp(-y))).to(dtype)
    yr = y.to(dtype).double()
    twice = (yr / (1 + torch.exp(-yr))).to(dtype)
    assert (out != once).double().mean().item() < 1e-3     # float32 vs float64 ties only
    assert (out != twice).double().mean().item() > 0.05
    assert (out.double() - once.double()).abs().max().item() <= \
        2 * torch.finfo(dtype).eps * once.double().abs().max().item()


def test_silu_float32_affine_with_half_input_and_optional_affine():
    x = make((2, 4, 6), F16, 4)
    w, b = make(4, F32, 5), make(4, F32, 6)
    out, mean, rstd = na.npu_group_norm_silu(x, w, b, 2, 1e-5)
    y, gm, gr = golden_group_norm(x, w, b, 2, 1e-5)
    assert (out.dtype, mean.dtype) == (F16, F16)            # pre-950: input's dtype
    assert_close_to_golden(out, y / (1 + torch.exp(-y)), dtype=F16, atol=1e-3)
    out0, _, _ = na.npu_group_norm_silu(x, None, None, 2)
    y0, _, _ = golden_group_norm(x, None, None, 2, 1e-5)
    assert_close_to_golden(out0, y0 / (1 + torch.exp(-y0)), dtype=F16, atol=1e-3)
    with na.strict("950"):
        _, mean950, rstd950 = na.npu_group_norm_silu(x, w, b, 2, 1e-5)
    assert mean950.dtype == rstd950.dtype == F32


def test_silu_non_contiguous():
    x = make((4, 6, 10), F32, 7).transpose(0, 2)[:, :, ::2]      # (10, 6, 2)
    w, b = make(6, F32, 8), make(6, F32, 9)
    out, _, _ = na.npu_group_norm_silu(x, w, b, 3, 1e-5)
    y, _, _ = golden_group_norm(x, w, b, 3, 1e-5)
    assert_close_to_golden(out, y / (1 + torch.exp(-y)), atol=1e-5)


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(2, 6, 3), torch.randn(6), torch.randn(6), 4), ValueError,
     "expected input a channel dim"),
    ((torch.randn(2, 4, 3), torch.randn(4), torch.randn(4), 0), ValueError,
     "expected group > 0"),
    ((torch.randn(2, 4, 3), torch.randn(4), torch.randn(4), 2, -1.0), ValueError,
     "expected eps > 0"),
    ((torch.randn(2, 4, 3), torch.randn(4, dtype=F16), torch.randn(4, dtype=F16), 2),
     TypeError, "expected weight the dtype of input"),
    ((torch.randn(2, 4, 3, dtype=F16), torch.randn(4, dtype=F16), torch.randn(4), 2),
     TypeError, "expected bias the same dtype as weight"),
    ((torch.randn(4), torch.randn(4), torch.randn(4), 2), ValueError,
     "expected input a 2-D to 8-D"),
])
def test_silu_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_group_norm_silu: " + match):
        na.npu_group_norm_silu(*args)


def test_silu_strict_rules():
    x = torch.randn(2, 4, 3, dtype=BF16)
    w, b = torch.randn(4, dtype=BF16), torch.randn(4, dtype=BF16)
    with na.strict("A2"):
        na.npu_group_norm_silu(x, w, b, 2)
        with pytest.raises(ValueError, match="expected weight a tensor on A2"):
            na.npu_group_norm_silu(x, None, b, 2)
    with na.strict("950"):
        na.npu_group_norm_silu(x, None, None, 2)
    with na.strict("310P"), pytest.raises(TypeError, match="other than bfloat16 on 310P"):
        na.npu_group_norm_silu(x, w, b, 2)
    with na.strict("910"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_group_norm_silu(x, w, b, 2)


def test_silu_no_autograd():
    x = make((2, 4, 3), F64, 10).requires_grad_(True)
    with pytest.raises(RuntimeError, match="npu_group_norm_silu: expected inputs that do not"):
        na.npu_group_norm_silu(x, None, None, 2)


# -- npu_group_norm_swish --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,groups", SHAPES)
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_swish_matches_formula(shape, groups, scale, dtype):
    x = make(shape, dtype, 11)
    w, b = make(shape[1], dtype, 12), make(shape[1], dtype, 13)
    out, mean, rstd = na.npu_group_norm_swish(x, groups, w, b, eps=1e-5, swish_scale=scale)
    want, want_mean, want_rstd = golden_swish(x, w, b, groups, 1e-5, scale)
    assert out.dtype == dtype and mean.dtype == rstd.dtype == w.dtype
    assert_close_to_golden(out, want, dtype=dtype, atol=1e-4)
    assert_close_to_golden(mean, want_mean, dtype=dtype, atol=1e-5)
    assert_close_to_golden(rstd, want_rstd, dtype=dtype, rtol=1e-5 if dtype == F32 else None)


def test_swish_defaults_and_none():
    x, w, b = make((3, 4, 6), F64, 14), make(4, F64, 15), make(4, F64, 16)
    want = golden_swish(x, w, b, 2, 1e-5, 1.0)[0]
    assert_close_to_golden(na.npu_group_norm_swish(x, 2, w, b)[0], want)
    assert_close_to_golden(na.npu_group_norm_swish(x, 2, w, b, None, None)[0], want)
    # and the scale matters
    assert not torch.allclose(na.npu_group_norm_swish(x, 2, w, b, swish_scale=2.0)[0], want)


def test_swish_float32_affine_gives_float32_stats():
    x = make((2, 4, 6), BF16, 17)
    out, mean, rstd = na.npu_group_norm_swish(x, 2, make(4, F32, 18), make(4, F32, 19))
    assert out.dtype == BF16 and mean.dtype == rstd.dtype == F32


@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((2, 4, 2, 3), 4), ((3, 2), 1)])
@pytest.mark.parametrize("scale", [1.0, 0.6])
def test_swish_gradcheck(shape, groups, scale):
    x = make(shape, F64, 20).requires_grad_(True)
    w = make(shape[1], F64, 21).requires_grad_(True)
    b = make(shape[1], F64, 22).requires_grad_(True)
    fn = lambda a, c, d: na.npu_group_norm_swish(a, groups, c, d, swish_scale=scale)[0]  # noqa
    assert torch.autograd.gradcheck(fn, (x, w, b))


def test_swish_grad_op_matches_golden_autograd():
    x, w, b = make((2, 8, 5), F32, 23), make(8, F32, 24), make(8, F32, 25)
    dy = make((2, 8, 5), F32, 26)
    _, mean, rstd = na.npu_group_norm_swish(x, 4, w, b, swish_scale=0.8)
    dx, dw, db = na.npu_group_norm_swish_grad(dy, x, 4, w, b, mean, rstd, [True, True, True],
                                              swish_scale=0.8)
    xs, ws, bs = (t.double().requires_grad_(True) for t in (x, w, b))
    out = golden_swish(xs, ws, bs, 4, 1e-5, 0.8)[0]
    want = torch.autograd.grad(out, (xs, ws, bs), dy.double())
    for got, exp in zip((dx, dw, db), want):
        assert got.dtype == F32
        assert_close_to_golden(got, exp, rtol=1e-5, atol=1e-5)
    dx2, dw2, db2 = na.npu_group_norm_swish_grad(dy, x, 4, w, b, mean, rstd,
                                                 [True, False, False], swish_scale=0.8)
    assert torch.equal(dx2, dx)
    assert torch.equal(dw2, torch.zeros(8)) and torch.equal(db2, torch.zeros(8))


def test_swish_mean_rstd_not_differentiable_and_partial_grads():
    x = make((2, 4, 3), F64, 27).requires_grad_(True)
    w = make(4, F64, 28)
    b = make(4, F64, 29).requires_grad_(True)
    out, mean, rstd = na.npu_group_norm_swish(x, 2, w, b)
    assert out.requires_grad and not mean.requires_grad and not rstd.requires_grad
    out.sum().backward()
    assert x.grad is not None and b.grad is not None and w.grad is None


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_swish_autograd_half(dtype):
    x = make((2, 8, 6), dtype, 30).requires_grad_(True)
    w = make(8, dtype, 31).requires_grad_(True)
    b = make(8, dtype, 32).requires_grad_(True)
    out = na.npu_group_norm_swish(x, 4, w, b)[0]
    dy = make((2, 8, 6), dtype, 33)
    out.backward(dy)
    xs, ws, bs = (t.detach().double().requires_grad_(True) for t in (x, w, b))
    want = torch.autograd.grad(golden_swish(xs, ws, bs, 4, 1e-5, 1.0)[0], (xs, ws, bs),
                               dy.double())
    for got, exp in zip((x.grad, w.grad, b.grad), want):
        assert got.dtype == dtype
        assert_close_to_golden(got, exp, dtype=dtype, rtol=2e-2 if dtype == BF16 else 3e-3,
                               atol=2e-2)


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(0, 4, 3), 2, torch.randn(4), torch.randn(4)), ValueError,
     "expected input a non-empty"),
    ((torch.randn(2, 4, 3), 3, torch.randn(4), torch.randn(4)), ValueError,
     "expected input a channel dim"),
    ((torch.randn(2, 4, 3), 2, torch.randn(4, 1), torch.randn(4)), RuntimeError,
     "expected weight a 1-D tensor of C = 4"),
])
def test_swish_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_group_norm_swish: " + match):
        na.npu_group_norm_swish(*args)


def test_swish_grad_bad_inputs():
    x, w = torch.randn(2, 8, 5), torch.randn(8)
    with pytest.raises(RuntimeError, match="^npu_group_norm_swish_grad: expected rstd shape"):
        na.npu_group_norm_swish_grad(x, x, 4, w, w, torch.randn(2, 4), torch.randn(2, 3),
                                     [True, True, True])
    big = torch.randn(1, 4001, 1)
    wb = torch.randn(4001)
    with pytest.raises(ValueError, match="expected num_groups C / num_groups <= 4000"):
        na.npu_group_norm_swish_grad(big, big, 1, wb, wb, torch.randn(1, 1), torch.randn(1, 1),
                                     [True, True, True])


def test_swish_strict_products():
    args = (torch.randn(2, 4, 3), 2, torch.randn(4), torch.randn(4))
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            na.npu_group_norm_swish(*args)
    with na.strict("310P"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_group_norm_swish(*args)
