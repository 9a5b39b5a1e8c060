"""npu_yolo_boxes_encode, npu_anchor_response_flags and npu_grid_assign_positive against goldens
written here in Python floats and loops (the YOLO coder / grid assigner as documented)."""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def boxes(n, seed, scale=40.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * scale
    wh = torch.rand(n, 2, generator=gen) * scale
    return torch.cat([xy, xy + wh], 1).to(dtype)


# ------------------------------------------------------------------ yolo_boxes_encode --


def yolo_golden(anchors, gt, stride, eps=1e-6):
    out = []
    for b, g, s in zip(anchors.double().tolist(), gt.double().tolist(), stride.tolist()):
        row = []
        for i in (0, 1):
            t = ((g[i] + g[i + 2]) / 2 - (b[i] + b[i + 2]) / 2) / s + 0.5
            row.append(min(max(t, eps), 1 - eps))
        for i in (0, 1):
            ratio = (g[i + 2] - g[i]) / (b[i + 2] - b[i])
            row.append(math.log(min(max(ratio, eps), 65504.0)))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


def test_yolo_op_plugin_golden():
    torch.manual_seed(1234)
    anchors, gt = torch.rand(2, 4), torch.rand(2, 4)
    stride = torch.tensor([2, 2], dtype=torch.int32)
    out = na.npu_yolo_boxes_encode(anchors, gt, stride, False)
    want = torch.tensor([[0.7921727, 0.5314963, -0.74224466, -13.815511],
                         [0.7360072, 0.58343244, 4.3334002, -0.51378196]])
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_yolo_against_golden(dtype):
    anchors, gt = boxes(11, 0, dtype=dtype), boxes(11, 1, dtype=dtype)
    gt[3] = anchors[3] + 500          # centre far away: x_t, y_t clamp at 1 - eps
    gt[4, 2] = gt[4, 0]               # zero width: log(eps)
    anchors[5] = torch.tensor([1.0, 0.5, 3.0, 0.5 + 2 ** -11])   # tiny anchor height and
    gt[5] = torch.tensor([0.0, 0.0, 4.0, 40.0])                   # a ratio clamped at 65504
    stride = torch.tensor([8, 16, 32] * 3 + [8, 16], dtype=torch.int32)
    out = na.npu_yolo_boxes_encode(anchors, gt, stride)
    assert out.dtype == dtype and out.shape == (11, 4)
    want = yolo_golden(anchors, gt, stride)
    assert out[5, 3].item() == pytest.approx(math.log(65504.0), rel=1e-3)
    if dtype == torch.float16:
        assert_close_to_golden(out, want, rtol=2e-3, atol=2e-3)
    else:
        assert_close_to_golden(out, want, rtol=1e-5, atol=1e-5)
        assert out[4, 2] == pytest.approx(math.log(1e-6), rel=1e-6)


def test_yolo_performance_mode_goes_through_float16():
    anchors, gt = boxes(9, 5) * 37, boxes(9, 6) * 37
    stride = torch.tensor([8, 16, 32] * 3, dtype=torch.int32)
    out = na.npu_yolo_boxes_encode(anchors, gt, stride, performance_mode=True)
    want = yolo_golden(anchors.half(), gt.half(), stride).half()
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, want.float(), rtol=1e-3, atol=1e-3)
    precise = na.npu_yolo_boxes_encode(anchors, gt, stride, False)
    assert_close_to_golden(precise, yolo_golden(anchors, gt, stride), rtol=1e-5, atol=1e-5)


def test_yolo_non_contiguous_and_checks():
    anchors = boxes(5, 2).t().contiguous().t()
    gt = boxes(10, 3)[::2]
    stride = torch.tensor([8, 0, 16, 0, 32, 0, 8, 0, 16, 0], dtype=torch.int32)[::2]
    out = na.npu_yolo_boxes_encode(anchors, gt, stride)
    assert_close_to_golden(out, yolo_golden(anchors, gt, stride), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="npu_yolo_boxes_encode: expected stride dtype in"):
        na.npu_yolo_boxes_encode(anchors, gt, stride.long())
    with pytest.raises(RuntimeError, match="npu_yolo_boxes_encode: expected gt_bboxes shape"):
        na.npu_yolo_boxes_encode(anchors, gt[:4], stride[:4])
    with na.strict("950"), pytest.raises(RuntimeError, match="expected a product the op supp"):
        na.npu_yolo_boxes_encode(anchors, gt, stride)


