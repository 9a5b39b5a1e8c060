"""npu_bounding_box_encode / decode and npu_rotated_box_encode / decode against goldens.

Goldens: the doc formulas in float64 (Python floats), and for the pre-950 bounding-box kernels
their float16 steps replayed with NumPy float16 scalars (each NumPy float16 operation rounds
to float16, as each of the kernel's vector instructions does).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16 = np.float16


def boxes(n, seed, dtype=torch.float32, scale=30.0):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * scale
    wh = torch.rand(n, 2, generator=gen) * scale
    return torch.cat([xy, xy + wh], 1).to(dtype)


# ------------------------------------------------------------- bounding box encode --


def encode_f16_steps(anchor, gt, means, stds):
    """The pre-950 kernel, one float16 rounding per instruction."""
    out = []
    for a, g in zip(anchor.tolist(), gt.tolist()):
        a, g = [F16(v) for v in a], [F16(v) for v in g]
        px, py = (a[0] + a[2]) * F16(0.5), (a[1] + a[3]) * F16(0.5)
        pw, ph = (a[2] - a[0]) + F16(1), (a[3] - a[1]) + F16(1)
        gx, gy = (g[0] + g[2]) * F16(0.5), (g[1] + g[3]) * F16(0.5)
        gw, gh = (g[2] - g[0]) + F16(1), (g[3] - g[1]) + F16(1)
        with np.errstate(all="ignore"):
            raw = [(gx - px) / pw, (gy - py) / ph, F16(np.log(np.float32(gw / pw))),
                   F16(np.log(np.float32(gh / ph)))]
            out.append([float((r + F16(-m)) * F16(1.0 / s)) for r, m, s in zip(raw, means, stds)])
    return torch.tensor(out, dtype=torch.float64)


def encode_f64(anchor, gt, means, stds):
    out = []
    for a, g in zip(anchor.double().tolist(), gt.double().tolist()):
        pw, ph, gw, gh = a[2] - a[0] + 1, a[3] - a[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
        d = [((g[0] + g[2]) - (a[0] + a[2])) / 2 / pw, ((g[1] + g[3]) - (a[1] + a[3])) / 2 / ph,
             math.log(gw / pw), math.log(gh / ph)]
        out.append([(v - m) / s for v, m, s in zip(d, means, stds)])
    return torch.tensor(out, dtype=torch.float64)


MEANS, STDS = (0.05, -0.1, 0.0, 0.2), (0.1, 0.1, 0.2, 0.3)


def test_encode_doc_example():
    a = torch.tensor([[1., 2., 3., 4.], [3., 4., 5., 6.]])
    g = torch.tensor([[5., 6., 7., 8.], [7., 8., 9., 6.]])
    want = torch.tensor([[13.328125, 13.328125, 0.0, 0.0], [13.328125, 6.6640625, 0.0, math.nan]])
    for dtype in (torch.float32, torch.float16):
        out = na.npu_bounding_box_encode(a.to(dtype), g.to(dtype), 0, 0, 0, 0, 0.1, 0.1, 0.2, 0.2)
        assert out.dtype == dtype and out.shape == (2, 4)
        torch.testing.assert_close(out.float(), want, equal_nan=True, rtol=0, atol=0)


def test_encode_atlas_training_takes_log_of_magnitude():
    # Seed 004's example output, printed on an Atlas training chip.
    a = torch.tensor([[3., 4., 5., 6.]])
    g = torch.tensor([[7., 8., 9., 6.]])
    with na.strict("910"):
        out = na.npu_bounding_box_encode(a, g, 0, 0, 0, 0, 0.1, 0.1, 0.2, 0.2)
    assert out.tolist() == [[13.328125, 6.6640625, 0.0, -5.4921875]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_encode_float16_steps_and_formula(dtype):
    a, g = boxes(37, 0, dtype), boxes(37, 1, dtype)
    out = na.npu_bounding_box_encode(a, g, *MEANS, *STDS)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), encode_f16_steps(a, g, MEANS, STDS), rtol=0, atol=0)
    # float16 arithmetic stays within a few float16 ulps of the formula (scaled by 1/std).
    assert_close_to_golden(out, encode_f64(a.half(), g.half(), MEANS, STDS), rtol=2e-2, atol=4e-2)


def test_encode_strict_950_is_float32():
    a, g = boxes(9, 2), boxes(9, 3)
    with na.strict("950"):
        out = na.npu_bounding_box_encode(a, g, *MEANS, *STDS)
    assert_close_to_golden(out, encode_f64(a, g, MEANS, STDS), rtol=1e-5, atol=1e-5)


def test_encode_non_contiguous_inputs_untouched():
    a, g = boxes(6, 4).t().contiguous().t(), boxes(6, 5)[::1]
    a2, g2 = a.clone(), g.clone()
    out = na.npu_bounding_box_encode(a, g, *MEANS, *STDS)
    torch.testing.assert_close(out.double(), encode_f16_steps(a, g, MEANS, STDS), rtol=0, atol=0)
    assert torch.equal(a, a2) and torch.equal(g, g2)


# ------------------------------------------------------------- bounding box decode --


def decode_f16_steps(rois, deltas, means, stds, max_shape, clip):
    ratio = abs(F16(np.log(np.float32(F16(clip)))))
    out = []
    for r, d in zip(rois.tolist(), deltas.tolist()):
        r, d = [F16(v) for v in r], [F16(v) for v in d]
        dx, dy, dw, dh = [v * F16(s) + F16(m) for v, s, m in zip(d, stds, means)]
        dw, dh = max(min(dw, ratio), -ratio), max(min(dh, ratio), -ratio)
        px, py = (r[0] + r[2]) * F16(0.5), (r[1] + r[3]) * F16(0.5)
        pw, ph = (r[2] - r[0]) + F16(1), (r[3] - r[1]) + F16(1)
        gw = F16(np.exp(np.float32(dw))) * pw
        gh = F16(np.exp(np.float32(dh))) * ph
        gx, gy = dx * pw + px, dy * ph + py
        box = [(gw * F16(-0.5) + gx) + F16(0.5), (gh * F16(-0.5) + gy) + F16(0.5),
               (gw * F16(0.5) + gx) - F16(0.5), (gh * F16(0.5) + gy) - F16(0.5)]
        top = [F16(max_shape[1] - 1), F16(max_shape[0] - 1)] * 2
        out.append([float(max(min(v, t), F16(0))) for v, t in zip(box, top)])
    return torch.tensor(out, dtype=torch.float64)


def decode_f64(rois, deltas, means, stds, max_shape, clip):
    ratio = abs(math.log(clip))
    out = []
    for r, d in zip(rois.double().tolist(), deltas.double().tolist()):
        dx, dy, dw, dh = [v * s + m for v, s, m in zip(d, stds, means)]
        dw, dh = max(min(dw, ratio), -ratio), max(min(dh, ratio), -ratio)
        pw, ph = r[2] - r[0] + 1, r[3] - r[1] + 1
        gx, gy = (r[0] + r[2]) / 2 + dx * pw, (r[1] + r[3]) / 2 + dy * ph
        gw, gh = pw * math.exp(dw), ph * math.exp(dh)
        box = [gx - gw / 2 + 0.5, gy - gh / 2 + 0.5, gx + gw / 2 - 0.5, gy + gh / 2 - 0.5]
        top = [max_shape[1] - 1, max_shape[0] - 1] * 2
        out.append([max(min(v, t), 0.0) for v, t in zip(box, top)])
    return torch.tensor(out, dtype=torch.float64)


def deltas(n, seed, dtype=torch.float32):
    return (torch.randn(n, 4, generator=torch.Generator().manual_seed(seed)) * 0.8).to(dtype)


def test_decode_doc_example():
    rois = torch.tensor([[1., 2., 3., 4.], [3., 4., 5., 6.]])
    d = torch.tensor([[5., 6., 7., 8.], [7., 8., 9., 6.]])
    want = torch.tensor([[2.5, 6.5, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
    for dtype in (torch.float32, torch.float16):
        out = na.npu_bounding_box_decode(rois.to(dtype), d.to(dtype), 0, 0, 0, 0, 1, 1, 1, 1,
                                         (10, 10), 0.1)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_float16_steps_and_formula(dtype):
    # max_shape [h, w] = [25, 41]: y clamps at 24, x at 40; clip 0.3 caps |dw|, |dh| at 1.204.
    rois, d = boxes(29, 6, dtype), deltas(29, 7, dtype)
    args = (MEANS, STDS, [25, 41], 0.3)
    out = na.npu_bounding_box_decode(rois, d, *args[0], *args[1], *args[2:])
    assert out.dtype == dtype and out.shape == (29, 4)
    torch.testing.assert_close(out.double(), decode_f16_steps(rois, d, *args), rtol=0, atol=0)
    assert_close_to_golden(out, decode_f64(rois.half(), d.half(), *args), rtol=1e-2, atol=0.1)
    assert out[:, [0, 2]].max() <= 40 and out[:, [1, 3]].max() <= 24 and out.min() >= 0


def decode_950_f64(rois, deltas, means, stds, max_shape):
    """The 950 kernel's README: no size-delta clip, bounds [0, W] / [0, H]."""
    out = []
    for r, d in zip(rois.double().tolist(), deltas.double().tolist()):
        dx, dy, dw, dh = [v * s + m for v, s, m in zip(d, stds, means)]
        pw, ph = r[2] - r[0] + 1, r[3] - r[1] + 1
        gx, gy = (r[0] + r[2]) / 2 + dx * pw, (r[1] + r[3]) / 2 + dy * ph
        gw, gh = pw * math.exp(dw), ph * math.exp(dh)
        box = [gx - gw / 2 + 0.5, gy - gh / 2 + 0.5, gx + gw / 2 - 0.5, gy + gh / 2 - 0.5]
        top = [max_shape[1], max_shape[0]] * 2
        out.append([max(min(v, t), 0.0) for v, t in zip(box, top)])
    return torch.tensor(out, dtype=torch.float64)


