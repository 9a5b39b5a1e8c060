"""An MX block-quantization golden in float64, written from the CANN docs and goldens, never
by calling npu_anywhere.

Sources: hicann/ops-nn ``quant/dynamic_mx_quant/docs/aclnnDynamicMxQuant.md`` (``shared_exp =
floor(log2(amax)) - emax``; the scale_alg 1 formula ``S = amax / DTYPE_MAX``, exponent rounded up
unless the mantissa is 0, or for a subnormal S with a mantissa above one half) and
``aclnnDynamicMxQuantV3.md`` (scale_alg 2), ``quant/grouped_dynamic_mx_quant/tests/assets/
golden.py`` (scales clamped to [2^-127, 2^127], inf/NaN blocks NaN, a block with scale 2^-127
written as zeros under scale_alg 0, elements rounded on the format's grid then clipped, NaN
elements +0, float4 packing low nibble first) and the 950 kernels (scale_alg 1 / generic 2 keep
the 2^127 reciprocal at code 0).

Element rounding here is by table: the value is compared with every finite value of the format
(float8 values decoded from their bit patterns by torch's own float8 dtypes, float4 from the
OCP table), which is independent of the exponent arithmetic the implementation uses.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import torch

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]   # codes 0..7 (OCP MX v1.0 table)
EMAX = {"float4_e2m1": 2, "float8_e4m3fn": 8, "float8_e5m2": 15}
MAX = {"float4_e2m1": 6.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
FP8_DTYPE = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def grid(fmt: str) -> list[float]:
    """Non-negative finite values of the format, index = code (float8: codes 0..max)."""
    if fmt == "float4_e2m1":
        return list(E2M1)
    codes = torch.arange(0, 128, dtype=torch.uint8).view(FP8_DTYPE[fmt]).to(torch.float64)
    vals = codes.tolist()
    return [v for v in vals if math.isfinite(v) and v <= MAX[fmt]]


_GRIDS: dict[str, list[float]] = {}


def round_to_grid(v: float, fmt: str, mode: str) -> float:
    """Round one float64 value to the format: nearest (ties to the even code for 'rint', away
    from zero for 'round') or toward -inf ('floor'); beyond the largest value: saturate."""
    if math.isnan(v):
        return 0.0
    g = _GRIDS.setdefault(fmt, grid(fmt))
    a = abs(v)
    neg = math.copysign(1.0, v) < 0
    if a >= g[-1]:
        r = g[-1]
    else:
        hi = bisect.bisect_left(g, a)              # g[hi] >= a > g[hi - 1]
        lo = hi if g[hi] == a else hi - 1
        if mode == "floor":                        # toward -inf: down in magnitude if positive
            r = g[hi] if neg else g[lo]
        else:
            dl, dh = a - g[lo], g[hi] - a
            if dl != dh:
                r = g[lo] if dl < dh else g[hi]
            elif mode == "rint":
                r = g[lo] if lo % 2 == 0 else g[hi]
            else:
                r = g[hi]
    return -r if neg else r


def e2m1_code(r: float) -> int:
    """Code of a value on the e2m1 grid (sign bit 3; -0 is 8)."""
    return E2M1.index(abs(r)) | (8 if math.copysign(1.0, r) < 0 else 0)


def shared_exponents(amax, fmt: str, scale_alg: int, dst_type_max: float):
    """Vectorized over float64 block maxima: (e8m0 codes int64, multiply-by factors float64
    with NaN for code 255 and 0 where the block is written as zeros)."""
    a = np.asarray(amax, dtype=np.float64)
    finite = np.isfinite(a)
    safe = np.where(finite & (a > 0), a, 1.0)
    mant, exp = np.frexp(safe)                       # safe = mant * 2^exp, mant in [0.5, 1)
    if scale_alg == 0:
        se = (exp - 1) - EMAX[fmt]                   # floor(log2 amax) - emax
        code = np.where(a > 0, np.maximum(se, -127) + 127, 0)
        zeros = code == 0
    elif scale_alg == 2 and dst_type_max in (0.0, 6.0, 7.0):
        b = torch.from_numpy(np.where(finite, a, np.inf)).float().to(torch.bfloat16)
        b = b.double().numpy()
        finite = np.isfinite(b)
        bm, be = np.frexp(np.where(finite & (b > 0), b, 1.0))
        mant7 = np.round((bm * 2 - 1) * 128)
        threshold = 0x60 if dst_type_max == 7.0 else 0x40
        se = (be - 1) + (mant7 > threshold) - 2
        code = np.where(b > 0, np.maximum(se, -127) + 127, 0)
        zeros = code == 0
    else:
        limit = np.float32(MAX[fmt] if scale_alg == 1 else dst_type_max)
        with np.errstate(invalid="ignore", over="ignore"):
            s = np.where(finite, a, 0).astype(np.float32) / limit   # float32 division
        bits = s.view(np.uint32).astype(np.int64)
        e, man = (bits >> 23) & 0xFF, bits & 0x7FFFFF
        up = (e > 0) & (e < 254) & (man > 0)
        if scale_alg == 1:
            up |= (e == 0) & (man > 0x400000)
        code = e + up
        zeros = a == 0
    code = np.where(finite, code, 255).astype(np.int64)
    factor = np.where(zeros, 0.0, np.exp2(127.0 - np.minimum(code, 254)))
    factor = np.where(code == 255, np.nan, factor)
    return code, factor


def shared_exponent(amax: float, fmt: str, scale_alg: int, dst_type_max: float):
    """(e8m0 code, multiply-by factor or None for 'write zeros') of one block."""
    code, factor = shared_exponents([amax], fmt, scale_alg, dst_type_max)
    c, f = int(code[0]), float(factor[0])
    return c, (None if f == 0.0 else f)


def mx_golden(x: torch.Tensor, fmt: str, mode: str = "rint", scale_alg: int = 0,
              dst_type_max: float = 0.0, block: int = 32):
    """(values float64 (..., n), codes of the elements (float4 codes or float8 bit patterns)
    (..., n), scale codes int64 (..., ceil(nb / 2), 2)) for quantization along the last dim."""
    lead, n = x.shape[:-1], x.shape[-1]
    rows = x.to(torch.float64).reshape(-1, n).tolist()
    nb = -(-n // block)
    out_vals, out_scale = [], []
    for row in rows:
        vals, scales = [], []
        for b in range(nb):
            chunk = row[b * block:(b + 1) * block]
            finite = all(math.isfinite(v) for v in chunk)
            amax = max(abs(v) for v in chunk) if finite else math.inf
            code, factor = shared_exponent(amax, fmt, scale_alg, dst_type_max)
            scales.append(code)
            for v in chunk:
                if code == 255:
                    vals.append(0.0)
                elif factor is None:
                    vals.append(math.copysign(0.0, v))
                else:
                    vals.append(round_to_grid(v * factor, fmt, mode))
        scales += [0] * (nb % 2)
        out_vals.append(vals)
        out_scale.append(scales)
    values = torch.tensor(out_vals, dtype=torch.float64).reshape(*lead, n)
    if fmt == "float4_e2m1":
        codes = torch.tensor([[e2m1_code(r) for r in vals] for vals in out_vals],
                             dtype=torch.int64).reshape(*lead, n)
    else:
        codes = values.to(FP8_DTYPE[fmt]).view(torch.uint8).to(torch.int64)
    scale = torch.tensor(out_scale, dtype=torch.int64).reshape(*lead, (nb + 1) // 2, 2)
    return values, codes, scale


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 (..., m) -> int64 codes (..., 2m), low nibble first (the CANN golden's packing)."""
    p = packed.to(torch.int64)
    return torch.stack((p & 0xF, p >> 4), dim=-1).reshape(*packed.shape[:-1], -1)
