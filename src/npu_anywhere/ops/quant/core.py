"""The quantization core: every quantizing op of npu_anywhere goes through these functions.

What is here, and what each op is expected to use:

* :class:`QuantFormat` / :data:`FORMATS` -- the destination formats (int8, uint8, int32, int4,
  float8_e4m3fn, float8_e5m2, hifloat8) with their storage dtype and representable range, and
  :func:`parse_dst_type`, which turns whatever the caller passed as ``dst_type`` / ``dtype`` (a
  ``torch.dtype``, its ScalarType code such as ``1`` or ``16``, or a torch_npu code such as
  ``torch_npu.int4 == 285``) into one of them, raising the project's errors otherwise.
* :func:`max_value` -- ``DTYPE_MAX`` of the docs' formulas (int8 127, int4 7, float8_e4m3fn 448,
  float8_e5m2 57344, hifloat8 32768).
* :func:`round_values` -- the five rounding modes of the Ascend ``Cast`` instruction, exact at
  ``.5`` ties: ``"rint"`` (half to even, CAST_RINT), ``"round"`` (half away from zero,
  CAST_ROUND), ``"floor"``, ``"ceil"``, ``"trunc"``.
* :func:`cast_to` -- round (integer formats), saturate and convert a float tensor to a format;
  int4 results are packed eight to an int32 (:func:`pack_int4`) unless ``pack=False``;
  hifloat8 results are uint8 codes (:mod:`.hifloat8`).
* :func:`decode` -- quantized storage back to float32 values (hifloat8 codes decoded).
* :func:`pack_int4` / :func:`unpack_int4` -- the NPU's int4-in-int32 layout.
* :func:`dynamic_symmetric` / :func:`dynamic_asymmetric` -- dynamic (max-based) quantization
  along given dims, in the two operation orders the CANN kernels use.

Facts settled from the sources (cited so that a reader can check them):

* **Integer casts saturate; NaN becomes 0.**  The CANN goldens clip to the destination range
  before the cast (hicann/ops-nn ``quant/quantize/tests/assets/golden.py``,
  ``quant/ascend_quant_v2/tests/assets/golden.py``) and map NaN to 0 for int32 ("CastToInt32 of
  nan ... the golden follows the GPU: 0").  The AI-core kernels convert float32 -> int32 (CAST_RINT)
  -> half -> int8, which saturates at the int8 range (``quant/dynamic_quant/op_kernel/*.h``,
  ``quant/ascend_quant_v2/op_kernel/ascend_quant_v2.h``).  We apply "NaN -> 0, then clamp" to
  every integer format; ``+-inf`` therefore saturate to the range ends.
* **float8 casts saturate** (overflow gives the largest finite value of the sign, never inf or
  NaN), **map NaN to +0, and round half to even**: every float32 -> float8 cast trait in the
  950 kernels is ``SatMode::SAT`` with ``RoundMode::CAST_RINT`` (``quant/dynamic_quant/
  op_kernel/arch35/dynamic_quant_regbase_full_load.h`` ``castTraitF32tofp8``, ``quant/quantize/
  op_kernel/arch35/quantize.h`` ``CAST_TRAIT_FP32_TO_FP8E5M2``, ``quant/quant_max/op_kernel/
  arch35/quant_max_common.h``, ``quant/dynamic_block_quant/op_kernel/arch35/``,
  ``quant/dequant_swiglu_quant/op_kernel/arch35/dequant_swiglu_quant_common.h``
  ``CAST_FP32_TO_FP8``, ``norm/rms_norm/op_kernel/arch35/rms_norm_regbase_common.h``
  ``castTraitFp322Fp8``); kernels that set CTRL[60] = 0 make the trait's SatMode apply, and
  the global mode they would otherwise run in (CTRL[60] = 1, CTRL[48] = 0 by default)
  saturates as well.  In saturation mode "NaN outputs become 0" (cannmirror/asc-devkit
  ``docs/zh/api/SIMD-API/基础API/特殊寄存器访问/SetCtrlSpr(ISASI).md``, CTRL[48]); CTRL[50],
  which could keep NaN for fp8, defaults to 0 and no ops-nn kernel sets it; ``Cast.md``
  (Reg矢量计算) says it directly: fp8 output in saturation mode, NaN input -> 0 by default.
  The CANN goldens agree: ``quant/quant_max/tests/assets/golden.py`` and
  ``quant/dynamic_block_quant/tests/assets/golden.py`` apply ``np.nan_to_num(nan=0.0)``
  before the float8 cast ("NPU will cast NaN (with or without sign) to positive ZERO").
  ``saturate=False`` gives the non-saturating mode instead (IEEE-style overflow: float8_e5m2
  -> +-inf, float8_e4m3fn -> NaN, which has no inf; NaN stays NaN); no op uses it at present.
* **int4 layout**: element ``j`` of each group of eight sits in bits ``4j .. 4j+3`` of the int32
  (low nibble first; in memory, byte ``b`` holds elements ``2b`` (low nibble) and ``2b+1`` (high
  nibble)).  Settled by op-plugin's ``convert_to_int4_pack`` (``op_plugin/ops/opapi/
  ConvertWeightToINT4PackKernelNpuOpApi.cpp``: ``a & 0xF | (b & 0xF) << 4 | ...``) and by the
  unpacking helpers of its goldens (``test/test_custom_ops/test_npu_dynamic_quant.py``
  ``convert_int4_to_int8``: low nibble first; ``test_npu_anti_quant.py`` ``unpack_int4``: shifts
  ``[0, 4]``).
* **hifloat8** (torch_npu code 290) is held as uint8 codes (op-plugin's meta registrations map
  290 to ``torch.uint8``) and converted bit-exactly by :mod:`.hifloat8`, which follows the
  Ascend 950 ``Cast`` rules (cannmirror/asc-devkit ``docs/zh/api/SIMD-API/基础API/Reg矢量计算/
  类型转换/Cast.md``): ``"round"`` (CAST_ROUND, half away from zero, the conversion of the CANN
  goldens' ``en_dtypes.hifloat8``) and ``"hybrid"`` (CAST_HYBRID: half away from zero for
  ``|e| <= 3``, elsewhere rounding up iff the 14 cut bits are >= the input's own low 14 bits).
  The kernels convert with ``SatMode::SAT`` (``quant/quantize/op_kernel/arch35/quantize.h``
  ``CAST_TRAIT_FP32_TO_HIFP8``), which turns inf outputs into +-32768 and NaN into 0 (CTRL[48];
  CTRL[50], which could keep NaN, does not apply to hifloat8), so :func:`cast_to` saturates
  that way unless ``saturate=False``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import torch

from ... import checks, dtypes
from . import hifloat8

ROUND_MODES = ("rint", "round", "floor", "ceil", "trunc")
"""Rounding modes: half to even, half away from zero, toward -inf, toward +inf, toward 0."""


@dataclass(frozen=True)
class QuantFormat:
    """A quantized destination format.

    ``storage`` is the torch dtype that holds one value (int4 values are held unpacked in int8
    here and packed into int32 by :func:`pack_int4`); ``qmin`` / ``qmax`` the representable
    range (for floats: the largest finite magnitude); ``emulated`` is False for formats whose
    conversion we cannot reproduce bit-exactly.
    """

    name: str
    kind: str                      # "int" or "float"
    storage: torch.dtype
    qmin: float
    qmax: float
    emulated: bool = True

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def packed_dtype(self) -> torch.dtype:
        """The dtype an op returns for this format (int32 for packed int4)."""
        return torch.int32 if self.name == "int4" else self.storage

    def __repr__(self) -> str:
        return f"QuantFormat({self.name})"


FORMATS: dict[str, QuantFormat] = {f.name: f for f in (
    QuantFormat("int8", "int", torch.int8, -128.0, 127.0),
    QuantFormat("uint8", "int", torch.uint8, 0.0, 255.0),
    QuantFormat("int32", "int", torch.int32, -2147483648.0, 2147483647.0),
    QuantFormat("int4", "int", torch.int8, -8.0, 7.0),
    QuantFormat("float8_e4m3fn", "float", torch.float8_e4m3fn, -448.0, 448.0),
    QuantFormat("float8_e5m2", "float", torch.float8_e5m2, -57344.0, 57344.0),
    QuantFormat("hifloat8", "float", torch.uint8, -hifloat8.MAX_VALUE, hifloat8.MAX_VALUE),
)}

# dtype codes as they reach an `int dst_type` argument: ScalarType values (a torch.dtype passed
# to an int argument arrives as its ScalarType value) and torch_npu's own codes
# (npu_anywhere.dtypes; op-plugin op_plugin/python/meta/_meta_registrations.py).
_DTYPE_CODES: dict[torch.dtype, int] = {
    dtype: code for code, dtype in dtypes.SCALAR_TYPE_CODES.items()
}
_FORMAT_OF_DTYPE: dict[torch.dtype, str] = {
    torch.int8: "int8", torch.qint8: "int8", torch.uint8: "uint8", torch.quint8: "uint8",
    torch.int32: "int32", torch.qint32: "int32", torch.quint4x2: "int4",
    torch.float8_e5m2: "float8_e5m2", torch.float8_e4m3fn: "float8_e4m3fn",
}
_CODES: dict[int, str] = {
    **{code: _FORMAT_OF_DTYPE[dtype] for dtype, code in _DTYPE_CODES.items()
       if dtype in _FORMAT_OF_DTYPE},
    dtypes.INT4: "int4",
    dtypes.HIFLOAT8: "hifloat8",
    dtypes.FLOAT8_E5M2: "float8_e5m2",
    dtypes.FLOAT8_E4M3FN: "float8_e4m3fn",
}


def dtype_code(value: torch.dtype | int) -> int:
    """The integer code of a dtype (its ScalarType value); ints are returned unchanged."""
    if isinstance(value, torch.dtype):
        if value not in _DTYPE_CODES:
            raise ValueError(f"no dtype code known for {value}")
        return _DTYPE_CODES[value]
    return int(value)


def describe_code(value: torch.dtype | int | None) -> str:
    """``'torch.quint4x2 (16)'``: a readable name for a dtype or dtype code (for messages)."""
    if value is None:
        return "None"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if value in dtypes.NPU_DTYPE_NAMES:
        return f"torch_npu.{dtypes.NPU_DTYPE_NAMES[value]} ({value})"
    dtype = dtypes.SCALAR_TYPE_CODES.get(value)
    return f"{dtype} ({value})" if dtype is not None else f"dtype code {value}"


def format_of(value: torch.dtype | int) -> Optional[QuantFormat]:
    """The format a dtype / dtype code stands for, or None if it is not a quant format."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.dtype):
        name = _FORMAT_OF_DTYPE.get(value)
        return FORMATS[name] if name is not None else None
    if not isinstance(value, int):
        return None
    name = _CODES.get(value)
    return FORMATS[name] if name is not None else None


