"""Tests of the HiFloat8 codec (npu_anywhere.ops.quant.hifloat8).

Oracles, none of them our code:

* ``en_dtypes.hifloat8`` (the package the CANN goldens convert with, e.g. hicann/ops-nn
  ``quant/quantize/tests/assets/golden.py``): decode of all 256 codes, and the non-saturating
  CAST_ROUND encode on every float16 value and a large float32 sample;
* a table of codes worked out by hand from the format of arXiv 2409.16626;
* ``_cast_reference``: a per-element transcription of the Ascend 950 ``Cast`` pseudo-code
  (cannmirror/asc-devkit ``docs/zh/api/SIMD-API/基础API/Reg矢量计算/类型转换/Cast.md``,
  "float转hifloat8_t转换规则"), mapping the rounded value back to a code through
  en_dtypes' table: for CAST_HYBRID, which en_dtypes does not have, and for saturation.
"""

from __future__ import annotations

import math
import struct

import en_dtypes                      # the CANN goldens' hifloat8 cast (a dev dependency)
import numpy as np
import pytest
import torch

from npu_anywhere.ops.quant import hifloat8 as hif8

NAN, INF = float("nan"), float("inf")


def _en_encode(x: torch.Tensor) -> torch.Tensor:
    a = x.to(torch.float32).numpy()
    with np.errstate(invalid="ignore"):                # NaN inputs
        return torch.from_numpy(a.astype(en_dtypes.hifloat8).view(np.uint8).copy())


def _en_decode(codes: torch.Tensor) -> torch.Tensor:
    a = codes.numpy().view(en_dtypes.hifloat8).astype(np.float32)
    return torch.from_numpy(a)


ALL_CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)
EN_VALUES = _en_decode(ALL_CODES)
CODE_OF_VALUE = {float(v): c for c, v in enumerate(EN_VALUES.tolist())
                 if math.isfinite(v) and not (v == 0 and c)}


def _f32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _bits_to_f32(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())


# -- decode ------------------------------------------------------------------------------------

def test_decode_all_codes_equal_en_dtypes():
    got = hif8.decode_hifloat8(ALL_CODES)
    assert got.dtype == torch.float32 and got.shape == (256,)
    assert torch.equal(got.isnan(), EN_VALUES.isnan())
    assert got.isnan().nonzero().flatten().tolist() == [0x80]
    assert torch.equal(got.nan_to_num(), EN_VALUES.nan_to_num())
    assert not torch.signbit(got[0])                    # 0x00 is +0; there is no -0


# Hand-decoded from the field layout: s | dot | exponent (sign-magnitude, implicit leading 1)
# | mantissa; dot 0000 is the denormal 2^(M - 23).
HAND_DECODE = {
    0x00: 0.0,
    0x01: 2.0 ** -22,                 # 0 0000 001
    0x07: 2.0 ** -16,                 # 0 0000 111
    0x08: 1.0,                        # 0 0001 000: e = 0
    0x0F: 1.875,                      # 0 0001 111
    0x10: 2.0,                        # 0 001 0 000: e = +1
    0x18: 0.5,                        # 0 001 1 000: e = -1
    0x2F: 15.0,                       # 0 01 0 1 111: e = +3, 1.875
    0x40: 16.0,                       # 0 10 0 00 00: e = +4
    0x47: 56.0,                       # 0 10 0 01 11: e = +5, 1.75
    0x52: 0.09375,                    # 0 10 1 00 10: e = -4, 1.5
    0x60: 256.0,                      # 0 11 0 000 0: e = +8
    0x6E: 32768.0,                    # 0 11 0 111 0: e = +15, the largest finite value
    0x6F: INF,                        # 0 11 0 111 1: where 1.5 * 2^15 would be
    0x7F: 1.5 * 2.0 ** -15,           # 0 11 1 111 1: e = -15, 1.5
    0xC8: -64.0,                      # 1 10 0 10 00: e = +6
    0xEF: -INF,
}


