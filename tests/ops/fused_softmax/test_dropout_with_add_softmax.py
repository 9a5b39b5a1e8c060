"""Tests for npu_dropout_with_add_softmax / its backward against goldens written from the doc.

Spec: seed 004 "npu_dropout_with_add_softmax" (prob is the drop rate) and op-plugin's CPU golden
(test/test_base_ops/test_dropout_with_add_softmax.py)::

    y       = x1 + self * alpha
    softmax = softmax(y, -1)                  (rounded to the input dtype)
    out     = softmax * mask * (1 / (1 - prob))
    backward: g = grad * mask / (1 - prob);  d self = alpha * softmax * (g - sum(g * softmax))

The keep-mask is ours (torch's generator), so the goldens read it from the op's first output
and check its statistics and its layout (flat uint8, 1 = kept).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

SHAPE = (32, 1, 128, 128)
DTYPES = [torch.float32, torch.float16, torch.float64]


def make(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=gen, dtype=torch.float64).to(dtype)


def golden_softmax(self, x1, alpha):
    y = x1.double() + self.double() * alpha
    e = torch.exp(y - y.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def keep_of(mask, shape):
    return mask[:torch.Size(shape).numel()].reshape(shape).double()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_no_drop_is_the_softmax_of_the_axpy(dtype):
    s, x1 = make(SHAPE, dtype, 1), make(SHAPE, dtype, 2)
    before = (s.clone(), x1.clone())
    mask, soft, out = na.npu_dropout_with_add_softmax(s, x1, 0.125, 0.0, -1)
    assert mask.dtype == torch.uint8 and mask.shape == (32 * 128 * 128,)
    assert torch.all(mask == 1)
    assert soft.dtype == out.dtype == dtype and soft.shape == out.shape == SHAPE
    want = golden_softmax(s, x1, 0.125)
    assert_close_to_golden(soft, want, dtype=dtype)
    assert_close_to_golden(out, want, dtype=dtype)
    assert torch.equal(out, soft) and out.data_ptr() != soft.data_ptr()   # two outputs
    assert torch.equal(s, before[0]) and torch.equal(x1, before[1])


@pytest.mark.parametrize("dtype,prob", [(torch.float32, 0.1), (torch.float16, 0.9),
                                        (torch.float64, 0.5)], ids=str)
def test_dropout_keeps_with_probability_one_minus_prob(dtype, prob):
    s, x1 = make(SHAPE, dtype, 3), make(SHAPE, dtype, 4)
    mask, soft, out = na.npu_dropout_with_add_softmax(s, x1, 2, prob, -1)
    keep = keep_of(mask, SHAPE)
    assert set(mask.unique().tolist()) <= {0, 1}
    assert abs(keep.mean().item() - (1 - prob)) < 0.01     # ~25 standard deviations
    assert_close_to_golden(soft, golden_softmax(s, x1, 2.0), dtype=dtype)
    # the kernel drops from the softmax already rounded to the input dtype
    want = soft.double() * keep / (1 - prob)
    assert_close_to_golden(out, want, dtype=dtype)


def test_mask_follows_torch_manual_seed():
    s, x1 = make(SHAPE, torch.float32, 5), make(SHAPE, torch.float32, 6)
    torch.manual_seed(7)
    a = na.npu_dropout_with_add_softmax(s, x1, 1.0, 0.5, -1)
    torch.manual_seed(7)
    b = na.npu_dropout_with_add_softmax(s, x1, 1.0, 0.5, -1)
    c = na.npu_dropout_with_add_softmax(s, x1, 1.0, 0.5, -1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    assert not torch.equal(b[0], c[0])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_op_matches_doc_formula(dtype):
    grad = make(SHAPE, dtype, 8) - 0.5
    soft = golden_softmax(make(SHAPE, torch.float64, 9), make(SHAPE, torch.float64, 10), 1.0)
    soft = soft.to(dtype)
    gen = torch.Generator().manual_seed(11)
    mask = (torch.rand(32 * 128 * 128, generator=gen) < 0.7).to(torch.uint8)
    d_self, passed = na.npu_dropout_with_add_softmax_backward(grad, mask, soft, 0.5, 0.3, -1)
    g = grad.double() * keep_of(mask, SHAPE) / 0.7
    sd = soft.double()
    want = 0.5 * sd * (g - (g * sd).sum(-1, keepdim=True))
    assert d_self.dtype == dtype and d_self.shape == SHAPE
    assert_close_to_golden(d_self, want, dtype=dtype)
    assert torch.equal(passed, grad)       # the NPU returns the incoming grad as output 1


def test_autograd_matches_golden_autograd_with_the_forward_mask():
    s = make(SHAPE, torch.float64, 12).requires_grad_()
    x1 = make(SHAPE, torch.float64, 13).requires_grad_()
    mask, soft, out = na.npu_dropout_with_add_softmax(s, x1, 0.7, 0.4, -1)
    assert not soft.requires_grad and not mask.requires_grad and out.requires_grad
    dy = make(SHAPE, torch.float64, 14)
    out.backward(dy)
    gs = s.detach().clone().requires_grad_()
    gx = x1.detach().clone().requires_grad_()
    (golden_softmax(gs, gx, 0.7) * keep_of(mask, SHAPE) / 0.6).backward(dy)
    assert_close_to_golden(s.grad, gs.grad, dtype=torch.float64)
    assert_close_to_golden(x1.grad, gx.grad, dtype=torch.float64)


def test_gradcheck():
    s = make(SHAPE, torch.float64, 15).requires_grad_()
    x1 = make(SHAPE, torch.float64, 16).requires_grad_()

    def fn(a, b):
        torch.manual_seed(0)                  # the same keep-mask on every evaluation
        return na.npu_dropout_with_add_softmax(a, b, 1.5, 0.2, -1)[2]

    assert torch.autograd.gradcheck(fn, (s, x1), fast_mode=True)


def test_same_through_torch_ops():
    s, x1 = make(SHAPE, torch.float32, 17), make(SHAPE, torch.float32, 18)
    a = na.npu_dropout_with_add_softmax(s, x1, 1, 0.0, -1)
    b = torch.ops.npu.npu_dropout_with_add_softmax(s, x1, 1, 0.0, -1)
    assert all(torch.equal(p, q) for p, q in zip(a, b))


@pytest.mark.parametrize("shape,kw,error,match", [
    ((32, 1, 128, 100), {}, ValueError, "expected self H and W each one of"),
    ((16, 1, 128, 128), {}, ValueError, "expected self N [*] C a multiple of 32"),
    ((32, 128, 128), {}, ValueError, "expected self a 4-D tensor"),
    (SHAPE, {"dim": 3}, ValueError, "expected dim -1"),
    (SHAPE, {"prob": -0.1}, ValueError, "expected prob a drop rate in"),
    (SHAPE, {"prob": 1.0}, NotImplementedError, "expected prob below 1"),
])
def test_bad_inputs(shape, kw, error, match):
    args = {"alpha": 1.0, "prob": 0.0, "dim": -1, **kw}
    with pytest.raises(error, match=match):
        na.npu_dropout_with_add_softmax(torch.zeros(shape), torch.zeros(shape), args["alpha"],
                                        args["prob"], args["dim"])


def test_bad_pairs():
    s = torch.zeros(SHAPE)
    with pytest.raises(RuntimeError, match="expected x1 the shape of self"):
        na.npu_dropout_with_add_softmax(s, torch.zeros(32, 1, 128, 256), 1.0, 0.0, -1)
    with pytest.raises(TypeError, match="expected x1 the same dtype"):
        na.npu_dropout_with_add_softmax(s, s.half(), 1.0, 0.0, -1)
    with pytest.raises(RuntimeError, match="expected mask a 1-D tensor of 524288"):
        na.npu_dropout_with_add_softmax_backward(s, torch.ones(SHAPE, dtype=torch.uint8), s,
                                                 1.0, 0.0, -1)


def test_strict_mode_rules():
    s = torch.zeros(SHAPE)
    with na.strict("A2"):
        na.npu_dropout_with_add_softmax(s, s, 1.0, 0.0, -1)
        with pytest.raises(TypeError, match="expected self dtype in"):
            na.npu_dropout_with_add_softmax(s.double(), s.double(), 1.0, 0.0, -1)
    with na.strict("310P"), pytest.raises(Exception, match="npu_dropout_with_add_softmax"):
        na.npu_dropout_with_add_softmax(s, s, 1.0, 0.0, -1)