def test_decode_strict_950_and_non_contiguous():
    rois, d = boxes(8, 8).t().contiguous().t(), deltas(16, 9)[::2] * 4
    with na.strict("950"):
        out = torch.ops.npu.npu_bounding_box_decode(rois, d, *MEANS, *STDS, [40, 50], 16 / 1000)
        with pytest.raises(RuntimeError, match="expected wh_ratio_clip > 0 on the Ascend 950"):
            na.npu_bounding_box_decode(rois, d, *MEANS, *STDS, [40, 50], 0.0)
    assert_close_to_golden(out, decode_950_f64(rois, d, MEANS, STDS, [40, 50]),
                           rtol=1e-5, atol=1e-4)
    assert out[:, [0, 2]].max() == 50 and out[:, [1, 3]].max() == 40


def test_box_coding_bad_inputs():
    a = boxes(3, 0)
    with pytest.raises(RuntimeError, match="npu_bounding_box_encode: expected stds2 non-zero"):
        na.npu_bounding_box_encode(a, a, 0, 0, 0, 0, 1, 1, 0, 1)
    with pytest.raises(RuntimeError, match="npu_bounding_box_decode: expected max_shape a list"):
        na.npu_bounding_box_decode(a, a, 0, 0, 0, 0, 1, 1, 1, 1, [5, 5, 5], 0.1)
    with pytest.raises(RuntimeError, match="expected rois a 2-D tensor of shape \\(N, 4\\)"):
        na.npu_bounding_box_decode(a[:, :3], a[:, :3], 0, 0, 0, 0, 1, 1, 1, 1, [5, 5], 0.1)


