"""torch_npu.npu_giou, npu_diou, npu_ciou and their backward ops.

Boxes are ``(4, n)``: one row per coordinate (x1, y1, x2, y2, or x, y, w, h when ``trans``), the
layout op-plugin's kernels read (GiouKernelNpu.cpp, DiouKernelNpu.cpp, CiouKernelNpu.cpp take
``size(1)`` as the box count; the newer docs' ``(N, 4)`` is a doc defect, the seed's own example
builds ``(4, 10)``).  Formulas follow op-plugin's CPU goldens (test/test_base_ops/
test_npu_giou.py, test_npu_diou.py, test_ciou.py), computed in float32 (float16 inputs upcast,
the result rounded to float16 when either input is float16, as the kernel wrappers do)::

    inter  = relu(min(x2, X2) - max(x1, X1)) * relu(min(y2, Y2) - max(y1, Y1))
    GIoU   = inter / union - (C - union) / C          union = w1 h1 + w2 h2 - inter, C = hull area
    DIoU   = inter / union_e - rho2 / c2              (eps = 1e-9 on h1, h2, union_e and c2)
    CIoU   = DIoU - alpha * v,   v = 4 / pi^2 (atan(w2 / h2) - atan(w1 / h1))^2,
             alpha = v / (1 + eps - iou + v)

``rho2`` is the squared centre distance, ``c2`` the squared diagonal of the hull.  Mode 1 (IoF)
replaces the union by the ground-truth box's area (w2 h2).  Pairs: ``is_cross=False`` pairs box
i with gtbox i (n must equal m); ``is_cross=True`` pairs every gtbox j with every box i.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._boxes import compute_dtype, corners_rows, expect_boxes_4n, float_dtypes, half_or_float

EPS = 1e-9
GIOU, DIOU, CIOU = "npu_giou", "npu_diou", "npu_ciou"

SCHEMA_GIOU = ("npu_giou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=False, "
               "int mode=0) -> Tensor")
SCHEMA_GIOU_BW = ("npu_giou_backward(Tensor grad, Tensor bboxes, Tensor gtboxes, bool trans=False, "
                  "bool is_cross=False, int mode=0) -> (Tensor, Tensor)")
SCHEMA_DIOU = ("npu_diou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=False, "
               "int mode=0) -> Tensor")
SCHEMA_DIOU_BW = ("npu_diou_backward(Tensor grad, Tensor bboxes, Tensor gtboxes, bool trans=False, "
                  "bool is_cross=False, int mode=0) -> (Tensor, Tensor)")
SCHEMA_CIOU = ("npu_ciou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=True, "
               "int mode=0, bool atan_sub_flag=False) -> Tensor")
SCHEMA_CIOU_PAIR = ("_npu_ciou(Tensor self, Tensor gtboxes, bool trans=False, bool is_cross=True, "
                    "int mode=0, bool atan_sub_flag=False) -> (Tensor, Tensor)")
SCHEMA_CIOU_BW = ("npu_ciou_backward(Tensor grad, Tensor bboxes, Tensor gtboxes, Tensor? atan_sub, "
                  "bool trans=False, bool is_cross=True, int mode=0) -> (Tensor, Tensor)")


def _out_shape(kind, n, m, is_cross):
    # GIoU's wrapper permutes its (1, n) / (m, n) kernel output; DIoU's and CIoU's do not.
    if kind == GIOU:
        return (n, m) if is_cross else (n, 1)
    return (m, n) if is_cross else (1, n)


# GIoU and DIoU have no Ascend 950 path (their docs list the older products only); CIoU's 950
# path (aclnnCIoU) takes only is_cross=False and box counts that are multiples of 1024, and has
# no backward (CiouKernelNpuOpApi.cpp, docs/zh/custom_APIs/torch_npu/...npu_ciou.md).
CIOU_950_BLOCK = 1024


def _check_ciou_950(op, boxes, is_cross):
    if targets.current() != Product.ASCEND_950:
        return
    checks.expect(not is_cross, op, "is_cross", "False on Ascend 950", repr(is_cross),
                  ValueError)
    checks.expect(boxes.shape[1] % CIOU_950_BLOCK == 0, op, "self",
                  f"a multiple of {CIOU_950_BLOCK} boxes on Ascend 950",
                  lambda: f"shape {tuple(boxes.shape)}", ValueError)


def _check_forward(op, boxes, gtboxes, trans, is_cross, mode, bname="self"):
    expect_boxes_4n(op, bname, boxes)
    expect_boxes_4n(op, "gtboxes", gtboxes)
    checks.expect(mode in (0, 1), op, "mode", "0 (IoU) or 1 (IoF)", repr(mode), ValueError)
    if not is_cross:
        checks.expect(gtboxes.shape[1] == boxes.shape[1], op, "gtboxes",
                      lambda: f"as many boxes as {bname} ({boxes.shape[1]}) when is_cross=False",
                      lambda: f"shape {tuple(gtboxes.shape)}", ValueError)
    checks.expect_same_device({bname: boxes, "gtboxes": gtboxes}, op)


def _expect_backward_setting(op, trans, is_cross, mode, what):
    checks.expect(bool(trans) and not is_cross and mode == 0, op, "trans, is_cross, mode",
                  f"trans=True, is_cross=False, mode=0 ({what})",
                  f"trans={trans}, is_cross={is_cross}, mode={mode}", ValueError)


def _check_backward(op, grad, bboxes, gtboxes, trans, is_cross, mode, kind):
    _check_forward(op, bboxes, gtboxes, trans, is_cross, mode, bname="bboxes")
    _expect_backward_setting(op, trans, is_cross, mode, "the only backward torch_npu has")
    want = _out_shape(kind, bboxes.shape[1], gtboxes.shape[1], is_cross)
    checks.expect_dtype(grad, float_dtypes(), op, "grad")
    checks.expect(tuple(grad.shape) == want, op, "grad", f"the forward output's shape {want}",
                  lambda: f"shape {tuple(grad.shape)}", ValueError)
    checks.expect_same_device({"bboxes": bboxes, "grad": grad}, op)
    targets.expect_supported(op, targets.PRE_950)


def _pairs(boxes, gtboxes, trans, is_cross, kind, ct):
    """Corner rows of both sets, broadcast to the output's layout."""
    b = corners_rows(boxes.to(ct), trans)
    g = corners_rows(gtboxes.to(ct), trans)
    if not is_cross:
        return b, g
    if kind == GIOU:       # (n, m): box i along rows
        return [t[:, None] for t in b], [t[None, :] for t in g]
    return [t[None, :] for t in b], [t[:, None] for t in g]     # (m, n)


