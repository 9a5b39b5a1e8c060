"""torch_npu.npu_nms_v4 (TensorFlow NonMaxSuppressionV4 on the NPU).

Semantics (seed 004 "npu_nms_v4"; output shapes from op-plugin op_plugin/ops/aclops/
NmsV4KernelNpu.cpp and KernelNpuOutputSize.cpp ``nms_v4_npu_output_size``)::

    candidates = boxes with score > scores_threshold, by descending score (ties: lower index)
    IoU(i, j)  = inter / (area_i + area_j - inter) over the boxes' (min, max) corners,
                 0 when either area is <= 0
    greedily keep a candidate unless IoU > iou_threshold with one already kept,
    stopping at max_output_size kept

``selected_indices`` is always ``[max_output_size]`` int32 on the NPU (the host allocates it
so whatever ``pad_to_max_output_size`` says); the kept indices come first, the rest are 0.
``valid_outputs`` is a 0-D int32 count.  Computed in float32 (float64 kept).
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from . import nms_common

OP = "npu_nms_v4"
SCHEMA = ("npu_nms_v4(Tensor self, Tensor scores, Scalar max_output_size, Tensor iou_threshold, "
          "Tensor scores_threshold, bool pad_to_max_output_size=False) -> (Tensor, Tensor)")



def check_nms_v4(self, scores, max_output_size, iou_threshold, scores_threshold,
                 pad_to_max_output_size=False):
    nms_common.expect_boxes_and_scores(OP, self, scores, 4)
    checks.expect(not isinstance(max_output_size, float) and max_output_size >= 0, OP,
                  "max_output_size", "an integer >= 0", max_output_size, ValueError)
    for name, t in (("iou_threshold", iou_threshold), ("scores_threshold", scores_threshold)):
        checks.expect_dtype(t, nms_common.FLOATS, OP, name)
        checks.expect(t.dim() == 0, OP, name, "a 0-D tensor", lambda: f"shape {tuple(t.shape)}",
                      ValueError)


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def nms_v4_reference(self, scores, max_output_size, iou_threshold, scores_threshold,
                     pad_to_max_output_size=False):
    limit = int(max_output_size)
    dtype = _compute_dtype(self.dtype)
    s = scores.to(dtype)
    candidates = torch.nonzero(s > scores_threshold.to(dtype)).flatten()
    order = candidates[torch.sort(s[candidates], descending=True, stable=True).indices]
    b = self.to(dtype)[order]
    corners = torch.cat([torch.minimum(b[:, :2], b[:, 2:]), torch.maximum(b[:, :2], b[:, 2:])], 1)
    area = (corners[:, 2:] - corners[:, :2]).prod(-1)
    inter = nms_common.intersection(corners, corners)
    union = area[:, None] + area[None, :] - inter
    positive = (area[:, None] > 0) & (area[None, :] > 0)
    iou = torch.where(positive, inter / torch.where(positive, union, 1.0), 0.0)
    kept = nms_common.greedy_keep(iou > iou_threshold.to(dtype), limit)
    selected = torch.zeros(limit, dtype=torch.int32, device=self.device)
    selected[:len(kept)] = order[kept].to(torch.int32)
    return selected, torch.tensor(len(kept), dtype=torch.int32, device=self.device)


def _nms_v4_fake(self, scores, max_output_size, iou_threshold, scores_threshold,
                 pad_to_max_output_size=False):
    return (self.new_empty(int(max_output_size), dtype=torch.int32),
            self.new_empty((), dtype=torch.int32))


nms_v4_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nms_v4, reference=nms_v4_reference,
                  fake=_nms_v4_fake, info=OpInfo(api="torch_npu"))
nms_v4_op.forbid_autograd("npu_nms_v4 returns indices; it has no backward on the NPU")


def npu_nms_v4(self=None, scores=None, max_output_size=None, iou_threshold=None,
               scores_threshold=None, pad_to_max_output_size=False, **kwargs):
    """Greedy non-maximum suppression of axis-aligned boxes (TF NonMaxSuppressionV4).

    Formula (TF NonMaxSuppressionV4; op-plugin NmsV4KernelNpu.cpp for the shapes)::

        keep box i (by descending score > scores_threshold) unless
        IoU(i, kept) > iou_threshold for some kept box, until max_output_size are kept

    Parameters
    ----------
    self : Tensor
        ``[num_boxes, 4]`` boxes ``(y1, x1, y2, x2)`` (any two opposite corners; ``boxes=``,
        the doc's name, is accepted too); float16, bfloat16, float32 (float64 kept).
    scores : Tensor
        ``[num_boxes]`` scores.
    max_output_size : int
        Most boxes kept (>= 0).
    iou_threshold, scores_threshold : Tensor
        0-D float tensors.
    pad_to_max_output_size : bool
        Accepted; the NPU's output is ``[max_output_size]`` either way.

    Returns
    -------
    (Tensor, Tensor)
        ``selected_indices`` int32 ``[max_output_size]`` (kept first, then 0) and
        ``valid_outputs``, the 0-D int32 number kept.

    Examples
    --------
    >>> boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [20., 20., 30., 30.]])
    >>> npu_anywhere.npu_nms_v4(boxes, torch.tensor([0.9, 0.8, 0.7]), 3, torch.tensor(0.5),
    ...                         torch.tensor(0.0))
    (tensor([0, 2, 0], dtype=torch.int32), tensor(2, dtype=torch.int32))
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "boxes", kwargs)
    return nms_v4_op(self, scores, max_output_size, iou_threshold, scores_threshold,
                     pad_to_max_output_size)


TORCH_NPU_FUNCTIONS = {OP: npu_nms_v4}
