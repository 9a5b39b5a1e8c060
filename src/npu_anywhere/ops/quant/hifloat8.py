"""Ascend HiFloat8 (``torch_npu.hifloat8``, dtype code 290): bit-exact encode and decode.

HiFloat8 (arXiv 2409.16626) is an 8-bit float with *tapered* precision: after the sign bit a
prefix-coded "dot" field says how many exponent bits follow, and the remaining bits are the
mantissa.  The exponent is stored sign-magnitude with an implicit leading 1 (``D`` exponent
bits hold ``|e|`` in ``[2^(D-1), 2^D - 1]``; ``D = 0`` means ``e = 0``)::

    dot    D  exponent bits  mantissa bits  |e|        code (s = sign, E = exponent sign)
    11     4  4 (E + 3)      1              8 .. 15    s 11 E eee m
    10     3  3 (E + 2)      2              4 .. 7     s 10 E ee mm
    01     2  2 (E + 1)      3              2 .. 3     s 01 E e mmm
    001    1  1 (E)          3              1          s 001 E mmm
    0001   0  0              3              0          s 0001 mmm
    0000   denormal          3 (M)          -          s 0000 MMM  = 2^(M - 23), M = 1..7

so a normal value is ``(-1)^s * 2^e * (1 + m / 2^mbits)`` with ``e`` in [-15, 15], and the
denormals are the powers of two 2^-22 .. 2^-16.  Special codes: 0x00 is the only zero (no
negative zero), 0x80 is NaN, 0x6F / 0xEF (``s 11 0 111 1``, i.e. where 1.5 * 2^15 would be)
are +-inf, so the largest finite magnitude is 2^15 = 32768 (0x6E).  Storage is a uint8
tensor holding the code, as torch_npu stores it (op-plugin ``op_plugin/python/meta/
_meta_registrations.py``: ``290: torch.uint8``).

Conversion float32 -> hifloat8 follows the Ascend 950 ``Cast`` instruction's rules (the
pseudo-code "float转hifloat8_t转换规则" in cannmirror/asc-devkit ``docs/zh/api/SIMD-API/
基础API/Reg矢量计算/类型转换/Cast.md``; ``Ev`` is the unbiased float32 exponent):

* NaN -> 0x80; +-inf and ``Ev > 15`` -> the inf code of the sign; ``Ev < -23`` (float32
  denormals included) -> 0x00.
* Otherwise the float32 significand is cut to the mantissa width of ``Ev``'s binade (3 bits
  for ``|Ev| <= 3``, 2 for 4..7, 1 for 8..15, 0 for the denormal binades -22..-16; ``Ev = -23``
  rounds between 0 and 2^-22) and rounded:

  - ``"round"`` (CAST_ROUND, the paper's TA): half away from zero -- round up iff the first
    cut bit is 1.  Exact ties (e.g. 1.0625 -> 1.125, 2^-23 -> 2^-22) go away from zero.
  - ``"hybrid"`` (CAST_HYBRID): TA for ``|Ev| <= 3``; elsewhere a deterministic "stochastic"
    rounding whose random threshold is the input's own low 14 bits: with ``frac`` the first 14
    cut bits (for ``Ev = -23``: the implicit 1 and the 13 leading mantissa bits) and
    ``thr = bits[13:0]`` of the float32, round up iff ``frac >= thr``.  Note that an input
    exactly on a hifloat8 value in those binades has ``frac = thr = 0`` and therefore rounds
    *up* (16.0 -> 20.0); this is what the documented rule says (and what CANN's own script
    ``examples/01_simd_cpp_api/04_advanced_api/00_matmul/matmul_fp8/scripts/hif8.py``,
    ``_fp32_ssr_round_to_hif8``, computes), so it is reproduced as is.

  A carry out of the mantissa moves to the next binade (mantissa 0); reaching ``1.5 * 2^15``
  or beyond gives the inf code, so ``"round"`` overflows to inf from 40960 = 1.25 * 2^15 on.
  The sign is applied last, except that a result of zero is always 0x00.
* Saturation (``saturate=True``, ``SatMode::SAT`` / CTRL[48] = 0): "inf outputs saturate to
  +-MAX, NaN outputs become 0" (asc-devkit ``docs/zh/api/SIMD-API/基础API/特殊寄存器访问/
  SetCtrlSpr(ISASI).md``, CTRL[48]; CTRL[50], which can keep NaN, applies to fp8/e8m0 only).
  So inf codes become +-32768 (0x6E / 0xEE) and NaN becomes 0x00.  Every quantizing kernel
  of ops-nn that writes hifloat8 uses SAT (e.g. ``quant/quantize/op_kernel/arch35/quantize.h``
  ``CAST_TRAIT_FP32_TO_HIFP8``, ``quant/dynamic_quant/op_kernel/arch35/
  dynamic_quant_regbase_full_load.h`` ``castTraitF32toh8``).  ``saturate=False`` is the
  non-saturating mode, which is also what the CANN goldens' ``en_dtypes.hifloat8`` cast gives
  (the goldens clip to +-2^15 and map NaN to 0 before it, e.g. ``quant/quant_max/tests/
  assets/golden.py``, which reproduces the saturating mode).

Where other sources differ, the ``Cast`` pseudo-code is followed: CANN's ``hif8.py`` script
sends every ``|x| >= 40960`` to overflow even under ``"hybrid"`` (the pseudo-code rounds
``Ev = 15`` like any binade, so 44927 can give 32768 when not saturating), does not saturate
an ``Ev = 15`` round-up to the inf code, and rounds ``2^-23 <= |x| < 1.5 * 2^-23`` to 0 under
``"round"`` (en_dtypes and the pseudo-code give 2^-22).  With saturation -- what the kernels
use -- only the last two matter, and en_dtypes settles the last one.

Everything is elementwise integer arithmetic on the float32 bit pattern (no lookups, no
data-dependent Python control flow), so it runs on any device and traces under FakeTensor and
``torch.compile``.
"""