def test_decode_hand_table():
    codes = torch.tensor(list(HAND_DECODE), dtype=torch.uint8)
    assert hif8.decode_hifloat8(codes).tolist() == list(HAND_DECODE.values())
    assert math.isnan(hif8.decode_hifloat8(torch.tensor([0x80], dtype=torch.uint8)).item())


def test_decode_accepts_other_integer_dtypes_and_strides():
    codes = ALL_CODES.to(torch.int64).reshape(16, 16).t()          # non-contiguous int64
    got = hif8.decode_hifloat8(codes)
    assert got.shape == (16, 16)
    assert torch.equal(got.nan_to_num(), EN_VALUES.reshape(16, 16).t().nan_to_num())


# -- encode, CAST_ROUND ------------------------------------------------------------------------

def test_encode_round_trips_every_code():
    finite = torch.isfinite(EN_VALUES)
    for saturate in (False, True):
        got = hif8.encode_hifloat8(EN_VALUES[finite], saturate=saturate)
        assert torch.equal(got, ALL_CODES[finite])


def test_encode_every_float16_equals_en_dtypes():
    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    got = hif8.encode_hifloat8(x.float())
    assert got.dtype == torch.uint8
    assert torch.equal(got, _en_encode(x.float()))
    # float16 input directly (converted to float32, exactly) gives the same codes
    assert torch.equal(hif8.encode_hifloat8(x), got)


def _tie_points() -> torch.Tensor:
    """Every midpoint between adjacent hifloat8 values (0 and 2^-22, 32768 and the 40960 that
    separates it from overflow included), both signs, with their float32 neighbours."""
    pos = sorted(v for v in EN_VALUES.tolist() if math.isfinite(v) and v >= 0)
    pos.append(49152.0)                          # 1.5 * 2^15, the value of the inf code
    mids = _f32([(a + b) / 2 for a, b in zip(pos, pos[1:])])
    assert torch.equal(mids.double(), torch.tensor([(a + b) / 2 for a, b in zip(pos, pos[1:])],
                                                   dtype=torch.float64))     # exact
    near = torch.cat([mids, torch.nextafter(mids, _f32([INF])),
                      torch.nextafter(mids, _f32([0.0])), _f32(pos[:-1])])
    return torch.cat([near, -near])


def test_encode_ties_and_neighbours_equal_en_dtypes():
    x = _tie_points()
    assert torch.equal(hif8.encode_hifloat8(x), _en_encode(x))


def test_encode_random_float32_equals_en_dtypes():
    g = np.random.default_rng(2409_16626)
    anything = g.integers(0, 2 ** 32, 1 << 19, dtype=np.uint64)
    # exponents -30 .. 20 with random mantissas: the interesting range, densely
    e = g.integers(-30, 21, 1 << 19)
    s = g.integers(0, 2, 1 << 19)
    m = g.integers(0, 1 << 23, 1 << 19)
    dense = (s << 31) | ((e + 127) << 23) | m
    x = _bits_to_f32(np.concatenate([anything, dense.astype(np.uint64)]))
    assert torch.equal(hif8.encode_hifloat8(x), _en_encode(x))


SPECIALS = [0.0, -0.0, INF, -INF, NAN, -NAN, 32768.0, 40960.0, -40960.0,
            float(np.nextafter(np.float32(40960), np.float32(0))), 49152.0, 1e38, -3e38,
            2.0 ** -23, -(2.0 ** -23), 2.0 ** -24, -(2.0 ** -24), 1e-40, -1e-45, 1.5 * 2 ** -16,
            1.4 * 2 ** -16, 3 * 2.0 ** -24]


def test_encode_specials_equal_en_dtypes():
    x = _f32(SPECIALS)
    assert torch.equal(hif8.encode_hifloat8(x), _en_encode(x))
    nan_payloads = _bits_to_f32(np.array([0x7F800001, 0xFFFFFFFF, 0x7FC00000, 0xFF812345]))
    assert hif8.encode_hifloat8(nan_payloads).tolist() == [0x80] * 4