def parse_dst_type(value: torch.dtype | int | None, *, op: str, param: str,
                   allowed: Sequence[str], default: str = "int8",
                   spelled: Optional[Sequence[str]] = None) -> QuantFormat:
    """Resolve a ``dst_type`` argument to a :class:`QuantFormat`, or raise.

    Parameters
    ----------
    value : torch.dtype, int or None
        What the caller passed; None selects ``default``.
    op, param : str
        For the error message (``"<op>: expected <param> one of [...], but got ..."``).
    allowed : sequence of str
        The format names the op accepts (e.g. ``("int8", "int4")``).  A documented format we
        cannot emulate (none at present) raises NotImplementedError; anything else ValueError.
    spelled : sequence of str, optional
        How to list the accepted values in the message (default: the format names).
    """
    if value is None:
        return FORMATS[default]
    fmt = format_of(value)
    listed = list(spelled) if spelled is not None else list(allowed)
    if fmt is None or fmt.name not in allowed:
        checks.expect(False, op, param, f"one of {listed}", describe_code(value), ValueError)
    if not fmt.emulated:
        checks.expect(False, op, param,
                      f"a format npu_anywhere can emulate bit-exactly ({fmt.name}'s conversion "
                      "rules are not documented well enough)", describe_code(value),
                      NotImplementedError)
    return fmt