from __future__ import annotations

import torch

ROUND_MODES = ("round", "hybrid")
"""Rounding modes of float -> hifloat8: CAST_ROUND (half away from zero) and CAST_HYBRID."""

NAN_CODE = 0x80
INF_CODE = 0x6F           # sign bit 0x80 added for -inf
MAX_CODE = 0x6E           # 2^15
MAX_VALUE = 32768.0
"""The largest finite hifloat8 magnitude, 2^15 (``DTYPE_MAX`` of the quantization docs)."""


def _shr(a: torch.Tensor, s: torch.Tensor | int) -> torch.Tensor:
    return torch.bitwise_right_shift(a, s)


def _shl(a: torch.Tensor | int, s: torch.Tensor | int) -> torch.Tensor:
    return torch.bitwise_left_shift(a, s)


def _pick(cond: torch.Tensor, a, b) -> torch.Tensor:
    """``torch.where`` kept in int32 (two Python ints would give int64)."""
    return torch.where(cond, a, b).to(torch.int32)


def encode_hifloat8(x: torch.Tensor, round_mode: str = "round", *,
                    saturate: bool = False) -> torch.Tensor:
    """float32 -> hifloat8 codes (uint8), bit-exact to the Ascend 950 ``Cast`` instruction.

    Parameters
    ----------
    x : Tensor
        Values to convert; anything but float32 is converted to float32 first (exact for
        float16 / bfloat16).
    round_mode : {'round', 'hybrid'}
        CAST_ROUND (half away from zero) or CAST_HYBRID (see the module docstring).
    saturate : bool
        False (default): overflow and +-inf give the inf codes, NaN gives 0x80 (the
        non-saturating mode, as ``en_dtypes.hifloat8``).  True: the kernels' ``SatMode::SAT``:
        overflow and +-inf give +-32768, NaN gives 0.

    Returns
    -------
    Tensor
        uint8 of x's shape holding the codes.
    """
    if round_mode not in ROUND_MODES:
        raise ValueError(f"encode_hifloat8: expected round_mode one of {list(ROUND_MODES)}, "
                         f"but got {round_mode!r}")
    bits = x.to(torch.float32).contiguous().view(torch.int32)
    neg = bits < 0
    a = bits & 0x7FFFFFFF
    ev = _shr(a, 23) - 127                        # unbiased exponent (-127 for zero/denormal)
    man = a & 0x7FFFFF
    is_nan = (ev == 128) & (man != 0)
    too_big = ev > 15                             # inf input included
    abs_ev = ev.abs()
    # Kept mantissa bits k of Ev's binade: 3 / 2 / 1 for the normal tiers, 0 for the
    # denormal binades -22..-16, -1 for Ev = -23 (rounds between 0 and 2^-22).
    k = _pick(abs_ev <= 3, 3, _pick(abs_ev <= 7, 2, 1))
    k = _pick(ev <= -16, 0, k)
    k = _pick(ev == -23, -1, k)
    k = _pick((ev < -23) | too_big, 3, k)         # placeholders, overwritten below
    sig = man | 0x800000                          # 24-bit significand with the implicit 1
    shift = 23 - k                                # cut bits: 20 .. 24
    q = _shr(sig, shift)                          # kept significand (0 for Ev = -23)
    rem = sig & (_shl(1, shift) - 1)
    ta_up = (_shr(rem, shift - 1) & 1) == 1
    if round_mode == "round":
        up = ta_up
    else:
        frac = _shr(rem, shift - 14)              # the first 14 cut bits
        thr = a & 0x3FFF                          # the input's own low 14 bits
        up = _pick(abs_ev <= 3, ta_up, frac >= thr)
    q = q + up.to(torch.int32)
    carry = q == _shl(1, k + 1)                   # k = -1: q == 1 means 2^-22
    e = ev + carry.to(torch.int32)
    m = _pick(carry, 0, q - _shl(1, k.clamp(min=0)))   # mantissa field value
    abs_e = e.abs()
    es = (e < 0).to(torch.int32)
    normal = _pick(abs_e >= 8, 0x60 | _shl(es, 4) | _shl(abs_e - 8, 1) | (m & 1),
                   _pick(abs_e >= 4, 0x40 | _shl(es, 4) | _shl(abs_e - 4, 2) | (m & 3),
                   _pick(abs_e >= 2, 0x20 | _shl(es, 4) | _shl(abs_e - 2, 3) | (m & 7),
                         _pick(abs_e == 1, 0x10 | _shl(es, 3) | (m & 7), 0x08 | (m & 7)))))
    code = _pick(e <= -16, e + 23, normal)        # denormal code M = e + 23 (e >= -22)
    zero = (ev < -23) | ((ev == -23) & ~carry)
    code = _pick(zero, 0, code)
    over = too_big | (e > 15) | ((e == 15) & (m == 1))
    code = _pick(over, MAX_CODE if saturate else INF_CODE, code)
    code = code | _shl((neg & (code != 0)).to(torch.int32), 7)
    code = _pick(is_nan, 0 if saturate else NAN_CODE, code)
    return code.to(torch.uint8)