# Hand-computed from the format: the cut happens at the mantissa width of x's binade, and
# ties round away from zero.
HAND_ENCODE = [
    (1.0625, 0x09),                   # halfway 1 .. 1.125 -> 1.125
    (-1.0625, 0x89),
    (1.0625 - 2 ** -23, 0x08),        # just below the tie -> 1.0
    (14.5, 0x2F),                     # halfway 14 .. 15 -> 15
    (15.5, 0x40),                     # halfway 15 .. 16 (next binade) -> 16
    (18.0, 0x41),                     # halfway 16 .. 20 (2 mantissa bits) -> 20
    (0.1, 0x52),                      # 1.6 * 2^-4: 2 mantissa bits, 1.5|0.. -> 0.09375
    (300.0, 0x60),                    # 1.17 * 2^8: 1 mantissa bit -> 256
    (40959.99609375, 0x6E),           # below 1.25 * 2^15 -> 32768
    (40960.0, 0x6F),                  # the tie with the inf code -> inf (no saturation)
    (2.0 ** -23, 0x01),               # halfway 0 .. 2^-22 -> 2^-22
    (2.0 ** -23 - 2 ** -47, 0x00),    # below it -> 0
    (-(2.0 ** -25), 0x00),            # negative underflow -> +0 (no -0 code)
    (-0.0, 0x00),
    (1.5 * 2 ** -16, 0x7E),           # denormal tie -> 2^-15
    (1.5 * 2 ** -17, 0x07),           # -> 2^-16 (denormal M = 7)
]


def test_encode_hand_table():
    x = _f32([v for v, _ in HAND_ENCODE])
    assert hif8.encode_hifloat8(x).tolist() == [c for _, c in HAND_ENCODE]


def test_encode_keeps_shape_and_takes_strides():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, 3, generator=g) * 100
    xt = x.transpose(0, 2)
    got = hif8.encode_hifloat8(xt)
    assert got.shape == xt.shape and torch.equal(got, _en_encode(xt.contiguous()))
    assert hif8.encode_hifloat8(torch.tensor(3.3)).shape == ()
    assert torch.equal(hif8.encode_hifloat8(x.to(torch.bfloat16)),
                       _en_encode(x.to(torch.bfloat16).float()))


def test_encode_saturating():
    x = _f32([40960.0, -40960.0, 1e30, INF, -INF, NAN, 40959.99609375, 1.0])
    assert hif8.encode_hifloat8(x, saturate=True).tolist() == [
        0x6E, 0xEE, 0x6E, 0x6E, 0xEE, 0x00, 0x6E, 0x08]
    assert hif8.encode_hifloat8(x, saturate=False).tolist() == [
        0x6F, 0xEF, 0x6F, 0x6F, 0xEF, 0x80, 0x6E, 0x08]


def test_encode_rejects_unknown_round_mode():
    with pytest.raises(ValueError, match=r"encode_hifloat8: expected round_mode one of "
                                         r"\['round', 'hybrid'\], but got 'rint'"):
        hif8.encode_hifloat8(_f32([1.0]), "rint")


# -- CAST_HYBRID -------------------------------------------------------------------------------

def _cast_reference(value: float, mode: str, saturate: bool) -> int:
    """One float32 -> hifloat8 code, step by step as Cast.md's pseudo-code reads."""
    b = struct.unpack("<I", struct.pack("<f", value))[0]
    sign, exp_field, man = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    ev, thr = exp_field - 127, b & 0x3FFF
    hybrid = mode == "hybrid"
    if exp_field == 255 and man:
        return 0 if saturate else 0x80
    if exp_field == 255 or ev > 15:
        return (0xEE if sign else 0x6E) if saturate else (0xEF if sign else 0x6F)
    if ev < -23:
        return 0
    if ev == -23:
        up = (not hybrid) or (((1 << 13) | (man >> 10)) >= thr)
        return (0x81 if sign else 0x01) if up else 0
    if abs(ev) <= 3:
        mbits, ta, frac = 3, (man >> 19) & 1, (man >> 6) & 0x3FFF
    elif abs(ev) <= 7:
        mbits, ta, frac = 2, (man >> 20) & 1, (man >> 7) & 0x3FFF
    elif ev >= -15:
        mbits, ta, frac = 1, (man >> 21) & 1, (man >> 8) & 0x3FFF
    else:                                           # denormal binades -22 .. -16
        mbits, ta, frac = 0, man >> 22, man >> 9
    mant = man >> (23 - mbits)
    if abs(ev) <= 3 or not hybrid:
        up = ta == 1
    else:
        up = frac >= thr
    if up:
        mant += 1
        if mant == 1 << mbits:
            mant, ev = 0, ev + 1
    magnitude = 2.0 ** ev * (1 + mant / 2 ** mbits)
    if magnitude >= 49152.0:                        # the inf code (1.5 * 2^15) or beyond
        return (0xEE if sign else 0x6E) if saturate else (0xEF if sign else 0x6F)
    code = CODE_OF_VALUE[magnitude]
    return code | 0x80 if sign else code


