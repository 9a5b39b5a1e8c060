"""Box arithmetic shared by the vision ops: compute dtypes, corner conversion, layout checks
and the exact intersection area of rotated boxes."""

from __future__ import annotations

import torch

from ... import checks, targets

FLOATS = (torch.float16, torch.float32)


def float_dtypes(documented=FLOATS) -> tuple:
    """The documented dtypes, plus float64 outside strict mode (gradcheck, float64 goldens)."""
    return documented if targets.current() is not None else tuple(documented) + (torch.float64,)


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (16-bit inputs are upcast)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def half_or_float(*tensors: torch.Tensor) -> torch.dtype:
    """The output dtype of the overlap ops: float16 when any input is, else the compute dtype."""
    if any(t.dtype == torch.float16 for t in tensors):
        return torch.float16
    return compute_dtype(*tensors)


def corners_rows(boxes: torch.Tensor, trans: bool):
    """``(4, n)`` boxes -> (x1, y1, x2, y2) rows; ``trans`` means the rows are x, y, w, h."""
    a, b, c, d = boxes.unbind(0)
    if trans:
        return a - c / 2, b - d / 2, a + c / 2, b + d / 2
    return a, b, c, d


def expect_boxes_4n(op: str, name: str, t: torch.Tensor, documented=FLOATS) -> None:
    checks.expect_dtype(t, float_dtypes(documented), op, name)
    checks.expect(t.dim() == 2 and t.shape[0] == 4, op, name,
                  "a 2-D tensor of shape (4, n) (rows x1, y1, x2, y2 or x, y, w, h)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_boxes_n4(op: str, name: str, t: torch.Tensor, documented=FLOATS) -> None:
    checks.expect_dtype(t, float_dtypes(documented), op, name)
    checks.expect(t.dim() == 2 and t.shape[1] == 4, op, name,
                  "a 2-D tensor of shape (n, 4) (columns x1, y1, x2, y2)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


# -- rotated boxes -----------------------------------------------------------------------------

# Relative slack of the point-in-box and segment-parameter tests: a corner that lies on the
# other box's edge (identical or touching boxes) must count as inside despite rounding.
_REL_TOL = 1e-5


def _frame(box):
    """(cx, cy, half_w, half_h, cos, sin) of ``(..., 5)`` rotated boxes, each ``(..., 1)``."""
    theta = torch.deg2rad(box[..., 4:5])
    return (box[..., 0:1], box[..., 1:2], box[..., 2:3] / 2, box[..., 3:4] / 2,
            torch.cos(theta), torch.sin(theta))


def rotated_corners(box):
    """The four corners of ``(..., 5)`` rotated boxes ``(cx, cy, w, h, theta_deg)``,
    counter-clockwise: ``(..., 4, 2)``.  ``theta_deg`` turns the box's (w, h) axes
    counter-clockwise (x towards y) by that many degrees."""
    return _corners(_frame(box))


def _corners(frame):
    cx, cy, hw, hh, cos, sin = frame
    sx = torch.tensor([-1.0, 1.0, 1.0, -1.0], dtype=hw.dtype, device=hw.device)
    sy = torch.tensor([-1.0, -1.0, 1.0, 1.0], dtype=hw.dtype, device=hw.device)
    dx, dy = hw * sx, hh * sy           # offsets along the box's own axes
    return torch.stack([cx + dx * cos - dy * sin, cy + dx * sin + dy * cos], -1)


def _inside(points, frame):
    """Whether each of ``points`` (..., P, 2) lies in the box of ``frame`` (one per row)."""
    cx, cy, hw, hh, cos, sin = frame
    dx, dy = points[..., 0] - cx, points[..., 1] - cy
    u = dx * cos + dy * sin              # coordinates along the box's own axes
    v = dy * cos - dx * sin
    slack = _REL_TOL * (hw + hh)
    return (u.abs() <= hw + slack) & (v.abs() <= hh + slack)


def _edge_crossings(pa, pb):
    """Crossing points of every edge of polygon ``pa`` with every edge of ``pb``.

    ``pa``, ``pb``: (..., 4, 2) corners.  Returns points (..., 16, 2) and validity (..., 16).
    """
    a0 = pa[..., :, None, :]
    ra = (pa.roll(-1, -2) - pa)[..., :, None, :]         # edge i of a: a_i -> a_{i+1}
    b0 = pb[..., None, :, :]
    rb = (pb.roll(-1, -2) - pb)[..., None, :, :]
    denom = ra[..., 0] * rb[..., 1] - ra[..., 1] * rb[..., 0]
    d = b0 - a0
    t_num = d[..., 0] * rb[..., 1] - d[..., 1] * rb[..., 0]
    s_num = d[..., 0] * ra[..., 1] - d[..., 1] * ra[..., 0]
    parallel = denom.abs() <= torch.finfo(denom.dtype).tiny
    safe = torch.where(parallel, torch.ones_like(denom), denom)
    t, s = t_num / safe, s_num / safe
    lo, hi = -_REL_TOL, 1 + _REL_TOL
    valid = ~parallel & (t >= lo) & (t <= hi) & (s >= lo) & (s <= hi)
    points = a0 + t[..., None] * ra
    return points.flatten(-3, -2), valid.flatten(-2)


def rotated_intersection_area(box_a, box_b):
    """Exact area of the intersection of rotated boxes ``box_a`` and ``box_b``.

    Both are ``(..., 5)`` rows ``(cx, cy, w, h, theta_deg)`` of a broadcastable shape.  The
    intersection of two convex quadrilaterals is the convex polygon whose vertices are the
    corners of each box inside the other and the crossings of their edges; these (at most
    24 candidates, duplicates harmless) are ordered by angle around their mean and summed
    with the shoelace formula.  Fixed-size tensors throughout, so it traces under FakeTensor.
    """
    fa, fb = _frame(box_a), _frame(box_b)
    ca, cb = _corners(fa), _corners(fb)
    ca, cb = torch.broadcast_tensors(ca, cb)
    cross_pts, cross_ok = _edge_crossings(ca, cb)
    points = torch.cat([ca, cb, cross_pts], -2)                        # (..., 24, 2)
    valid = torch.cat([_inside(ca, fb), _inside(cb, fa), cross_ok], -1)
    weight = valid.to(points.dtype)
    count = weight.sum(-1, keepdim=True)
    centre = (points * weight[..., None]).sum(-2) / count.clamp_min(1)
    rel = points - centre[..., None, :]
    angle = torch.atan2(rel[..., 1], rel[..., 0])
    angle = torch.where(valid, angle, torch.full_like(angle, 4.0))    # invalid ones last
    order = angle.argsort(-1)
    rel = rel.gather(-2, order[..., None].expand_as(rel))
    valid = valid.gather(-1, order)
    # Invalid slots repeat the first vertex: their edges have no area.
    rel = torch.where(valid[..., None], rel, rel[..., :1, :])
    nxt = rel.roll(-1, -2)
    twice = (rel[..., 0] * nxt[..., 1] - rel[..., 1] * nxt[..., 0]).sum(-1)
    return torch.where(count[..., 0] >= 3, twice.abs() / 2, torch.zeros_like(twice))
