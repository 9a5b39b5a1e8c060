"""torch_npu.npu_iou and npu_ptiou: IoU / IoF of every (gtbox, bbox) pair.

Formula (op-plugin's aclop path, op_plugin/ops/aclops/IouKernelNpu.cpp, runs the ``Iou``
kernel with ``eps = 0.01`` on float16 copies of both inputs)::

    w = x2 - x1 + eps;  h = y2 - y1 + eps;  area = w * h           (per box)
    inter[j, i] = max(min(x2_i, X2_j) - max(x1_i, X1_j), 0) * (same for y)
    iou[j, i] = inter / (area_i + area_gt_j - inter)      mode 0
    iof[j, i] = inter / area_gt_j                         mode 1

Precision order: the per-box widths, heights and areas and the intersection are float16
values (each step rounded to float16), the union and the quotient float32, the result
rounded to float16 and cast to ``bboxes``' dtype.  That order reproduces every value of
op-plugin's test/test_base_ops/test_iou.py and of the doc example exactly (0.4985 for the
contained box, 0.9961 / 0.9980 for identical ones; float32 areas would give 0.4988).  The
intersection carries no eps on this path.

Ascend 950 (op_plugin/ops/opapi/IouKernelNpuOpApi.cpp, ``aclnnIou``; hicann ops-cv
objdetect/iou_v2/op_kernel) adds eps inside the intersection clamp too, computes in float32
and keeps the input dtype; under ``npu_anywhere.strict("950")`` that form is used.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._boxes import expect_boxes_n4

OP = "npu_iou"
SCHEMA = "npu_iou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor"
OP_PT = "npu_ptiou"
SCHEMA_PT = "npu_ptiou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor"

EPS = 0.01
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})


def _check(op, bboxes, gtboxes, mode, supported):
    expect_boxes_n4(op, "bboxes", bboxes, _DTYPES)
    expect_boxes_n4(op, "gtboxes", gtboxes, _DTYPES)
    checks.expect(mode in (0, 1), op, "mode", "0 (IoU) or 1 (IoF)", repr(mode), ValueError)
    checks.expect_same_device({"bboxes": bboxes, "gtboxes": gtboxes}, op)
    targets.expect_supported(op, supported)


def check_iou(bboxes, gtboxes, mode=0):
    _check(OP, bboxes, gtboxes, mode, _SUPPORTED)


def check_ptiou(bboxes, gtboxes, mode=0):
    _check(OP_PT, bboxes, gtboxes, mode, targets.PRE_950)


def _aclop_iou(b, g, mode):
    """The float16-step form of the pre-950 kernel; ``b`` (1, N, 4), ``g`` (M, 1, 4) float32."""
    def h(t):         # one float16 step, carried in float32
        return t.half().float()

    def area(t):
        return h(h(t[..., 2] - t[..., 0] + EPS) * h(t[..., 3] - t[..., 1] + EPS))

    iw = h(torch.minimum(b[..., 2], g[..., 2]) - torch.maximum(b[..., 0], g[..., 0])).clamp_min(0)
    ih = h(torch.minimum(b[..., 3], g[..., 3]) - torch.maximum(b[..., 1], g[..., 1])).clamp_min(0)
    inter = h(iw * ih)
    area_g = area(g)
    denom = area_g if mode == 1 else area(b) + area_g - inter
    return (inter / denom).half()


def _aclnn_iou(b, g, mode):
    """The 950 kernel's form: eps inside the intersection clamp as well, float32 steps."""
    iw = (torch.minimum(b[..., 2], g[..., 2]) + EPS - torch.maximum(b[..., 0], g[..., 0]))
    ih = (torch.minimum(b[..., 3], g[..., 3]) + EPS - torch.maximum(b[..., 1], g[..., 1]))
    inter = iw.clamp_min(0) * ih.clamp_min(0)
    area_b = (b[..., 2] - b[..., 0] + EPS) * (b[..., 3] - b[..., 1] + EPS)
    area_g = (g[..., 2] - g[..., 0] + EPS) * (g[..., 3] - g[..., 1] + EPS)
    denom = area_g if mode == 1 else area_b + area_g - inter
    return inter / denom