def _overlap(kind, boxes, gtboxes, trans, is_cross, mode, detach_alpha=False,
             with_atan_sub=False):
    """The formula in the compute dtype, differentiable (no_grad parts as documented).

    ``with_atan_sub``: CIoU only, also return ``atan(w2 / h2) - atan(w1 / h1)``.
    """
    ct = compute_dtype(boxes, gtboxes)
    (x1, y1, x2, y2), (X1, Y1, X2, Y2) = _pairs(boxes, gtboxes, trans, is_cross, kind, ct)
    inter = ((torch.minimum(x2, X2) - torch.maximum(x1, X1)).clamp_min(0)
             * (torch.minimum(y2, Y2) - torch.maximum(y1, Y1)).clamp_min(0))
    cw = torch.maximum(x2, X2) - torch.minimum(x1, X1)
    ch = torch.maximum(y2, Y2) - torch.minimum(y1, Y1)
    if kind == GIOU:
        w1, h1, w2, h2 = x2 - x1, y2 - y1, X2 - X1, Y2 - Y1
        union = w1 * h1 + w2 * h2 - inter
        denom = w2 * h2 if mode == 1 else union
        hull = cw.abs() * ch.abs()
        out = inter / denom - (hull - union) / hull
    else:
        w1, h1, w2, h2 = x2 - x1, y2 - y1 + EPS, X2 - X1, Y2 - Y1 + EPS
        denom = (w2 * h2 if mode == 1 else w1 * h1 + w2 * h2 - inter) + EPS
        iou = inter / denom
        c2 = cw ** 2 + ch ** 2 + EPS
        rho2 = ((X1 + X2 - x1 - x2) ** 2 + (Y1 + Y2 - y1 - y2) ** 2) / 4
        out = iou - rho2 / c2
        if kind == CIOU:
            atan_sub = torch.atan(w2 / h2) - torch.atan(w1 / h1)
            v = (4 / math.pi ** 2) * atan_sub ** 2
            alpha = v / ((1 + EPS) - iou + v)
            if detach_alpha:
                alpha = alpha.detach()
            out = out - alpha * v
    shape = _out_shape(kind, boxes.shape[1], gtboxes.shape[1], is_cross)
    if with_atan_sub:
        return out.reshape(shape), atan_sub.reshape(shape)
    return out.reshape(shape)


