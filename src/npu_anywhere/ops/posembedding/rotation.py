"""Rotation math shared by the RoPE family (half, quarter and interleave modes).

Every mode rotates pairs of elements of the last dim: ``rotate(x)[i] = sign[i] * x[partner(i)]``
with

=========== ============================== =========================
mode        rotate(x)                      pairs
=========== ============================== =========================
half        cat(-x2, x1)                   i and i + D/2
quarter     cat(-x2, x1, -x4, x3)          i and i + D/4 in each half
interleave  (-x1, x0, -x3, x2, ...)        2i and 2i + 1
=========== ============================== =========================

Viewing the last dim as ``(groups, 2, width)`` turns all three into one operation: the partner
of an element is the other entry of its size-2 axis (a ``flip``), and the sign is -1 for the
first entry and +1 for the second.  RoPE is then ``x * cos + partner(x) * signed(sin)``, where
``signed(sin)`` is built once from the (small, head-broadcast) sin tensor instead of negating
slices of the large x.
"""

from __future__ import annotations

import torch

MODES = ("half", "quarter", "interleave")

# Minimum divisor of the last dim per mode.
DIVISOR = {"half": 2, "quarter": 4, "interleave": 2}


def pair_view(d: int, mode: str) -> tuple[int, int, int]:
    """(groups, 2, width) such that partners sit on the size-2 axis."""
    if mode == "half":
        return (1, 2, d // 2)
    if mode == "quarter":
        return (2, 2, d // 4)
    return (d // 2, 2, 1)


def partner(x: torch.Tensor, mode: str) -> torch.Tensor:
    """The element each element of the last dim is rotated with (no sign applied)."""
    return x.unflatten(-1, pair_view(x.shape[-1], mode)).flip(-2).flatten(-3)


def signed(t: torch.Tensor, mode: str) -> torch.Tensor:
    """``t`` with the sign of the rotation folded in: ``rotate(x) * t == partner(x) * signed(t)``."""
    v = t.unflatten(-1, pair_view(t.shape[-1], mode))
    return torch.cat((-v[..., 0:1, :], v[..., 1:2, :]), dim=-2).flatten(-3)


def rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    """The documented ``x_rotate`` (e.g. ``cat(-x2, x1)`` in half mode)."""
    return signed(partner(x, mode), mode)


def unrotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    """The transpose of :func:`rotate` (its inverse, as the rotation is orthogonal): -rotate(x)."""
    return partner(signed(x, mode), mode)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precision is computed in float32 and rounded once, as the NPU kernels do."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def prepare(cos: torch.Tensor, sin: torch.Tensor, mode: str,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and ``signed(sin)`` in the compute dtype (done once for query and key)."""
    ct = compute_dtype(dtype)
    return cos.to(ct), signed(sin.to(ct), mode)


def rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, mode: str) -> torch.Tensor:
    """``x * cos + rotate(x) * sin`` with ``cos, signed_sin = prepare(cos, sin, mode, x.dtype)``.

    Computed in float32 (float64 for float64 x) and rounded once to x's dtype.  Three
    whole-tensor ops (mul, flip, addcmul): fewer than the doc formula's six, which is what
    decode-sized calls pay for; large calls go to the compiled provider, which fuses them.
    """
    xc = x.to(cos.dtype)
    return torch.addcmul(xc * cos, partner(xc, mode), signed_sin).to(x.dtype)


def reduce_to(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum ``t`` over the dims that were broadcast to reach it from ``shape``."""
    if t.shape == shape:
        return t
    lead = t.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and t.shape[lead + i] != 1]
    return t.sum(dim=dims, keepdim=True).reshape(shape) if dims else t.reshape(shape)
