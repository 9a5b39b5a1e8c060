"""npu_ps_roi_pooling and its backward against a loop golden of R-FCN's position-sensitive
average pooling (float64)."""

import math

import pytest
import torch

import npu_anywhere as na


def _round(v):
    return math.floor(v + 0.5)          # the kernel adds 0.5 and floors


def golden(x, rois, scale, g, dim):
    x = x.double()
    batch, _, h, w = x.shape
    n, _, r = rois.shape
    out = torch.zeros(n * r, dim, g, g, dtype=torch.float64)
    for i in range(n):
        for j in range(r):
            b, x1, y1, x2, y2 = rois[i, :, j].double().tolist()
            b = math.floor(b)
            if not 0 <= b < batch:
                continue
            sx, sy = _round(x1) * scale, _round(y1) * scale
            ex, ey = (_round(x2) + 1) * scale, (_round(y2) + 1) * scale
            bw, bh = max(ex - sx, 0.1) / g, max(ey - sy, 0.1) / g
            for gh in range(g):
                h0 = min(max(math.floor(sy + gh * bh), 0), h)
                h1 = min(max(math.ceil(sy + (gh + 1) * bh), 0), h)
                for gw in range(g):
                    w0 = min(max(math.floor(sx + gw * bw), 0), w)
                    w1 = min(max(math.ceil(sx + (gw + 1) * bw), 0), w)
                    if h1 <= h0 or w1 <= w0:
                        continue
                    for d in range(dim):
                        c = (d * g + gh) * g + gw
                        out[i * r + j, d, gh, gw] = x[b, c, h0:h1, w0:w1].mean()
    return out


def _rois(n=2, r=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lo = torch.rand(n, 2, r, generator=gen) * 8 - 1
    hi = lo + torch.rand(n, 2, r, generator=gen) * 9
    b = torch.tensor([[0., 1., 2.5], [1., 0., -1.]])[:n, :r, None].transpose(1, 2)
    return torch.cat([b, lo, hi], 1)


def test_op_plugin_example_is_all_zero():
    # op-plugin test_ps_roi_pooling(_backward).py: rois outside the 1x1 map (one on image 6)
    roi = torch.tensor([[[1], [2], [3], [4], [5]], [[6], [7], [8], [9], [10]]],
                       dtype=torch.float16)
    x = torch.arange(1., 17.).reshape(2, 8, 1, 1).half().requires_grad_()
    out = na.npu_ps_roi_pooling(x, roi, 0.5, 2, 2)
    assert out.shape == (2, 2, 2, 2) and out.dtype == torch.float16 and not out.any()
    out.backward(torch.ones_like(out))
    assert x.grad.shape == x.shape and not x.grad.any()


@pytest.mark.parametrize("g,dim,scale", [(2, 2, 0.5), (3, 1, 1.3)])
def test_against_golden(g, dim, scale):
    x = torch.randn(2, g * g * dim, 7, 6, dtype=torch.float64)
    rois = _rois()
    torch.testing.assert_close(na.npu_ps_roi_pooling(x, rois.double(), scale, g, dim),
                               golden(x, rois, scale, g, dim))


def test_low_precision_noncontiguous_untouched():
    x = torch.randn(2, 6, 7, 8).permute(0, 3, 1, 2).bfloat16()     # [2, 8, 6, 7]
    rois = _rois().bfloat16()
    before = (x.clone(), rois.clone())
    out = na.npu_ps_roi_pooling(x, rois, 0.8, 2, 2)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), golden(x.float(), rois.float(), 0.8, 2, 2),
                               atol=2e-2, rtol=2e-2)
    assert torch.equal(x, before[0]) and torch.equal(rois, before[1])


def test_backward_matches_autograd_and_gradcheck():
    x = torch.randn(2, 8, 5, 6, dtype=torch.float64, requires_grad=True)
    rois = _rois().double()
    out = na.npu_ps_roi_pooling(x, rois, 0.9, 2, 2)
    grad = torch.randn_like(out)
    back = na.npu_ps_roi_pooling_backward(grad, rois, 0.9, 2, 2, [5, 6])
    torch.testing.assert_close((back * x).sum(), (grad * out).sum())   # the exact transpose
    torch.testing.assert_close(torch.autograd.grad(out, x, grad)[0], back)
    small = torch.randn(2, 8, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: na.npu_ps_roi_pooling(t, rois[:, :, :2], 0.6, 2, 2),
                                    (small,))


def test_bad_inputs():
    x, rois = torch.randn(2, 8, 4, 4), _rois()
    cases = (((x, rois, 0.5, 2, 3), "expected self group_size\\*\\*2 \\* output_dim = 12"),
             ((x, rois[:, :4], 0.5, 2, 2), "expected rois of shape"),
             ((x, rois, 0.5, 128, 2), "expected group_size in \\(0, 128\\)"),
             ((x, rois, -1.0, 2, 2), "expected spatial_scale > 0"),
             ((x, rois[:1], 0.5, 2, 2), "expected rois the batch of self \\(2\\)"),
             ((x, rois.half(), 0.5, 2, 2), "expected rois the same dtype as self"))
    for args, match in cases:
        for fn in (na.npu_ps_roi_pooling, torch.ops.npu.npu_ps_roi_pooling):
            with pytest.raises(RuntimeError, match=match):
                fn(*args)
