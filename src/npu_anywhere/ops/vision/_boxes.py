"""Box arithmetic shared by the vision ops."""

from __future__ import annotations

import torch

from ... import checks

FLOATS = (torch.float16, torch.float32)
# float64 is accepted in addition to the documented dtypes (gradcheck, float64 goldens).
FLOATS_EXT = (torch.float16, torch.float32, torch.float64)


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


def expect_boxes_4n(op: str, name: str, t: torch.Tensor, dtypes=FLOATS_EXT) -> None:
    checks.expect_dtype(t, dtypes, op, name)
    checks.expect(t.dim() == 2 and t.shape[0] == 4, op, name,
                  "a 2-D tensor of shape (4, n) (rows x1, y1, x2, y2 or x, y, w, h)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_boxes_n4(op: str, name: str, t: torch.Tensor, dtypes=FLOATS_EXT) -> None:
    checks.expect_dtype(t, dtypes, op, name)
    checks.expect(t.dim() == 2 and t.shape[1] == 4, op, name,
                  "a 2-D tensor of shape (n, 4) (columns x1, y1, x2, y2)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)