# ------------------------------------------------------------------ rotated boxes --


def rotated(b, n, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(b, 2, n, generator=gen) * 50
    wh = torch.rand(b, 2, n, generator=gen) * 40 + 0.3      # some sizes below the clamp of 1
    angle = (torch.rand(b, 1, n, generator=gen) - 0.5) * 170
    return torch.cat([xy, xy + wh, angle], 1).to(dtype)


def centre(box):
    x1, y1, x2, y2, t = box
    w, h = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    return x1 + w / 2, y1 + h / 2, w, h, t


def per_box(t):
    """(B, 5, N) -> list of (b, n, [5 values]) in float64."""
    t = t.double()
    return [(b, n, t[b, :, n].tolist()) for b in range(t.shape[0]) for n in range(t.shape[2])]


def rotated_encode_f64(anchor, gt, weight):
    out = torch.zeros(anchor.shape, dtype=torch.float64)
    for b, n, a in per_box(anchor):
        ax, ay, aw, ah, at = centre(a)
        gx, gy, gw, gh, gt_ = centre(gt.double()[b, :, n].tolist())
        d = [(gx - ax) / aw, (gy - ay) / ah, math.log(gw / aw), math.log(gh / ah),
             math.tan(math.radians(gt_)) - math.tan(math.radians(at))]
        out[b, :, n] = torch.tensor([v * w for v, w in zip(d, weight)], dtype=torch.float64)
    return out


def rotated_decode_f64(anchor, delta, weight):
    out = torch.zeros(anchor.shape, dtype=torch.float64)
    for b, n, a in per_box(anchor):
        ax, ay, aw, ah, at = centre(a)
        dx, dy, dw, dh, dt = [v / w for v, w in zip(delta.double()[b, :, n].tolist(), weight)]
        cx, cy, w, h = ax + dx * aw, ay + dy * ah, aw * math.exp(dw), ah * math.exp(dh)
        t = math.degrees(math.atan(math.tan(math.radians(at)) + dt))
        out[b, :, n] = torch.tensor([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, t],
                                    dtype=torch.float64)
    return out


WEIGHT = [1.0, 2.0, 0.5, 1.5, 0.25]


def test_rotated_op_plugin_goldens():
    a = torch.tensor([[[44.2877], [9.1412], [88.7575], [25.8879], [64.8047]]])
    g = torch.tensor([[[39.1763], [0.9838], [78.1028], [29.5997], [51.5907]]])
    out = na.npu_rotated_box_encode(a, g, torch.ones(5))
    assert_close_to_golden(out, rotated_encode_f64(a, g, [1.0] * 5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.flatten(), torch.tensor([-0.1773, -0.1327, -0.1331, 0.5358,
                                                            -0.8643]), rtol=0, atol=1e-4)
    a = torch.tensor([[[4.137], [33.72], [29.4], [54.06], [41.28]]]).half()
    d = torch.tensor([[[0.0244], [-1.992], [0.2109], [0.315], [-37.25]]]).half()
    out = na.npu_rotated_box_decode(anchor_boxes=a, deltas=d, weight=torch.ones(5).half())
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.flatten().float(), torch.tensor(
        [1.786, -10.58, 33.0, 17.3, -88.44]), rtol=2e-3, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rotated_encode_decode_against_formula(dtype):
    a, g = rotated(2, 7, 0, dtype), rotated(2, 7, 1, dtype)
    w = torch.tensor(WEIGHT)
    enc = na.npu_rotated_box_encode(a, g, w)
    assert enc.dtype == dtype and enc.shape == (2, 5, 7)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-3, atol=2e-3)
    assert_close_to_golden(enc, rotated_encode_f64(a, g, WEIGHT), **tol)
    d = (torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(2)) * 0.5).to(dtype)
    dec = torch.ops.npu.npu_rotated_box_decode(a, d, w.to(dtype))
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-3, atol=5e-2)
    assert_close_to_golden(dec, rotated_decode_f64(a, d, WEIGHT), **tol)


