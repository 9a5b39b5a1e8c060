"""A float4 (e2m1, e1m2) rounding golden in float64, written from the format definitions and
the Ascend 950 conversion rules, never by calling npu_anywhere.

Formats: float4_e2m1 (OCP MX v1.0: 0, 0.5, 1, 1.5, 2, 3, 4, 6 as codes 0..7, taken from
``tests/ops/quant/mx_goldens.py``) and float4_e1m2 (one exponent bit with bias 1, two mantissa
bits, no inf/NaN: subnormals m/4, normals 1 + m/4, i.e. 0, 0.25, ..., 1.75 as codes 0..7).
The sign is bit 3 of the code.

Conversion (the 950 kernels of npu_dequant_swiglu_quant: float32 -> bfloat16 half to even, then
bfloat16 -> float4 in the requested mode; cannmirror/asc-devkit ``Cast.md``: out-of-range values
give the signed largest value, NaN gives 0): rounding here is by table, comparing the value with
every grid point, and a zero result keeps the sign of the input.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from mx_goldens import E2M1, unpack_nibbles  # noqa: E402,F401  (unpack_nibbles re-exported)

E1M2 = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
GRIDS = {"float4_e2m1": E2M1, "float4_e1m2": E1M2}
CODES = {296: "float4_e2m1", 297: "float4_e1m2"}
MODES = ("rint", "round", "floor", "ceil", "trunc")


def round_code(v: float, fmt: str, mode: str) -> int:
    """float4 code of one value rounded in ``mode`` (rint / round / floor / ceil / trunc)."""
    if math.isnan(v):
        return 0
    g = GRIDS[fmt]
    neg = math.copysign(1.0, v) < 0
    a = abs(v)
    below = max(i for i, p in enumerate(g) if p <= a) if a < g[-1] else len(g) - 1
    above = min((i for i, p in enumerate(g) if p >= a), default=len(g) - 1)
    if mode == "trunc":
        idx = below
    elif mode == "floor":                  # toward -inf: away from zero for negatives
        idx = above if neg else below
    elif mode == "ceil":
        idx = below if neg else above
    else:
        dl, dh = a - g[below], g[above] - a
        if dl != dh:
            idx = below if dl < dh else above
        elif mode == "rint":
            idx = below if below % 2 == 0 else above
        else:
            idx = above
    return idx | (8 if neg else 0)


def code_value(code: int, fmt: str) -> float:
    mag = GRIDS[fmt][code & 7]
    return -mag if code & 8 else mag


def fp4_codes(t: torch.Tensor, fmt: str, mode: str = "rint", via_bfloat16: bool = True):
    """int64 codes (same shape) of float values ``t``; ``via_bfloat16`` first rounds the float32
    value to bfloat16 (the 950 kernels' CAST_FP32_TO_BF16, half to even)."""
    v = t.to(torch.float32)
    if via_bfloat16:
        v = v.to(torch.bfloat16)
    flat = [round_code(float(e), fmt, mode) for e in v.double().reshape(-1).tolist()]
    return torch.tensor(flat, dtype=torch.int64).reshape(t.shape)


def ordinal(codes: torch.Tensor) -> torch.Tensor:
    """Signed grid position of codes (-0 and +0 both 0): adjacent values differ by 1."""
    mag = codes.to(torch.int64) & 7
    return torch.where((codes.to(torch.int64) & 8) != 0, -mag, mag)


def assert_fp4_near(packed: torch.Tensor, want_codes: torch.Tensor, max_mismatch: float):
    """Packed uint8 output vs golden codes: every code within one grid step, and at most a
    ``max_mismatch`` fraction off."""
    got = unpack_nibbles(packed)
    assert got.shape == want_codes.shape
    diff = (ordinal(got) - ordinal(want_codes)).abs()
    assert diff.max() <= 1, (got, want_codes)
    assert (diff > 0).double().mean() <= max_mismatch