def _hybrid_sample() -> torch.Tensor:
    g = np.random.default_rng(7)
    n = 6000
    e = g.integers(-25, 17, n)
    s = g.integers(0, 2, n)
    m = g.integers(0, 1 << 23, n)
    m[: n // 4] &= ~0x3FFF                          # low bits 0: exact and near-exact values
    m[n // 4: n // 2] |= 0x3FFF                     # largest thresholds
    bits = (s << 31) | ((e + 127) << 23) | m
    return torch.cat([_bits_to_f32(bits), _tie_points(), _f32(SPECIALS),
                      EN_VALUES[torch.isfinite(EN_VALUES)]])


@pytest.mark.parametrize("mode", ["round", "hybrid"])
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_equals_cast_pseudo_code(mode, saturate):
    x = _hybrid_sample()
    want = [_cast_reference(v, mode, saturate) for v in x.tolist()]
    assert hif8.encode_hifloat8(x, mode, saturate=saturate).tolist() == want


# Worked by hand from the pseudo-code.  thr is the input's low 14 bits; frac the 14 bits after
# the kept mantissa.
HAND_HYBRID = [
    (1.0625, 0x09),                   # |e| <= 3: half away from zero, as "round"
    (16.0, 0x41),                     # e = 4, frac 0 >= thr 0 -> up: 20
    (16.000001907348633, 0x40),       # mantissa ...0001: frac 0 < thr 1 -> stays 16
    (-16.0, 0xC1),
    (17.0, 0x41),                     # 1.0625 * 2^4: frac 0x1000 >= thr 0 -> 20
    (256.0, 0x61),                    # e = 8: 256 -> 384
    (32768.0, 0x6E),                  # e = 15: up reaches the inf code, saturated -> 32768
    (2.0 ** -16, 0x7E),               # denormal binade: frac 0 >= 0 -> 2^-15
    (2.0 ** -23, 0x01),               # e = -23: {1, man[22:10]} = 0x2000 >= 0 -> 2^-22
    (2.0 ** -23 * (1 + 2 ** -23 * 0x3FFF), 0x00),   # 0x200F < thr 0x3FFF -> 0
    (40000.0, 0x6E),                  # e = 15 below 1.25 * 2^15: either way 32768 (saturated)
    (NAN, 0x00),
]


def test_encode_hybrid_hand_table():
    x = _f32([v for v, _ in HAND_HYBRID])
    assert hif8.encode_hifloat8(x, "hybrid", saturate=True).tolist() == [c for _, c in HAND_HYBRID]
    assert hif8.encode_hifloat8(_f32([32768.0]), "hybrid").tolist() == [0x6F]   # unsaturated


# -- tracing -----------------------------------------------------------------------------------

def test_fake_tensor_and_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fx = torch.empty(4, 3)
        assert hif8.encode_hifloat8(fx, "hybrid").dtype == torch.uint8
        assert hif8.decode_hifloat8(torch.empty(4, 3, dtype=torch.uint8)).dtype == torch.float32

    def roundtrip(x):
        return (hif8.encode_hifloat8(x), hif8.encode_hifloat8(x, "hybrid", saturate=True),
                hif8.decode_hifloat8(hif8.encode_hifloat8(x)))

    x = _hybrid_sample()
    compiled = torch.compile(roundtrip, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(x), roundtrip(x)):
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
