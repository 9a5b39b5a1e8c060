"""Helpers shared by the fused quantizing ops (not an op module: the underscore keeps
``family.collect`` from looking for functions here)."""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks
from ..quant import core


def expect_shape(op: str, name: str, t: Optional[torch.Tensor], shape, what: str) -> None:
    """``t`` (if given) has exactly ``shape``."""
    if t is None:
        return
    checks.expect(tuple(t.shape) == tuple(shape), op, name,
                  lambda: f"the shape of {what} {tuple(shape)}", lambda: tuple(t.shape))


def expect_optional_dtype(op: str, name: str, t: Optional[torch.Tensor], allowed) -> None:
    if t is not None:
        checks.expect_dtype(t, allowed, op, name)


def quantize_static(y: torch.Tensor, scale: torch.Tensor, zero_point: Optional[torch.Tensor],
                    fmt: core.QuantFormat, *, div_mode: bool) -> torch.Tensor:
    """``cast(y / scale + zero_point)`` (``div_mode``) or ``cast(y * scale + zero_point)``.

    Everything in ``y``'s dtype (float32, float64 for float64 inputs); one rounding per
    operation, then the quant core's cast (integers: half to even, NaN -> 0, saturating;
    float8: half to even, NaN -> +0, saturating).
    """
    s = scale.to(y.dtype)
    t = y / s if div_mode else y * s
    if zero_point is not None:
        t = t.add_(zero_point.to(y.dtype))
    return core.cast_to(t, fmt, inplace=True)
