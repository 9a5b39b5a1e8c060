"""npu_deformable_conv2d (+ npu_deformable_conv2dbk) against a float64 golden.

Golden: the seed doc's steps written per sample point in Python floats -- base position
``-pad + o * stride + k * dilation``, plus the offset (x offsets first, then y offsets, then
masks, as the kernel's golden lays them out), floor-corner bilinear interpolation with zero
outside the image, times the mask, placed at ``(oh * kH + ki, ow * kW + kj)`` of deformOut, then
a grouped convolution with stride = kernel.  Backward: autograd of that golden in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def _bilinear(img, y, x):
    """img [H, W]; y, x 0-d tensors (kept differentiable)."""
    h, w = img.shape
    y0, x0 = math.floor(float(y.detach())), math.floor(float(x.detach()))
    total = img.new_zeros(())
    corners = ((y0, x0, (y0 + 1 - y) * (x0 + 1 - x)), (y0, x0 + 1, (y0 + 1 - y) * (x - x0)),
               (y0 + 1, x0, (y - y0) * (x0 + 1 - x)), (y0 + 1, x0 + 1, (y - y0) * (x - x0)))
    for yy, xx, wgt in corners:
        if 0 <= yy < h and 0 <= xx < w:
            total = total + img[yy, xx] * wgt
    return total


def golden(x, w, off, b, ks, stride, pad, dil, groups, dg, modulated):
    x, w, off = x.double(), w.double(), off.double()
    n, c, h, wd = x.shape
    kh, kw = ks
    ho, wo = off.shape[2:]
    k = kh * kw
    planes = []
    for bi in range(n):
        for ch in range(c):
            g = ch // (c // dg)
            rows = []
            for oh in range(ho):
                for ki in range(kh):
                    row = []
                    for ow in range(wo):
                        for kj in range(kw):
                            idx = g * k + ki * kw + kj
                            py = (-pad[0] + oh * stride[2] + ki * dil[2]
                                  + off[bi, dg * k + idx, oh, ow])
                            px = -pad[2] + ow * stride[3] + kj * dil[3] + off[bi, idx, oh, ow]
                            m = off[bi, 2 * dg * k + idx, oh, ow] if modulated else 1.0
                            row.append(_bilinear(x[bi, ch], py, px) * m)
                    rows.append(torch.stack(row))
            planes.append(torch.stack(rows))       # [Ho kH, Wo kW], row oh*kH+ki, col ow*kW+kj
    deform = torch.stack(planes).reshape(n, c, ho * kh, wo * kw)
    out = torch.nn.functional.conv2d(deform, w, None if b is None else b.double(), stride=ks,
                                     groups=groups)
    return out, deform


def _rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


CASES = [  # (x shape, weight shape, kernel, stride, padding, dilation, groups, dg, modulated)
    ((1, 4, 5, 6), (6, 2, 2, 3), [2, 3], [1, 1, 1, 2], [1, 0, 0, 1], [1, 1, 1, 1], 2, 2, True),
    ((2, 2, 4, 4), (3, 2, 3, 3), [3, 3], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], 1, 1, False),
    ((1, 3, 6, 5), (2, 3, 2, 2), [2, 2], [1, 1, 2, 1], [0, 1, 1, 0], [1, 1, 2, 1], 1, 1, True),
]


def _case(case, dtype):
    xs, ws, ks, stride, pad, dil, groups, dg, modulated = case
    ho = (xs[2] + pad[0] + pad[1] - ((ks[0] - 1) * dil[2] + 1)) // stride[2] + 1
    wo = (xs[3] + pad[2] + pad[3] - ((ks[1] - 1) * dil[3] + 1)) // stride[3] + 1
    off = _rand(xs[0], dg * ks[0] * ks[1] * (3 if modulated else 2), ho, wo, dtype=dtype, seed=2,
                scale=1.5)
    return (_rand(*xs, dtype=dtype), _rand(*ws, dtype=dtype, seed=1), off,
            _rand(ws[0], dtype=dtype, seed=3), ks, stride, pad, dil, groups, dg, modulated)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_forward_against_golden(case, dtype):
    args = _case(case, dtype)
    want_out, want_deform = golden(*args)
    out, deform = na.npu_deformable_conv2d(*args)
    assert out.dtype == dtype and deform.dtype == dtype
    assert deform.shape == want_deform.shape
    assert_close_to_golden(deform, want_deform)
    assert_close_to_golden(out, want_out)


def test_seed_example_shapes_and_self_alias():
    x, w, off = torch.rand(2, 4, 6, 6), torch.rand(4, 4, 3, 3), torch.rand(2, 27, 6, 6)
    out, deform = na.npu_deformable_conv2d(self=x, weight=w, offset=off, bias=None,
                                           kernel_size=[3, 3], stride=[1, 1, 1, 1],
                                           padding=[1, 1, 1, 1])
    assert out.shape == (2, 4, 6, 6) and deform.shape == (2, 4, 18, 18)


def test_zero_offsets_full_mask_is_plain_convolution():
    x, w = _rand(1, 2, 5, 5), _rand(3, 2, 3, 3, seed=1)
    off = torch.cat([torch.zeros(1, 18, 5, 5), torch.ones(1, 9, 5, 5)], dim=1)
    out, _ = na.npu_deformable_conv2d(x, w, off, None, [3, 3], [1, 1, 1, 1], [1, 1, 1, 1])
    assert_close_to_golden(out, torch.nn.functional.conv2d(x.double(), w.double(), padding=1))


def test_backward_against_golden_autograd():
    args = list(_case(CASES[0], torch.float64))
    leaves = [t.clone().requires_grad_() for t in args[:4]]
    want_out, _ = golden(*leaves, *args[4:])
    grad = _rand(*want_out.shape, dtype=torch.float64, seed=9)
    want_out.backward(grad)
    out, deform = na.npu_deformable_conv2d(*args)
    got = na.npu_deformable_conv2dbk(args[0], grad, deform, args[1], args[2], *args[4:])
    for g, leaf in zip((got[0], got[1], got[2], got[3]), (leaves[0], leaves[1], leaves[2],
                                                          leaves[3])):
        assert_close_to_golden(g, leaf.grad)
    # through autograd, and non-contiguous input
    x_nc = args[0].transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    out2, deform2 = na.npu_deformable_conv2d(x_nc, *args[1:])
    assert not deform2.requires_grad
    out2.backward(grad)
    assert_close_to_golden(x_nc.grad, leaves[0].grad)


def test_gradcheck_unmodulated():
    case = ((1, 2, 3, 3), (2, 2, 2, 2), [2, 2], [1, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1], 1, 1,
            False)
    args = list(_case(case, torch.float64))
    x, w, off = (t.requires_grad_() for t in args[:3])
    assert torch.autograd.gradcheck(
        lambda a, c, e: na.npu_deformable_conv2d(a, c, e, None, *args[4:])[0], (x, w, off))


@pytest.mark.parametrize("change, error, match", [
    (dict(stride=[1, 1, 1]), ValueError, "expected stride a list of 4 ints"),
    (dict(dilation=[1, 2, 1, 1]), ValueError, "expected dilation 1 in its N and C entries"),
    (dict(groups=3), ValueError, "expected groups a positive divisor"),
    (dict(kernel_size=[3, 3]), RuntimeError, "expected weight the shape"),
    (dict(modulated=False), RuntimeError, "expected offset the shape \\[N, deformable_groups "
     "\\* K_H \\* K_W \\* 2"),
])
def test_bad_inputs(change, error, match):
    names = ["input", "weight", "offset", "bias", "kernel_size", "stride", "padding", "dilation",
             "groups", "deformable_groups", "modulated"]
    kw = dict(zip(names, _case(CASES[0], torch.float32)))
    kw.update(change)
    with pytest.raises(error, match="npu_deformable_conv2d: " + match):
        na.npu_deformable_conv2d(**kw)
