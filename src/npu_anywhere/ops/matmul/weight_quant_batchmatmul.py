"""torch_npu.npu_weight_quant_batchmatmul: float16 / bfloat16 activations times int8 or int4
(packed in int32) weights dequantized on the fly, with optional int8 quantization of the output.

Formula (aclnnWeightQuantBatchMatmulV2, hicann/ops-nn ``matmul/weight_quant_batch_matmul_v2/
docs/aclnnWeightQuantBatchMatmulV2.md``)::

    ANTIQUANT(weight) = (weight + antiquant_offset) * antiquant_scale
    y = x @ ANTIQUANT(weight) + bias
    with quant_scale:  y = QUANT(x @ ANTIQUANT(weight) + bias) = round(y * quant_scale + quant_offset)

Precision, following op-plugin's golden (``test/test_custom_ops/test_npu_weight_quant_
batchmatmul.py``: ``(weight + offset) * scale`` in x's dtype, then a matmul of x-dtype operands):
the offset sum and the scaled weight are each rounded to x's dtype; the matmul accumulates in
float32, the bias is added in float32 and the result is rounded once.  A float32 quant_scale goes
through ``npu_trans_quant_param(quant_scale, quant_offset)`` first, as op-plugin's adapter
(``op_plugin/ops/opapi/WeightQuantBatchMatmulV2KernelNpuOpApi.cpp``) does, and the int8 output
is the float32 result times the fp19 scale plus the int9 offset, rounded half to even and
saturated.

Providers, tried in order: ``compiled`` (contiguous 2-D int8 / packed int4 weights with
x-dtype scales, once a layer is hot: one compiled dequantize kernel per cache-resident tile of
output columns, see ``weight_decode``), ``blocked`` (any 2-D weight, eager, blocks of weight
rows), then the reference (batched weights).  All compute the reference's roundings; only the
float32 summation order differs.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..quant import core as quant_core
from ..quant.trans_quant_param import trans_quant_param_reference
from . import integer, weight_decode

OP = "npu_weight_quant_batchmatmul"
SCHEMA = ("npu_weight_quant_batchmatmul(Tensor x, Tensor weight, Tensor antiquant_scale, "
          "Tensor? antiquant_offset=None, Tensor? quant_scale=None, Tensor? quant_offset=None, "
          "Tensor? bias=None, int antiquant_group_size=0, int inner_precise=0, "
          "int? weight_dtype=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})
_X_DTYPES = (torch.float16, torch.bfloat16)
# float32 weights are npu_convert_weight_to_int4pack's Ascend 950 output: eight float4_e2m1
# codes per float32 word, dequantized with e8m0 (uint8) scales per group of 32 along k.
_W_DTYPES = (torch.int8, torch.int32, torch.float32)
_PACKED_DTYPES = (torch.int32, torch.float32)
_MX_GROUP = 32
# The 16 float4_e2m1 values, by 4-bit code (bit 3 the sign).
_FP4_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_QUINT4X2 = 16          # ScalarType code of torch.quint4x2, the int4 tag of packed weights
MAX_KN = 65535


def is_transposed(t: torch.Tensor) -> bool:
    """True when ``t`` is the last-two-dims transpose of a contiguous tensor (op-plugin's
    is_transpose_last_two_dims), which is how a packed int4 ``(n, k // 8)`` weight arrives."""
    if t.dim() < 2:
        return False
    rows, cols = t.shape[-2], t.shape[-1]
    if rows == 1 and cols == 1:
        return False
    if t.stride(-2) != 1 or t.stride(-1) != rows:
        return False
    expected = rows * cols
    for d in range(t.dim() - 3, -1, -1):
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def weight_kn(weight: torch.Tensor) -> tuple[int, int]:
    """(k, n) of the logical weight; int32 words hold eight int4 values along n, or along k when
    the weight is a transposed (n, k // 8)."""
    k, n = weight.shape[-2], weight.shape[-1]
    if weight.dtype not in _PACKED_DTYPES:
        return k, n
    return (k * 8, n) if is_transposed(weight) else (k, n * 8)


def _check_param_shape(name: str, t, allowed: list[tuple[int, ...]]) -> None:
    shape = tuple(t.shape)
    checks.expect(shape in allowed, OP, name, lambda: f"one of the shapes {allowed}", shape,
                  ValueError)


def _check_mx_antiquant(scale, offset, group_size, k, n) -> None:
    rule = "when weight is float32 (packed float4_e2m1)"
    checks.expect_dtype(scale, (torch.uint8,), OP, "antiquant_scale")
    checks.expect(group_size == _MX_GROUP, OP, "antiquant_group_size",
                  f"{_MX_GROUP} {rule} (e8m0 scales per 32 values of k)", group_size, ValueError)
    checks.expect(offset is None, OP, "antiquant_offset", f"None {rule}", "a tensor",
                  ValueError)
    _check_param_shape("antiquant_scale", scale, [(math.ceil(k / group_size), n)])


def _check_antiquant(x, weight, scale, offset, group_size, k, n, m) -> None:
    if weight.dtype == torch.float32:
        _check_mx_antiquant(scale, offset, group_size, k, n)
        return
    if scale.dtype == torch.int64:
        # Packed per-channel scales: the doc's narrow fast path.
        rule = "when antiquant_scale is int64"
        checks.expect(x.dtype == torch.float16, OP, "x", f"float16 {rule}", str(x.dtype),
                      TypeError)
        checks.expect(weight.dtype == torch.int8 and is_transposed(weight), OP, "weight",
                      f"a transposed int8 tensor {rule}",
                      lambda: f"dtype {weight.dtype}, strides {weight.stride()}", ValueError)
        checks.expect(group_size == 0, OP, "antiquant_group_size", f"0 {rule} (per-channel)",
                      group_size, ValueError)
        checks.expect(1 <= m <= 96, OP, "x", f"m in [1, 96] {rule}", m, ValueError)
        checks.expect(k % 64 == 0 and n % 64 == 0, OP, "weight",
                      f"k and n multiples of 64 {rule}", lambda: f"k={k}, n={n}", ValueError)
        _check_param_shape("antiquant_scale", scale, [(n,), (1, n)])
        if offset is not None:
            checks.expect_dtype(offset, (torch.int32,), OP, "antiquant_offset")
    else:
        checks.expect(scale.dtype == x.dtype, OP, "antiquant_scale",
                      lambda: f"the dtype of x ({x.dtype}) or int64", lambda: str(scale.dtype),
                      TypeError)
        if offset is not None:
            checks.expect(offset.dtype == scale.dtype, OP, "antiquant_offset",
                          lambda: f"the dtype of antiquant_scale ({scale.dtype})",
                          lambda: str(offset.dtype), TypeError)
    if group_size:
        checks.expect(group_size % 32 == 0 and 32 <= group_size <= k - 1, OP,
                      "antiquant_group_size",
                      lambda: f"0 or a multiple of 32 in [32, k - 1 = {k - 1}]", group_size,
                      ValueError)
        _check_param_shape("antiquant_scale", scale, [(math.ceil(k / group_size), n)])
    else:
        _check_param_shape("antiquant_scale", scale, [(1,), (1, 1), (n,), (1, n)])
    if offset is not None:
        checks.expect(tuple(offset.shape) == tuple(scale.shape), OP, "antiquant_offset",
                      lambda: f"the shape of antiquant_scale {tuple(scale.shape)}",
                      lambda: tuple(offset.shape), ValueError)


def _check_quant(scale, offset, antiquant_scale, n) -> None:
    if scale is None:
        checks.expect(offset is None, OP, "quant_offset", "None when quant_scale is None",
                      "a tensor", ValueError)
        return
    checks.expect(antiquant_scale.dtype != torch.int64, OP, "quant_scale",
                  "None when antiquant_scale is int64", "a tensor", ValueError)
    checks.expect_dtype(scale, (torch.float32, torch.int64), OP, "quant_scale")
    _check_param_shape("quant_scale", scale, [(1,), (n,), (1, n)])
    if offset is not None:
        checks.expect_dtype(offset, (torch.float32,), OP, "quant_offset")
        checks.expect(tuple(offset.shape) == tuple(scale.shape), OP, "quant_offset",
                      lambda: f"the shape of quant_scale {tuple(scale.shape)}",
                      lambda: tuple(offset.shape), ValueError)


def _check_bias(x, bias, n) -> None:
    allowed = (torch.float16,) if x.dtype == torch.float16 else (torch.float32,)
    checks.expect(bias.dtype in allowed, OP, "bias",
                  lambda: f"dtype {allowed[0]} for {x.dtype} x", lambda: str(bias.dtype),
                  TypeError)
    _check_param_shape("bias", bias, [(n,), (1,), (1, n)])


def _batch(x, weight) -> tuple[int, ...]:
    xb, wb = tuple(x.shape[:-2]), tuple(weight.shape[:-2])
    if xb and wb:
        checks.expect(xb == wb, OP, "weight", lambda: f"batch dims equal to x's {xb}", wb,
                      RuntimeError)
    return xb if len(xb) >= len(wb) else wb


def _check_strict(x, weight, quant_scale, group_size) -> None:
    product = targets.expect_supported(OP, _SUPPORTED)
    if product is not None and product != Product.ASCEND_950:
        checks.expect(weight.dtype != torch.float32, OP, "weight",
                      lambda: f"int8 or int32 on {product.value} (float32-packed float4 "
                      "weights are Ascend 950 only)", str(weight.dtype), TypeError)
    if product != Product.ATLAS_INFERENCE:
        return
    rule = "on 310P (Atlas inference)"
    checks.expect(x.dtype == torch.float16, OP, "x", f"float16 {rule}", str(x.dtype), TypeError)
    checks.expect(weight.dtype == torch.int8, OP, "weight", f"int8 {rule}", str(weight.dtype),
                  TypeError)
    checks.expect(quant_scale is None, OP, "quant_scale", f"None {rule}", "a tensor",
                  ValueError)
    checks.expect(group_size == 0, OP, "antiquant_group_size", f"0 {rule} (no per-group)",
                  group_size, ValueError)


def check_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
                                   quant_scale=None, quant_offset=None, bias=None,
                                   antiquant_group_size=0, inner_precise=0, weight_dtype=None):
    checks.expect_dtype(x, _X_DTYPES, OP, "x")
    checks.expect_dtype(weight, _W_DTYPES, OP, "weight")
    checks.expect(weight_dtype is None or (weight_dtype in (_QUINT4X2, torch.quint4x2)
                                           and weight.dtype == torch.int32),
                  OP, "weight_dtype", "None (or torch.quint4x2 for int32 weights); hifloat8 / "
                  "float8 / float4 weights (Ascend 950) are not implemented",
                  lambda: quant_core.describe_code(weight_dtype), NotImplementedError)
    for name, t in (("x", x), ("weight", weight)):
        checks.expect(2 <= t.dim() <= 6, OP, name, "a tensor with 2 to 6 dims",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
        checks.expect_nonempty(t, OP, name)
    k, n = weight_kn(weight)
    m = x.shape[-2]
    checks.expect(x.shape[-1] == k, OP, "weight", lambda: f"a k dim equal to x's ({x.shape[-1]})",
                  k, RuntimeError)
    checks.expect(k <= MAX_KN and n <= MAX_KN, OP, "weight", f"k and n in [1, {MAX_KN}]",
                  lambda: f"k={k}, n={n}", ValueError)
    _batch(x, weight)
    checks.expect(inner_precise in (0, 1), OP, "inner_precise",
                  "0 (high precision) or 1 (high performance)", inner_precise, ValueError)
    _check_antiquant(x, weight, antiquant_scale, antiquant_offset, antiquant_group_size, k, n, m)
    _check_quant(quant_scale, quant_offset, antiquant_scale, n)
    if weight.dtype == torch.float32:
        checks.expect(quant_scale is None, OP, "quant_scale",
                      "None when weight is float32 (packed float4_e2m1)", "a tensor", ValueError)
    if bias is not None:
        _check_bias(x, bias, n)
    named = {"x": x, "weight": weight, "antiquant_scale": antiquant_scale}
    for name, t in (("antiquant_offset", antiquant_offset), ("quant_scale", quant_scale),
                    ("quant_offset", quant_offset), ("bias", bias)):
        if t is not None:
            named[name] = t
    checks.expect_same_device(named, OP)
    _check_strict(x, weight, quant_scale, antiquant_group_size)


def weight_values(weight: torch.Tensor) -> torch.Tensor:
    """The values of the logical ``[..., k, n]`` weight: int8 as is, int4 words unpacked to
    int8, float32 words unpacked to their float4_e2m1 values (float32)."""
    if weight.dtype not in _PACKED_DTYPES:
        return weight
    words = weight.view(torch.int32)
    if is_transposed(weight):
        nibbles = quant_core.unpack_int4(words.mT).mT
    else:
        nibbles = quant_core.unpack_int4(words)
    if weight.dtype == torch.int32:
        return nibbles
    table = torch.tensor(_FP4_E2M1_VALUES, dtype=torch.float32, device=weight.device)
    return table[nibbles.to(torch.int64) & 0xF]


def antiquant_param(p: torch.Tensor, k: int, group_size: int) -> torch.Tensor:
    """A scale / offset as float32 broadcastable against ``[k, n]``: per-tensor and per-channel
    as a row, per-group expanded so that row i uses group ``i // group_size``."""
    if p.dtype == torch.int64:
        p = integer.unpack_scale_word(p)[0]
    if p.dtype == torch.uint8:
        # e8m0: 2 ** (code - 127); code 255 is NaN.
        p = torch.where(p == 255, float("nan"), torch.exp2(p.to(torch.float32) - 127))
    p = p.to(torch.float32)
    if group_size:
        return p.repeat_interleave(group_size, dim=0)[:k]
    return p.reshape(1, -1)


def dequantize(values, scale, offset, group_size, dtype, k) -> torch.Tensor:
    """ANTIQUANT(weight) in float32, holding values rounded to ``dtype`` after the offset sum
    and after the scaling (the golden's x-dtype arithmetic)."""
    w = values.to(torch.float32)
    if offset is not None:
        w = (w + antiquant_param(offset, k, group_size)).to(dtype).to(torch.float32)
    return (w * antiquant_param(scale, k, group_size)).to(dtype).to(torch.float32)


def finish(y, x_dtype, quant_scale, quant_offset, bias) -> torch.Tensor:
    """float32 ``x @ ANTIQUANT(weight)`` -> the output: bias, then quantization or rounding."""
    if bias is not None:
        y = y + bias.to(torch.float32).reshape(-1)
    if quant_scale is None:
        return y.to(x_dtype)
    word = quant_scale if quant_scale.dtype == torch.int64 else \
        trans_quant_param_reference(quant_scale.reshape(-1),
                                    None if quant_offset is None else quant_offset.reshape(-1))
    s, off = integer.unpack_scale_word(word.reshape(-1))
    return integer.to_int8_saturated(y * s + off)


def weight_quant_batchmatmul_reference(x, weight, antiquant_scale, antiquant_offset=None,
                                       quant_scale=None, quant_offset=None, bias=None,
                                       antiquant_group_size=0, inner_precise=0,
                                       weight_dtype=None):
    k = x.shape[-1]
    w = dequantize(weight_values(weight), antiquant_scale, antiquant_offset,
                   antiquant_group_size, x.dtype, k)
    y = torch.matmul(x.to(torch.float32), w)
    return finish(y, x.dtype, quant_scale, quant_offset, bias)


weight_quant_batchmatmul_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_weight_quant_batchmatmul,
    reference=weight_quant_batchmatmul_reference, metadata_check=True,
    info=OpInfo(api="torch_npu"))