def max_value(fmt: QuantFormat) -> float:
    """``DTYPE_MAX`` of the docs: the largest value of the format (int8 127, int4 7, ...)."""
    if not fmt.emulated:
        raise NotImplementedError(f"{fmt.name} is not emulated by npu_anywhere")
    return fmt.qmax


def _f32(value: float) -> float:
    """``value`` rounded to float32 (what a float constant in a kernel holds)."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def to_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a contiguous float32 tensor (the compute dtype of every quant kernel); returns
    ``x`` itself when it already is one."""
    return x.contiguous().to(torch.float32)


# -- rounding ----------------------------------------------------------------------------------

def round_values(x: torch.Tensor, mode: str = "rint") -> torch.Tensor:
    """Round a floating tensor to integral values (same dtype), exact at ``.5`` ties.

    ``"rint"`` half to even (``torch.round``), ``"round"`` half away from zero, ``"floor"``,
    ``"ceil"``, ``"trunc"``.  NaN and +-inf pass through unchanged.

    "round" is computed as ``trunc(x) + sign(x) * (|x - trunc(x)| >= 0.5)``: ``x - trunc(x)`` is
    exact in floating point, so no ``x + 0.5`` rounding error can move a value across a tie.
    """
    if mode == "rint":
        return torch.round(x)
    if mode == "floor":
        return torch.floor(x)
    if mode == "ceil":
        return torch.ceil(x)
    if mode == "trunc":
        return torch.trunc(x)
    if mode == "round":
        t = torch.trunc(x)
        away = (x - t).abs() >= 0.5
        return torch.where(away, t + torch.sign(x), t)
    raise ValueError(f"round_values: expected mode one of {list(ROUND_MODES)}, but got {mode!r}")