def _forward(kind, boxes, gtboxes, trans, is_cross, mode):
    return _overlap(kind, boxes, gtboxes, trans, is_cross, mode).to(half_or_float(boxes, gtboxes))


def _grads(kind, grad, bboxes, gtboxes, trans, is_cross, mode):
    ct = compute_dtype(bboxes, gtboxes, grad)
    # The gradient is the formula's autograd, taken on private copies (also under no_grad or
    # inference mode, where the backward op may be called directly).
    with torch.inference_mode(False), torch.enable_grad():
        b = bboxes.detach().to(ct, copy=True).requires_grad_(True)
        g = gtboxes.detach().to(ct, copy=True).requires_grad_(True)
        out = _overlap(kind, b, g, trans, is_cross, mode, detach_alpha=True)
        db, dg = torch.autograd.grad(out, (b, g), grad.detach().to(ct, copy=True),
                                     allow_unused=True)
        db = torch.zeros_like(b) if db is None else db
        dg = torch.zeros_like(g) if dg is None else dg
    dt = half_or_float(bboxes, gtboxes)
    return db.to(dt), dg.to(dt)


def _grads_fake(kind, grad, bboxes, gtboxes, trans, is_cross, mode):
    dt = half_or_float(bboxes, gtboxes)
    return (bboxes.new_empty(bboxes.shape, dtype=dt), gtboxes.new_empty(gtboxes.shape, dtype=dt))


# -- GIoU and DIoU (same signature, same product rules) -----------------------------------------

def _define_with_backward(kind, schema, schema_backward):
    """The forward op of ``kind`` and its public backward op."""
    backward = f"{kind}_backward"

    def check(self, gtboxes, trans=False, is_cross=False, mode=0):
        _check_forward(kind, self, gtboxes, trans, is_cross, mode)
        targets.expect_supported(kind, targets.PRE_950)
        if kind == GIOU and targets.current() is not None:
            # GiouKernelNpu.cpp refuses other forward settings on every product; outside
            # strict mode they compute the documented formula.
            _expect_backward_setting(kind, trans, is_cross, mode,
                                     "the only forward the NPU wrapper accepts")

    def check_backward(grad, bboxes, gtboxes, trans=False, is_cross=False, mode=0):
        _check_backward(backward, grad, bboxes, gtboxes, trans, is_cross, mode, kind)

    def reference(self, gtboxes, trans=False, is_cross=False, mode=0):
        return _forward(kind, self, gtboxes, trans, is_cross, mode)

    def reference_backward(grad, bboxes, gtboxes, trans=False, is_cross=False, mode=0):
        return _grads(kind, grad, bboxes, gtboxes, trans, is_cross, mode)

    def fake_backward(grad, bboxes, gtboxes, trans=False, is_cross=False, mode=0):
        return _grads_fake(kind, grad, bboxes, gtboxes, trans, is_cross, mode)

    forward_op = NpuOp(schema, namespace=TORCH_NPU_NS, check=check, reference=reference,
                       metadata_check=True, info=OpInfo(api="torch_npu"))
    backward_op = NpuOp(schema_backward, namespace=TORCH_NPU_NS, check=check_backward,
                        reference=reference_backward, fake=fake_backward, metadata_check=True,
                        info=OpInfo(api="torch_npu", backward_of=kind))
    return forward_op, backward_op


giou_op, giou_backward_op = _define_with_backward(GIOU, SCHEMA_GIOU, SCHEMA_GIOU_BW)
diou_op, diou_backward_op = _define_with_backward(DIOU, SCHEMA_DIOU, SCHEMA_DIOU_BW)

# -- CIoU --------------------------------------------------------------------------------------