weight_quant_batchmatmul_op.forbid_autograd(
    "npu_weight_quant_batchmatmul has no backward on the NPU (inference only)")


# -- fast provider: dequantize one block of output columns at a time ------------------------------

_BLOCK_BYTES = 4 << 20        # float32 weight block: a few MiB stays in the last-level cache
_DECODE_ROWS = 256            # above this many rows one whole-weight GEMM is cheaper


def _int4_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[256, 2] table: byte value b (as uint8) -> its (low, high) signed nibbles in ``dtype``."""
    b = torch.arange(256, device=device)
    lo, hi = b & 0xF, b >> 4
    pair = torch.stack((lo - 16 * (lo >= 8), hi - 16 * (hi >= 8)), dim=-1)
    return pair.to(dtype)


def _weight_rows(weight: torch.Tensor, k0: int, k1: int, dtype: torch.dtype) -> torch.Tensor:
    """Logical weight rows ``[k0, k1)`` as a ``[k1 - k0, n]`` tensor of ``dtype`` values.

    int4 words are decoded through a byte table (one gather instead of shift-and-mask passes):
    little-endian byte i of a packed row holds elements 2i (low nibble) and 2i + 1 (high).
    """
    if weight.dtype != torch.int32:
        return weight[k0:k1].to(dtype)
    table = _int4_table(dtype, weight.device)
    if is_transposed(weight):                  # storage (n, k // 8): packed along k
        part = weight[k0 // 8:k1 // 8].mT.contiguous()
        vals = torch.nn.functional.embedding(part.view(torch.uint8).to(torch.int32), table)
        return vals.reshape(part.shape[0], -1).mT
    part = weight[k0:k1].contiguous()
    vals = torch.nn.functional.embedding(part.view(torch.uint8).to(torch.int32), table)
    return vals.reshape(part.shape[0], -1)


def _param_rows(p, k0: int, k1: int, group_size: int, dtype) -> torch.Tensor:
    """A scale / offset for weight rows ``[k0, k1)``, broadcastable against them: a row for
    per-tensor / per-channel, ``[groups, 1, n]`` for per-group (blocks start on a group)."""
    if p.dtype == torch.int64:
        p = integer.unpack_scale_word(p)[0]
    p = p.to(dtype)
    if not group_size:
        return p.reshape(1, -1)
    return p[k0 // group_size:-(-k1 // group_size)].unsqueeze(1)


def _apply(w: torch.Tensor, p: torch.Tensor, op, group_size: int, dtype) -> torch.Tensor:
    if group_size and p.dim() == 3:
        rows = w.shape[0]
        pad = p.shape[0] * group_size - rows
        if pad == 0:
            return op(w.reshape(p.shape[0], group_size, -1), p).reshape(rows, -1).to(dtype)
        p = p.squeeze(1).repeat_interleave(group_size, dim=0)[:rows]
    return op(w, p).to(dtype)


def blocked_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
                                     quant_scale=None, quant_offset=None, bias=None,
                                     antiquant_group_size=0, inner_precise=0, weight_dtype=None):
    """The reference's arithmetic on blocks of weight rows: each block is decoded, offset and
    scaled in x's dtype while it is cache-resident and accumulated into a float32 result, so no
    float copy of the whole weight is made when few rows of x share it (decode); with many
    rows the whole weight is dequantized once and one GEMM does the work (prefill).
    Elementwise float16 / bfloat16 arithmetic on CPU computes in float32 and rounds once,
    which is the reference's rounding step by step."""
    k, n = weight_kn(weight)
    rows = x.reshape(-1, k).to(torch.float32)
    g, dt = antiquant_group_size, x.dtype
    # int64 scales decode to float32 fp19 values: apply those in float32, then round.
    pdt = torch.float32 if antiquant_scale.dtype == torch.int64 else dt
    if rows.shape[0] > _DECODE_ROWS:
        block = k
    else:
        block = max(8, _BLOCK_BYTES // (4 * n)) // 8 * 8
        if g:
            block = max(g, block // g * g)
    y = None
    for k0 in range(0, k, block):
        k1 = min(k, k0 + block)
        w = _weight_rows(weight, k0, k1, pdt)
        if antiquant_offset is not None:
            w = _apply(w, _param_rows(antiquant_offset, k0, k1, g, pdt), torch.add, g, dt)
        w = _apply(w.to(pdt), _param_rows(antiquant_scale, k0, k1, g, pdt), torch.mul, g, dt)
        part = rows[:, k0:k1]
        y = part @ w.float() if y is None else y.addmm_(part, w.float())
    y = y.reshape(*x.shape[:-1], n)
    return finish(y, x.dtype, quant_scale, quant_offset, bias)


def _blocked_supports(x, weight, *args, **kwargs):
    if weight.dtype == torch.float32:
        return "float4 (float32-packed) weights take the reference"
    if weight.dim() != 2:
        return "batched weights take the reference"
    return None


# -- compiled provider: one compiled dequantize kernel per cache-resident tile (weight_decode) ----

def _layer_key(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None,
               quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0,
               weight_dtype=None):
    return (str(weight.dtype), str(x.dtype), *weight.shape, antiquant_group_size,
            antiquant_offset is not None, x.device.type)


_TILE_KERNELS = {
    "int4": compiled.CompiledProvider(weight_decode.int4_tile, _layer_key, op_name=OP),
    "int8": compiled.CompiledProvider(weight_decode.int8_tile, _layer_key, op_name=OP),
}


def _run_tile(kind, key, *args):
    return _TILE_KERNELS[kind].run_as(key, *args)


def tiled_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
                                   quant_scale=None, quant_offset=None, bias=None,
                                   antiquant_group_size=0, inner_precise=0, weight_dtype=None,
                                   run_tile=_run_tile):
    """The reference's arithmetic on tiles of output columns (weight_decode): each tile is
    dequantized by one compiled kernel while it is cache-resident, then multiplied by x in x's
    dtype (bfloat16 without bias or quant_scale: the GEMM rounds once) or in float32."""
    k, n = weight_kn(weight)
    float_out = bias is not None or quant_scale is not None
    y = weight_decode.tiled_weight_matmul(x.reshape(-1, k), weight, antiquant_scale,
                                          antiquant_offset, antiquant_group_size, float_out,
                                          run_tile)
    y = y.reshape(*x.shape[:-1], n)
    if not float_out and y.dtype == x.dtype:
        return y
    return finish(y.to(torch.float32), x.dtype, quant_scale, quant_offset, bias)


def _tiled_supports(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None,
                    quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0,
                    weight_dtype=None):
    if weight.dtype == torch.float32:
        return "float4 (float32-packed) weights take the reference"
    if weight.dim() != 2:
        return "batched weights take the reference"
    if not weight.is_contiguous() or is_transposed(weight):
        return "transposed weights take the blocked provider"
    if antiquant_scale.dtype == torch.int64:
        return "int64 (fp19) antiquant_scale takes the blocked provider"
    k, _ = weight_kn(weight)
    if antiquant_group_size and k % antiquant_group_size:
        return "a last partial group takes the blocked provider"
    kind = "int4" if weight.dtype == torch.int32 else "int8"
    return _TILE_KERNELS[kind].supports(x, weight, antiquant_scale, antiquant_offset,
                                        quant_scale, quant_offset, bias, antiquant_group_size)


# Tried in this order: the compiled tiles once a layer is hot, else the eager blocked provider.
weight_quant_batchmatmul_op.add_provider("compiled", tiled_weight_quant_batchmatmul,
                                         _tiled_supports)
weight_quant_batchmatmul_op.add_provider("blocked", blocked_weight_quant_batchmatmul,
                                         _blocked_supports)


def npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
                                 quant_scale=None, quant_offset=None, bias=None,
                                 antiquant_group_size=0, inner_precise=0, weight_dtype=None):
    """Weight-only quantized matmul (W8A16 / W4A16), optionally quantizing the output to int8.

    Formula (aclnnWeightQuantBatchMatmulV2)::

        ANTIQUANT(weight) = (weight + antiquant_offset) * antiquant_scale
        y = x @ ANTIQUANT(weight) + bias
        quant_scale given:  y = int8(round(y * quant_scale + quant_offset))

    Parameters
    ----------
    x : Tensor
        ``(..., m, k)``, float16 or bfloat16; transposed (non-contiguous) views accepted.
    weight : Tensor
        ``(..., k, n)`` int8, or int32 holding eight int4 values each (``npu_convert_weight_to_
        int4pack``): a contiguous ``(k, n // 8)`` or the transpose of a contiguous
        ``(n, k // 8)``.  Batch dims equal x's when both have them.  Ascend 950 (and default
        mode): float32 holding eight float4_e2m1 codes each, as npu_convert_weight_to_int4pack
        packs float32 weights there (same layouts as int32); this MX A16W4 form takes uint8
        (e8m0) scales per group of 32 and no offset or quant_scale.
    antiquant_scale : Tensor
        x's dtype: per-tensor ``(1,)`` / ``(1, 1)``, per-channel ``(n,)`` / ``(1, n)``, per-group
        ``(ceil(k / antiquant_group_size), n)``.  Or int64 words of npu_trans_quant_param
        (float16 x, transposed int8 weight, per-channel, m <= 96, k and n multiples of 64).
        With a float32 (float4) weight: uint8 e8m0 codes ``(ceil(k / 32), n)``, each standing
        for ``2 ** (code - 127)`` (255 is NaN), antiquant_group_size 32 (op-plugin's
        test_npu_convert_weight_to_int4pack.py golden).
    antiquant_offset : Tensor, optional
        antiquant_scale's shape and dtype (int32 with an int64 antiquant_scale).
    quant_scale, quant_offset : Tensor, optional
        float32 (or int64 words for quant_scale), ``(1,)``, ``(n,)`` or ``(1, n)``: the output
        becomes int8.  quant_offset needs quant_scale.
    bias : Tensor, optional
        ``(n,)``, ``(1,)`` or ``(1, n)``: float16 for float16 x, float32 for bfloat16 x.
    antiquant_group_size : int, default 0
        Per-group size along k: 0, or a multiple of 32 in ``[32, k - 1]``.
    inner_precise : {0, 1}
        High-precision / high-performance mode on the NPU; the results here are the same.
    weight_dtype : int, optional
        None, or torch.quint4x2 for int32 weights; float8 / hifloat8 / float4 weights raise
        NotImplementedError.

    Returns
    -------
    Tensor ``batch + (m, n)``: int8 with quant_scale, else x's dtype.

    Constraints
    -----------
    k and n in [1, 65535]; no empty tensors; strict 310P: float16 x, int8 weight, no
    quant_scale, no per-group.

    Notes
    -----
    Precision: ``(weight + offset)`` and its product with the scale are rounded to x's dtype
    (op-plugin's golden does this arithmetic in x's dtype), the matmul accumulates in float32,
    the result is rounded once.  A float32 quant_scale is packed by npu_trans_quant_param
    first (fp19 scale, int9 offset), as op-plugin's adapter does.

    Examples
    --------
    >>> x = torch.randn(8, 320, dtype=torch.float16)
    >>> w = torch.randint(-8, 8, (320, 256), dtype=torch.int8)
    >>> s, o = torch.randn(1, 256, dtype=torch.float16), torch.randn(1, 256, dtype=torch.float16)
    >>> npu_anywhere.npu_weight_quant_batchmatmul(x, w, s, o).dtype
    torch.float16
    """
    return weight_quant_batchmatmul_op(x, weight, antiquant_scale, antiquant_offset, quant_scale,
                                       quant_offset, bias, antiquant_group_size, inner_precise,
                                       weight_dtype)


TORCH_NPU_FUNCTIONS = {"npu_weight_quant_batchmatmul": npu_weight_quant_batchmatmul}
