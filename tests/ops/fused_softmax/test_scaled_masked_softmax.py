"""Tests for npu_scaled_masked_softmax / its backward against goldens written from the docs.

Spec: seed 004 "npu_scaled_masked_softmax" and op-plugin's CPU golden
(test/test_base_ops/test_scaled_masked_softmax.py)::

    out = softmax(masked_fill(x * scale, mask, -10000), dim=-1)
    fixed_triu_mask=True: mask = triu(ones(H, W), diagonal=1)

Kernel rounding (scaled_masked_softmax_v2.h): float16 rounds ``x * fp16(scale)`` to float16
before the float32 softmax; every dtype rounds the result once.  The goldens below take the
softmax in float64 and apply only that float16 rounding step.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def make(shape, dtype, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def make_mask(shape, seed=0, p=0.3):
    gen = torch.Generator().manual_seed(seed + 100)
    return torch.rand(shape, generator=gen) < p


def golden_mask(mask, shape, fixed_triu):
    if fixed_triu:
        h, w = shape[-2:]
        return torch.tensor([[j > i for j in range(w)] for i in range(h)]).expand(shape)
    return mask.expand(shape)


def golden(x, mask, scale, fixed_triu=False):
    m = golden_mask(mask, x.shape, fixed_triu)
    if x.dtype == torch.float16:
        s16 = torch.tensor(scale, dtype=torch.float16).double()
        z = (x.double() * s16).to(torch.float16).double()
    else:
        z = x.double() * scale
    z = torch.where(m, torch.full_like(z, -10000.0), z)
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def golden_grad(dy, y, mask, scale, fixed_triu=False):
    m = golden_mask(mask, dy.shape, fixed_triu)
    dy, y = dy.double(), y.double()
    dx = scale * y * (dy - (dy * y).sum(-1, keepdim=True))
    return torch.where(m, torch.zeros_like(dx), dx)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_shape", [(2, 3, 32, 64), (2, 1, 32, 64), (1, 3, 32, 64),
                                        (32, 64), (1, 1, 1, 64)], ids=str)
@pytest.mark.parametrize("fixed_triu", [False, True])
def test_forward_matches_doc_formula(dtype, mask_shape, fixed_triu):
    shape = (2, 3, 32, 64)
    x = make(shape, dtype, seed=len(mask_shape))
    mask = make_mask(mask_shape)
    before_x, before_m = x.clone(), mask.clone()
    out = na.npu_scaled_masked_softmax(x, mask, 0.37, fixed_triu)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_golden(out, golden(x, mask, 0.37, fixed_triu), dtype=dtype)
    assert torch.equal(x, before_x) and torch.equal(mask, before_m)


def test_fixed_triu_ignores_the_given_mask_and_masks_the_future():
    x = make((1, 1, 32, 32), torch.float32)
    all_masked = torch.ones(1, 1, 32, 32, dtype=torch.bool)
    out = na.npu_scaled_masked_softmax(x, all_masked, 1.0, True)
    assert torch.all(out.triu(1) == 0)
    assert out[0, 0, 0, 0] == 1.0          # the first query sees only the first key


def test_fully_masked_row_is_uniform_and_has_zero_gradient():
    x = make((1, 2, 32, 32), torch.float64).requires_grad_()
    mask = torch.zeros(1, 2, 32, 32, dtype=torch.bool)
    mask[0, 1, 5] = True                   # one whole row masked
    out = na.npu_scaled_masked_softmax(x, mask, 2.0)
    torch.testing.assert_close(out[0, 1, 5], torch.full((32,), 1 / 32, dtype=torch.float64))
    out.backward(make((1, 2, 32, 32), torch.float64, seed=1))
    assert torch.all(x.grad[0, 1, 5] == 0)


def test_masked_value_is_minus_10000_not_minus_inf():
    # scale * x near -10000 competes with the fill value: with -inf the masked key would get 0
    x = torch.full((1, 1, 32, 32), -10000.0)
    mask = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    mask[..., :16] = True
    out = na.npu_scaled_masked_softmax(x, mask, 1.0)
    torch.testing.assert_close(out, torch.full_like(out, 1 / 32))


def test_float16_scales_in_float16_before_the_softmax():
    # 1003 * fp16(0.1) rounds to 100.25 in float16 (100.3 unrounded); 1005 * 0.1 = 100.5 both ways
    x = torch.full((1, 1, 32, 32), -1000.0, dtype=torch.float16)
    x[..., 0], x[..., 1] = 1003.0, 1005.0
    none = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    out = na.npu_scaled_masked_softmax(x, none, 0.1)
    assert_close_to_golden(out, golden(x, none, 0.1), dtype=torch.float16)
    unrounded = torch.softmax(x.double() * 0.1, -1)
    assert (out[..., 0].double() - unrounded[..., 0]).abs().min() > 0.01


def test_non_contiguous_inputs():
    base = make((2, 32, 3, 64), torch.float32)
    x = base.transpose(1, 2)               # (2, 3, 32, 64), not contiguous
    mask = make_mask((2, 64, 32)).transpose(1, 2)[:, None]
    out = na.npu_scaled_masked_softmax(x, mask, 0.5)
    assert_close_to_golden(out, golden(x, mask, 0.5), dtype=torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fixed_triu", [False, True])
def test_backward_op_matches_doc_formula(dtype, fixed_triu):
    shape = (1, 2, 32, 64)
    dy = make(shape, dtype, seed=3)
    y = golden(make(shape, torch.float64, seed=4), make_mask(shape), 1.0).to(dtype)
    mask = make_mask((1, 1, 32, 64), seed=5)
    dx = na.npu_scaled_masked_softmax_backward(dy, y, mask, 0.8, fixed_triu)
    assert dx.shape == shape and dx.dtype == dtype
    assert_close_to_golden(dx, golden_grad(dy, y, mask, 0.8, fixed_triu), dtype=dtype)


@pytest.mark.parametrize("fixed_triu", [False, True])
def test_gradcheck(fixed_triu):
    # the documented minimum is 32 x 32 (1024 inputs): fast mode checks random projections
    x = make((1, 1, 32, 32), torch.float64, scale=1.0).requires_grad_()
    mask = make_mask((1, 32))
    assert torch.autograd.gradcheck(
        lambda t: na.npu_scaled_masked_softmax(t, mask, 0.6, fixed_triu), (x,), fast_mode=True)


def test_autograd_matches_golden_autograd():
    x = make((1, 2, 32, 32), torch.float32).requires_grad_()
    mask = make_mask((1, 1, 32, 32))
    dy = make((1, 2, 32, 32), torch.float32, seed=9)
    na.npu_scaled_masked_softmax(x, mask, 1.5).backward(dy)
    xs = x.detach().double().requires_grad_()
    golden(xs, mask, 1.5).backward(dy.double())
    assert_close_to_golden(x.grad, xs.grad, dtype=torch.float32)


def test_same_through_torch_ops_and_int_scale():
    x = make((1, 1, 32, 32), torch.float32)
    mask = make_mask((1, 1, 32, 32))
    a = na.npu_scaled_masked_softmax(x, mask, 2)
    b = torch.ops.npu.npu_scaled_masked_softmax(x, mask, 2)
    assert torch.equal(a, b)
    assert_close_to_golden(a, golden(x, mask, 2.0), dtype=torch.float32)


@pytest.mark.parametrize("shape,error,match", [
    ((2, 32, 32), ValueError, "expected x a 4-D tensor"),
    ((1, 1, 32, 48), ValueError, "expected x W"),
    ((1, 1, 4128, 32), ValueError, "expected x H"),
])
def test_bad_shapes(shape, error, match):
    with pytest.raises(error, match=match):
        na.npu_scaled_masked_softmax(torch.zeros(shape), torch.zeros(shape, dtype=torch.bool))


def test_bad_mask():
    x = torch.zeros(1, 2, 32, 32)
    with pytest.raises(RuntimeError, match="expected mask a shape that broadcasts"):
        na.npu_scaled_masked_softmax(x, torch.zeros(1, 2, 1, 31, dtype=torch.bool))
    with pytest.raises(TypeError, match="expected mask dtype in"):
        na.npu_scaled_masked_softmax(x, torch.zeros(1, 2, 32, 32, dtype=torch.uint8))


def test_strict_mode_rules():
    x = torch.zeros(1, 1, 32, 32)
    mask = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    with na.strict("A2"):
        na.npu_scaled_masked_softmax(x, mask, 1.0, False)
        with pytest.raises(ValueError, match="expected fixed_triu_mask False on A2"):
            na.npu_scaled_masked_softmax(x, mask, 1.0, True)
        with pytest.raises(TypeError, match="expected x dtype in"):
            na.npu_scaled_masked_softmax(x.double(), mask)
    assert na.npu_scaled_masked_softmax(x, mask, 1.0, True).shape == x.shape
