"""torch_npu.npu_bounding_box_encode / npu_bounding_box_decode: the Faster R-CNN box coder.

Formula (seed 004; the kernels' docstrings)::

    px = (x1 + x2) / 2;  py = (y1 + y2) / 2;  pw = x2 - x1 + 1;  ph = y2 - y1 + 1   (per box)
    encode:  d = ((gx - px) / pw, (gy - py) / ph, log(gw / pw), log(gh / ph));  (d - means) / stds
    decode:  d = deltas * stds + means;  dw, dh clipped to [-|log r|, |log r|] (r = wh_ratio_clip)
             gx = px + pw * dx;  gw = pw * exp(dw)  (y, h alike)
             box = (gx - gw/2 + 0.5, gy - gh/2 + 0.5, gx + gw/2 - 0.5, gy + gh/2 - 0.5)
             x clamped to [0, max_shape[1] - 1], y to [0, max_shape[0] - 1]

Precision order.  op-plugin runs both through aclops (op_plugin/ops/aclops/BoundingBox
{Encode,Decode}KernelNpu.cpp).  On the Atlas training / inference / A2 / A3 lines the kernels
(CANN's bounding_box_encode.py / bounding_box_decode.py) convert float32 inputs to float16 and
do every vector step in float16: the means and the reciprocals of the stds (encode) or the stds
(decode) are float16 scalars, each add / multiply / divide / log / exp rounds to float16, and a
float32 result is the float16 one widened.  That order reproduces op-plugin's goldens
(test/test_base_ops/test_bounding_box_encode.py: 13.3281 for 40/3, NaN for the log of a
negative height ratio; test_bounding_box_decode.py) exactly.  The Ascend 950 kernels (hicann
ops-cv objdetect/bounding_box_{encode,decode}/op_kernel/arch35) compute the same formulas in
float32 and round once, and the 950 decoder differs: it does not clip the size deltas
(``wh_ratio_clip`` is only checked to be positive), clips x to ``[0, max_shape[1]]`` and y to
``[0, max_shape[0]]`` and maps NaN to 0 (its README and kernel); ``npu_anywhere.strict("950")``
selects those forms.
"""

from __future__ import annotations

import math
import struct

import torch

from ... import checks, targets
from ...targets import Product
from .box_coding_common import define_op, expect_n4

ENCODE_OP = "npu_bounding_box_encode"
ENCODE_SCHEMA = ("npu_bounding_box_encode(Tensor anchor_box, Tensor ground_truth_box, "
                 "float means0, float means1, float means2, float means3, float stds0, "
                 "float stds1, float stds2, float stds3) -> Tensor")
DECODE_OP = "npu_bounding_box_decode"
DECODE_SCHEMA = ("npu_bounding_box_decode(Tensor rois, Tensor deltas, float means0, "
                 "float means1, float means2, float means3, float stds0, float stds1, "
                 "float stds2, float stds3, int[1] max_shape, float wh_ratio_clip) -> Tensor")

# ---------------------------------------------------------------------------- checks --


def _expect_box_pair(op, first, first_name, second, second_name):
    expect_n4(op, first_name, first)
    expect_n4(op, second_name, second)
    checks.expect(second.shape == first.shape, op, second_name,
                  lambda: f"the shape of {first_name} {tuple(first.shape)}",
                  lambda: f"shape {tuple(second.shape)}", RuntimeError)
    checks.expect_same_dtype({first_name: first, second_name: second}, op)
    checks.expect_same_device({first_name: first, second_name: second}, op)


def check_bounding_box_encode(anchor_box, ground_truth_box, means0, means1, means2, means3,
                              stds0, stds1, stds2, stds3):
    _expect_box_pair(ENCODE_OP, anchor_box, "anchor_box", ground_truth_box, "ground_truth_box")
    # The kernel divides by each std (it stores 1 / std as a scalar).
    for i, std in enumerate((stds0, stds1, stds2, stds3)):
        checks.expect(std != 0, ENCODE_OP, f"stds{i}", "non-zero", repr(std), ValueError)


