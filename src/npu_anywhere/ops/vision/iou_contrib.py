"""torch_npu.contrib's box-overlap helpers: ``npu_iou``, ``npu_ptiou``, ``npu_giou`` and, under
``torch_npu.contrib.function``, ``npu_diou`` and ``npu_ciou``.

Thin Python wrappers over the ops (op-plugin docs/zh/custom_APIs/torch_npu-contrib/*.md): they
cast integer boxes to float32, reorder the arguments so that the result is ``[boxes1, boxes2]``
and pick the layouts the loss ops take.  They add no arithmetic of their own, so they trace,
compile and differentiate as the ops do.  The shim installs them as ``torch_npu.contrib.<name>``
and ``torch_npu.contrib.function.<name>``; ``npu_anywhere`` itself does not export them (their
names would shadow the ops').
"""

from __future__ import annotations

import torch

from ... import checks
from .iou import npu_iou as _iou_op, npu_ptiou as _ptiou_op
from .iou_losses import npu_ciou as _ciou_op, npu_diou as _diou_op, npu_giou as _giou_op

_IOU_MODES = ("iou", "ptiou")


def _as_box_dtype(boxes: torch.Tensor) -> torch.Tensor:
    """float32 unless already float32 or float16 (the helpers' documented input dtypes)."""
    return boxes if boxes.dtype in (torch.float32, torch.float16) else boxes.float()


def _pairwise(op_name, boxes1, boxes2, mode, is_normalized, normalized_scale):
    checks.expect_one_of(mode, _IOU_MODES, op_name, "mode")
    if is_normalized:
        # The ops add 0.01 to every side: normalised boxes are scaled up first.
        boxes1, boxes2 = boxes1 * normalized_scale, boxes2 * normalized_scale
    op = _iou_op if mode == "iou" else _ptiou_op
    # The op's rows are its second argument: boxes2 first gives [N (boxes1), M (boxes2)].
    return op(_as_box_dtype(boxes2), _as_box_dtype(boxes1), 0)


def npu_iou(boxes1, boxes2, mode="ptiou", is_normalized=False, normalized_scale=100.0):
    """IoU of every pair of ``boxes1`` ``(N, 4)`` and ``boxes2`` ``(M, 4)``, ``[x1, y1, x2, y2]``
    rows: an ``(N, M)`` tensor.

    ``mode`` picks the op (``"iou"``: :func:`torch_npu.npu_iou`, ``"ptiou"``:
    :func:`torch_npu.npu_ptiou`; both compute the same numbers here, see ``npu_iou``).
    ``is_normalized`` multiplies both box sets by ``normalized_scale`` first, since the op's
    eps of 0.01 per side would weigh too much on coordinates in [0, 1].  Boxes of another
    dtype than float32 / float16 are cast to float32.  No backward.
    """
    return _pairwise("npu_iou", boxes1, boxes2, mode, is_normalized, normalized_scale)


def npu_ptiou(boxes1, boxes2, mode="ptiou", is_normalized=False, normalized_scale=100.0):
    """The same helper as :func:`npu_iou` (the contrib doc gives both one signature)."""
    return _pairwise("npu_ptiou", boxes1, boxes2, mode, is_normalized, normalized_scale)


def npu_giou(boxes1, boxes2, is_permuted=True):
    """GIoU of aligned pairs of ``xywh`` boxes: ``(n, 1)``.

    ``is_permuted=True`` (the default) takes ``(n, 4)`` boxes and hands the op their
    transposes; ``False`` takes the op's own ``(4, n)`` layout.  Calls
    :func:`torch_npu.npu_giou` with ``trans=True, is_cross=False, mode=0``, the setting its
    backward supports.
    """
    if is_permuted:
        boxes1, boxes2 = boxes1.t(), boxes2.t()
    return _giou_op(_as_box_dtype(boxes1), _as_box_dtype(boxes2), True, False, 0)


def npu_diou(boxes1, boxes2, trans=True, is_cross=False, mode=0):
    """:func:`torch_npu.npu_diou` of ``(4, n)`` boxes with the contrib defaults
    (``trans=True``: ``xywh`` rows, aligned pairs, IoU): ``(1, n)``."""
    return _diou_op(_as_box_dtype(boxes1), _as_box_dtype(boxes2), trans, is_cross, mode)


def npu_ciou(boxes1, boxes2, trans=True, is_cross=False, mode=0):
    """:func:`torch_npu.npu_ciou` of ``(4, n)`` boxes with the contrib defaults (``trans=True``,
    aligned pairs, IoU; ``atan_sub_flag=True``): ``(1, n)``."""
    return _ciou_op(_as_box_dtype(boxes1), _as_box_dtype(boxes2), trans, is_cross, mode, True)


CONTRIB_FUNCTIONS = {"npu_iou": npu_iou, "npu_ptiou": npu_ptiou, "npu_giou": npu_giou,
                     "npu_diou": npu_diou, "npu_ciou": npu_ciou}