def iou_reference(bboxes, gtboxes, mode=0):
    if targets.current() == Product.ASCEND_950:
        form, b, g = _aclnn_iou, bboxes.float(), gtboxes.float()
    else:
        # The aclop path casts both inputs to float16 first.
        form, b, g = _aclop_iou, bboxes.half().float(), gtboxes.half().float()
    return form(b[None, :, :], g[:, None, :], mode).to(bboxes.dtype)


iou_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_iou, reference=iou_reference,
               metadata_check=True, info=OpInfo(api="torch_npu"))
iou_op.forbid_autograd("torch_npu defines no backward for it")
ptiou_op = NpuOp(SCHEMA_PT, namespace=TORCH_NPU_NS, check=check_ptiou, reference=iou_reference,
                 metadata_check=True, info=OpInfo(api="torch_npu"))
ptiou_op.forbid_autograd("torch_npu defines no backward for it")


def npu_iou(bboxes, gtboxes, mode=0):
    """IoU (``mode=0``) or IoF (``mode=1``) of every ground-truth box with every box.

    Formula (eps = 0.01, the kernel's attribute)::

        area = (x2 - x1 + eps) * (y2 - y1 + eps)
        iw = relu(min(x2_i, X2_j) - max(x1_i, X1_j)); ih = relu(min(y2_i, Y2_j) - max(y1_i, Y1_j))
        inter[j, i] = iw * ih
        out[j, i] = inter / (area_i + area_gt_j - inter)   (IoU)   or   inter / area_gt_j   (IoF)

    Parameters
    ----------
    bboxes : Tensor
        ``(N, 4)`` boxes ``[x1, y1, x2, y2]``, float16, bfloat16 or float32 (float64 accepted
        outside strict mode).
    gtboxes : Tensor
        ``(M, 4)`` ground-truth boxes, same layout.
    mode : int
        0 IoU, 1 IoF (intersection over the ground-truth box's area).

    Constraints
    -----------
    Atlas training / inference / A2 / A3 series and Ascend 950.

    Returns
    -------
    Tensor
        ``(M, N)`` in ``bboxes``' dtype (row = ground-truth box).

    Notes
    -----
    Source: op-plugin op_plugin/ops/aclops/IouKernelNpu.cpp (float16 casts, ``eps=0.01``);
    the precision order (float16 areas and intersection, float32 union and quotient) is the
    one that reproduces the goldens of test/test_base_ops/test_iou.py and the doc example
    exactly.  Strict mode "950" follows IouKernelNpuOpApi.cpp's ``aclnnIou`` instead (eps
    also inside the intersection, float32, the input dtype kept).  No backward.

    Examples
    --------
    >>> b = torch.tensor([[0, 0, 10, 10], [10, 10, 20, 20.]]).half()
    >>> npu_anywhere.npu_iou(b, b, 0)      # [[0.9961, 0], [0, 0.9961]]
    """
    return iou_op(bboxes, gtboxes, mode)


def npu_ptiou(bboxes, gtboxes, mode=0):
    """The same computation as :func:`npu_iou` (op-plugin's aclops npu_ptiou calls npu_iou).

    Returns ``(M, N)``: the IoU (``mode=0``) or IoF (``mode=1``) of ground-truth box ``j`` and
    box ``i``; see :func:`npu_iou` for the formula, dtypes and the float16 steps.  Atlas
    training / inference / A2 / A3 series only (no Ascend 950 path; strict mode).
    """
    return ptiou_op(bboxes, gtboxes, mode)


TORCH_NPU_FUNCTIONS = {OP: npu_iou, OP_PT: npu_ptiou}
