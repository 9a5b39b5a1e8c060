"""MX (microscaling) block quantization as the Ascend 950 kernels compute it.

A tensor is cut along its last dim into blocks of ``block_size`` (32) elements; every block gets
one shared power-of-two scale, stored as a float8_e8m0 code (an unsigned biased exponent:
``code`` stands for ``2**(code - 127)``, 255 is NaN), and its elements are divided by the scale
and rounded to a small floating format (float4_e2m1, float8_e4m3fn, float8_e5m2).

What is here (pure PyTorch, vectorized, traceable by FakeTensor and ``torch.compile``):

* :class:`MXFormat` / :data:`FORMATS` -- the element formats and their constants.
* :func:`scale_codes` -- the e8m0 code and the float32 reciprocal of every block's scale from
  its absolute maximum, for the three documented ``scale_alg`` algorithms.
* :func:`round_to_format` -- rounding to an element format (``"rint"``, ``"round"``,
  ``"floor"``), saturating, NaN -> +0.
* :func:`encode_e2m1` / :func:`decode_e2m1`, :func:`pack_fp4` / :func:`unpack_fp4` -- float4
  codes and their two-per-byte packing.
* :func:`e8m0_to_float` -- scale codes back to float32.
* :data:`FLOAT4_E1M2`, :func:`encode_e1m2` / :func:`decode_e1m2`, :func:`encode_fp4` and
  :func:`cast_fp4` -- per-element float4 casts (both float4 formats, all five round modes,
  optionally through bfloat16 as the 950 kernels convert), for ops with per-token scales.
* :func:`quantize` -- the whole block quantization along the last dim; returns the element
  tensor and the scale codes in the ``(..., ceil(blocks / 2), 2)`` layout.

Sources (facts only; the code is written from them):

* hicann/ops-nn ``quant/dynamic_mx_quant/docs/aclnnDynamicMxQuant.md`` / ``...V3.md``: the
  formulas of the three ``scaleAlg`` scenes, ``emax`` (float4_e2m1 2, float8_e4m3fn 8,
  float8_e5m2 15), round modes (float4: rint/round/floor; float8: rint only), the scale shape
  (blocks per row rounded up to even, padding 0, then a trailing dim of 2).
* hicann/ops-nn ``quant/dynamic_mx_quant/op_kernel/arch35/dynamic_mx_quant_tail_axis.h``,
  ``..._tail_axis_fp8.h`` and ``dynamic_mx_quant_common.h`` (the 950 kernels), which settle
  what the formulas leave open: the OCP scale is the exponent field of the block maximum minus
  ``emax``, clamped at code 0; a block whose scale code is 0 under ``scale_alg`` 0 (and the
  ``dst_type_max`` 0/6/7 variant of 2) is quantized to zeros (the kernel's reciprocal is set to
  0); a block holding inf or NaN gets code 255; ``scale_alg`` 1 rounds the exponent of
  ``amax / DTYPE_MAX`` up (also for a subnormal quotient whose mantissa exceeds one half), the
  generic ``scale_alg`` 2 does the same without the subnormal case, and both keep the
  reciprocal ``2**(127 - code)`` for code 0; elements are rounded once (the half / float32
  paths emulate the rounding exactly; a zero result from a negative input keeps its sign).
* hicann/ops-nn ``quant/grouped_dynamic_mx_quant/tests/assets/golden.py`` (the CANN golden of
  the same quantization): element rounding ``P = round(V / 2**e)`` on the format's grid with
  the format's subnormals, then clipping to the largest finite value (saturation), NaN results
  become +0 ("NPU will cast NaN ... to positive ZERO"), float4 codes packed two per byte with
  the even element in the low nibble, the scale_alg 2 (dst_type_max 0/6/7) exponent taken from
  the block maximum rounded to bfloat16.

Known disagreements between those sources, and what this module does:

* ``scale_alg`` 1 / generic 2, code 0 with a nonzero block (``amax / DTYPE_MAX`` below
  ``2**-127``, reachable only from bfloat16/float32 blocks below about ``2**-117``): the doc
  formula and the kernel multiply by ``2**127``; the golden writes zeros.  We follow the doc and
  the kernel.
* ``scale_alg`` 1 / generic 2 compute ``amax / DTYPE_MAX`` as a float32 division (doc,
  golden); the kernel multiplies by ``float32(1 / DTYPE_MAX)``.  Both give the same codes for
  every float16 and every bfloat16 block maximum (checked exhaustively for DTYPE_MAX 448,
  57344 and dst_type_max 6, 6.25, 6.5, 7, 7.5, 8, 9, 9.75, 10, 11, 11.5, 12); float32 blocks
  could differ where the quotient lies within an ulp of a power of two.
* ``scale_alg`` 2 with ``dst_type_max`` 0/6/7 reads the block maximum as bfloat16: the golden
  and the float16 kernel round to nearest even, the float32 kernel truncates.  We round to
  nearest even for every input dtype (float32 input is outside npu_rotate_quant's doc).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .core import _f32, round_values

BLOCK_SIZE = 32
"""The MX block size of the torch_npu ops built on this module."""

E8M0_NAN = 255
"""The float8_e8m0 code of a block that holds inf or NaN."""

ROUND_MODES = ("rint", "round", "floor")
"""Element rounding: half to even, half away from zero, toward -inf."""

SCALE_ALGS = (0, 1, 2)
"""0: OCP (floor of log2 of the maximum minus emax); 1: cuBLAS-style (the exponent of
``amax / DTYPE_MAX`` rounded up), float8 only; 2: a configurable ``dst_type_max``, float4 only."""


@dataclass(frozen=True)
class MXFormat:
    """An MX element format.

    ``emax`` is the exponent of the largest normal value (the docs' table), ``mantissa_bits``
    the stored mantissa bits, ``min_exponent`` the exponent of the smallest normal value (the
    subnormals share it), ``max_value`` the largest finite magnitude, ``storage`` the dtype an
    op returns (float4 values come as uint8 bytes holding two codes).
    """

    name: str
    emax: int
    mantissa_bits: int
    min_exponent: int
    max_value: float
    storage: torch.dtype

    @property
    def packed(self) -> bool:
        """True for float4 (two elements per stored byte)."""
        return self.storage == torch.uint8

    def __repr__(self) -> str:
        return f"MXFormat({self.name})"


FORMATS: dict[str, MXFormat] = {f.name: f for f in (
    MXFormat("float4_e2m1", 2, 1, 0, 6.0, torch.uint8),
    MXFormat("float8_e4m3fn", 8, 3, -6, 448.0, torch.float8_e4m3fn),
    MXFormat("float8_e5m2", 15, 2, -14, 57344.0, torch.float8_e5m2),
)}


# -- bit helpers ---------------------------------------------------------------------------------

def _exponent_field(v: torch.Tensor) -> torch.Tensor:
    """The biased exponent field (0..255) of float32 ``v``, as int32."""
    return (v.view(torch.int32) >> 23) & 0xFF


def _mantissa_field(v: torch.Tensor) -> torch.Tensor:
    """The 23 mantissa bits of float32 ``v``, as int32."""
    return v.view(torch.int32) & 0x7FFFFF


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """``2.0 ** e`` as float32 for integer ``e`` in [-149, 127], built from its bits (exact)."""
    e = e.to(torch.int32)
    normal = (e + 127).clamp(min=1) << 23
    sub = torch.ones_like(e) << (e + 149).clamp(0, 22)
    return torch.where(e >= -126, normal, sub).view(torch.float32)


# -- scales --------------------------------------------------------------------------------------

def _reciprocal(code: torch.Tensor, zero_at_code0: torch.Tensor) -> torch.Tensor:
    """float32 ``2**(127 - code)``; 0 where ``zero_at_code0`` (and code is 0); NaN for 255."""
    recip = _pow2(127 - code.clamp(max=254))
    recip = torch.where(zero_at_code0 & (code == 0), torch.zeros_like(recip), recip)
    return torch.where(code == E8M0_NAN, torch.full_like(recip, float("nan")), recip)


def _rounded_up_exponent(quotient: torch.Tensor, subnormal: bool) -> torch.Tensor:
    """The exponent field of float32 ``quotient``, plus 1 unless it is a power of two (normal
    numbers below 2**127); with ``subnormal``, a subnormal above half the smallest normal also
    rounds up."""
    e = _exponent_field(quotient)
    m = _mantissa_field(quotient)
    up = (e > 0) & (e < 254) & (m > 0)
    if subnormal:
        up = up | ((e == 0) & (m > 0x400000))
    return e + up.to(torch.int32)


def scale_codes(amax: torch.Tensor, fmt: MXFormat, scale_alg: int = 0,
                dst_type_max: float = 0.0, *,
                code0_zeros: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """e8m0 codes and float32 reciprocals of the block scales.

    Parameters
    ----------
    amax : Tensor
        float32 block maxima ``max |V_i|`` (NaN if the block holds NaN, inf if it holds inf).
    fmt : MXFormat
        The element format.
    scale_alg : {0, 1, 2}
        * 0 (OCP): ``code = max(E(amax) - emax, 0)`` with ``E`` the float32 exponent field,
          i.e. ``shared_exp = floor(log2(amax)) - emax`` clamped at -127.  Code 0 quantizes the
          block to zeros (the kernel's reciprocal is 0).
        * 1 (cuBLAS, float8 formats): ``S = float32(amax / DTYPE_MAX)``, ``code = E(S) + 1``
          unless ``S`` is a power of two (and ``E(S) < 254``), or if ``S`` is subnormal with a
          mantissa above one half; ``amax == 0`` gives code 0 and zeros.
        * 2 (float4_e2m1): ``dst_type_max`` 0, 6 or 7: ``b = bfloat16(amax)`` (round to
          nearest even); ``code = max(E(b) + (mantissa7(b) > T) - 2, 0)`` with ``T`` the
          mantissa of bfloat16(6) (0x40; also for 0) or of bfloat16(7) (0x60); code 0 gives
          zeros.  Any other ``dst_type_max`` (6..12): as 1 with ``DTYPE_MAX = dst_type_max``
          (float32) and without the subnormal case.
    dst_type_max : float
        See ``scale_alg`` 2.
    code0_zeros : bool
        Where ``scale_alg`` 0 and 2 (``dst_type_max`` 0/6/7) write a block as zeros: True
        (the DynamicMxQuant kernels) every block with code 0; False (the FlatQuant 950 kernel,
        hicann/ops-nn ``quant/flat_quant/op_kernel/arch35/flat_quant_high_v2.h``) only a
        block whose maximum has exponent field 0 (zero or subnormal), any other code-0 block
        keeps the reciprocal ``2**127``.

    Returns
    -------
    (code, reciprocal)
        int32 codes in [0, 255] (255 for a block with inf/NaN) and float32 ``1 / scale`` (0
        for blocks quantized to zeros, NaN for code 255), both of ``amax``'s shape.
    """
    finite = torch.isfinite(amax)
    if scale_alg == 0:
        e = _exponent_field(amax)
        code = (e - fmt.emax).clamp(min=0)
        zero_code0 = torch.ones_like(finite) if code0_zeros else e == 0
    elif scale_alg == 2 and dst_type_max in (0.0, 6.0, 7.0):
        bits = amax.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0x7FFF
        e, m = bits >> 7, bits & 0x7F
        threshold = 0x60 if dst_type_max == 7.0 else 0x40
        code = (e + (m > threshold).to(torch.int32) - 2).clamp(min=0)
        finite = e != 0xFF
        zero_code0 = torch.ones_like(finite) if code0_zeros else e == 0
    elif scale_alg in (1, 2):
        limit = fmt.max_value if scale_alg == 1 else float(dst_type_max)
        quotient = amax / torch.full_like(amax, limit)
        code = _rounded_up_exponent(quotient, subnormal=scale_alg == 1)
        zero_code0 = amax == 0
    else:
        raise ValueError(f"scale_codes: expected scale_alg one of {list(SCALE_ALGS)}, but got "
                         f"{scale_alg!r}")
    code = torch.where(finite, code, torch.full_like(code, E8M0_NAN))
    return code, _reciprocal(code, zero_code0)


def e8m0_to_float(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of e8m0 codes (any integer dtype, or float8_e8m0fnu): ``2**(code - 127)``,
    NaN for 255."""
    if codes.dtype == torch.float8_e8m0fnu:
        codes = codes.view(torch.uint8)
    c = codes.to(torch.int32)
    value = _pow2(c.clamp(max=254) - 127)
    return torch.where(c == E8M0_NAN, torch.full_like(value, float("nan")), value)


# -- elements ------------------------------------------------------------------------------------

def round_to_format(v: torch.Tensor, fmt: MXFormat, round_mode: str = "rint") -> torch.Tensor:
    """Round float32 ``v`` to the grid of ``fmt``: float32 values of the format, saturated at
    ``+-max_value``, NaN -> +0.

    With ``p = max(floor(log2|v|), min_exponent)`` the grid spacing is ``2**(p - m)`` (``m``
    mantissa bits), so the result is ``round(v * 2**(m - p)) * 2**(p - m)`` with
    :func:`core.round_values` (exact at ties); every step is an exact power-of-two scaling.
    A zero result keeps the sign of ``v`` (``rint(-0.2) == -0``).
    """
    e = _exponent_field(v).clamp(max=254) - 127
    p = e.clamp(min=fmt.min_exponent)
    q = v * _pow2(fmt.mantissa_bits - p)
    r = round_values(q, round_mode) * _pow2(p - fmt.mantissa_bits)
    r = r.clamp(-fmt.max_value, fmt.max_value)
    return torch.where(torch.isnan(r), torch.zeros_like(r), r)


def encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """float4_e2m1 codes (uint8, 0..15) of float32 values already on the e2m1 grid.

    Bit 3 is the sign, bits 2..1 the exponent (bias 1), bit 0 the mantissa: 0, 0.5, 1, 1.5, 2,
    3, 4, 6 are codes 0..7 and their negatives 8..15 (-0 is 8).
    """
    a = values.abs()
    e = _exponent_field(a) - 127                         # 0..2 for |v| >= 1
    m = (a.view(torch.int32) >> 22) & 1
    big = 2 + 2 * e + m
    small = (a * 2).to(torch.int32)                      # 0 or 0.5 -> 0 or 1
    mag = torch.where(a >= 1, big, small)
    sign = torch.signbit(values).to(torch.int32) << 3
    return (mag | sign).to(torch.uint8)


_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of float4_e2m1 codes (low four bits of any integer tensor)."""
    c = codes.to(torch.int64) & 0xF
    table = torch.tensor(_E2M1_VALUES + tuple(-v for v in _E2M1_VALUES), dtype=torch.float32,
                         device=codes.device)
    return table[c]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes two per byte along the last dim (even length): element ``2i`` in the
    low nibble, ``2i + 1`` in the high nibble of byte ``i``."""
    n = codes.shape[-1]
    torch._check(n % 2 == 0, lambda: f"pack_fp4: expected an even last dim, but got {n}")
    pairs = (codes.to(torch.int32) & 0xF).reshape(*codes.shape[:-1], n // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_fp4`: uint8 ``(..., m)`` -> codes uint8 ``(..., 2m)``."""
    p = packed.to(torch.int32)
    both = torch.stack((p & 0xF, (p >> 4) & 0xF), dim=-1)
    return both.reshape(*packed.shape[:-1], packed.shape[-1] * 2).to(torch.uint8)


# -- float4_e1m2 and per-element float4 casts -----------------------------------------------------

FLOAT4_E1M2 = MXFormat("float4_e1m2", 0, 2, 0, 1.75, torch.uint8)
"""float4_e1m2: sign, one exponent bit (bias 1), two mantissa bits, no inf / NaN.  Its values
0, 0.25, 0.5, ..., 1.75 are a uniform grid (the subnormals ``m / 4`` and the normals
``1 + m / 4``), largest 1.75 (torch_npu's ``DTYPE_MAX`` for it, op-plugin
``test/test_custom_ops/test_npu_dequant_swiglu_quant.py`` ``MAX_VALUE_WITH_FLOAT4E1M2``).  Of
the MX ops only npu_dynamic_mx_quant documents it (emax 0, scale_alg 0 only,
aclnnDynamicMxQuantV3), so it is kept out of :data:`FORMATS`."""

FLOAT4_FORMATS: dict[str, MXFormat] = {"float4_e2m1": FORMATS["float4_e2m1"],
                                       "float4_e1m2": FLOAT4_E1M2}
"""The two float4 formats (torch_npu codes 296 and 297), by name."""


def encode_e1m2(values: torch.Tensor) -> torch.Tensor:
    """float4_e1m2 codes (uint8, 0..15) of float32 values already on the e1m2 grid.

    Bit 3 is the sign, bit 2 the exponent, bits 1..0 the mantissa; on this grid the magnitude
    code is simply ``4 * |v|`` (0.25 -> 1, 1.0 -> 4, 1.75 -> 7); -0 is 8.
    """
    mag = (values.abs() * 4).to(torch.int32)
    sign = torch.signbit(values).to(torch.int32) << 3
    return (mag | sign).to(torch.uint8)


def decode_e1m2(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of float4_e1m2 codes (low four bits of any integer tensor)."""
    c = codes.to(torch.int32) & 0xF
    mag = (c & 7).to(torch.float32) * 0.25
    return torch.where(c >= 8, -mag, mag)


def encode_fp4(values: torch.Tensor, fmt: MXFormat) -> torch.Tensor:
    """float4 codes of values on the grid of ``fmt`` (float4_e2m1 or :data:`FLOAT4_E1M2`)."""
    if fmt.name == "float4_e1m2":
        return encode_e1m2(values)
    if fmt.name == "float4_e2m1":
        return encode_e2m1(values)
    raise ValueError(f"encode_fp4: expected a float4 format, but got {fmt.name}")


def cast_fp4(v: torch.Tensor, fmt: MXFormat, round_mode: str = "rint", *,
             via_bfloat16: bool = False) -> torch.Tensor:
    """Round float values to a float4 format and pack them two per byte along the last dim.

    ``round_mode`` is any of :data:`core.ROUND_MODES` (``rint``, ``round``, ``floor``, ``ceil``,
    ``trunc``); values beyond the format saturate to ``+-max_value``, NaN gives +0, a zero
    result keeps the sign of its input (:func:`round_to_format`).  ``via_bfloat16=True`` first
    rounds the float32 values to bfloat16 (half to even), as the Ascend 950 kernels do when they
    convert float32 with ``Cast<bfloat16_t, float, CAST_RINT>`` and then
    ``Cast<fp4x2_*, bfloat16_t, round mode>`` (bfloat16 -> float4 is the only float4 conversion
    of the 950's ``Cast``: cannmirror/asc-devkit ``docs/zh/api/SIMD-API/基础API/Reg矢量计算/
    类型转换/Cast.md``, which also states the saturation and NaN -> 0 of that conversion).  The
    two roundings differ from one rounding of the float32 value where it lies within half a
    bfloat16 ulp of a float4 tie (``rint``/``round``) or of a float4 value (``floor``/``ceil``/
    ``trunc``: ``floor(2 - 2**-12)`` is 2, not 1.5).  Returns uint8 ``(..., n / 2)``, element
    ``2i`` in the low nibble (:func:`pack_fp4`; ``n`` must be even).
    """
    v = v.to(torch.float32)
    if via_bfloat16:
        v = v.to(torch.bfloat16).to(torch.float32)
    return pack_fp4(encode_fp4(round_to_format(v, fmt, round_mode), fmt))


# -- block quantization --------------------------------------------------------------------------

def scale_shape(shape, block_size: int = BLOCK_SIZE) -> tuple[int, ...]:
    """Shape of the scale output for quantization along the last dim of ``shape``:
    ``(*shape[:-1], ceil(ceil(n / block_size) / 2), 2)``."""
    blocks = -(-shape[-1] // block_size)
    return (*shape[:-1], (blocks + 1) // 2, 2)


def quantize(x: torch.Tensor, fmt: MXFormat, *, block_size: int = BLOCK_SIZE,
             round_mode: str = "rint", scale_alg: int = 0, dst_type_max: float = 0.0,
             code0_zeros: bool = True, max_low_bound: float = 0.0,
             pack: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MX-quantize ``x`` along its last dim.

    Blocks of ``block_size`` consecutive elements (a short last block is padded with zeros);
    per block ``(code, R) =`` :func:`scale_codes` of ``max |V_i|``, then ``P_i =``
    :func:`round_to_format` ``(V_i * R)``.  ``x`` may be float16, bfloat16 or float32 (its
    values are used exactly).  ``code0_zeros``: see :func:`scale_codes`.  ``fmt`` may also be
    :data:`FLOAT4_E1M2` (emax 0, aclnnDynamicMxQuantV3).  ``max_low_bound`` > 0 raises every
    block maximum to at least ``float32(max_low_bound)`` before the scale is computed
    (aclnnDynamicMxQuantV3 ``maxLowBound``, scale_alg 1; NaN maxima stay NaN).

    Returns
    -------
    (y, scale)
        ``y``: ``fmt.storage``, shape of ``x`` (float8) or ``(..., n / 2)`` uint8 with two
        float4 codes per byte (:func:`pack_fp4`; ``n`` must be even); with ``pack=False`` the
        float4 codes stay one per uint8 element, shape of ``x`` (for callers that pack along
        another dim).  ``scale``: uint8 e8m0 codes, :func:`scale_shape` -- block ``j`` of a row
        at ``[..., j // 2, j % 2]``, an odd block count padded with code 0.
    """
    v = x.to(torch.float32)
    n = v.shape[-1]
    blocks = -(-n // block_size)
    pad = blocks * block_size - n
    if pad:
        v = F.pad(v, (0, pad))
    grouped = v.reshape(*v.shape[:-1], blocks, block_size)
    amax = grouped.abs().amax(dim=-1, keepdim=True)
    if max_low_bound > 0.0:
        amax = amax.clamp(min=_f32(max_low_bound))      # clamp keeps NaN
    code, recip = scale_codes(amax, fmt, scale_alg, dst_type_max, code0_zeros=code0_zeros)
    r = round_to_format(grouped * recip, fmt, round_mode)
    r = r.reshape(*v.shape[:-1], blocks * block_size)
    if pad:
        r = r[..., :n]
    if fmt.packed:
        y = encode_fp4(r, fmt)
        y = pack_fp4(y) if pack else y
    else:
        y = r.to(fmt.storage)
    code = code.squeeze(-1)
    if blocks % 2:
        code = F.pad(code, (0, 1))
    scale = code.to(torch.uint8).reshape(*code.shape[:-1], (blocks + 1) // 2, 2)
    return y, scale