def test_rotated_non_contiguous_and_round_trip():
    a = rotated(3, 4, 3).transpose(0, 2).contiguous().transpose(0, 2)
    g = rotated(3, 4, 4)
    a2 = a.clone()
    w = torch.tensor(WEIGHT, dtype=torch.float64)[::1]
    enc = na.npu_rotated_box_encode(a, g, w)
    assert_close_to_golden(enc, rotated_encode_f64(a, g, WEIGHT), rtol=1e-5, atol=1e-5)
    assert torch.equal(a, a2)
    for alias in ("anchor_box", "anchor_boxes"):
        assert torch.equal(na.npu_rotated_box_encode(gt_bboxes=g, weight=w, **{alias: a}), enc)
    # Decoding the encoding recovers boxes whose sizes were not clamped.
    big = ((g[:, 2] - g[:, 0]) >= 1) & ((g[:, 3] - g[:, 1]) >= 1)
    back = na.npu_rotated_box_decode(a, enc, w)
    torch.testing.assert_close(back.permute(0, 2, 1)[big], g.permute(0, 2, 1)[big],
                               rtol=1e-4, atol=2e-3)


def test_rotated_bad_inputs():
    a = rotated(1, 3, 0)
    with pytest.raises(RuntimeError, match="npu_rotated_box_encode: expected weight 5 values"):
        na.npu_rotated_box_encode(a, a, torch.ones(3))
    with pytest.raises(RuntimeError, match="npu_rotated_box_decode: expected self a 3-D tensor"):
        na.npu_rotated_box_decode(a[0], a[0], torch.ones(5))


def test_empty_inputs():
    e = torch.zeros(0, 4)
    assert na.npu_bounding_box_encode(e, e, *MEANS, *STDS).shape == (0, 4)
    assert na.npu_bounding_box_decode(e, e, *MEANS, *STDS, [3, 3], 0.1).shape == (0, 4)
    r = torch.zeros(2, 5, 0)
    assert na.npu_rotated_box_encode(r, r, torch.ones(5)).shape == (2, 5, 0)
    assert na.npu_rotated_box_decode(r, r, torch.ones(5)).shape == (2, 5, 0)