def decode_hifloat8(bits: torch.Tensor) -> torch.Tensor:
    """hifloat8 codes (uint8, or any integer dtype holding 0..255) -> float32 values.

    0x80 is NaN, 0x6F / 0xEF are +-inf; every other code is exact in float32.  The float32
    bit pattern is assembled directly (sign, biased exponent, mantissa), so no rounding can
    occur.
    """
    b = bits.to(torch.int32) & 0xFF
    p = b & 0x7F
    es_hi = _shr(p, 4) & 1                        # exponent sign for D = 4, 3, 2
    # (exponent, mantissa bits, mantissa) of each tier, selected by the dot prefix.
    e = _pick(p >= 0x60, _pick(es_hi == 1, -1, 1) * (8 + (_shr(p, 1) & 7)),
              _pick(p >= 0x40, _pick(es_hi == 1, -1, 1) * (4 + (_shr(p, 2) & 3)),
              _pick(p >= 0x20, _pick(es_hi == 1, -1, 1) * (2 + (_shr(p, 3) & 1)),
                    _pick(p >= 0x10, _pick((_shr(p, 3) & 1) == 1, -1, 1),
                    _pick(p >= 0x08, 0, p - 23)))))           # denormal: 2^(M - 23)
    mbits = _pick(p >= 0x60, 1, _pick(p >= 0x40, 2, 3))
    m = _pick(p >= 0x08, p & (_shl(1, mbits) - 1), 0)
    f32 = _shl(e + 127, 23) | _shl(m, 23 - mbits)
    f32 = _pick(p == 0, 0, f32)
    f32 = _pick(p == INF_CODE, 0x7F800000, f32)
    f32 = f32 | _shl(_shr(b, 7), 31)
    f32 = _pick(b == NAN_CODE, 0x7FC00000, f32)
    return f32.to(torch.int32).view(torch.float32)