def check_bounding_box_decode(rois, deltas, means0, means1, means2, means3, stds0, stds1,
                              stds2, stds3, max_shape, wh_ratio_clip):
    _expect_box_pair(DECODE_OP, rois, "rois", deltas, "deltas")
    checks.expect(len(max_shape) == 2, DECODE_OP, "max_shape", "a list of 2 ints [h, w]",
                  lambda: repr(list(max_shape)), ValueError)
    if targets.current() == Product.ASCEND_950:
        # The 950 kernel's tiling rejects it (it no longer clips the size deltas).
        checks.expect(wh_ratio_clip > 0, DECODE_OP, "wh_ratio_clip", "> 0 on the Ascend 950",
                      repr(wh_ratio_clip), ValueError)


# --------------------------------------------------------------------- arithmetic --


def _stepper(dtype: torch.dtype):
    """The rounding applied after each vector step: float16 on the pre-950 kernels."""
    if targets.current() == Product.ASCEND_950:
        return lambda t: t
    return lambda t: t.to(torch.float16).to(dtype)


def _scalar(value: float) -> float:
    """A kernel scalar: float16 on the pre-950 kernels, float32 on the 950 (rounded in plain
    Python, so that tracing under FakeTensor sees a constant)."""
    code = "f" if targets.current() == Product.ASCEND_950 else "e"
    try:
        return struct.unpack(code, struct.pack(code, value))[0]
    except OverflowError:   # beyond the format's range: the conversion gives an infinity
        return math.copysign(math.inf, value)


