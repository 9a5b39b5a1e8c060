"""npu_rotated_iou / npu_rotated_overlaps against a float64 golden written here: each box
pair's intersection by Sutherland-Hodgman clipping of one rectangle by the other (a different
algorithm from the op's vertex-collection form), in plain Python floats."""

from __future__ import annotations

import math
import re

import pytest
import torch

import npu_anywhere
from npu_anywhere.ops.vision._boxes import rotated_intersection_area


def _rect(cx, cy, w, h, deg):
    t = math.radians(deg)
    c, s = math.cos(t), math.sin(t)
    return [(cx + dx * c - dy * s, cy + dx * s + dy * c)
            for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))]


def _clip(subject, clipper):
    """Sutherland-Hodgman: ``subject`` clipped by the convex counter-clockwise ``clipper``."""
    out = subject
    for i in range(len(clipper)):
        (ax, ay), (bx, by) = clipper[i], clipper[(i + 1) % len(clipper)]

        def side(p):
            return (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)
        src, out = out, []
        for j in range(len(src)):
            p, q = src[j], src[(j + 1) % len(src)]
            sp, sq = side(p), side(q)
            if sp >= 0:
                out.append(p)
            if sp * sq < 0:
                r = sp / (sp - sq)
                out.append((p[0] + r * (q[0] - p[0]), p[1] + r * (q[1] - p[1])))
        if not out:
            return []
    return out


def _area(poly):
    return abs(sum(poly[i][0] * poly[(i + 1) % len(poly)][1]
                   - poly[(i + 1) % len(poly)][0] * poly[i][1] for i in range(len(poly)))) / 2


def _golden_inter(a, b):
    poly = _clip(_rect(*a), _rect(*b))
    return _area(poly) if len(poly) >= 3 else 0.0


def _xywht(rows, trans):
    if not trans:
        return rows
    return [((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, t) for x1, y1, x2, y2, t in rows]


def _golden(boxes, query, trans=False, mode=0, kind="iou"):
    out = torch.zeros(boxes.shape[0], boxes.shape[1], query.shape[1], dtype=torch.float64)
    for b in range(boxes.shape[0]):
        bs = _xywht(boxes[b].double().tolist(), trans)
        qs = _xywht(query[b].double().tolist(), trans)
        for n, box in enumerate(bs):
            for k, q in enumerate(qs):
                inter = _golden_inter(box, q)
                a1, a2 = box[2] * box[3], q[2] * q[3]
                if kind == "overlaps":
                    out[b, n, k] = inter
                else:
                    out[b, n, k] = inter / (a1 if mode == 1 else a1 + a2 - inter)
    return out


def _boxes(b, n, seed, dtype=torch.float32, trans=False):
    gen = torch.Generator().manual_seed(seed)
    c = torch.rand(b, n, 2, generator=gen, dtype=torch.float64) * 6
    wh = torch.rand(b, n, 2, generator=gen, dtype=torch.float64) * 4 + 0.5
    t = torch.randint(-180, 180, (b, n, 1), generator=gen).double()
    if trans:
        return torch.cat([c - wh / 2, c + wh / 2, t], -1).to(dtype)
    return torch.cat([c, wh, t], -1).to(dtype)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("trans", [False, True])
def test_rotated_iou_cross_matches_clipping_golden(trans, mode):
    boxes, query = _boxes(2, 5, 1, trans=trans), _boxes(2, 4, 2, trans=trans)
    out = npu_anywhere.npu_rotated_iou(boxes, query, trans, mode, True)
    assert out.shape == (2, 5, 4) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _golden(boxes, query, trans, mode),
                               rtol=1e-5, atol=1e-5)
    assert (out > 0).sum() >= 5            # the sample really overlaps


def test_rotated_overlaps_matches_clipping_golden_fp16_noncontiguous():
    boxes = _boxes(1, 6, 3).half().transpose(1, 2).contiguous().transpose(1, 2)
    query = _boxes(1, 9, 4).half()[:, ::2]                 # strided rows
    assert not boxes.is_contiguous() and not query.is_contiguous()
    before = (boxes.clone(), query.clone())
    out = npu_anywhere.npu_rotated_overlaps(boxes, query)
    assert out.shape == (1, 6, 5) and out.dtype == torch.float16
    torch.testing.assert_close(out.double(), _golden(boxes, query, kind="overlaps"),
                               rtol=2e-3, atol=2e-3)
    assert torch.equal(boxes, before[0]) and torch.equal(query, before[1])


def test_rotated_overlaps_trans_and_torch_ops_path():
    boxes, query = _boxes(2, 3, 5, trans=True), _boxes(2, 2, 6, trans=True)
    out = torch.ops.npu.npu_rotated_overlaps(boxes, query, True)
    torch.testing.assert_close(out.double(), _golden(boxes, query, True, kind="overlaps"),
                               rtol=1e-5, atol=1e-5)


