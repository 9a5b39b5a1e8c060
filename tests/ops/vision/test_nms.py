"""npu_nms_v4, npu_nms_with_mask and npu_nms_rotated against plain-Python greedy goldens
(rotated overlaps by polygon clipping, a different construction from the op's)."""

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import npu_anywhere as na


def greedy(order, suppresses, limit=None):
    kept = []
    for i in order:
        if all(not suppresses(k, i) for k in kept):
            kept.append(i)
            if limit is not None and len(kept) == limit:
                break
    return kept


def iou_axis(a, b):
    ay0, ax0, ay1, ax1 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
    by0, bx0, by1, bx1 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
    area_a, area_b = (ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0)
    if area_a <= 0 or area_b <= 0:
        return 0.0
    inter = max(0.0, min(ay1, by1) - max(ay0, by0)) * max(0.0, min(ax1, bx1) - max(ax0, bx0))
    return inter / (area_a + area_b - inter)


def _boxes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo = torch.rand(n, 2, generator=g) * 30
    return torch.cat([lo, lo + torch.rand(n, 2, generator=g) * 12 + 0.5], 1)


@pytest.mark.parametrize("dtype,limit", [(torch.float32, 6), (torch.float16, 40)])
def test_nms_v4_golden(dtype, limit):
    n = 30
    boxes = _boxes(n).to(dtype)
    boxes[::4] = boxes[::4][:, [2, 3, 0, 1]]            # corners in the other order
    scores = torch.rand(n, generator=torch.Generator().manual_seed(1)).to(dtype)
    scores[5] = scores[7]                                 # a tie: the lower index goes first
    b, s = boxes.double().tolist(), scores.float().tolist()
    order = sorted((i for i in range(n) if s[i] > 0.25), key=lambda i: (-s[i], i))
    kept = greedy(order, lambda k, i: iou_axis(b[k], b[i]) > 0.3, limit)
    sel, valid = na.npu_nms_v4(boxes, scores, limit, torch.tensor(0.3), torch.tensor(0.25))
    assert sel.dtype == valid.dtype == torch.int32 and sel.shape == (limit,) and valid.dim() == 0
    assert valid.item() == len(kept)
    assert sel.tolist() == kept + [0] * (limit - len(kept))


def test_nms_v4_doc_example_shape_and_bad_input():
    boxes, scores = torch.rand(100, 4) * 100, torch.rand(100)
    sel, valid = na.npu_nms_v4(boxes, scores, 20, torch.tensor(0.5), torch.tensor(0.3))
    assert sel.shape == (20,) and 0 <= valid.item() <= 20
    with pytest.raises(RuntimeError, match="npu_nms_v4: expected iou_threshold a 0-D tensor"):
        torch.ops.npu.npu_nms_v4(boxes, scores, 20, torch.tensor([0.5]), torch.tensor(0.3))


def test_nms_with_mask_golden():
    rows = torch.cat([_boxes(25, 2), torch.rand(25, 1).sort(0, descending=True).values,
                      torch.zeros(25, 3)], 1)
    b = rows.double().tolist()

    def suppresses(i, j):
        area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
        inter = max(0.0, min(b[i][2], b[j][2]) - max(b[i][0], b[j][0])) * \
            max(0.0, min(b[i][3], b[j][3]) - max(b[i][1], b[j][1]))
        return inter > 0.2 * (area(b[i]) + area(b[j]) - inter)

    kept = greedy(range(25), suppresses)
    boxes, idx, mask = na.npu_nms_with_mask(rows.t().contiguous().t(), 0.2)  # non-contiguous
    assert torch.equal(boxes, rows[:, :5]) and idx.tolist() == list(range(25))
    assert mask.dtype == torch.uint8 and mask.nonzero().flatten().tolist() == kept
    # op-plugin test_nms_with_mask.py
    out = na.npu_nms_with_mask(torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.6], [6.0, 7.0, 8.0, 9.0, 0.4]]),
                               0.5)
    assert out[1].tolist() == [0, 1] and out[2].tolist() == [1, 1]


# ---- rotated ------------------------------------------------------------------------------

def corners(cx, cy, w, h, deg):
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return [(cx + c * dx - s * dy, cy + s * dx + c * dy)
            for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))]


def clip(poly, a, b):
    """Part of ``poly`` left of the directed line a -> b (Sutherland-Hodgman step)."""
    side = lambda p: (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])  # noqa: E731
    out = []
    for i, p in enumerate(poly):
        q = poly[(i + 1) % len(poly)]
        sp, sq = side(p), side(q)
        if sp >= 0:
            out.append(p)
        if sp * sq < 0:
            t = sp / (sp - sq)
            out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
    return out


def area(poly):
    return abs(sum(p[0] * q[1] - q[0] * p[1]
                   for p, q in zip(poly, poly[1:] + poly[:1]))) / 2 if len(poly) > 2 else 0.0


def iou_rotated(a, b):
    pa, pb = corners(*a), corners(*b)
    inter = pb
    for i in range(4):
        inter = clip(inter, pa[i], pa[(i + 1) % 4])
        if not inter:
            return 0.0
    i = area(inter)
    return i / (area(pa) + area(pb) - i)


def _rotated(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.rand(n, 2, generator=g) * 14, torch.rand(n, 2, generator=g) * 7 + 1,
                      torch.rand(n, 1, generator=g) * 180 - 90], 1)


@pytest.mark.parametrize("mode", [0, 1])
def test_nms_rotated_golden(mode):
    n = 24
    dets = _rotated(n, 3 + mode)
    scores = torch.rand(n, generator=torch.Generator().manual_seed(9))
    centre = dets.double().tolist()
    if mode == 1:                       # (x1, y1, x2, y2, angle), angle sign flipped
        d = dets.clone()
        d[:, :2] = dets[:, :2] - dets[:, 2:4] / 2
        d[:, 2:4] = dets[:, :2] + dets[:, 2:4] / 2
        d[:, 4] = -dets[:, 4]
        dets = d
    s = scores.tolist()
    order = sorted((i for i in range(n) if s[i] > 0.1), key=lambda i: (-s[i], i))
    kept = greedy(order, lambda k, i: iou_rotated(centre[k], centre[i]) > 0.15, 7)
    index, num = na.npu_nms_rotated(dets, scores, 0.15, 0.1, 7, mode)
    assert index.dtype == num.dtype == torch.int32 and num.shape == (1,)
    assert index.tolist() == kept and num.item() == len(kept)


def test_nms_rotated_degenerate_boxes_and_no_limit():
    dets = torch.tensor([[0., 0., 4., 2., 30.], [0., 0., 4., 2., 30.], [0., 0., -4., 2., 0.],
                         [0., 0., -4., -2., 0.]])
    index, num = na.npu_nms_rotated(dets.half(), torch.tensor([.9, .8, .7, .6]).half(), 0.5)
    # a duplicate is suppressed; a negative signed area overlaps nothing; -w, -h is a box
    assert index.tolist() == [0, 2] and num.tolist() == [2]


def test_nms_rotated_fake_sizes_the_output_symbolically():
    dets, scores = _rotated(6, 5), torch.rand(6)
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        index, num = torch.ops.npu.npu_nms_rotated(mode.from_tensor(dets), mode.from_tensor(scores),
                                                   0.3)
        assert isinstance(index.shape[0], torch.SymInt) and num.shape == (1,)
    with pytest.raises(RuntimeError, match="npu_nms_rotated: expected mode one of"):
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            torch.ops.npu.npu_nms_rotated(mode.from_tensor(dets), mode.from_tensor(scores), 0.3,
                                          mode=3)