def _centre_size(boxes, h):
    """(cx, cy, w, h) of ``[x1, y1, x2, y2]`` columns, the kernels' "+1" widths."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return (h(h(x1 + x2) * 0.5), h(h(y1 + y2) * 0.5), h(h(x2 - x1) + 1.0), h(h(y2 - y1) + 1.0))


def bounding_box_encode_reference(anchor_box, ground_truth_box, means0, means1, means2, means3,
                                  stds0, stds1, stds2, stds3):
    h = _stepper(torch.float32)
    # The inputs are converted once to the compute dtype (float16 before the 950).
    px, py, pw, ph = _centre_size(h(anchor_box.float()), h)
    gx, gy, gw, gh = _centre_size(h(ground_truth_box.float()), h)
    means = [_scalar(-m) for m in (means0, means1, means2, means3)]
    inv_stds = [_scalar(1.0 / s) for s in (stds0, stds1, stds2, stds3)]
    log = torch.log
    if targets.current() == Product.ATLAS_TRAINING:
        # That line's float16 log returns log|x| for a negative ratio (the seed doc's -5.4922).
        log = lambda t: torch.log(t.abs())  # noqa: E731
    raw = (h(h(gx - px) / pw), h(h(gy - py) / ph), h(log(h(gw / pw))), h(log(h(gh / ph))))
    deltas = [h(h(d + m) * s) for d, m, s in zip(raw, means, inv_stds)]
    return torch.stack(deltas, dim=-1).to(anchor_box.dtype)


def _decode_950(rois, deltas, means, stds, max_shape):
    """The Ascend 950 kernel: float32, no ratio clip, bounds [0, W] / [0, H], NaN -> 0."""
    px, py, pw, ph = _centre_size(rois.float(), lambda t: t)
    dx, dy, dw, dh = (d * s + m for d, s, m in zip(deltas.float().unbind(-1), stds, means))
    gw, gh = pw * torch.exp(dw), ph * torch.exp(dh)
    gx, gy = px + pw * dx, py + ph * dy
    height, width = max_shape
    boxes = [(gx - gw * 0.5 + 0.5, width), (gy - gh * 0.5 + 0.5, height),
             (gx + gw * 0.5 - 0.5, width), (gy + gh * 0.5 - 0.5, height)]
    boxes = [torch.nan_to_num(v, nan=0.0).clamp(0.0, float(top)) for v, top in boxes]
    return torch.stack(boxes, dim=-1).to(rois.dtype)


def bounding_box_decode_reference(rois, deltas, means0, means1, means2, means3, stds0, stds1,
                                  stds2, stds3, max_shape, wh_ratio_clip):
    means, stds = (means0, means1, means2, means3), (stds0, stds1, stds2, stds3)
    if targets.current() == Product.ASCEND_950:
        return _decode_950(rois, deltas, means, stds, max_shape)
    h = _stepper(torch.float32)
    means = [_scalar(m) for m in means]
    stds = [_scalar(s) for s in stds]
    dx, dy, dw, dh = (h(h(d * s) + m) for d, s, m in
                      zip(h(deltas.float()).unbind(-1), stds, means))
    # max_ratio = |log(wh_ratio_clip)|, computed by the kernel in float16.
    max_ratio = abs(_scalar(math.log(_scalar(wh_ratio_clip)))) if wh_ratio_clip > 0 else (
        math.inf if wh_ratio_clip == 0 else math.nan)
    dw = torch.clamp(torch.clamp(dw, max=max_ratio), min=-max_ratio)
    dh = torch.clamp(torch.clamp(dh, max=max_ratio), min=-max_ratio)
    px, py, pw, ph = _centre_size(h(rois.float()), h)
    gw, gh = h(h(torch.exp(dw)) * pw), h(h(torch.exp(dh)) * ph)
    gx, gy = h(h(dx * pw) + px), h(h(dy * ph) + py)
    x1 = h(h(h(gw * -0.5) + gx) + 0.5)
    y1 = h(h(h(gh * -0.5) + gy) + 0.5)
    x2 = h(h(h(gw * 0.5) + gx) - 0.5)
    y2 = h(h(h(gh * 0.5) + gy) - 0.5)
    x_max, y_max = _scalar(max_shape[1] - 1), _scalar(max_shape[0] - 1)
    boxes = [torch.clamp(torch.clamp(v, max=top), min=0.0)
             for v, top in ((x1, x_max), (y1, y_max), (x2, x_max), (y2, y_max))]
    return torch.stack(boxes, dim=-1).to(rois.dtype)


encode_op = define_op(ENCODE_SCHEMA, check_bounding_box_encode, bounding_box_encode_reference)
decode_op = define_op(DECODE_SCHEMA, check_bounding_box_decode, bounding_box_decode_reference)


# ------------------------------------------------------------------ public functions --


def npu_bounding_box_encode(anchor_box, ground_truth_box, means0, means1, means2, means3,
                            stds0, stds1, stds2, stds3):
    """Deltas of ground-truth boxes relative to anchor boxes (Faster R-CNN box encoder).

    Formula (per box; ``+1`` widths as the kernel)::

        px, py = (x1 + x2) / 2, (y1 + y2) / 2;   pw, ph = x2 - x1 + 1, y2 - y1 + 1
        (same for the ground-truth box: gx, gy, gw, gh)
        delta = ((gx - px) / pw, (gy - py) / ph, log(gw / pw), log(gh / ph))
        out[:, i] = (delta[i] - means_i) / stds_i

    Parameters
    ----------
    anchor_box : Tensor
        ``(N, 4)`` boxes ``[x1, y1, x2, y2]``, float32 or float16.
    ground_truth_box : Tensor
        ``(N, 4)`` ground-truth boxes, ``anchor_box``'s shape and dtype.
    means0, means1, means2, means3 : float
        Means subtracted from the four deltas (usually 0).
    stds0, stds1, stds2, stds3 : float
        Standard deviations dividing them (usually 1); non-zero.

    Returns
    -------
    Tensor
        ``(N, 4)`` deltas ``[dx, dy, dw, dh]`` in ``anchor_box``'s dtype.

    Notes
    -----
    Source: op-plugin op_plugin/ops/aclops/BoundingBoxEncodeKernelNpu.cpp and CANN's
    bounding_box_encode kernel: before the Ascend 950 every step runs in float16 (float32
    inputs included), so float32 results carry float16 precision (``40/3`` comes out as
    13.3281, as the doc example shows); the log of a non-positive size ratio is NaN (or
    ``-inf`` for 0), as on A2 (op-plugin's golden and the newer doc).  ``strict("910")``
    (Atlas training series) gives ``log|ratio|`` there, the seed example's -5.4922 (that line
    divides by a Newton-refined reciprocal, which may differ by a float16 ulp; not modelled).
    ``strict("950")`` computes in float32 (hicann ops-cv arch35 kernel).  No backward.

    Examples
    --------
    >>> a = torch.tensor([[1., 2., 3., 4.], [3., 4., 5., 6.]])
    >>> g = torch.tensor([[5., 6., 7., 8.], [7., 8., 9., 6.]])
    >>> npu_anywhere.npu_bounding_box_encode(a, g, 0, 0, 0, 0, 0.1, 0.1, 0.2, 0.2)
    tensor([[13.3281, 13.3281,  0.0000,  0.0000],
            [13.3281,  6.6641,  0.0000,     nan]])
    """
    return encode_op(anchor_box, ground_truth_box, means0, means1, means2, means3,
                     stds0, stds1, stds2, stds3)


def npu_bounding_box_decode(rois, deltas, means0, means1, means2, means3, stds0, stds1, stds2,
                            stds3, max_shape, wh_ratio_clip):
    """Boxes from ROIs and deltas (Faster R-CNN box decoder), clipped to the image.

    Formula::

        dx, dy, dw, dh = deltas * stds + means
        dw, dh clipped to [-|log(wh_ratio_clip)|, |log(wh_ratio_clip)|]
        px, py = (x1 + x2) / 2, (y1 + y2) / 2;   pw, ph = x2 - x1 + 1, y2 - y1 + 1
        gx, gy = px + pw * dx, py + ph * dy;     gw, gh = pw * exp(dw), ph * exp(dh)
        out = (gx - gw/2 + 0.5, gy - gh/2 + 0.5, gx + gw/2 - 0.5, gy + gh/2 - 0.5)
        x coordinates clamped to [0, max_shape[1] - 1], y coordinates to [0, max_shape[0] - 1]

    Parameters
    ----------
    rois : Tensor
        ``(N, 4)`` regions of interest ``[x1, y1, x2, y2]``, float32 or float16.
    deltas : Tensor
        ``(N, 4)`` ``[dx, dy, dw, dh]``, ``rois``' shape and dtype.
    means0, means1, means2, means3, stds0, stds1, stds2, stds3 : float
        De-normalisation: ``deltas * stds + means``.
    max_shape : list of 2 ints
        ``[h, w]`` of the image the boxes are clipped to.
    wh_ratio_clip : float
        The size deltas are limited to ``±|log(wh_ratio_clip)|`` (the doc's "(-wh_ratio_clip,
        wh_ratio_clip)" is the kernel's clip of the ratio ``exp(dw)``).

    Returns
    -------
    Tensor
        ``(N, 4)`` boxes ``[x1, y1, x2, y2]`` in ``rois``' dtype.

    Notes
    -----
    Source: op-plugin op_plugin/ops/aclops/BoundingBoxDecodeKernelNpu.cpp and CANN's
    bounding_box_decode kernel: before the Ascend 950 every step is float16 (float32 inputs
    too).  ``strict("950")`` follows the 950 kernel (hicann ops-cv arch35): float32, no
    clip of ``dw`` / ``dh`` (``wh_ratio_clip`` must be > 0 but is unused), bounds ``[0, w]`` /
    ``[0, h]`` instead of ``w - 1`` / ``h - 1``, NaN -> 0.  No backward.

    Examples
    --------
    >>> rois = torch.tensor([[1., 2., 3., 4.], [3., 4., 5., 6.]])
    >>> deltas = torch.tensor([[5., 6., 7., 8.], [7., 8., 9., 6.]])
    >>> npu_anywhere.npu_bounding_box_decode(rois, deltas, 0, 0, 0, 0, 1, 1, 1, 1, (10, 10), 0.1)
    tensor([[2.5000, 6.5000, 9.0000, 9.0000],
            [9.0000, 9.0000, 9.0000, 9.0000]])
    """
    return decode_op(rois, deltas, means0, means1, means2, means3, stds0, stds1, stds2, stds3,
                     max_shape, wh_ratio_clip)


TORCH_NPU_FUNCTIONS = {
    ENCODE_OP: npu_bounding_box_encode,
    DECODE_OP: npu_bounding_box_decode,
}