def check_ciou(self, gtboxes, trans=False, is_cross=True, mode=0, atan_sub_flag=False):
    _check_forward(CIOU, self, gtboxes, trans, is_cross, mode)
    _check_ciou_950(CIOU, self, is_cross)


def check_ciou_pair(self, gtboxes, trans=False, is_cross=True, mode=0, atan_sub_flag=False):
    _check_forward("_npu_ciou", self, gtboxes, trans, is_cross, mode)
    _check_ciou_950("_npu_ciou", self, is_cross)


def check_ciou_backward(grad, bboxes, gtboxes, atan_sub, trans=False, is_cross=True, mode=0):
    _check_backward("npu_ciou_backward", grad, bboxes, gtboxes, trans, is_cross, mode, CIOU)
    if atan_sub is not None:
        want = _out_shape(CIOU, bboxes.shape[1], gtboxes.shape[1], is_cross)
        checks.expect(tuple(atan_sub.shape) == want, "npu_ciou_backward", "atan_sub",
                      f"the forward output's shape {want}",
                      lambda: f"shape {tuple(atan_sub.shape)}", ValueError)


def _ciou_grads(grad, bboxes, gtboxes, atan_sub, trans=False, is_cross=True, mode=0):
    # atan_sub (atan(w2/h2) - atan(w1/h1), which the NPU forward can hand over) is recomputed
    # from the boxes here, so None and a given tensor give the same gradients.
    return _grads(CIOU, grad, bboxes, gtboxes, trans, is_cross, mode)


def _ciou_pair(self, gtboxes, trans=False, is_cross=True, mode=0, atan_sub_flag=False):
    out, atan_sub = _overlap(CIOU, self, gtboxes, trans, is_cross, mode, with_atan_sub=True)
    # atan_sub stays in the kernel's float32 (the 950 path casts it back to float16 too).
    sub_dtype = (half_or_float(self, gtboxes) if targets.current() == Product.ASCEND_950
                 else compute_dtype(self, gtboxes))
    return out.to(half_or_float(self, gtboxes)), atan_sub.to(sub_dtype)


ciou_pair_op = NpuOp(SCHEMA_CIOU_PAIR, namespace=TORCH_NPU_NS, check=check_ciou_pair,
                     reference=_ciou_pair, metadata_check=True,
                     info=OpInfo(api="torch_npu", public=False))
ciou_op = NpuOp(SCHEMA_CIOU, namespace=TORCH_NPU_NS, check=check_ciou,
                reference=lambda self, gtboxes, trans=False, is_cross=True, mode=0,
                atan_sub_flag=False: _forward(CIOU, self, gtboxes, trans, is_cross, mode),
                metadata_check=True, info=OpInfo(api="torch_npu"))
ciou_backward_op = NpuOp(
    SCHEMA_CIOU_BW, namespace=TORCH_NPU_NS, check=check_ciou_backward, reference=_ciou_grads,
    fake=lambda grad, bboxes, gtboxes, atan_sub, trans=False, is_cross=True, mode=0:
    _grads_fake(CIOU, grad, bboxes, gtboxes, trans, is_cross, mode),
    metadata_check=True, info=OpInfo(api="torch_npu", backward_of=CIOU))

# -- autograd ----------------------------------------------------------------------------------


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.args = tuple(inputs[2:5])
    ctx.dtypes = (inputs[0].dtype, inputs[1].dtype)


def _cast(ctx, db, dg):
    return db.to(ctx.dtypes[0]), dg.to(ctx.dtypes[1])


def _giou_bw(ctx, grad):
    b, g = ctx.saved_tensors
    return (*_cast(ctx, *giou_backward_op(grad, b, g, *ctx.args)), None, None, None)


def _diou_bw(ctx, grad):
    b, g = ctx.saved_tensors
    return (*_cast(ctx, *diou_backward_op(grad, b, g, *ctx.args)), None, None, None)


def _ciou_bw(ctx, grad):
    b, g = ctx.saved_tensors
    return (*_cast(ctx, *ciou_backward_op(grad, b, g, None, *ctx.args)), None, None, None, None)


giou_op.set_autograd(setup_context=_setup, backward=_giou_bw)
diou_op.set_autograd(setup_context=_setup, backward=_diou_bw)
ciou_op.set_autograd(setup_context=_setup, backward=_ciou_bw)