# -- casts -------------------------------------------------------------------------------------

def saturate_int(r: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """Integral-valued floats -> ``fmt.storage`` integers: NaN -> 0, then clamp to the range."""
    return _saturate_int_(r.clone(), fmt)


def _saturate_int_(r: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """:func:`saturate_int` that may overwrite ``r`` (a temporary the caller owns)."""
    if fmt.name == "int32":
        # 2**31 - 1 is not a float32; clamp in float64, where both ends are exact.
        r = r.to(torch.float64)
    return _zero_nan_(r.clamp_(fmt.qmin, fmt.qmax)).to(fmt.storage)


def _zero_nan_(r: torch.Tensor) -> torch.Tensor:
    """NaN (of either sign) -> +0 in ``r``, a temporary the caller owns.

    Callers clamp first: clamp keeps NaN (+-inf are then already at the range ends).  Eager: one
    in-place pass; traced (torch.compile): a compare-and-select, which Inductor vectorizes (its
    nan_to_num lowering tests NaN element by element).
    """
    if torch.compiler.is_dynamo_compiling():
        return torch.where(r != r, torch.zeros_like(r), r)
    return r.nan_to_num_(nan=0.0)


def cast_float8(y: torch.Tensor, fmt: QuantFormat, *, saturate: bool = True) -> torch.Tensor:
    """float32 -> float8 with round-half-even.  ``saturate=True`` (``SatMode::SAT``): overflow
    gives the largest finite value of the sign and NaN (of either sign) gives +0;
    ``saturate=False``: overflow goes to inf (e5m2) / NaN (e4m3fn) and NaN stays NaN."""
    if saturate:
        return _zero_nan_(y.clamp(fmt.qmin, fmt.qmax)).to(fmt.storage)
    out = y.to(fmt.storage)
    # Round-to-nearest-even overflow thresholds: e4m3fn's largest value 448 has an even
    # mantissa, so |y| <= 464 still rounds to it; e5m2's 57344 is odd, so 61440 rounds up.
    if fmt.name == "float8_e4m3fn":
        over = y.abs() > 464.0
        return torch.where(over, torch.full_like(out, float("nan")), out)
    over = y.abs() >= 61440.0
    return torch.where(over, torch.where(y > 0, float("inf"), float("-inf")).to(out.dtype), out)


def cast_to(y: torch.Tensor, fmt: QuantFormat, *, round_mode: str = "rint",
            saturate: bool = True, pack: bool = True, inplace: bool = False) -> torch.Tensor:
    """Convert float values (normally float32) to ``fmt``.

    Integer formats: ``round_values(y, round_mode)``, clamp to the range, NaN -> 0, convert;
    int4 results are packed into int32 along the last dim when ``pack`` (last dim a multiple of
    8), else returned unpacked as int8 in [-8, 7].  float8 formats: round half to even,
    saturating (+-448 / +-57344, NaN -> +0) unless ``saturate=False`` (``round_mode`` does not
    apply).  hifloat8: uint8 codes, ``round_mode`` ``"round"`` or ``"hybrid"`` (the default
    ``"rint"``, which hifloat8 lacks, means ``"round"``: the kernels' CAST_ROUND), saturating
    (+-32768, NaN -> 0) unless ``saturate=False`` (inf codes, NaN code 0x80).
    ``inplace=True`` lets the function overwrite ``y`` (pass it for a temporary you own: large
    inputs then need no extra float32 buffers).
    """
    if not fmt.emulated:
        raise NotImplementedError(f"{fmt.name} is not emulated by npu_anywhere")
    if fmt.name == "hifloat8":
        mode = "round" if round_mode == "rint" else round_mode
        return hifloat8.encode_hifloat8(y, mode, saturate=saturate)
    if fmt.is_int:
        r = y.round_() if (inplace and round_mode == "rint") else round_values(y, round_mode)
        q = _saturate_int_(r, fmt)                   # r is a temporary either way
        return pack_int4(q) if (fmt.name == "int4" and pack) else q
    if inplace and saturate:
        return _zero_nan_(y.clamp_(fmt.qmin, fmt.qmax)).to(fmt.storage)
    return cast_float8(y, fmt, saturate=saturate)


def decode(q: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """float32 values of quantized storage ``q`` of format ``fmt``: hifloat8 codes (uint8) are
    decoded (0x80 NaN, 0x6F / 0xEF +-inf), every other format is converted as is (unpack int4
    first)."""
    if fmt.name == "hifloat8":
        return hifloat8.decode_hifloat8(q)
    return q.to(torch.float32)


# -- int4 packing ------------------------------------------------------------------------------

_NIBBLE_SHIFTS = tuple(4 * j for j in range(8))


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Pack int4 values (any integer dtype, last dim a multiple of 8) into int32.

    Element ``8k + j`` of the last dim goes to bits ``4j .. 4j+3`` of output element ``k``
    (low nibble first), two's-complement nibbles.  Values outside [-8, 7] keep their low four
    bits (``v & 0xF``), as op-plugin's packer does.
    """
    n = values.shape[-1]
    torch._check(n % 8 == 0, lambda: f"pack_int4: expected a last dim divisible by 8, but got {n}")
    nib = (values.to(torch.int64) & 0xF).reshape(*values.shape[:-1], n // 8, 8)
    shifts = torch.tensor(_NIBBLE_SHIFTS, dtype=torch.int64, device=values.device)
    word = (nib << shifts).sum(dim=-1)                      # in [0, 2**32): disjoint bit fields
    word = torch.where(word >= 2 ** 31, word - 2 ** 32, word)  # two's complement int32
    return word.to(torch.int32)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: int32 ``(..., m)`` -> int8 ``(..., 8m)`` in [-8, 7].

    int32 words are read as their little-endian bytes: byte ``i`` holds elements ``2i`` (low
    nibble) and ``2i + 1`` (high nibble), and int8 arithmetic shifts sign-extend a nibble, so two
    shifts replace eight int64 shift-and-mask passes (about 20x faster on a 4096 x 4096 weight).
    Other integer dtypes take the word-wise path.
    """
    if packed.dtype == torch.int32:
        # Flattened first: a "contiguous" tensor whose last dim has size 1 may still carry a
        # last stride other than 1, which view() to a smaller dtype refuses.
        b = packed.contiguous().reshape(-1).view(torch.int8).reshape(
            *packed.shape[:-1], packed.shape[-1] * 4)             # (..., 4m) bytes
        lo = torch.bitwise_left_shift(b, 4).bitwise_right_shift_(4)
        hi = torch.bitwise_right_shift(b, 4)
        return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 8)
    shifts = torch.tensor(_NIBBLE_SHIFTS, dtype=torch.int64, device=packed.device)
    nib = (packed.to(torch.int64).unsqueeze(-1) >> shifts) & 0xF
    signed = nib - 16 * (nib >= 8).to(torch.int64)
    return signed.reshape(*packed.shape[:-1], packed.shape[-1] * 8).to(torch.int8)


# -- dynamic quantization ----------------------------------------------------------------------

def dynamic_symmetric(v: torch.Tensor, fmt: QuantFormat, dims: int | Iterable[int], *,
                      reciprocal: bool, pack: bool = True, owned: bool = False,
                      dtype_max: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic quantization of float32 ``v`` over ``dims``.

    ``amax = max(|v|)`` over ``dims`` (kept), ``scale = amax * float32(1 / DTYPE_MAX)``, then

    * ``reciprocal=True`` (the Atlas A2/A3 AI-core kernels): ``y = cast(v * (DTYPE_MAX / amax))``,
    * ``reciprocal=False`` (the Ascend 950 kernels and the CANN golden): ``y = cast(v / scale)``,

    with the ``cast_to`` rules (integers: half to even, saturating).  The two orders differ in
    the last float32 bit of ``v * q``, so about one element in 10^4 can land on the other side
    of a ``.5`` tie.  An all-zero slice gives scale 0 and y 0 (0 * inf and 0 / 0 are NaN, which
    the integer cast maps to 0).  ``owned=True`` lets the function overwrite ``v``;
    ``dtype_max`` replaces ``DTYPE_MAX`` (hifloat8's ``dst_type_max``).  Returns ``(y, scale)``
    with ``scale`` keeping ``dims``.
    """
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    m = max_value(fmt) if dtype_max is None else dtype_max
    amax = torch.linalg.vector_norm(v, ord=float("inf"), dim=dims, keepdim=True)   # max |v|
    scale = amax * _f32(1.0 / m)
    if reciprocal:
        # torch evaluates ``python_number / tensor`` as ``reciprocal(tensor) * number`` (two
        # roundings); the kernel divides once, so the numerator is a tensor.
        q = torch.full_like(amax, m) / amax
        t = v.mul_(q) if owned else v * q
    else:
        t = v.div_(scale) if owned else v / scale
    return cast_to(t, fmt, pack=pack, inplace=True), scale


def dynamic_asymmetric(v: torch.Tensor, fmt: QuantFormat, dims: int | Iterable[int], *,
                       reciprocal: bool, pack: bool = True, owned: bool = False,
                       dtype_max: Optional[float] = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric dynamic quantization of float32 ``v`` over ``dims``.

    ``mx, mn = max(v), min(v)``; ``RANGE = DTYPE_MAX - DTYPE_MIN`` (int8 255, int4 15, float
    formats ``2 * DTYPE_MAX``); ``offset = DTYPE_MAX - mx / scale`` and

    * ``reciprocal=True`` (Atlas A2/A3 kernels): ``scale = max((mx - mn) / RANGE, 1e-12)``,
      ``y = cast(v * (1 / scale) + offset)`` (a multiply, then an add: two roundings);
    * ``reciprocal=False`` (950 kernels, CANN golden): ``scale = (mx - mn) * float32(1/RANGE)``,
      ``y = cast(v / scale + offset)``.

    ``owned=True`` lets the function overwrite ``v``; ``dtype_max`` replaces ``DTYPE_MAX``
    (hifloat8's ``dst_type_max``).  Returns ``(y, scale, offset)``, scale and offset keeping
    ``dims``.
    """
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    m = max_value(fmt) if dtype_max is None else dtype_max
    rng = m - fmt.qmin if fmt.is_int else 2.0 * m
    mx = v.amax(dim=dims, keepdim=True)
    mn = v.amin(dim=dims, keepdim=True)
    if reciprocal:
        scale = (mx - mn) / rng
        eps = _f32(1e-12)
        scale = torch.where(scale > eps, scale, torch.full_like(scale, eps))  # GetMax(s, eps)
        offset = m - mx / scale
        back = torch.reciprocal(scale)
        t = v.mul_(back) if owned else v * back
    else:
        scale = (mx - mn) * _f32(1.0 / rng)
        offset = m - mx / scale
        t = v.div_(scale) if owned else v / scale
    t = t.add_(offset)
    return cast_to(t, fmt, pack=pack, inplace=True), scale, offset