# -------------------------------------------------------------- anchor_response_flags --


def flags_golden(gt, featmap_size, stride, num_base_anchors):
    h, w = featmap_size
    grid = [0] * (h * w)
    for x1, y1, x2, y2 in gt.float().double().tolist():
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        gx = min(max(math.floor(cx / stride[0]), 0), w - 1) if math.isfinite(cx) else 0
        gy = min(max(math.floor(cy / stride[1]), 0), h - 1) if math.isfinite(cy) else 0
        grid[gy * w + gx] = 1
    return torch.tensor([f for f in grid for _ in range(num_base_anchors)], dtype=torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_anchor_flags_against_golden(dtype):
    gt = boxes(23, 4, scale=50.0, dtype=dtype)
    gt[0] = torch.tensor([300.0, 300.0, 310.0, 310.0])    # beyond the map: the last cell
    gt[1] = torch.tensor([-90.0, 20.0, -70.0, 24.0])      # left of it: clamped to column 0
    gt[2, 0] = math.nan                                   # a NaN centre marks cell 0
    out = na.npu_anchor_response_flags(gt, [7, 9], [12, 10], 3)
    assert out.dtype == torch.uint8 and out.shape == (7 * 9 * 3,)
    assert torch.equal(out, flags_golden(gt, [7, 9], [12, 10], 3))
    assert out[-3:].tolist() == [1, 1, 1] and 0 < out.sum() < out.numel()


def test_anchor_flags_op_plugin_shape_and_checks():
    x = torch.rand(100, 4) * 100
    out = torch.ops.npu.npu_anchor_response_flags(x, [60, 60], [2, 2], 9)
    assert out.shape == (32400,) and torch.equal(out, flags_golden(x, [60, 60], [2, 2], 9))
    # The doc's parameter list spells it ``strides``.
    again = na.npu_anchor_response_flags(x, featmap_size=[60, 60], strides=[2, 2],
                                         num_base_anchors=9)
    assert torch.equal(again, out)
    with pytest.raises(RuntimeError, match="npu_anchor_response_flags: expected self dtype in"):
        na.npu_anchor_response_flags(x.double(), [6, 6], [2, 2], 1)


# ---------------------------------------------------------------- grid_assign_positive --


def assign_golden(inds, overlaps, flags, max_ov, argmax_ov, gt_max, gt_argmax, num_gts,
                  pos_thr, min_pos, assign_all):
    """mmdet's GridAssigner positive steps, as loops."""
    out = inds.double().tolist()
    resp = [f != 0 for f in flags.tolist()]
    for i, (m, a) in enumerate(zip(max_ov.tolist(), argmax_ov.tolist())):
        if m > pos_thr and resp[i]:
            out[i] = a + 1
    ov = overlaps.tolist()
    for j in range(min(num_gts, len(ov))):
        if gt_max[j].item() > min_pos:
            if assign_all:
                for i in range(len(out)):
                    if ov[j][i] == gt_max[j].item() and resp[i]:
                        out[i] = j + 1
            elif flags[int(gt_argmax[j])] == 1:
                out[int(gt_argmax[j])] = j + 1
    return torch.tensor(out, dtype=torch.float64)


def assign_inputs(k, n, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    overlaps = torch.rand(k, n, generator=gen).to(dtype)
    overlaps[1, 3] = overlaps[1].max()           # a tie at ground truth 1's best IoU
    flags = (torch.rand(n, generator=gen) * 3).to(torch.uint8)   # 0, 1 and 2 (also set)
    max_ov, argmax_ov = overlaps.max(0)
    gt_max, gt_argmax = overlaps.max(1)
    inds = torch.randint(-1, 1, (n,), generator=gen).to(dtype)
    return inds, overlaps, flags, max_ov, argmax_ov.int(), gt_max, gt_argmax.int()


def test_assign_op_plugin_golden():
    torch.manual_seed(1234)
    inds, overlaps = torch.rand(4), torch.rand(2, 4)
    flags = torch.tensor([1, 1, 1, 0], dtype=torch.uint8)
    max_ov = torch.rand(4)
    argmax_ov = torch.tensor([1, 0, 1, 0], dtype=torch.int32)
    gt_max, gt_argmax = torch.rand(2), torch.tensor([1, 0], dtype=torch.int32)
    out = na.npu_grid_assign_positive(inds, overlaps, flags, max_ov, argmax_ov, gt_max,
                                      gt_argmax, 128, 0.5, 0.0, True)
    torch.testing.assert_close(out, torch.tensor([2.0, 1.0, 0.25984418, 0.36664134]))
    # The newer doc's example passes num_gts as a one-element int32 tensor.
    num_gts = torch.tensor([128], dtype=torch.int32)
    again = torch.ops.npu.npu_grid_assign_positive(inds, overlaps, flags, max_ov, argmax_ov,
                                                   gt_max, gt_argmax, num_gts, 0.5, 0.0, True)
    assert torch.equal(again, out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("assign_all", [True, False])
@pytest.mark.parametrize("num_gts", [2, 9])
def test_assign_against_golden(dtype, assign_all, num_gts):
    args = assign_inputs(5, 13, 7, dtype)
    out = na.npu_grid_assign_positive(*args, num_gts, 0.6, 0.2, assign_all)
    assert out.dtype == dtype and out.shape == (13,)
    want = assign_golden(*args, num_gts, 0.6, 0.2, assign_all)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=0)


def test_assign_later_ground_truth_wins_and_inputs_untouched():
    overlaps = torch.tensor([[0.9, 0.1, 0.3], [0.9, 0.2, 0.1]])
    flags = torch.tensor([1, 0, 1], dtype=torch.uint8)
    max_ov, argmax_ov = overlaps.max(0)
    gt_max, gt_argmax = overlaps.max(1)
    inds = torch.zeros(3)
    before = [t.clone() for t in (inds, overlaps, flags)]
    for assign_all in (True, False):
        out = na.npu_grid_assign_positive(inds, overlaps, flags, max_ov, argmax_ov.int(), gt_max,
                                          gt_argmax.int(), 2, 0.95, 0.5, assign_all)
        # Box 0 is both ground truths' best box: ground truth 2 (index 1) overwrites 1.
        assert out.tolist() == [2.0, 0.0, 0.0]
    assert all(torch.equal(a, b) for a, b in zip(before, (inds, overlaps, flags)))


def test_assign_checks():
    args = list(assign_inputs(3, 6, 1))
    args[4] = args[4].long()
    with pytest.raises(RuntimeError, match="npu_grid_assign_positive: expected argmax_overlaps"):
        na.npu_grid_assign_positive(*args, 3, 0.5, 0.0, True)
    args = list(assign_inputs(3, 6, 1))
    args[5] = args[5][:2]
    with pytest.raises(RuntimeError, match="expected gt_max_overlaps shape \\(3,\\)"):
        na.npu_grid_assign_positive(*args, 3, 0.5, 0.0, True)
    args = list(assign_inputs(256, 4, 1))
    with pytest.raises(RuntimeError, match="expected overlaps fewer than 256 rows"):
        na.npu_grid_assign_positive(*args, 3, 0.5, 0.0, True)


def test_empty_inputs():
    e = torch.zeros(0, 4)
    assert na.npu_yolo_boxes_encode(e, e, torch.zeros(0, dtype=torch.int32)).shape == (0, 4)
    assert na.npu_anchor_response_flags(e, [3, 4], [2, 2], 2).tolist() == [0] * 24
    z = torch.zeros(0)
    for assign_all in (True, False):
        out = na.npu_grid_assign_positive(z, torch.zeros(3, 0), z.to(torch.uint8), z, z.int(),
                                          torch.rand(3), torch.zeros(3, dtype=torch.int32), 3,
                                          0.5, 0.0, assign_all)
        assert out.shape == (0,)
    x = torch.rand(4)           # no ground truth: the indices come back unchanged
    out = na.npu_grid_assign_positive(x, torch.zeros(0, 4), torch.ones(4, dtype=torch.uint8),
                                      torch.zeros(4), torch.zeros(4, dtype=torch.int32),
                                      torch.zeros(0), torch.zeros(0, dtype=torch.int32), 3, 0.5,
                                      0.0, True)
    assert torch.equal(out, x)
