"""torch_npu.npu_rotated_box_encode / npu_rotated_box_decode: rotated-box deltas.

Boxes are ``(B, 5, N)``: rows ``x1, y1, x2, y2, angle`` (angle in degrees).  Formula (CANN's
rotated_box_encode.py / rotated_box_decode.py kernels, run by op-plugin's aclops
op_plugin/ops/aclops/RotatedBox{Encode,Decode}KernelNpu.cpp with ``weight`` as a host list)::

    w = max(x2 - x1, 1);  h = max(y2 - y1, 1);  cx = x1 + w / 2;  cy = y1 + h / 2   (per box)
    encode:  (dx, dy, dw, dh, dt) = ((gcx - cx) / w, (gcy - cy) / h, log(gw / w), log(gh / h),
                                     tan(gt * pi / 180) - tan(t * pi / 180)) * weight
    decode:  (dx, dy, dw, dh, dt) = deltas / weight
             gcx = cx + dx * w;  gcy = cy + dy * h;  gw = w * exp(dw);  gh = h * exp(dh)
             gt = atan(tan(t * pi / 180) + dt) * 180 / pi
             out = (gcx - gw / 2, gcy - gh / 2, gcx + gw / 2, gcy + gh / 2, gt)

The kernels compute in float32 (float16 inputs widened, the result rounded once), which this
reference does too; their tan / atan are series approximations of the exact functions used
here.  op-plugin's test/test_base_ops/test_rotated_box.py goldens agree to their tolerance.
"""

from __future__ import annotations

import math

import torch

from ... import checks
from ...params import accept_alias
from .box_coding_common import FLOATS, define_op

ENCODE_OP = "npu_rotated_box_encode"
ENCODE_SCHEMA = "npu_rotated_box_encode(Tensor self, Tensor gt_bboxes, Tensor weight) -> Tensor"
DECODE_OP = "npu_rotated_box_decode"
DECODE_SCHEMA = "npu_rotated_box_decode(Tensor self, Tensor deltas, Tensor weight) -> Tensor"

_DEG = math.pi / 180.0


