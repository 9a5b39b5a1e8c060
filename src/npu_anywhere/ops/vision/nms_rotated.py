"""torch_npu.npu_nms_rotated (greedy NMS of rotated boxes).

Semantics (seed 004 "npu_nms_rotated"; op-plugin op_plugin/ops/aclops/NmsRotatedKernelNpu.cpp
for the outputs: float32 math, ``selected_index`` resized to the kept count, ``selected_num``
a one-element int32 tensor; the overlap steps from the CPU golden NPU results are judged by,
op-plugin test/test_base_ops/test_nms_rotated.py)::

    mode 0: box = (cx, cy, w, h, angle°);  mode 1: (x1, y1, x2, y2, angle°) read as
            cx = (x1+x2)/2, cy = (y1+y2)/2, w = x2-x1, h = y2-y1, angle = -angle
    candidates: score > scores_threshold, by descending score (ties: lower index first)
    keep a candidate unless IoU > iou_threshold with a kept box; at most max_output_size
    (-1: no limit)
    IoU = inter / (w_a h_a + w_b h_b - inter), with IoU = 0 when either signed area w*h is
          below 1e-14 and IoU = 1 when the two corner lists agree within 1e-5

``inter`` is the area of the convex region bounded by the edge crossings and the corners of
each box that lie in the other (computed in float64 about the pair's mean centre).
"""

from __future__ import annotations

import math

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from . import nms_common

OP = "npu_nms_rotated"
SCHEMA = ("npu_nms_rotated(Tensor self, Tensor scores, float iou_threshold, "
          "float scores_threshold=0, int max_output_size=-1, int mode=0) -> (Tensor, Tensor)")

_DEGREE = 0.01745329251      # the kernel's pi / 180
_AREA_EPS = 1e-14
_SAME_EPS = 1e-5
_ROWS_PER_CHUNK = 64


def check_nms_rotated(self, scores, iou_threshold, scores_threshold=0, max_output_size=-1,
                      mode=0):
    nms_common.expect_boxes_and_scores(OP, self, scores, 5)
    checks.expect(max_output_size >= -1, OP, "max_output_size", ">= -1 (-1: no limit)",
                  max_output_size, ValueError)
    checks.expect_one_of(mode, (0, 1), OP, "mode")


def _as_center_form(dets, mode):
    if mode == 0:
        return dets
    x1, y1, x2, y2, angle = dets.unbind(-1)
    return torch.stack([(x1 + x2) * 0.5, (y1 + y2) * 0.5, x2 - x1, y2 - y1, -angle], -1)


def _corners(cx, cy, w, h, angle):
    """``[..., 4, 2]`` corners in the kernel's cyclic order."""
    theta = angle * _DEGREE
    b = torch.cos(theta) * 0.5
    a = torch.sin(theta) * 0.5
    p0 = torch.stack([cx - a * h - b * w, cy + b * h - a * w], -1)
    p1 = torch.stack([cx + a * h - b * w, cy - b * h - a * w], -1)
    centre = torch.stack([cx, cy], -1)
    return torch.stack([p0, p1, 2 * centre - p0, 2 * centre - p1], -2)


def _cross(u, v):
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def _dot(u, v):
    return (u * v).sum(-1)


def _inside(points, rect):
    """Which of ``points [..., 4, 2]`` lie in (or on) ``rect [..., 4, 2]``."""
    ab = rect[..., 1, :] - rect[..., 0, :]
    da = rect[..., 0, :] - rect[..., 3, :]
    ap = points - rect[..., None, 0, :]
    along_ab = _dot(ap, ab[..., None, :])
    along_ad = -_dot(ap, da[..., None, :])
    return ((along_ab >= 0) & (along_ad >= 0) & (along_ab <= _dot(ab, ab)[..., None])
            & (along_ad <= _dot(da, da)[..., None]))


def _intersection_area(pa, pb):
    """Overlap area of convex quads ``pa, pb [P, 4, 2]``."""
    va = pa.roll(-1, -2) - pa
    vb = pb.roll(-1, -2) - pb
    # every edge i of a against every edge j of b: [P, 4, 4]
    det = _cross(vb[:, None, :, :], va[:, :, None, :])
    offset = pb[:, None, :, :] - pa[:, :, None, :]
    safe = torch.where(det.abs() > _AREA_EPS, det, torch.ones_like(det))
    t1 = _cross(vb[:, None, :, :], offset) / safe
    t2 = _cross(va[:, :, None, :], offset) / safe
    crossing = (det.abs() > _AREA_EPS) & (t1 >= 0) & (t1 <= 1) & (t2 >= 0) & (t2 <= 1)
    cross_pts = pa[:, :, None, :] + va[:, :, None, :] * t1[..., None]
    points = torch.cat([cross_pts.flatten(1, 2), pa, pb], 1)                 # [P, 24, 2]
    valid = torch.cat([crossing.flatten(1), _inside(pa, pb), _inside(pb, pa)], 1)
    count = valid.sum(1)
    weight = valid.to(points.dtype)
    centre = (points * weight[..., None]).sum(1) / count.clamp_min(1)[:, None]
    rel = points - centre[:, None, :]
    # All valid points lie on the convex region's boundary, so ordering them by angle about
    # their mean walks the boundary; invalid slots sort last and repeat the first point.
    angle = torch.where(valid, torch.atan2(rel[..., 1], rel[..., 0]), torch.full_like(weight, 10.))
    order = angle.argsort(1)
    ring = rel.gather(1, order[..., None].expand_as(rel))
    ring = torch.where(valid.gather(1, order)[..., None], ring, ring[:, :1])
    area = _cross(ring, ring.roll(-1, 1)).sum(1).abs() * 0.5
    return torch.where(count > 2, area, torch.zeros_like(area))


