"""torch_npu.npu_rotated_iou and npu_rotated_overlaps: IoU / IoF and intersection areas of
rotated boxes.

Layout (op-plugin RotatedIouKernelNpu.cpp / RotatedOverlapsKernelNpu.cpp): the inputs are
``(B, N, 5)`` and ``(B, K, 5)`` -- the wrappers permute them to the kernel's ``(B, 5, N)``,
which is what the seed doc's "(B, 5, N)" describes -- and the result is ``(B, N, K)``.  Each
row is ``(cx, cy, w, h, theta)`` ("xywht") or, with ``trans``, ``(x1, y1, x2, y2, theta)``
("xyxyt"); ``theta`` is in degrees, counter-clockwise (x towards y).  Both the convention and
the layout are the ones that reproduce every golden of op-plugin's
test/test_base_ops/test_rotated_iou.py and test_rotated_overlaps.py (seed 1234 data; the
opposite angle sign misses them all).

Formula, per batch b and pair (n, k)::

    inter[b, n, k] = area(box_n  intersect  query_k)       (exact convex clipping)
    iou  = inter / (area_n + area_k - inter)                mode 0
    iof  = inter / area_n                                   mode 1 (the first box's area)

computed in float32 as the kernels (16-bit inputs upcast by the wrappers) and cast back to
``self``'s dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ._boxes import compute_dtype, rotated_intersection_area

OP_IOU = "npu_rotated_iou"
OP_OVERLAPS = "npu_rotated_overlaps"
SCHEMA_IOU = ("npu_rotated_iou(Tensor self, Tensor query_boxes, bool trans=False, int mode=0, "
              "bool is_cross=True, float v_threshold=0.0, float e_threshold=0.0) -> Tensor")
SCHEMA_OVERLAPS = ("npu_rotated_overlaps(Tensor self, Tensor query_boxes, bool trans=False) "
                   "-> Tensor")

MAX_QUERY_BOXES = 1600          # docs/zh/custom_APIs/torch_npu-npu_rotated_iou.md: K <= 1600
_DOCUMENTED = (torch.float16, torch.float32)
# Pairs per slice of the reference: bounds its (pairs x 24 x 2) candidate-vertex buffers.
_PAIRS_PER_SLICE = 1 << 16


def _dtypes():
    # float64 besides the documented dtypes outside strict mode (float64 goldens).
    return _DOCUMENTED if targets.current() is not None else _DOCUMENTED + (torch.float64,)


def _check_boxes(op, boxes, query_boxes):
    for name, t in (("self", boxes), ("query_boxes", query_boxes)):
        checks.expect_dtype(t, _dtypes(), op, name)
        checks.expect(t.dim() == 3 and t.shape[-1] == 5, op, name,
                      "a 3-D tensor of shape (B, n, 5) (rows x, y, w, h, theta)",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(query_boxes.shape[0] == boxes.shape[0], op, "query_boxes",
                  lambda: f"the batch size of self ({boxes.shape[0]})",
                  lambda: f"shape {tuple(query_boxes.shape)}", RuntimeError)
    checks.expect_same_device({"self": boxes, "query_boxes": query_boxes}, op)
    targets.expect_supported(op, targets.PRE_950)


def check_rotated_iou(self, query_boxes, trans=False, mode=0, is_cross=True, v_threshold=0.0,
                      e_threshold=0.0):
    _check_boxes(OP_IOU, self, query_boxes)
    checks.expect(mode in (0, 1), OP_IOU, "mode", "0 (IoU) or 1 (IoF)", repr(mode), ValueError)
    checks.expect(query_boxes.shape[1] <= MAX_QUERY_BOXES, OP_IOU, "query_boxes",
                  f"at most {MAX_QUERY_BOXES} boxes per batch",
                  lambda: f"shape {tuple(query_boxes.shape)}", ValueError)
    if not is_cross:
        checks.expect(query_boxes.shape[1] == self.shape[1], OP_IOU, "query_boxes",
                      lambda: f"as many boxes as self ({self.shape[1]}) when is_cross=False",
                      lambda: f"shape {tuple(query_boxes.shape)}", RuntimeError)


def check_rotated_overlaps(self, query_boxes, trans=False):
    _check_boxes(OP_OVERLAPS, self, query_boxes)


def _xywht(boxes, trans, ct):
    """``(..., 5)`` rows as (cx, cy, w, h, theta) in the compute dtype."""
    boxes = boxes.to(ct)
    if not trans:
        return boxes
    x1, y1, x2, y2, theta = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, theta], -1)


def _areas(boxes):
    return boxes[..., 2] * boxes[..., 3]


def _cross_intersections(boxes, query):
    """(B, N, K) intersection areas, in slices of whole rows of n."""
    bsz, n, k = boxes.shape[0], boxes.shape[1], query.shape[1]
    if bsz * n * k <= _PAIRS_PER_SLICE:
        return rotated_intersection_area(boxes[:, :, None, :], query[:, None, :, :])
    rows = max(1, _PAIRS_PER_SLICE // max(1, bsz * k))
    parts = [rotated_intersection_area(boxes[:, i:i + rows, None, :], query[:, None, :, :])
             for i in range(0, n, rows)]
    return torch.cat(parts, 1)


def _ratio(inter, area_self, area_query, mode):
    denom = area_self if mode == 1 else area_self + area_query - inter
    # A degenerate (zero-area) pair has no overlap to report.
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, inter / safe, torch.zeros_like(inter))


def rotated_iou_reference(self, query_boxes, trans=False, mode=0, is_cross=True,
                          v_threshold=0.0, e_threshold=0.0):
    ct = compute_dtype(self, query_boxes)
    boxes = _xywht(self, trans, ct)
    query = _xywht(query_boxes, trans, ct)
    bsz, n, k = self.shape[0], self.shape[1], query_boxes.shape[1]
    if is_cross:
        inter = _cross_intersections(boxes, query)
        out = _ratio(inter, _areas(boxes)[:, :, None], _areas(query)[:, None, :], mode)
    else:
        # One-to-one: the kernel writes its (B, N) result at the start of the (B, N, K)
        # buffer the wrapper allocates; the rest of the buffer is not written (zeros here).
        inter = rotated_intersection_area(boxes, query)
        aligned = _ratio(inter, _areas(boxes), _areas(query), mode).reshape(-1)
        out = torch.cat([aligned, aligned.new_zeros(bsz * n * k - bsz * n)]).reshape(bsz, n, k)
    return out.to(self.dtype)


def rotated_overlaps_reference(self, query_boxes, trans=False):
    ct = compute_dtype(self, query_boxes)
    inter = _cross_intersections(_xywht(self, trans, ct), _xywht(query_boxes, trans, ct))
    return inter.to(self.dtype)


def _pairs_fake(self, query_boxes, *flags):
    # The output shape alone: tracing the clipping (sorts, gathers, 24-vertex buffers) under
    # FakeTensor and symbolic shapes costs seconds and adds nothing; the opdb fake-vs-eager
    # test checks that this agrees with the reference.
    return self.new_empty((self.shape[0], self.shape[1], query_boxes.shape[1]))


rotated_iou_op = NpuOp(SCHEMA_IOU, namespace=TORCH_NPU_NS, check=check_rotated_iou,
                       reference=rotated_iou_reference, fake=_pairs_fake, metadata_check=True,
                       info=OpInfo(api="torch_npu"))
rotated_iou_op.forbid_autograd("torch_npu defines no backward for it")
rotated_overlaps_op = NpuOp(SCHEMA_OVERLAPS, namespace=TORCH_NPU_NS,
                            check=check_rotated_overlaps, reference=rotated_overlaps_reference,
                            fake=_pairs_fake, metadata_check=True, info=OpInfo(api="torch_npu"))
rotated_overlaps_op.forbid_autograd("torch_npu defines no backward for it")


def npu_rotated_iou(self, query_boxes, trans=False, mode=0, is_cross=True, v_threshold=0.0,
                    e_threshold=0.0):
    """IoU (``mode=0``) or IoF (``mode=1``) of rotated boxes, per batch.

    Formula::

        inter[b, n, k] = area(self[b, n] intersect query_boxes[b, k])   (exact polygon clipping)
        IoU = inter / (area_n + area_k - inter),   IoF = inter / area_n

    Parameters
    ----------
    self : Tensor
        ``(B, N, 5)`` boxes, float32 or float16 (float64 accepted outside strict mode): rows
        ``(cx, cy, w, h, theta)``, or ``(x1, y1, x2, y2, theta)`` when ``trans``; ``theta`` in
        degrees, counter-clockwise.  (The doc's "(B, 5, N)" is the kernel's layout after the
        wrapper's permute.)
    query_boxes : Tensor
        ``(B, K, 5)``, same layout, ``K <= 1600``.
    trans : bool
        True: "xyxyt" rows; False: "xywht".
    mode : int
        0 IoU, 1 IoF (over the area of ``self``'s box).
    is_cross : bool
        True: every pair; False: box n with query box n (``K == N``).
    v_threshold, e_threshold : float
        Vertex / edge tolerances.  op-plugin's wrapper (RotatedIouKernelNpu.cpp) hands both
        to the kernel under the attribute name ``value``, so the kernel keeps its defaults;
        they do not change the result here either.

    Returns
    -------
    Tensor
        ``(B, N, K)`` in ``self``'s dtype (computed in float32).  With ``is_cross=False``
        the ``B * N`` one-to-one values fill the start of that buffer in row-major order (the
        kernel's ``(B, N)`` result); the rest, which the NPU leaves unwritten, is zero.

    Constraints
    -------------
    Atlas training / inference / A2 / A3 series; not Ascend 950 (strict mode).

    Notes
    -----
    Sources: op-plugin RotatedIouKernelNpu.cpp (layout, casts), the goldens of
    test/test_base_ops/test_rotated_iou.py (angle unit and sign; met to 1e-7).  The NPU's
    float16 doc example (boxes of size < 1) shows values that exact geometry does not give
    (a self-IoU of 0.33); no kernel source explains them, so they are not reproduced.  No
    backward.

    Examples
    --------
    >>> a = torch.tensor([[[0., 0, 2, 2, 0], [0, 0, 2, 2, 45]]])
    >>> npu_anywhere.npu_rotated_iou(a, a)        # [[[1, 0.7071], [0.7071, 1]]]
    """
    return rotated_iou_op(self, query_boxes, trans, mode, is_cross, v_threshold, e_threshold)


def npu_rotated_overlaps(self, query_boxes, trans=False):
    """Intersection areas of every pair of rotated boxes, per batch.

    Formula::

        out[b, n, k] = area(self[b, n] intersect query_boxes[b, k])   (exact polygon clipping)

    Parameters
    ----------
    self : Tensor
        ``(B, N, 5)`` boxes, float32 or float16 (float64 accepted outside strict mode): rows
        ``(cx, cy, w, h, theta)``, or ``(x1, y1, x2, y2, theta)`` when ``trans``; ``theta`` in
        degrees, counter-clockwise.
    query_boxes : Tensor
        ``(B, K, 5)``, same layout.
    trans : bool
        True: "xyxyt" rows; False: "xywht".

    Returns
    -------
    Tensor
        ``(B, N, K)`` in ``self``'s dtype (computed in float32).

    Constraints
    -------------
    Atlas training / inference / A2 / A3 series; not Ascend 950 (strict mode).

    Notes
    -----
    Sources: op-plugin RotatedOverlapsKernelNpu.cpp (layout, float32 casts) and the goldens
    of test/test_base_ops/test_rotated_overlaps.py (angle unit and sign).  No backward.

    Examples
    --------
    >>> a = torch.tensor([[[0., 0, 2, 2, 0]]])
    >>> b = torch.tensor([[[1., 0, 2, 2, 0], [0, 0, 2, 2, 45]]])
    >>> npu_anywhere.npu_rotated_overlaps(a, b)   # [[[2.0, 3.3137]]]
    """
    return rotated_overlaps_op(self, query_boxes, trans)


TORCH_NPU_FUNCTIONS = {OP_IOU: npu_rotated_iou, OP_OVERLAPS: npu_rotated_overlaps}
