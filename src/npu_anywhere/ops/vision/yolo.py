"""YOLO target helpers: npu_yolo_boxes_encode, npu_anchor_response_flags, npu_grid_assign_positive.

All three run through op-plugin's aclops (op_plugin/ops/aclops/YoloBoxesEncodeKernelNpu.cpp,
AnchorResponseFlagsKernelNpu.cpp, GridAssignPositiveKernelNpu.cpp) and implement the YOLOv3
box coder and grid assigner; the formulas follow the CPU goldens of op-plugin's
test/test_base_ops/test_{yolo_boxes_encode,anchorresponseflags,grid_assign_positive}.py and
CANN's grid_assign_positive kernel for the assignment order.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...params import accept_alias
from .box_coding_common import FLOATS, define_op, expect_n4, expect_shape

YOLO_OP = "npu_yolo_boxes_encode"
YOLO_SCHEMA = ("npu_yolo_boxes_encode(Tensor self, Tensor gt_bboxes, Tensor stride, "
               "bool performance_mode=False) -> Tensor")
FLAGS_OP = "npu_anchor_response_flags"
FLAGS_SCHEMA = ("npu_anchor_response_flags(Tensor self, int[2] featmap_size, int[2] stride, "
                "int num_base_anchors) -> Tensor")
ASSIGN_OP = "npu_grid_assign_positive"
ASSIGN_SCHEMA = ("npu_grid_assign_positive(Tensor self, Tensor overlaps, "
                 "Tensor box_responsible_flags, Tensor max_overlaps, Tensor argmax_overlaps, "
                 "Tensor gt_max_overlaps, Tensor gt_argmax_overlaps, int num_gts, "
                 "float pos_iou_thr, float min_pos_iou, bool gt_max_assign_all) -> Tensor")

# op-plugin accepts any integral dtype but int64 for the index tensors (cast to int32).
_INDEX_DTYPES = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
MAX_ANCHORS = 20480        # YoloBoxesEncodeKernelNpu.cpp: MAX_ANCHOR_BOX_SIZE
YOLO_EPS = 1e-6
MAX_GTS = 256              # grid_assign_positive kernel: overlaps.shape[0] < 256
YOLO_RATIO_MAX = 65504.0   # the kernel's upper clamp of the size ratios (float16 max)


# ------------------------------------------------------------------ yolo_boxes_encode --


def check_yolo_boxes_encode(self, gt_bboxes, stride, performance_mode=False):
    expect_n4(YOLO_OP, "self", self)
    checks.expect(self.shape[0] <= MAX_ANCHORS, YOLO_OP, "self",
                  f"at most {MAX_ANCHORS} anchor boxes", lambda: f"{self.shape[0]}", ValueError)
    expect_n4(YOLO_OP, "gt_bboxes", gt_bboxes)
    expect_shape(YOLO_OP, "gt_bboxes", gt_bboxes, self.shape, "one per anchor box")
    checks.expect_same_dtype({"self": self, "gt_bboxes": gt_bboxes}, YOLO_OP)
    checks.expect_dtype(stride, _INDEX_DTYPES, YOLO_OP, "stride")
    expect_shape(YOLO_OP, "stride", stride, gt_bboxes.shape[:1], "one per gt_bboxes row")
    checks.expect_same_device({"self": self, "gt_bboxes": gt_bboxes, "stride": stride},
                              YOLO_OP)
    # The doc lists the Atlas training / inference / A2 / A3 lines (no 950 kernel exists).
    targets.expect_supported(YOLO_OP, targets.PRE_950)


def yolo_boxes_encode_reference(self, gt_bboxes, stride, performance_mode=False):
    b, g = self.float(), gt_bboxes.float()
    if performance_mode:
        # "high_performance" moves the boxes through float16 (and the result back out).
        b, g = b.half().float(), g.half().float()
    # The kernel converts the int32 strides to float16, then to float32.
    s = stride.to(torch.float16).float()
    centre = lambda t, i: (t[:, i] + t[:, i + 2]) * 0.5  # noqa: E731
    size = lambda t, i: t[:, i + 2] - t[:, i]  # noqa: E731
    rows = [((centre(g, i) - centre(b, i)) / s + 0.5).clamp(YOLO_EPS, 1 - YOLO_EPS)
            for i in (0, 1)]
    rows += [torch.log((size(g, i) / size(b, i)).clamp(YOLO_EPS, YOLO_RATIO_MAX))
             for i in (0, 1)]
    out = torch.stack(rows, dim=1)
    if performance_mode:
        out = out.half().float()
    return out.to(gt_bboxes.dtype)


yolo_op = define_op(YOLO_SCHEMA, check_yolo_boxes_encode, yolo_boxes_encode_reference)


def npu_yolo_boxes_encode(self, gt_bboxes, stride, performance_mode=False):
    """YOLOv3 regression targets of ground-truth boxes relative to anchor boxes.

    Formula (per row; ``eps = 1e-6``)::

        x_t = clamp((gcx - cx) / stride + 0.5, eps, 1 - eps)      (y_t alike)
        w_t = log(clamp(gw / w, eps, 65504));  h_t = log(clamp(gh / h, eps, 65504))
        with cx = (x1 + x2) / 2, w = x2 - x1 for anchors and ground truths alike

    Parameters
    ----------
    self : Tensor
        ``(N, 4)`` anchor boxes ``[x1, y1, x2, y2]``, float16 or float32, N <= 20480.
    gt_bboxes : Tensor
        ``(N, 4)`` ground-truth boxes, ``self``'s dtype.
    stride : Tensor
        ``(N,)`` int32 strides of each box's feature level.
    performance_mode : bool
        ``True``: the kernel's "high_performance" mode, which passes the boxes and the result
        through float16 (errors up to about 5e-3); ``False``: "high_precision" (float32).

    Returns
    -------
    Tensor
        ``(N, 4)`` targets ``[x_t, y_t, w_t, h_t]`` in ``gt_bboxes``' dtype (float32 math).

    Notes
    -----
    The seed doc page is a copy of ``npu_transpose``'s; the schema and the checks are
    op-plugin's (YoloBoxesEncodeKernelNpu.cpp), the formula and precision order CANN's
    yolo_boxes_encode kernel (float32 math, strides converted through float16, ratio clamp
    [1e-6, 65504]); test/test_base_ops/test_yolo_boxes_encode.py's golden agrees.  No backward.

    Examples
    --------
    >>> anchors = torch.tensor([[0., 0., 4., 4.]])
    >>> gt = torch.tensor([[1., 1., 3., 5.]])
    >>> npu_anywhere.npu_yolo_boxes_encode(anchors, gt, torch.tensor([2], dtype=torch.int32))
    tensor([[ 0.5000,  1.0000, -0.6931,  0.0000]])
    """
    return yolo_op(self, gt_bboxes, stride, performance_mode)


# -------------------------------------------------------------- anchor_response_flags --


def check_anchor_response_flags(self, featmap_size, stride, num_base_anchors):
    checks.expect(len(featmap_size) == 2, FLAGS_OP, "featmap_size", "a list of 2 ints [h, w]",
                  lambda: repr(list(featmap_size)), ValueError)
    checks.expect(len(stride) == 2, FLAGS_OP, "stride", "a list of 2 ints [x, y]",
                  lambda: repr(list(stride)), ValueError)
    checks.expect(self.dim() == 2 and self.shape[1] == 4, FLAGS_OP, "self",
                  "a 2-D tensor of shape (N, 4) (ground-truth boxes)",
                  lambda: f"shape {tuple(self.shape)}", ValueError)
    checks.expect_dtype(self, FLOATS, FLAGS_OP, "self")
    checks.expect(all(s > 0 for s in stride), FLAGS_OP, "stride", "positive values",
                  lambda: repr(list(stride)), ValueError)
    checks.expect(all(f >= 0 for f in featmap_size), FLAGS_OP, "featmap_size",
                  "non-negative values", lambda: repr(list(featmap_size)), ValueError)
    checks.expect(num_base_anchors >= 0, FLAGS_OP, "num_base_anchors", "non-negative",
                  repr(num_base_anchors), ValueError)


def _grid_cell(centre, stride, cells):
    """Grid coordinate of centres, clamped to ``[0, cells - 1]``; NaN / inf centres -> 0."""
    coord = torch.floor(centre / stride).clamp(0, max(cells - 1, 0))
    return torch.where(torch.isfinite(centre), coord, 0.0).long()


def anchor_response_flags_reference(self, featmap_size, stride, num_base_anchors):
    feat_h, feat_w = featmap_size
    # op-plugin converts the boxes to float32 before the kernel.
    boxes = self.float()
    grid_x = _grid_cell((boxes[:, 0] + boxes[:, 2]) * 0.5, stride[0], feat_w)
    grid_y = _grid_cell((boxes[:, 1] + boxes[:, 3]) * 0.5, stride[1], feat_h)
    cells = feat_h * feat_w
    hits = torch.zeros(cells, dtype=torch.uint8, device=self.device)
    if cells and boxes.shape[0]:
        hits = hits.index_fill(0, grid_y * feat_w + grid_x, 1)
    return hits[:, None].expand(cells, num_base_anchors).reshape(-1)


flags_op = define_op(FLAGS_SCHEMA, check_anchor_response_flags, anchor_response_flags_reference)


def npu_anchor_response_flags(self=None, featmap_size=None, stride=None, num_base_anchors=None,
                              **kwargs):
    """Responsible flags of the anchors of one feature map (YOLO): 1 where the grid cell
    holds the centre of a ground-truth box.

    Formula::

        gx = clamp(floor(cx / stride[0]), 0, w - 1);  gy = clamp(floor(cy / stride[1]), 0, h - 1)
        grid[gy * w + gx] = 1 for every box (cx, cy: its centre);  out = grid repeated per anchor

    Parameters
    ----------
    self : Tensor
        ``(N, 4)`` ground-truth boxes ``[x1, y1, x2, y2]``, float16 or float32.
    featmap_size : list of 2 ints
        ``[h, w]`` of the feature map.
    stride : list of 2 ints
        The level's strides; ``stride[0]`` divides x, ``stride[1]`` y (``strides=``, the
        spelling of the doc's parameter list, is accepted too).
    num_base_anchors : int
        Anchors per grid cell.

    Returns
    -------
    Tensor
        uint8 ``(h * w * num_base_anchors,)``, cell-major (the flags of cell ``c`` are
        ``out[c * num_base_anchors:(c + 1) * num_base_anchors]``).

    Notes
    -----
    Source: op-plugin AnchorResponseFlagsKernelNpu.cpp (float32 copy of ``self``; output size
    from infersize_npu_anchor_response_flags) and the equivalent golden of op-plugin's
    docs/zh/custom_APIs page: a centre outside the map marks the nearest border cell (each
    axis clamped); hicann ops-cv's kernel golden also maps a NaN / inf centre to 0, as here.
    No backward.

    Examples
    --------
    >>> x = torch.rand(100, 4) * 100
    >>> npu_anywhere.npu_anchor_response_flags(x, [60, 60], [2, 2], 9).shape
    torch.Size([32400])
    """
    if kwargs:
        stride = accept_alias(FLAGS_OP, "stride", stride, "strides", kwargs)
    return flags_op(self, featmap_size, stride, num_base_anchors)


# ---------------------------------------------------------------- grid_assign_positive --


def check_grid_assign_positive(self, overlaps, box_responsible_flags, max_overlaps,
                               argmax_overlaps, gt_max_overlaps, gt_argmax_overlaps, num_gts,
                               pos_iou_thr, min_pos_iou, gt_max_assign_all):
    op = ASSIGN_OP
    checks.expect_dtype(self, FLOATS, op, "self")
    checks.expect_dim(self, 1, op, "self")
    checks.expect_dim(overlaps, 2, op, "overlaps")
    n = self.shape[0]
    k = overlaps.shape[0]
    expect_shape(op, "overlaps", overlaps, (k, n), "(k, n) with n = self.size(0)")
    checks.expect_dtype(box_responsible_flags, (torch.uint8,), op, "box_responsible_flags")
    expect_shape(op, "box_responsible_flags", box_responsible_flags, (n,), "(n,)")
    expect_shape(op, "max_overlaps", max_overlaps, (n,), "(n,)")
    expect_shape(op, "argmax_overlaps", argmax_overlaps, (n,), "(n,)")
    expect_shape(op, "gt_max_overlaps", gt_max_overlaps, (k,), "(k,) with k = overlaps.size(0)")
    expect_shape(op, "gt_argmax_overlaps", gt_argmax_overlaps, (k,), "(k,)")
    checks.expect_same_dtype({"self": self, "overlaps": overlaps, "max_overlaps": max_overlaps,
                              "gt_max_overlaps": gt_max_overlaps}, op)
    # op-plugin's own check (any integral dtype but int64; the kernel takes int32).
    checks.expect_dtype(argmax_overlaps, _INDEX_DTYPES, op, "argmax_overlaps")
    checks.expect_dtype(gt_argmax_overlaps, _INDEX_DTYPES, op, "gt_argmax_overlaps")
    checks.expect(k < MAX_GTS, op, "overlaps", f"fewer than {MAX_GTS} rows (ground truths)",
                  lambda: f"shape {tuple(overlaps.shape)}", ValueError)
    checks.expect_same_device({"self": self, "overlaps": overlaps,
                               "box_responsible_flags": box_responsible_flags,
                               "max_overlaps": max_overlaps, "argmax_overlaps": argmax_overlaps,
                               "gt_max_overlaps": gt_max_overlaps,
                               "gt_argmax_overlaps": gt_argmax_overlaps}, op)
    targets.expect_supported(op, targets.PRE_950)


def grid_assign_positive_reference(self, overlaps, box_responsible_flags, max_overlaps,
                                   argmax_overlaps, gt_max_overlaps, gt_argmax_overlaps,
                                   num_gts, pos_iou_thr, min_pos_iou, gt_max_assign_all):
    n, dtype = self.shape[0], self.dtype
    if n == 0:
        return self.clone()
    # The kernel reads a flag as set when non-zero, except in the argmax-only step (== 1).
    responsible = box_responsible_flags != 0
    # Positive boxes: the best ground truth's 1-based index.
    positive = (max_overlaps > pos_iou_thr) & responsible
    out = torch.where(positive, (argmax_overlaps.long() + 1).to(dtype), self)
    # Low-quality matches, ground truth by ground truth in order (a later one wins); the
    # kernel loops over num_gts rows, clamped to the k rows overlaps has.
    k = max(min(int(num_gts), overlaps.shape[0]), 0)
    ids = torch.arange(1, k + 1, device=self.device)
    eligible = gt_max_overlaps[:k] > min_pos_iou
    if gt_max_assign_all:
        hit = (overlaps[:k] == gt_max_overlaps[:k, None]) & responsible & eligible[:, None]
        winner = (hit.long() * ids[:, None]).amax(0) if k else torch.zeros_like(out).long()
    else:
        target = gt_argmax_overlaps[:k].long()
        inside = (target >= 0) & (target < n)
        target = target.clamp(0, n - 1)
        flagged = box_responsible_flags[target] == 1
        ok = eligible & inside & flagged
        winner = torch.zeros(n, dtype=torch.long, device=self.device)
        winner = winner.scatter_reduce(0, target, torch.where(ok, ids, 0), "amax")
    return torch.where(winner > 0, winner.to(dtype), out)


assign_op = define_op(ASSIGN_SCHEMA, check_grid_assign_positive, grid_assign_positive_reference)


def npu_grid_assign_positive(self, overlaps, box_responsible_flags, max_overlaps,
                             argmax_overlaps, gt_max_overlaps, gt_argmax_overlaps, num_gts,
                             pos_iou_thr, min_pos_iou, gt_max_assign_all):
    """Positive assignment step of the YOLO grid assigner.

    Formula (boxes ``i``, ground truths ``j``; ``responsible = box_responsible_flags != 0``)::

        out = self
        out[i] = argmax_overlaps[i] + 1      where max_overlaps[i] > pos_iou_thr and responsible[i]
        for j in range(min(num_gts, k)), in order, if gt_max_overlaps[j] > min_pos_iou:
            gt_max_assign_all:  out[i] = j + 1 for every responsible i with
                                overlaps[j, i] == gt_max_overlaps[j]
            otherwise:          out[b] = j + 1 for b = gt_argmax_overlaps[j] if its flag == 1

    Parameters
    ----------
    self : Tensor
        ``(n,)`` float16 / float32 assigned indices so far (``assigned_gt_inds``).
    overlaps : Tensor
        ``(k, n)`` IoU of ground truths and boxes, ``self``'s dtype; ``k < 256``.
    box_responsible_flags : Tensor
        ``(n,)`` uint8.
    max_overlaps, argmax_overlaps : Tensor
        ``overlaps.max(0)`` values (``self``'s dtype) and indices (int32), ``(n,)``.
    gt_max_overlaps, gt_argmax_overlaps : Tensor
        ``overlaps.max(1)`` values and indices (int32), ``(k,)``.
    num_gts : int
        Number of real ground truths (clamped to ``k``; a one-element int tensor, as the newer
        doc's example passes, is accepted too).
    pos_iou_thr, min_pos_iou : float
        IoU threshold of positives; minimum IoU of a low-quality match.
    gt_max_assign_all : bool
        Assign every box tied at a ground truth's best IoU (else only its argmax box).

    Returns
    -------
    Tensor
        ``(n,)`` in ``self``'s dtype.

    Notes
    -----
    The seed doc's description is a copy of another op's.  Source: op-plugin
    GridAssignPositiveKernelNpu.cpp and CANN's grid_assign_positive kernel: flags count when
    non-zero (exactly 1 in the argmax-only step), ``num_gts`` is clamped to ``k``, and a later
    ground truth overwrites an earlier one.  No backward.

    Examples
    --------
    >>> out = npu_anywhere.npu_grid_assign_positive(
    ...     torch.zeros(4), torch.rand(2, 4), torch.tensor([1, 1, 1, 0], dtype=torch.uint8),
    ...     torch.rand(4), torch.tensor([1, 0, 1, 0], dtype=torch.int32), torch.rand(2),
    ...     torch.tensor([1, 0], dtype=torch.int32), 128, 0.5, 0., True)
    >>> out.shape
    torch.Size([4])
    """
    return assign_op(self, overlaps, box_responsible_flags, max_overlaps, argmax_overlaps,
                     gt_max_overlaps, gt_argmax_overlaps, num_gts, pos_iou_thr, min_pos_iou,
                     gt_max_assign_all)


TORCH_NPU_FUNCTIONS = {
    YOLO_OP: npu_yolo_boxes_encode,
    FLAGS_OP: npu_anchor_response_flags,
    ASSIGN_OP: npu_grid_assign_positive,
}
