"""The quantization modes of npu_moe_init_routing_v2, applied to gathered rows.

Sources: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing_v2.md``
(the list of modes and the output dtypes and shapes), ``op_plugin/ops/opapi/
MoeInitRoutingV2KernelNpuOpApi.cpp`` (output allocation: HIF8 and INT4 rows in uint8, MXFP4
scales in uint8, int8 buffers for every quantized drop / pad call) and the ``cpu_op_exec``
golden of ``test/test_custom_ops/test_npu_moe_init_routing_v2.py`` (the numerics)::

    0      static int8:  int8(clip(rint(fp16(fp16(x) * fp16(scale)) + fp16(offset))))
    1      dynamic int8: v = x (* scale row); s = max|v| / 127; q = int8(rint(v / s))
    2 / 3  MXFP8 RoundScale (float8_e5m2 / float8_e4m3fn), blocks of 32 along H:
           amax = max|block| (float16 x: of the values cut to bfloat16 by truncation),
           S = float32(amax / FP8_MAX), e = E(S) - 127 + (mantissa(S) != 0), e >= -126,
           scale = e8m0(2^e), q = float8(x * 2^-e) rounded half to even
    16/17  as 2 / 3 with amax raised to at least float32(1e-4)
    6      HIF8 cast:        hifloat8(x)
    7      HIF8 per tensor:  hifloat8(clip(x * scale[0], +-32768))
    8      HIF8 per token:   s = max|x| / 32768; hifloat8(clip(x / (s or 1), +-32768))
    9      MXFP4 (float4_e2m1): the OCP rule, shared_exp = floor(log2 amax) - 2 >= -127,
           elements on the e2m1 grid rounded half to even, two per byte (even one low)
    11/12  FP8 per block of 128 (float8_e5m2 / float8_e4m3fn): s = blockmax / FP8_MAX
           (0 when below FLT_MIN); q = float8(clip(x / s, +-FP8_MAX)), NaN -> 0
    13     INT4 dynamic: v = x (* scale (1, H)); s = max|v| / 7; q = int4(rint(v / s)),
           two per byte (even one in the low nibble)

HIF8 conversions round half away from zero and saturate (``SatMode::SAT``, as every quantizing
950 kernel, :mod:`..quant.hifloat8`).  Where the golden ignores an input (the ``scale`` of the
MX, HIF8 cast / per-token and FP8 modes, the ``offset`` of mode 7), it is ignored here too.

Disagreements, and what is followed: the page's own demo computes modes 2 / 3 with the OCP
rule (``floor(log2 amax) - emax``, saturating); the test golden above rounds the scale up so
that no element saturates, which is what "RoundScale" names, and is followed.  The golden
casts a zero block's scale 0.0 to e8m0 through ``en_dtypes``, whose conversion gives NaN
(0xFF) for zero; here a zero block (and an odd block count's padding) has code 0, the value a
zeroed scale buffer holds, as the padding of every other MX op.  Mode 13 has shape-only tests
upstream; its arithmetic is mode 1's with the int4 range (``DTYPE_MAX`` 7, as
npu_dynamic_quant's int4 output).  Modes 11 / 12: the golden's code does not run (it names an
undefined variable); its evident formula is followed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import dtypes
from ..quant import core as qcore
from ..quant import mx
from ..quant.hifloat8 import encode_hifloat8

INT8 = qcore.format_of(torch.int8)
_INT4 = qcore.FORMATS["int4"]
_FLOAT8 = {"e5m2": qcore.format_of(torch.float8_e5m2), "e4m3fn": qcore.format_of(torch.float8_e4m3fn)}

MXFP8_MODES = {2: "e5m2", 3: "e4m3fn", 16: "e5m2", 17: "e4m3fn"}
HIF8_MODES = (6, 7, 8)
MXFP4_MODE = 9
FP8_BLOCK_MODES = {11: "e5m2", 12: "e4m3fn"}
INT4_MODE = 13
MODES = (-1, 0, 1, *MXFP8_MODES, *HIF8_MODES, MXFP4_MODE, *FP8_BLOCK_MODES, INT4_MODE)
"""Every quant_mode the page documents."""

_MX_BLOCK = 32
_FP8_BLOCK = 128
_AMAX_FLOOR = 1e-4                    # modes 16 / 17: the golden's MXFP8_AMAX_CLAMP_VALUE
_HIF8_MAX = 32768.0
_FLT_MIN = torch.finfo(torch.float32).tiny


def _f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


def _blocks(v: torch.Tensor, size: int) -> torch.Tensor:
    """float32 rows (n, H) as (n, ceil(H / size), size), zero padded."""
    n, h = v.shape
    count = -(-h // size)
    return F.pad(v, (0, count * size - h)).reshape(n, count, size)


def _pad_even(t: torch.Tensor) -> torch.Tensor:
    """Pad the last dim to an even length with zeros."""
    return F.pad(t, (0, t.shape[-1] % 2))


def _mxfp8_roundscale(rows: torch.Tensor, quant_mode: int):
    fmt = _FLOAT8[MXFP8_MODES[quant_mode]]
    n, h = rows.shape
    v = rows.to(torch.float32)
    probe = v
    if rows.dtype == torch.float16:
        # The golden takes the block maxima of float16 inputs cut to bfloat16 (truncation).
        probe = (v.view(torch.int32) & -65536).view(torch.float32)
    magnitude = probe.abs()
    magnitude = torch.where(torch.isfinite(magnitude), magnitude, float("inf"))
    amax = _blocks(magnitude, _MX_BLOCK).amax(dim=-1)
    if quant_mode in (16, 17):
        amax = torch.maximum(amax, _f32(_AMAX_FLOOR))
    quotient = amax / _f32(qcore.max_value(fmt))
    bits = quotient.view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    exponent = exponent.clamp(min=-126)
    zero, infinite = amax == 0, torch.isinf(amax)
    codes = torch.where(zero, 0, torch.where(infinite, 255, exponent + 127))
    # 2^-e is exact in float32 for e in [-126, 128]; inf blocks multiply by -inf (NaN / inf).
    inverse = torch.where(zero, 0.0, torch.where(infinite, float("-inf"),
                                                 torch.exp2(-exponent.to(torch.float32))))
    scaled = (_blocks(v, _MX_BLOCK) * inverse.unsqueeze(-1)).reshape(n, -1)[:, :h]
    q = qcore.cast_float8(scaled, fmt, saturate=False)
    return q, _pad_even(codes).to(torch.uint8).view(torch.float8_e8m0fnu)


def _hif8(rows: torch.Tensor, quant_mode: int, scale):
    v = rows.to(torch.float32)
    row_scale = None
    if quant_mode == 7:
        v = (v * scale.to(torch.float32)[0]).clamp(-_HIF8_MAX, _HIF8_MAX)
    elif quant_mode == 8:
        row_scale = v.abs().amax(dim=-1) / _f32(_HIF8_MAX)
        safe = torch.where(row_scale == 0, 1.0, row_scale)
        v = (v / safe.unsqueeze(-1)).clamp(-_HIF8_MAX, _HIF8_MAX)
    return encode_hifloat8(v, "round", saturate=True), row_scale


def _mxfp4(rows: torch.Tensor):
    # The golden clamps the shared exponent at -127 and still scales such a block.
    return mx.quantize(rows, mx.FORMATS["float4_e2m1"], scale_alg=0, code0_zeros=False)


def _fp8_block(rows: torch.Tensor, quant_mode: int):
    fmt = _FLOAT8[FP8_BLOCK_MODES[quant_mode]]
    n, h = rows.shape
    v = rows.to(torch.float32)
    block_scale = _blocks(v.abs(), _FP8_BLOCK).amax(dim=-1) / _f32(qcore.max_value(fmt))
    block_scale = torch.where(block_scale < _FLT_MIN, 0.0, block_scale)
    spread = block_scale.repeat_interleave(_FP8_BLOCK, dim=-1)[:, :h]
    limit = qcore.max_value(fmt)
    q = torch.nan_to_num((v / spread).clamp(-limit, limit), nan=0.0)
    scales = _pad_even(block_scale).reshape(n, -1, 2)
    return qcore.cast_float8(q, fmt, saturate=True), scales


def _int4_dynamic(rows: torch.Tensor, scale):
    v = rows.to(torch.float32)
    if scale is not None:
        v = v * scale
    row_scale = v.abs().amax(dim=-1, keepdim=True) / 7.0
    q = qcore.saturate_int(qcore.round_values(v / row_scale), _INT4)   # 0 / 0 -> 0
    nibbles = q.to(torch.int32) & 0xF
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return packed.to(torch.uint8), row_scale.squeeze(-1)


def _static_int8(rows: torch.Tensor, scale, offset):
    # The golden computes in float16, rounding after the product and after the sum.
    h = rows.to(torch.float16) * scale.to(torch.float16)[0]
    if offset is not None:
        h = h + offset.to(torch.float16)[0]
    return qcore.saturate_int(qcore.round_values(h.to(torch.float32)), INT8), None


def _dynamic_int8(rows: torch.Tensor, scale, row_experts, start):
    v = rows.to(torch.float32)
    if scale is not None:
        if scale.shape[0] == 1:
            v = v * scale
        else:
            which = (row_experts - start).clamp(0, scale.shape[0] - 1)
            v = v * scale.index_select(0, which)
    row_scale = v.abs().amax(dim=-1, keepdim=True) / 127.0
    q = qcore.saturate_int(qcore.round_values(v / row_scale), INT8)
    return q, row_scale.squeeze(-1)


def quantize_rows(rows: torch.Tensor, quant_mode: int, scale, offset, row_experts, start):
    """Quantize gathered rows ``(n, H)`` in ``quant_mode`` (not -1).

    ``row_experts`` (each row's expert) and ``start`` pick mode 1's per-expert smooth scale.
    Returns ``(expanded_x rows, expanded_scale or None)``: None where the kernel writes no
    scale (modes 0, 6, 7; the caller allocates the unwritten float32 buffer).
    """
    if quant_mode == 0:
        return _static_int8(rows, scale, offset)
    if quant_mode == 1:
        return _dynamic_int8(rows, scale, row_experts, start)
    if quant_mode in MXFP8_MODES:
        return _mxfp8_roundscale(rows, quant_mode)
    if quant_mode in HIF8_MODES:
        return _hif8(rows, quant_mode, scale)
    if quant_mode == MXFP4_MODE:
        return _mxfp4(rows)
    if quant_mode in FP8_BLOCK_MODES:
        return _fp8_block(rows, quant_mode)
    return _int4_dynamic(rows, scale)


def passthrough_x_dtype(x: torch.Tensor, x_dtype) -> str | None:
    """The low-precision format an unquantized (mode -1) ``x`` carries, or None for plain x.

    float8 tensors carry themselves; uint8 tensors carry hifloat8 codes or packed
    float4_e2m1 pairs, named by ``x_dtype``.
    """
    if x.dtype in (torch.float8_e5m2, torch.float8_e4m3fn):
        return "float8"
    if x_dtype == dtypes.HIFLOAT8:
        return "hifloat8"
    if x_dtype == dtypes.FLOAT4_E2M1FN_X2:
        return "float4"
    return None
