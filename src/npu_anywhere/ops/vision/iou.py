"""torch_npu.npu_iou and npu_ptiou: IoU / IoF of every (gtbox, bbox) pair.

Formula (seed 004 names it; the numbers follow op-plugin's aclop path, IouKernelNpu.cpp, which
runs the ``Iou`` kernel with ``eps = 0.01`` on float16 copies of both inputs)::

    w = x2 - x1 + eps;  h = y2 - y1 + eps;  area = w * h           (per box)
    inter[j, i] = max(min(x2_i, X2_j) - max(x1_i, X1_j), 0) * (same for y)
    iou[j, i] = inter / (area_i + area_gt_j - inter)      mode 0
    iof[j, i] = inter / area_gt_j                         mode 1

The intersection carries no eps: that is what op-plugin's test/test_base_ops/test_iou.py
numbers show (identical boxes give 0.9961 = 100 / 100.4 for IoU and 0.9980 for IoF, exactly;
the doc example's 0.4985 comes out 0.4988, 6e-4 relative, the NPU's own float16 arithmetic).  Ascend 950 (IouKernelNpuOpApi.cpp, ``aclnnIou``) adds eps inside the intersection clamp
too and keeps the input dtype; under ``npu_anywhere.strict("950")`` that form is used.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_iou"
SCHEMA = "npu_iou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor"
OP_PT = "npu_ptiou"
SCHEMA_PT = "npu_ptiou(Tensor bboxes, Tensor gtboxes, int mode=0) -> Tensor"

EPS = 0.01
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})


def _check(op, bboxes, gtboxes, mode):
    for name, t in (("bboxes", bboxes), ("gtboxes", gtboxes)):
        checks.expect_dtype(t, _DTYPES, op, name)
        checks.expect(t.dim() == 2 and t.shape[1] == 4, op, name,
                      "a 2-D tensor of shape (n, 4) (columns x1, y1, x2, y2)",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(mode in (0, 1), op, "mode", "0 (IoU) or 1 (IoF)", repr(mode), ValueError)
    checks.expect_same_device({"bboxes": bboxes, "gtboxes": gtboxes}, op)
    targets.expect_supported(op, _SUPPORTED)


def check_iou(bboxes, gtboxes, mode=0):
    _check(OP, bboxes, gtboxes, mode)


def check_ptiou(bboxes, gtboxes, mode=0):
    _check(OP_PT, bboxes, gtboxes, mode)


def iou_reference(bboxes, gtboxes, mode=0):
    on_950 = targets.current() == Product.ASCEND_950
    if on_950:
        b, g = bboxes.float(), gtboxes.float()
    else:
        # The aclop path casts both inputs to float16; the arithmetic itself is wider.
        b, g = bboxes.half().float(), gtboxes.half().float()
    b = b[None, :, :]        # (1, N, 4)
    g = g[:, None, :]        # (M, 1, 4)
    inter_eps = EPS if on_950 else 0.0
    iw = (torch.minimum(b[..., 2], g[..., 2]) - torch.maximum(b[..., 0], g[..., 0])
          + inter_eps).clamp_min(0)
    ih = (torch.minimum(b[..., 3], g[..., 3]) - torch.maximum(b[..., 1], g[..., 1])
          + inter_eps).clamp_min(0)
    inter = iw * ih
    area_b = (b[..., 2] - b[..., 0] + EPS) * (b[..., 3] - b[..., 1] + EPS)
    area_g = (g[..., 2] - g[..., 0] + EPS) * (g[..., 3] - g[..., 1] + EPS)
    denom = area_g if mode == 1 else area_b + area_g - inter
    out = inter / denom
    if not on_950:
        out = out.half()     # the kernel's float16 output
    return out.to(bboxes.dtype)


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
        inter[j, i] = relu(min(x2_i, X2_j) - max(x1_i, X1_j)) * relu(min(y2_i, Y2_j) - max(y1_i, Y1_j))
        out[j, i] = inter / (area_i + area_gt_j - inter)   (IoU)   or   inter / area_gt_j   (IoF)

    Parameters
    ----------
    bboxes : Tensor
        ``(N, 4)`` boxes ``[x1, y1, x2, y2]``, float16, bfloat16 or float32.
    gtboxes : Tensor
        ``(M, 4)`` ground-truth boxes, same layout.
    mode : int
        0 IoU, 1 IoF (intersection over the ground-truth box's area).

    Returns
    -------
    Tensor
        ``(M, N)`` in ``bboxes``' dtype (row = ground-truth box).

    Notes
    -----
    Source: op-plugin op_plugin/ops/aclops/IouKernelNpu.cpp (float16 casts, ``eps=0.01``) and
    the goldens of test/test_base_ops/test_iou.py (met within their float16 tolerance; the
    identical-box values exactly): inputs and output pass through float16 as on the NPU, the
    arithmetic is float32.  Strict mode "950" follows
    IouKernelNpuOpApi.cpp's ``aclnnIou`` instead (eps also inside the intersection, no float16
    round trip).  No backward.

    Examples
    --------
    >>> b = torch.tensor([[0, 0, 10, 10], [10, 10, 20, 20.]]).half()
    >>> npu_anywhere.npu_iou(b, b, 0)      # [[0.9961, 0], [0, 0.9961]]
    """
    return iou_op(bboxes, gtboxes, mode)


def npu_ptiou(bboxes, gtboxes, mode=0):
    """The same computation as :func:`npu_iou` (op-plugin's npu_ptiou calls npu_iou).

    Returns ``(M, N)``: the IoU (``mode=0``) or IoF (``mode=1``) of ground-truth box ``j`` and
    box ``i``; see :func:`npu_iou` for the formula, dtypes and the float16 round trip.
    """
    return ptiou_op(bboxes, gtboxes, mode)


TORCH_NPU_FUNCTIONS = {OP: npu_iou, OP_PT: npu_ptiou}