def rotated_iou_rows(boxes_a, boxes_b):
    """``[A, B]`` IoU of centre-form rotated boxes (cx, cy, w, h, angle in degrees), float64."""
    a = boxes_a[:, None, :].expand(-1, boxes_b.shape[0], -1).reshape(-1, 5)
    b = boxes_b[None, :, :].expand(boxes_a.shape[0], -1, -1).reshape(-1, 5)
    shift = (a[:, :2] + b[:, :2]) * 0.5
    pa = _corners(a[:, 0] - shift[:, 0], a[:, 1] - shift[:, 1], a[:, 2], a[:, 3], a[:, 4])
    pb = _corners(b[:, 0] - shift[:, 0], b[:, 1] - shift[:, 1], b[:, 2], b[:, 3], b[:, 4])
    size_a, size_b = a[:, 2] * a[:, 3], b[:, 2] * b[:, 3]
    inter = _intersection_area(pa, pb)
    iou = inter / torch.where((size_a + size_b - inter) != 0, size_a + size_b - inter, 1.0)
    same = ((pa - pb).abs() <= _SAME_EPS).all(-1).all(-1)
    iou = torch.where(same, torch.ones_like(iou), iou)
    iou = torch.where((size_a < _AREA_EPS) | (size_b < _AREA_EPS), torch.zeros_like(iou), iou)
    return iou.reshape(boxes_a.shape[0], boxes_b.shape[0])


def nms_rotated_reference(self, scores, iou_threshold, scores_threshold=0, max_output_size=-1,
                          mode=0):
    # the host casts to float32; the overlap geometry runs in float64 (as the golden's scalars)
    s = scores.to(torch.float32)
    dets = _as_center_form(self.to(torch.float32).to(torch.float64), mode)
    candidates = torch.nonzero(s > scores_threshold).flatten()
    order = candidates[torch.sort(s[candidates], descending=True, stable=True).indices]
    boxes = dets[order]
    n = boxes.shape[0]
    if n:
        iou = torch.cat([rotated_iou_rows(boxes[i:i + _ROWS_PER_CHUNK], boxes)
                         for i in range(0, n, _ROWS_PER_CHUNK)])
    else:
        iou = boxes.new_zeros(0, 0)
    limit = None if max_output_size < 0 else max_output_size
    kept = nms_common.greedy_keep(iou > iou_threshold, limit)
    index = order[kept].to(torch.int32)
    return index, torch.tensor([len(kept)], dtype=torch.int32, device=self.device)


def _nms_rotated_fake(self, scores, iou_threshold, scores_threshold=0, max_output_size=-1,
                      mode=0):
    # the kept count is data: a fresh size, unless nothing can be kept
    if max_output_size == 0 or self.shape[0] == 0:
        kept = 0
    else:
        n = self.shape[0]
        kept = torch.library.get_ctx().new_dynamic_size(max=n if isinstance(n, int) else None)
    return (self.new_empty(kept, dtype=torch.int32), self.new_empty(1, dtype=torch.int32))


nms_rotated_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nms_rotated,
                       reference=nms_rotated_reference, fake=_nms_rotated_fake,
                       info=OpInfo(api="torch_npu"))
nms_rotated_op.forbid_autograd("npu_nms_rotated returns indices; it has no backward on the NPU")


def npu_nms_rotated(self=None, scores=None, iou_threshold=None, scores_threshold=0,
                    max_output_size=-1, mode=0, **kwargs):
    """Greedy non-maximum suppression of rotated boxes, highest score first.

    Formula (op-plugin test_nms_rotated.py golden; NmsRotatedKernelNpu.cpp outputs)::

        keep box i (by descending score > scores_threshold) unless
        rotated_IoU(i, kept) > iou_threshold, until max_output_size are kept

    Parameters
    ----------
    self : Tensor
        ``[num_boxes, 5]`` boxes (``dets=``, the doc's name, is accepted too): mode 0
        ``(x, y, w, h, angle)``, mode 1 ``(x1, y1, x2, y2, angle)``, angles in degrees;
        float16, bfloat16, float32 (cast to float32 as the NPU does).
    scores : Tensor
        ``[num_boxes]`` scores.
    iou_threshold : float
        Overlap above which a lower-scoring box is removed.
    scores_threshold : float, default 0
        Boxes scoring at or below it are dropped first.
    max_output_size : int, default -1
        Most boxes kept; -1 for no limit.
    mode : int, default 0
        Box layout, 0 or 1 (the doc lists 1 as unsupported on some products; it runs here).

    Returns
    -------
    (Tensor, Tensor)
        ``selected_index`` int32 ``[M]`` in selection order and ``selected_num``, the int32
        ``[1]`` tensor ``[M]`` (one element, as the NPU returns it).

    Examples
    --------
    >>> dets = torch.tensor([[0., 0., 4., 2., 0.], [0., 0., 4., 2., 10.], [9., 9., 2., 2., 45.]])
    >>> npu_anywhere.npu_nms_rotated(dets, torch.tensor([0.9, 0.8, 0.7]), 0.5)
    (tensor([0, 2], dtype=torch.int32), tensor([2], dtype=torch.int32))
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "dets", kwargs)
    return nms_rotated_op(self, scores, iou_threshold, scores_threshold, max_output_size, mode)


TORCH_NPU_FUNCTIONS = {OP: npu_nms_rotated}