def _setup_pair(ctx, inputs, output):
    _setup(ctx, inputs, output)
    ctx.atan_sub = output[1].detach()


def _ciou_pair_bw(ctx, grad, _grad_atan_sub):
    # atan_sub is an auxiliary output (derivatives.yaml: only self and gtboxes get gradients,
    # from npu_ciou_backward fed with result1).
    b, g = ctx.saved_tensors
    grads = ciou_backward_op(grad, b, g, ctx.atan_sub, *ctx.args)
    return (*_cast(ctx, *grads), None, None, None, None)


ciou_pair_op.set_autograd(setup_context=_setup_pair, backward=_ciou_pair_bw)
for _op in (giou_backward_op, diou_backward_op, ciou_backward_op):
    _op.forbid_autograd("no double backward")

_COMMON_DOC = """
    Parameters
    ----------
    self : Tensor
        ``(4, n)`` boxes, float16 or float32 (float64 accepted outside strict mode); rows
        x1, y1, x2, y2, or x, y, w, h when ``trans``.
    gtboxes : Tensor
        ``(4, m)`` ground-truth boxes, same layout; ``m == n`` unless ``is_cross``.
    trans : bool
        True: rows are centre x, centre y, width, height.
    is_cross : bool
        False: box i with gtbox i; True: every pair.
    mode : int
        0 IoU, 1 IoF (the union replaced by the ground-truth box's area).
"""


def npu_giou(self, gtboxes, trans=False, is_cross=False, mode=0):
    """Generalized IoU: IoU minus the share of the enclosing box not covered by the union.

    Formula (op-plugin test/test_base_ops/test_npu_giou.py golden)::

        giou = inter / union - (C - union) / C,   C = |hull w| * |hull h|
    """ + _COMMON_DOC + """
    Returns
    -------
    Tensor
        ``(n, 1)`` (``is_cross=False``) or ``(n, m)`` (GiouKernelNpu.cpp permutes the kernel's
        ``(1, n)`` / ``(m, n)``); float16 if either input is float16, else float32.

    Constraints
    -----------
    The backward (``npu_giou_backward``) exists only for ``trans=True, is_cross=False,
    mode=0``; other settings raise when a gradient is requested.  Atlas training /
    inference / A2 / A3 series (not Ascend 950, strict mode).

    Notes
    -----
    The NPU wrapper (GiouKernelNpu.cpp) refuses every forward but ``trans=True, is_cross=False,
    mode=0``, as strict mode does; by default the other settings compute the golden's formula.  IoF mode is not covered
    by any op-plugin golden: it divides by the ground-truth area, as the Iou kernel's IoF does.

    Examples
    --------
    >>> box = torch.tensor([[1.], [1.], [2.], [2.]])          # centre (1, 1), 2 x 2
    >>> npu_anywhere.npu_giou(box, box + torch.tensor([[1.], [0], [0], [0]]), trans=True)
    tensor([[0.3333]])
    """
    return giou_op(self, gtboxes, trans, is_cross, mode)


def npu_giou_backward(grad, bboxes, gtboxes, trans=False, is_cross=False, mode=0):
    """Gradients of :func:`npu_giou` with respect to both box sets: ``(dbboxes, dgtboxes)``.

    Only ``trans=True, is_cross=False, mode=0`` (GiouKernelNpu.cpp).  ``grad`` has the forward
    output's shape; the gradients have the boxes' shapes, float16 if either box set is float16.
    """
    return giou_backward_op(grad, bboxes, gtboxes, trans, is_cross, mode)


def npu_diou(self, gtboxes, trans=False, is_cross=False, mode=0):
    """Distance IoU: IoU minus the squared centre distance over the hull's squared diagonal.

    Formula (op-plugin test/test_base_ops/test_npu_diou.py golden, eps = 1e-9)::

        h1 += eps; h2 += eps; iou = inter / (w1 h1 + w2 h2 - inter + eps)
        diou = iou - rho2 / (cw^2 + ch^2 + eps)
    """ + _COMMON_DOC + """
    Returns
    -------
    Tensor
        ``(1, n)`` (``is_cross=False``) or ``(m, n)``; float16 if either input is float16,
        else float32.

    Constraints
    -----------
    Backward (``npu_diou_backward``) only for ``trans=True, is_cross=False, mode=0`` (seed 004).
    Atlas training / inference / A2 / A3 series (not Ascend 950, strict mode).

    Notes
    -----
    Source: op-plugin DiouKernelNpu.cpp (layout, float16 handling) and the golden of
    test/test_base_ops/test_npu_diou.py (formula, eps placement).

    Examples
    --------
    >>> box = torch.tensor([[1.], [1.], [2.], [2.]])
    >>> npu_anywhere.npu_diou(box, box, trans=True)           # tensor([[1.]])
    """
    return diou_op(self, gtboxes, trans, is_cross, mode)