def test_special_configurations():
    # Identical, touching, nested, disjoint and 45-degree boxes (exact values known).
    a = torch.tensor([[[0., 0, 2, 2, 0], [0, 0, 2, 2, 45], [5, 5, 1, 3, 90], [0, 0, 4, 4, 30]]])
    inter = npu_anywhere.npu_rotated_overlaps(a, a)[0].double()
    octagon = 8 * (math.sqrt(2) - 1)
    assert inter[0, 0] == pytest.approx(4, rel=1e-5)
    assert inter[0, 1] == pytest.approx(octagon, rel=1e-5)
    assert inter[2, 2] == pytest.approx(3, rel=1e-5)
    assert inter[0, 2] == 0 and inter[1, 2] == 0
    assert inter[0, 3] == pytest.approx(4, rel=1e-5)          # nested
    touching = torch.tensor([[[0., 0, 2, 2, 0]]]), torch.tensor([[[2., 0, 2, 2, 0]]])
    assert npu_anywhere.npu_rotated_overlaps(*touching).item() == pytest.approx(0, abs=1e-5)


def test_aligned_mode_fills_the_start_of_the_buffer():
    boxes, query = _boxes(2, 3, 7), _boxes(2, 3, 8)
    query[:, :, :2] = boxes[:, :, :2] + 0.3                 # every aligned pair overlaps
    out = npu_anywhere.npu_rotated_iou(boxes, query, is_cross=False, mode=0)
    full = _golden(boxes, query)
    aligned = torch.diagonal(full, dim1=1, dim2=2).reshape(-1)
    assert out.shape == (2, 3, 3)
    torch.testing.assert_close(out.reshape(-1)[:6].double(), aligned, rtol=1e-5, atol=1e-6)
    assert torch.all(out.reshape(-1)[6:] == 0)


def test_opplugin_goldens():
    # test/test_base_ops/test_rotated_overlaps.py, float32 case: numpy seed 1234 data.
    np = pytest.importorskip("numpy")
    np.random.seed(1234)

    def make(n):
        c = np.random.uniform(30, 60, [1, n, 2]).astype(np.float32)
        wh = np.random.randint(1, 20, size=[1, n, 2])
        t = np.random.randint(-180, 180, size=[1, n, 1])
        return torch.from_numpy(np.concatenate([c, wh, t], axis=-1, dtype=np.float32))
    boxes, query = make(3), make(2)
    expect = torch.tensor([[[0., 10.289731], [0., 0.], [0., 0.]]])
    torch.testing.assert_close(npu_anywhere.npu_rotated_overlaps(boxes, query), expect,
                               rtol=5e-5, atol=1e-6)


def test_rotated_iou_float64_and_large_query_slices():
    # More pairs than one slice of the reference: the sliced path gives the same numbers.
    boxes, query = _boxes(1, 70, 9, torch.float64), _boxes(1, 1000, 10, torch.float64)
    out = npu_anywhere.npu_rotated_iou(boxes, query)
    whole = rotated_intersection_area(boxes[:, :, None, :], query[:, None, :, :])
    area = boxes[..., 2:4].prod(-1)[:, :, None] + query[..., 2:4].prod(-1)[:, None, :]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, whole / (area - whole), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[0, :2, :3], _golden(boxes[:, :2], query[:, :3])[0],
                               rtol=1e-9, atol=1e-9)


def test_bad_inputs_raise_before_anything():
    ok = torch.zeros(1, 3, 5)
    cases = [
        ((torch.zeros(1, 3, 4), ok), {}, ValueError, "expected self a 3-D tensor"),
        ((ok, torch.zeros(2, 3, 5)), {}, RuntimeError, "expected query_boxes the batch size"),
        ((ok, ok.int()), {}, TypeError, "expected query_boxes dtype in"),
        ((ok, ok), dict(mode=3), ValueError, "expected mode 0 (IoU) or 1 (IoF)"),
        ((ok, torch.zeros(1, 2, 5)), dict(is_cross=False), RuntimeError,
         "expected query_boxes as many boxes as self"),
        ((ok, torch.zeros(1, 1601, 5)), {}, ValueError, "expected query_boxes at most 1600 boxes"),
    ]
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=re.escape("npu_rotated_iou: " + match)):
            npu_anywhere.npu_rotated_iou(*args, **kwargs)
    with pytest.raises(TypeError, match="npu_rotated_overlaps: expected self dtype in"):
        npu_anywhere.npu_rotated_overlaps(ok.bfloat16(), ok)


def test_strict_products():
    ok = _boxes(1, 2, 11)
    with npu_anywhere.strict("A2"):
        npu_anywhere.npu_rotated_iou(ok, ok)
        with pytest.raises(TypeError, match="npu_rotated_iou: expected self dtype in"):
            npu_anywhere.npu_rotated_iou(ok.double(), ok.double())
    with npu_anywhere.strict("950"), pytest.raises(RuntimeError, match="npu_rotated_overlaps"):
        npu_anywhere.npu_rotated_overlaps(ok, ok)


def test_no_backward():
    boxes = _boxes(1, 2, 12).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_rotated_iou: expected inputs that do not "
                                           "require grad"):
        npu_anywhere.npu_rotated_iou(boxes, boxes.detach())
