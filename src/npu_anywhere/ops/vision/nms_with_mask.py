"""torch_npu.npu_nms_with_mask (NMSWithMask: validity mask of greedy NMS in input order).

Semantics (seed 004 "npu_nms_with_mask"; shapes from op-plugin op_plugin/ops/aclops/
NmsWithMaskKernelNpu.cpp; the suppression test from ops-cv image/nms_with_mask/op_kernel/
arch35/nms_with_mask_regbase_multiprocess.h ``CalcIntersection``)::

    rows are proposals (c0, c1, c2, c3, score, ...) already in priority order
    area_i = (c2 - c0) * (c3 - c1)
    inter  = max(0, min(c2) - max(c0)) * max(0, min(c3) - max(c1))
    box j is suppressed by an earlier kept box i when inter > iou_threshold * (area_i + area_j - inter)
    selected_boxes = input[:, :5],  selected_idx = 0 .. N-1,  selected_mask = 1 for kept rows

The kernel does not sort: callers pass proposals sorted by score.  Computed in float32
(float64 kept); ``selected_boxes`` keeps the input dtype.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import nms_common

OP = "npu_nms_with_mask"
SCHEMA = "npu_nms_with_mask(Tensor input, Scalar iou_threshold) -> (Tensor, Tensor, Tensor)"


def check_nms_with_mask(input, iou_threshold):
    checks.expect_dtype(input, nms_common.FLOATS, OP, "input")
    checks.expect(input.dim() == 2 and input.shape[1] in (5, 8), OP, "input",
                  "of shape [N, 5] or [N, 8] (x1, y1, x2, y2, score[, padding])",
                  lambda: f"shape {tuple(input.shape)}", ValueError)


def nms_with_mask_reference(input, iou_threshold):
    dtype = torch.float64 if input.dtype == torch.float64 else torch.float32
    boxes = input[:, :4].to(dtype)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    inter = nms_common.intersection(boxes, boxes)
    union = area[:, None] + area[None, :] - inter
    kept = nms_common.greedy_keep(inter > float(iou_threshold) * union)
    n = input.shape[0]
    mask = torch.zeros(n, dtype=torch.uint8, device=input.device)
    mask[kept] = 1
    return (input[:, :5].clone(), torch.arange(n, dtype=torch.int32, device=input.device), mask)


def _nms_with_mask_fake(input, iou_threshold):
    n = input.shape[0]
    return (input.new_empty(n, 5), input.new_empty(n, dtype=torch.int32),
            input.new_empty(n, dtype=torch.uint8))


nms_with_mask_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nms_with_mask,
                         reference=nms_with_mask_reference, fake=_nms_with_mask_fake,
                         info=OpInfo(api="torch_npu"))
nms_with_mask_op.forbid_autograd("npu_nms_with_mask has no backward on the NPU")


def npu_nms_with_mask(input=None, iou_threshold=None):
    """Mark which proposals survive greedy NMS, in the order given.

    Formula (ops-cv NMSWithMask kernel)::

        mask[j] = 1 unless some earlier kept i has inter(i, j) > iou_threshold * union(i, j)

    Parameters
    ----------
    input : Tensor
        ``[N, 5]`` (or ``[N, 8]``, extra columns ignored) rows ``(x1, y1, x2, y2, score)``
        sorted by descending score; float16, bfloat16, float32 (float64 kept).
    iou_threshold : float
        Overlap above which a later box is suppressed.

    Returns
    -------
    (Tensor, Tensor, Tensor)
        ``selected_boxes`` ``[N, 5]`` (the first five columns, input dtype),
        ``selected_idx`` int32 ``[N]`` (0 .. N-1) and ``selected_mask`` uint8 ``[N]``.

    Examples
    --------
    >>> x = torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.6], [6.0, 7.0, 8.0, 9.0, 0.4]])
    >>> npu_anywhere.npu_nms_with_mask(x, 0.5)[2]
    tensor([1, 1], dtype=torch.uint8)
    """
    return nms_with_mask_op(input, iou_threshold)


TORCH_NPU_FUNCTIONS = {OP: npu_nms_with_mask}
