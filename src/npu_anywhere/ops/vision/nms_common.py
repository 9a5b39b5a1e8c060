"""Pieces the NMS ops share: the greedy suppression walk and axis-aligned overlaps.

No op lives here (the family collector ignores modules without function tables).
"""

from __future__ import annotations

import numpy as np
import torch

from ... import checks

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def expect_boxes_and_scores(op: str, boxes: torch.Tensor, scores: torch.Tensor,
                            width: int) -> None:
    """``boxes`` ``[num_boxes, width]`` and ``scores`` ``[num_boxes]``, floating, one device."""
    checks.expect_dtype(boxes, FLOATS, op, "self")
    checks.expect(boxes.dim() == 2 and boxes.shape[1] == width, op, "self",
                  f"of shape [num_boxes, {width}]", lambda: f"shape {tuple(boxes.shape)}",
                  ValueError)
    checks.expect_dtype(scores, FLOATS, op, "scores")
    checks.expect(tuple(scores.shape) == (boxes.shape[0],), op, "scores",
                  lambda: f"of shape [num_boxes] = [{boxes.shape[0]}]",
                  lambda: f"shape {tuple(scores.shape)}")
    checks.expect_same_device({"self": boxes, "scores": scores}, op)


def greedy_keep(suppresses: torch.Tensor, limit: int | None = None) -> list[int]:
    """Positions kept by greedy NMS over candidates already in priority order.

    ``suppresses[i, j]`` says that keeping candidate ``i`` removes candidate ``j``; only
    ``j > i`` matters (earlier candidates are decided before ``i`` is).  At most ``limit``
    positions are kept (``None``: no limit).
    """
    if limit == 0:
        return []
    rows = suppresses.cpu().numpy()
    removed = np.zeros(rows.shape[0], dtype=bool)
    kept: list[int] = []
    for i in range(rows.shape[0]):
        if removed[i]:
            continue
        kept.append(i)
        if limit is not None and len(kept) >= limit:
            break
        removed |= rows[i]          # one vector OR per kept box, not a Python loop per pair
    return kept


def intersection(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[N, M]`` overlap areas of ``[N, 4]`` and ``[M, 4]`` boxes given as (lo0, lo1, hi0, hi1)."""
    lo = torch.maximum(a[:, None, :2], b[None, :, :2])
    hi = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    return (hi - lo).clamp_min(0).prod(-1)
