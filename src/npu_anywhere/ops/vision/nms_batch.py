"""torch_npu.npu_batch_nms (BatchMultiClassNonMaxSuppression: per-class NMS per image, the
kept boxes of all classes ranked by score and padded to max_total_size).

Semantics (seed 004 "npu_batch_nms"; shapes from op-plugin op_plugin/ops/aclops/
BatchNMSKernelNpu.cpp; steps from ops-cv objdetect/batch_multi_class_non_max_suppression/
tests/golden/cpu_golden.py, the CPU golden that kernel is judged by)::

    for image b and class c (boxes[b, :, 0 if q == 1 else c]):
        candidates: score > score_threshold and y2 > y1 and x2 > x1, by descending score
                    (ties: lower index first)
        greedy keep unless IoU > iou_threshold with a kept box, at most max_size_per_class
        IoU = inter / max(area_a + area_b - inter, 1e-12)
    all classes' kept boxes of image b, by descending score (ties: lower class, then kept
    order), the first max_total_size of them; the rest of the rows are 0

``torch_npu`` passes no clip window, so ``change_coordinate_frame`` changes nothing.
``transpose_box=True`` reads boxes laid out ``[B, q, 4, N]``.  Computed in float32 (float64
kept); boxes, scores and classes come back in the boxes' dtype.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import nms_common

OP = "npu_batch_nms"
SCHEMA = ("npu_batch_nms(Tensor self, Tensor scores, float score_threshold, float iou_threshold, "
          "int max_size_per_class, int max_total_size, bool change_coordinate_frame=False, "
          "bool transpose_box=False) -> (Tensor, Tensor, Tensor, Tensor)")


def _layout(boxes, transpose_box):
    """(per-class box count q, box count N) of ``boxes`` in either layout."""
    if transpose_box:
        return boxes.shape[1], boxes.shape[3]
    return boxes.shape[2], boxes.shape[1]


def check_batch_nms(self, scores, score_threshold, iou_threshold, max_size_per_class,
                    max_total_size, change_coordinate_frame=False, transpose_box=False):
    checks.expect_dtype(self, nms_common.FLOATS, OP, "self")
    layout = "[batch, q, 4, num_anchors]" if transpose_box else "[batch, num_anchors, q, 4]"
    coord_dim = 2 if transpose_box else 3
    checks.expect(self.dim() == 4 and self.shape[coord_dim] == 4, OP, "self",
                  f"of shape {layout}", lambda: f"shape {tuple(self.shape)}", ValueError)
    checks.expect_nonempty(self, OP, "self")
    checks.expect_dtype(scores, (self.dtype,), OP, "scores")
    checks.expect_dim(scores, 3, OP, "scores")
    q, n = _layout(self, transpose_box)
    checks.expect(scores.shape[0] == self.shape[0] and scores.shape[1] == n, OP, "scores",
                  lambda: f"of shape [batch, num_anchors, num_classes] with batch = "
                          f"{self.shape[0]} and num_anchors = {n}",
                  lambda: f"shape {tuple(scores.shape)}")
    checks.expect(q in (1, scores.shape[2]), OP, "self",
                  lambda: f"q equal to 1 or num_classes = {scores.shape[2]}", q)
    checks.expect(0.0 <= iou_threshold <= 1.0, OP, "iou_threshold", "in [0, 1]", iou_threshold,
                  ValueError)
    checks.expect(max_size_per_class > 0, OP, "max_size_per_class", "> 0", max_size_per_class,
                  ValueError)
    checks.expect(max_total_size > 0, OP, "max_total_size", "> 0", max_total_size, ValueError)
    checks.expect_same_device({"self": self, "scores": scores}, OP)


def _class_nms(boxes, scores, score_threshold, iou_threshold, limit):
    """(scores, boxes) kept for one image and class, in keep order."""
    ok = (scores > score_threshold) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    index = torch.nonzero(ok).flatten()
    index = index[torch.sort(scores[index], descending=True, stable=True).indices]
    b = boxes[index]
    area = (b[:, 2:] - b[:, :2]).prod(-1)
    inter = nms_common.intersection(b, b)
    iou = inter / (area[:, None] + area[None, :] - inter).clamp_min(1e-12)
    kept = index[nms_common.greedy_keep(iou > iou_threshold, limit)]
    return scores[kept], boxes[kept]


def batch_nms_reference(self, scores, score_threshold, iou_threshold, max_size_per_class,
                        max_total_size, change_coordinate_frame=False, transpose_box=False):
    dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
    boxes = self.to(dtype)
    boxes = boxes.permute(0, 3, 1, 2) if transpose_box else boxes      # [B, N, q, 4]
    s = scores.to(dtype)
    batch, classes = s.shape[0], s.shape[2]
    out_boxes = boxes.new_zeros(batch, max_total_size, 4)
    out_scores = boxes.new_zeros(batch, max_total_size)
    out_classes = boxes.new_zeros(batch, max_total_size)
    out_num = torch.zeros(batch, dtype=torch.int32, device=self.device)
    for b in range(batch):
        kept_scores, kept_boxes, kept_classes = [], [], []
        for c in range(classes):
            cls_boxes = boxes[b, :, 0 if boxes.shape[2] == 1 else c]
            ks, kb = _class_nms(cls_boxes, s[b, :, c], score_threshold, iou_threshold,
                                max_size_per_class)
            kept_scores.append(ks)
            kept_boxes.append(kb)
            kept_classes.append(torch.full_like(ks, float(c)))
        ks, kb, kc = torch.cat(kept_scores), torch.cat(kept_boxes), torch.cat(kept_classes)
        order = torch.sort(ks, descending=True, stable=True).indices[:max_total_size]
        count = order.numel()
        out_boxes[b, :count] = kb[order]
        out_scores[b, :count] = ks[order]
        out_classes[b, :count] = kc[order]
        out_num[b] = count
    out_dtype = self.dtype
    return out_boxes.to(out_dtype), out_scores.to(out_dtype), out_classes.to(out_dtype), out_num


def _batch_nms_fake(self, scores, score_threshold, iou_threshold, max_size_per_class,
                    max_total_size, change_coordinate_frame=False, transpose_box=False):
    batch = self.shape[0]
    return (self.new_empty(batch, max_total_size, 4), self.new_empty(batch, max_total_size),
            self.new_empty(batch, max_total_size), self.new_empty(batch, dtype=torch.int32))


batch_nms_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_batch_nms,
                     reference=batch_nms_reference, fake=_batch_nms_fake,
                     info=OpInfo(api="torch_npu"))
batch_nms_op.forbid_autograd("npu_batch_nms has no backward on the NPU")


def npu_batch_nms(self=None, scores=None, score_threshold=None, iou_threshold=None,
                  max_size_per_class=None, max_total_size=None, change_coordinate_frame=False,
                  transpose_box=False):
    """Multi-class, multi-image non-maximum suppression with padded fixed-size outputs.

    Formula (ops-cv BatchMultiClassNonMaxSuppression CPU golden)::

        per image and class: greedy NMS (IoU > iou_threshold suppresses) over boxes scoring
        > score_threshold with positive extent, at most max_size_per_class;
        per image: the kept boxes of all classes by descending score, at most max_total_size

    Parameters
    ----------
    self : Tensor
        Boxes ``[batch, num_anchors, q, 4]`` as ``(y1, x1, y2, x2)``, ``q`` 1 (shared by all
        classes) or ``num_classes``; ``[batch, q, 4, num_anchors]`` with ``transpose_box``.
        float16 or float32 (bfloat16, float64 accepted).
    scores : Tensor
        ``[batch, num_anchors, num_classes]``, ``self``'s dtype.
    score_threshold, iou_threshold : float
        Candidate filter and suppression threshold (``iou_threshold`` in [0, 1]).
    max_size_per_class, max_total_size : int
        Most boxes kept per class and per image (> 0).
    change_coordinate_frame : bool
        Accepted; without a clip window (torch_npu passes none) it changes nothing.
    transpose_box : bool
        Boxes in the ``[batch, q, 4, num_anchors]`` layout.

    Returns
    -------
    (Tensor, Tensor, Tensor, Tensor)
        ``nmsed_boxes [batch, max_total_size, 4]``, ``nmsed_scores`` and ``nmsed_classes``
        ``[batch, max_total_size]`` (class ids as floats), all in ``self``'s dtype and zero
        past the valid rows, and ``nmsed_num`` int32 ``[batch]``.

    Notes
    -----
    The seed's example passes boxes and scores of different batch sizes; that is rejected
    here (``scores`` must match ``self``'s batch and anchor count).

    Examples
    --------
    >>> boxes = torch.tensor([[[[0., 0., 1., 1.]], [[0., 0., .9, 1.]], [[2., 2., 3., 3.]]]])
    >>> scores = torch.tensor([[[.9], [.8], [.3]]])
    >>> npu_anywhere.npu_batch_nms(boxes, scores, 0.1, 0.5, 4, 4)[3]
    tensor([2], dtype=torch.int32)
    """
    return batch_nms_op(self, scores, score_threshold, iou_threshold, max_size_per_class,
                        max_total_size, change_coordinate_frame, transpose_box)


TORCH_NPU_FUNCTIONS = {OP: npu_batch_nms}