def npu_diou_backward(grad, bboxes, gtboxes, trans=False, is_cross=False, mode=0):
    """Gradients of :func:`npu_diou`: ``(dbboxes, dgtboxes)``; ``trans=True, is_cross=False,
    mode=0`` only (test_npu_diou_backward.py differentiates the golden formula fully)."""
    return diou_backward_op(grad, bboxes, gtboxes, trans, is_cross, mode)


def npu_ciou(self, gtboxes, trans=False, is_cross=True, mode=0, atan_sub_flag=False):
    """Complete IoU: DIoU minus an aspect-ratio penalty ``alpha * v``.

    Formula (op-plugin test/test_base_ops/test_ciou.py golden, eps = 1e-9)::

        v = 4 / pi^2 * (atan(w2 / h2) - atan(w1 / h1))^2
        alpha = v / (1 + eps - iou + v)
        ciou = iou - rho2 / c2 - alpha * v
    """ + _COMMON_DOC + """
    atan_sub_flag : bool
        Whether the NPU forward keeps ``atan(w2/h2) - atan(w1/h1)`` for the backward; it does
        not change the result (the backward here recomputes it).

    Returns
    -------
    Tensor
        ``(1, n)`` (``is_cross=False``) or ``(m, n)``; float16 if either input is float16,
        else float32.

    Constraints
    -----------
    Backward only for ``trans=True, is_cross=False, mode=0`` (seed 004).  Ascend 950
    (strict mode): ``is_cross=False`` only, a multiple of 1024 boxes, and no backward
    (CiouKernelNpuOpApi.cpp, the op-plugin doc).

    Notes
    -----
    Sources: op-plugin CiouKernelNpu.cpp / CiouKernelNpuOpApi.cpp (layout, dtypes) and the
    golden of test/test_base_ops/test_ciou.py.  The backward treats ``alpha`` as a constant
    (the usual convention of CIoU losses).  op-plugin's test_ciou_backward.py golden, which
    is skipped upstream, also holds ``rho2 / c2`` constant (unlike its DIoU backward golden);
    the CIoUGrad kernel source is not public, so this choice is unverified.  As in that
    golden formula, a pair of identical boxes gives ``alpha = 0 / 0`` in float32 (the 1e-9
    eps vanishes next to 1), so its CIoU is NaN.
    ``torch.ops.npu._npu_ciou`` returns ``(ciou, atan_sub)``, the pair derivatives.yaml
    differentiates.

    Examples
    --------
    >>> b = torch.tensor([[1.], [1.], [2.], [2.]], requires_grad=True)
    >>> npu_anywhere.npu_ciou(b, b.detach() + 0.5, trans=True, is_cross=False).sum().backward()
    """
    return ciou_op(self, gtboxes, trans, is_cross, mode, atan_sub_flag)


def npu_ciou_backward(grad, bboxes, gtboxes, atan_sub=None, trans=False, is_cross=True, mode=0):
    """Gradients of :func:`npu_ciou`: ``(dbboxes, dgtboxes)``, ``alpha`` held constant;
    ``trans=True, is_cross=False, mode=0`` only.  ``atan_sub`` is optional (recomputed)."""
    return ciou_backward_op(grad, bboxes, gtboxes, atan_sub, trans, is_cross, mode)


TORCH_NPU_FUNCTIONS = {
    GIOU: npu_giou, "npu_giou_backward": npu_giou_backward,
    DIOU: npu_diou, "npu_diou_backward": npu_diou_backward,
    CIOU: npu_ciou, "npu_ciou_backward": npu_ciou_backward,
}
