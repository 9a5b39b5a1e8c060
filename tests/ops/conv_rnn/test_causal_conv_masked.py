"""npu_masked_causal_conv1d (+ backward) against float64 goldens.

Golden: the doc formula written per output position in float64,
``out[s] = sum_k w[k] * x[s - 2 + k]`` (x before 0 is zero), zeroed where ``mask[b, s]`` is
False; the backward golden is autograd of that loop in float64.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def golden(x, w, mask=None):
    x, w = x.double(), w.double()
    s_len = x.shape[0]
    rows = []
    for s in range(s_len):
        acc = torch.zeros_like(x[0])
        for k in range(3):
            src = s - 2 + k
            if src >= 0:
                acc = acc + w[k] * x[src]
        rows.append(acc)
    out = torch.stack(rows)
    if mask is not None:
        out = out * mask.t().unsqueeze(-1).double()
    return out


def _inputs(s, b, h, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(s, b, h, generator=gen, dtype=torch.float64).to(dtype)
    w = torch.randn(3, h, generator=gen, dtype=torch.float64).to(dtype)
    mask = torch.rand(b, s, generator=gen) > 0.3
    return x, w, mask


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_mask", [True, False])
def test_forward_and_backward_against_golden(dtype, with_mask):
    x, w, mask = _inputs(11, 3, 17, dtype)
    mask = mask if with_mask else None
    got = na.npu_masked_causal_conv1d(x, w, mask=mask)
    assert got.dtype == dtype and got.shape == x.shape
    assert_close_to_golden(got, golden(x, w, mask))

    xd = x.double().requires_grad_()
    wd = w.double().requires_grad_()
    grad = torch.randn(11, 3, 17, generator=torch.Generator().manual_seed(5)).to(dtype)
    golden(xd, wd, mask).backward(grad.double())
    gi, gw = na.npu_masked_causal_conv1d_backward(grad, x, w, mask=mask)
    assert gi.dtype == dtype and gw.dtype == dtype and gw.shape == (3, 17)
    assert_close_to_golden(gi, xd.grad)
    assert_close_to_golden(gw, wd.grad)


def test_short_sequence_and_non_contiguous_input():
    x, w, mask = _inputs(4, 2, 8, torch.bfloat16)
    x_nc = x.transpose(0, 1).contiguous().transpose(0, 1)          # [S, B, H] view, B-major
    w_nc = torch.cat([w, w], dim=1)[:, ::2]
    assert not x_nc.is_contiguous() and not w_nc.is_contiguous()
    got = torch.ops.npu.npu_masked_causal_conv1d(x_nc, w_nc, mask=mask)
    assert_close_to_golden(got, golden(x, w_nc, mask))
    one = na.npu_masked_causal_conv1d(x[:1], w)                     # S = 1: only w[2] acts
    assert_close_to_golden(one, golden(x[:1], w))


def test_autograd_and_gradcheck():
    x, w, mask = _inputs(7, 2, 5, torch.float64)
    x.requires_grad_()
    w.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: na.npu_masked_causal_conv1d(a, b, mask=mask), (x, w))
    xb = x.detach().bfloat16().requires_grad_()
    wb = w.detach().bfloat16().requires_grad_()
    na.npu_masked_causal_conv1d(xb, wb, mask=mask).sum().backward()
    assert xb.grad.shape == xb.shape and wb.grad.shape == wb.shape


@pytest.mark.parametrize("make, error, match", [
    (lambda: (torch.randn(5, 2, 4), torch.randn(2, 4), None), RuntimeError,
     "expected weight the shape \\[W, H\\] = \\(3, 4\\)"),
    (lambda: (torch.randn(5, 2, 4), torch.randn(3, 4), torch.ones(5, 2, dtype=torch.bool)),
     RuntimeError, "expected mask the shape \\[B, S\\] = \\(2, 5\\)"),
    (lambda: (torch.randn(5, 8), torch.randn(3, 8), None), ValueError,
     "expected input a 3-D tensor"),
    (lambda: (torch.randn(5, 2, 4).half(), torch.randn(3, 4), None), TypeError,
     "expected weight the same dtype as input"),
])
def test_bad_inputs(make, error, match):
    x, w, mask = make()
    with pytest.raises(error, match="npu_masked_causal_conv1d: " + match):
        na.npu_masked_causal_conv1d(x, w, mask=mask)


def test_strict_mode():
    x, w, _ = _inputs(5, 2, 4, torch.float32)
    with na.strict("950"), pytest.raises(TypeError, match="expected input dtype in"):
        na.npu_masked_causal_conv1d(x, w)
    with na.strict("A2"), pytest.raises(RuntimeError, match="npu_masked_causal_conv1d"):
        na.npu_masked_causal_conv1d(x.half(), w.half())
