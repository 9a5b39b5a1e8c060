"""npu_roi_align / npu_roi_alignbk against a per-sample float64 golden of the kernel's steps."""

import math

import pytest
import torch

import npu_anywhere as na

X6 = torch.arange(1.0, 37.0).reshape(1, 1, 6, 6)
ROI = torch.tensor([[0, -2.0, -2.0, 22.0, 22.0]])


def golden(x, rois, scale, ph, pw, sample_num, mode):
    """Loop over rois, bins and samples (ops-cv roi_align_grad kernel steps), float64."""
    x = x.double()
    b_, c_, h_, w_ = x.shape
    out = torch.zeros(rois.shape[0], c_, ph, pw, dtype=torch.float64)
    for k, (b, x1, y1, x2, y2) in enumerate(rois.double().tolist()):
        b = math.floor(b)
        if not 0 <= b < b_:
            continue
        sx, sy, ex, ey = x1 * scale, y1 * scale, x2 * scale, y2 * scale
        if mode in (1, 3):
            ex, ey = ex + scale, ey + scale
        if mode == 2:
            sx, sy, ex, ey = sx - .5, sy - .5, ex - .5, ey - .5
        rw, rh = ex - sx, ey - sy
        if mode < 2:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        if mode == 3:
            rw, rh = max(rw, 0.0), max(rh, 0.0)
        bw, bh = rw / pw, rh / ph
        nw = sample_num or math.ceil(bw)
        nh = sample_num or math.ceil(bh)
        if nw <= 0 or nh <= 0:
            continue

        def taps(coord, limit):
            if coord < -1 or coord > limit:
                return []
            c = min(max(coord, 0.0), limit - 1)
            lo = math.floor(c)
            hi = min(lo + 1, limit - 1)
            return [(lo, 1 - (c - lo)), (hi, c - lo)]

        for p in range(ph):
            for q in range(pw):
                acc = torch.zeros(c_, dtype=torch.float64)
                for i in range(nh):
                    y = sy + (p * nh + i + .5) * bh / nh
                    for j in range(nw):
                        xx = sx + (q * nw + j + .5) * bw / nw
                        for yi, wy in taps(y, h_):
                            for xi, wx in taps(xx, w_):
                                acc += wy * wx * x[b, :, yi, xi]
                out[k, :, p, q] = acc / (nh * nw)
    return out


def test_op_plugin_goldens():
    # op-plugin test_roi_align.py / test_roi_align_backward.py expectations
    out = na.npu_roi_align(X6, ROI, 0.25, 3, 3, 2, 0)
    torch.testing.assert_close(out, torch.tensor([[[[4.5, 6.5, 8.5], [16.5, 18.5, 20.5],
                                                    [28.5, 30.5, 32.5]]]]))
    grad = na.npu_roi_alignbk(out, ROI, X6.size(), 3, 3, 0.25, 2)
    torch.testing.assert_close(grad[0, 0, :2], torch.tensor(
        [[1.0786, 1.0557, 1.4942, 1.5248, 1.9226, 2.4709],
         [1.0557, 1.0332, 1.4625, 1.4924, 1.8817, 2.4183]]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad[0, 0, 5, -1], torch.tensor(11.4575), atol=1e-4, rtol=1e-4)


def _rois(k=4, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo = torch.rand(k, 2, generator=g) * 14 - 3
    hi = lo + torch.rand(k, 2, generator=g) * 12
    b = torch.tensor([0., 1., 1.7, 3.0])[:k, None]          # 3.0: no such image -> zeros
    return torch.cat([b, lo, hi], 1)


@pytest.mark.parametrize("mode,sample_num", [(0, 2), (1, 0), (2, 3), (3, 0)])
def test_modes_against_golden(mode, sample_num):
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    rois = _rois()
    out = na.npu_roi_align(x, rois.double(), 0.5, 3, 2, sample_num, mode)
    torch.testing.assert_close(out, golden(x, rois, 0.5, 3, 2, sample_num, mode))
    assert out[3].abs().sum() == 0


def test_half_noncontiguous_and_untouched():
    base = torch.randn(2, 7, 6, 3)
    x = base.permute(0, 3, 1, 2).half()          # non-contiguous NCHW
    rois = _rois().half()
    before = (x.clone(), rois.clone())
    out = na.npu_roi_align(x, rois, 0.5, 2, 2, 2, 1)
    assert out.dtype == torch.float16 and out.shape == (4, 3, 2, 2)
    ref = golden(x.float(), rois.float(), 0.5, 2, 2, 2, 1)
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(x, before[0]) and torch.equal(rois, before[1])


def test_backward_is_the_transpose_and_autograd_uses_it():
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    rois = _rois().double()
    g = torch.randn(4, 2, 3, 2, dtype=torch.float64)
    for mode, sample_num in ((1, 2), (0, 0)):
        out = na.npu_roi_align(x, rois, 0.5, 3, 2, sample_num, mode)
        back = na.npu_roi_alignbk(g, rois, list(x.shape), 2, 3, 0.5, sample_num, mode)
        torch.testing.assert_close((back * x).sum(), (g * out).sum())
        (auto,) = torch.autograd.grad(out, x, g)
        torch.testing.assert_close(auto, back)
    assert torch.autograd.gradcheck(lambda t: na.npu_roi_align(t, rois, 0.7, 2, 2, 0, 2), (x,))


def test_bad_inputs_raise_the_same_everywhere():
    x, rois = torch.randn(1, 2, 4, 4), _rois(2)
    for args, match in (((x, rois[:, :4], 0.5, 2, 2, 2, 1), "expected rois of shape"),
                        ((x, rois, 0.0, 2, 2, 2, 1), "expected spatial_scale > 0"),
                        ((x, rois, 0.5, 2, 2, -1, 1), "expected sample_num >= 0"),
                        ((x[0], rois, 0.5, 2, 2, 2, 1), "expected self a 4-D tensor")):
        for fn in (na.npu_roi_align, torch.ops.npu.npu_roi_align):
            with pytest.raises(RuntimeError, match=match):
                fn(*args)
    with pytest.raises(RuntimeError, match="npu_roi_alignbk: expected self the shape"):
        na.npu_roi_alignbk(torch.randn(2, 2, 2, 3), rois, [1, 2, 4, 4], 2, 3, 0.5, 2)