def _check(op, anchors, other, other_name, weight):
    for name, t in (("self", anchors), (other_name, other)):
        checks.expect_dtype(t, FLOATS, op, name)
        checks.expect(t.dim() == 3 and t.shape[1] == 5, op, name,
                      "a 3-D tensor of shape (B, 5, N) (rows x1, y1, x2, y2, angle)",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(other.shape == anchors.shape, op, other_name,
                  lambda: f"the shape of self {tuple(anchors.shape)}",
                  lambda: f"shape {tuple(other.shape)}", RuntimeError)
    checks.expect_same_dtype({"self": anchors, other_name: other}, op)
    checks.expect(weight.is_floating_point(), op, "weight", "a floating-point tensor",
                  lambda: str(weight.dtype).replace("torch.", ""), TypeError)
    checks.expect(weight.numel() == 5, op, "weight",
                  "5 values (weights of x, y, w, h and angle)",
                  lambda: f"shape {tuple(weight.shape)}", ValueError)
    checks.expect_same_device({"self": anchors, other_name: other}, op)


def check_rotated_box_encode(self, gt_bboxes, weight):
    _check(ENCODE_OP, self, gt_bboxes, "gt_bboxes", weight)


def check_rotated_box_decode(self, deltas, weight):
    _check(DECODE_OP, self, deltas, "deltas", weight)


def _centre_form(boxes):
    """(cx, cy, w, h, angle) rows of ``(B, 5, N)`` corner boxes; sizes at least 1."""
    x1, y1, x2, y2, angle = boxes.unbind(1)
    w = (x2 - x1).clamp_min(1.0)
    h = (y2 - y1).clamp_min(1.0)
    return x1 + w * 0.5, y1 + h * 0.5, w, h, angle


def _weights(weight, like):
    # The host list of float32 values the kernel takes as its attribute, one per row.
    return weight.reshape(5).to(device=like.device, dtype=torch.float32).unbind(0)


def rotated_box_encode_reference(self, gt_bboxes, weight):
    ax, ay, aw, ah, at = _centre_form(self.float())
    gx, gy, gw, gh, gt = _centre_form(gt_bboxes.float())
    wx, wy, ww, wh, wt = _weights(weight, self)
    rows = ((gx - ax) / aw * wx, (gy - ay) / ah * wy, torch.log(gw / aw) * ww,
            torch.log(gh / ah) * wh, (torch.tan(gt * _DEG) - torch.tan(at * _DEG)) * wt)
    return torch.stack(rows, dim=1).to(self.dtype)


def rotated_box_decode_reference(self, deltas, weight):
    ax, ay, aw, ah, at = _centre_form(self.float())
    # The kernel multiplies by host-computed reciprocals of the weights.
    inv = [1.0 / w for w in _weights(weight, self)]
    dx, dy, dw, dh, dt = (d * r for d, r in zip(deltas.float().unbind(1), inv))
    cx, cy = dx * aw + ax, dy * ah + ay
    w, h = torch.exp(dw) * aw, torch.exp(dh) * ah
    angle = torch.atan(torch.tan(at * _DEG) + dt) / _DEG
    rows = (cx - w * 0.5, cy - h * 0.5, cx + w * 0.5, cy + h * 0.5, angle)
    return torch.stack(rows, dim=1).to(self.dtype)


encode_op = define_op(ENCODE_SCHEMA, check_rotated_box_encode, rotated_box_encode_reference)
decode_op = define_op(DECODE_SCHEMA, check_rotated_box_decode, rotated_box_decode_reference)


def _anchors(op, value, kwargs):
    # The doc pages spell the anchors ``anchor_box`` and ``anchor_boxes`` (prototype and
    # parameter list disagree); both are accepted for both ops.
    alias = "anchor_boxes" if "anchor_boxes" in kwargs else "anchor_box"
    return accept_alias(op, "self", value, alias, kwargs)


def npu_rotated_box_encode(self=None, gt_bboxes=None, weight=None, **kwargs):
    """Deltas of rotated ground-truth boxes relative to rotated anchor boxes.

    Formula (per box; angles in degrees)::

        w = max(x2 - x1, 1);  h = max(y2 - y1, 1);  cx = x1 + w/2;  cy = y1 + h/2
        out = ((gcx - cx) / w, (gcy - cy) / h, log(gw / w), log(gh / h),
               tan(g_angle * pi/180) - tan(angle * pi/180)) * weight

    Parameters
    ----------
    self : Tensor
        ``(B, 5, N)`` anchor boxes, rows ``x1, y1, x2, y2, angle`` (the doc's names
        ``anchor_box=`` / ``anchor_boxes=`` also accepted), float32 or float16.
    gt_bboxes : Tensor
        ``(B, 5, N)`` ground-truth boxes, ``self``'s shape and dtype.
    weight : Tensor
        5 floats, the weights of the x, y, w, h and angle deltas (the doc's default is ones).

    Returns
    -------
    Tensor
        ``(B, 5, N)`` deltas in ``self``'s dtype (float32 math, one rounding).

    Notes
    -----
    Source: CANN's rotated_box_encode kernel (op-plugin aclops RotatedBoxEncodeKernelNpu.cpp
    passes ``weight`` as a host attribute).  Its tan is a series; this reference uses the
    exact function.  No backward.

    Examples
    --------
    >>> anchors = torch.tensor([[[30.69], [32.6], [45.94], [59.88], [-44.53]]]).half()
    >>> gt = torch.tensor([[[30.44], [18.72], [33.22], [45.56], [8.5]]]).half()
    >>> npu_anywhere.npu_rotated_box_encode(anchors, gt, torch.ones(5).half()).flatten()
    tensor([-0.4253, -0.5166, -1.7021, -0.0162,  1.1328], dtype=torch.float16)
    """
    if kwargs:
        self = _anchors(ENCODE_OP, self, kwargs)
    return encode_op(self, gt_bboxes, weight)


def npu_rotated_box_decode(self=None, deltas=None, weight=None, **kwargs):
    """Rotated boxes from anchor boxes and deltas (the inverse of the encoder).

    Formula (angles in degrees)::

        w = max(x2 - x1, 1);  h = max(y2 - y1, 1);  cx = x1 + w/2;  cy = y1 + h/2
        dx, dy, dw, dh, dt = deltas / weight
        gcx, gcy = cx + dx * w, cy + dy * h;   gw, gh = w * exp(dw), h * exp(dh)
        angle = atan(tan(anchor_angle * pi/180) + dt) * 180/pi
        out = (gcx - gw/2, gcy - gh/2, gcx + gw/2, gcy + gh/2, angle)

    Parameters
    ----------
    self : Tensor
        ``(B, 5, N)`` anchor boxes (the doc's names ``anchor_boxes=`` / ``anchor_box=`` also
        accepted), float32 or float16.
    deltas : Tensor
        ``(B, 5, N)`` deltas, ``self``'s shape and dtype.
    weight : Tensor
        5 floats dividing the deltas (non-zero; the doc's default is ones).

    Returns
    -------
    Tensor
        ``(B, 5, N)`` boxes in ``self``'s dtype (float32 math, one rounding).

    Notes
    -----
    Source: CANN's rotated_box_decode kernel (op-plugin aclops RotatedBoxDecodeKernelNpu.cpp).
    The kernel's tan / atan are series approximations; exact functions here.  No backward.

    Examples
    --------
    >>> anchors = torch.tensor([[[4.137], [33.72], [29.4], [54.06], [41.28]]]).half()
    >>> deltas = torch.tensor([[[0.0244], [-1.992], [0.2109], [0.315], [-37.25]]]).half()
    >>> npu_anywhere.npu_rotated_box_decode(anchors, deltas, torch.ones(5).half()).flatten()
    tensor([  1.7861, -10.5781,  33.0000,  17.2969, -88.4375], dtype=torch.float16)
    """
    if kwargs:
        self = _anchors(DECODE_OP, self, kwargs)
    return decode_op(self, deltas, weight)


TORCH_NPU_FUNCTIONS = {
    ENCODE_OP: npu_rotated_box_encode,
    DECODE_OP: npu_rotated_box_decode,
}
