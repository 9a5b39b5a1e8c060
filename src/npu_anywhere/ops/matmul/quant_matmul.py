"""torch_npu.npu_quant_matmul: int8 x int8 (or int4 x int4 packed in int32) matmul with exact
int32 accumulation, then dequantization; the Ascend 950's float8 / hifloat8 / MX float8 / MX
float4 inputs are in ``_quant_matmul_lowbit.py``, the int8 G-B and int4 K-G per-group modes
in ``_quant_matmul_int_groups.py``, A8W4 (int8 x1, int4 x2) in ``_quant_matmul_a8w4.py``.

Formulas (aclnnQuantMatmulV4, hicann/ops-nn ``matmul/quant_batch_matmul_v3/docs/
aclnnQuantMatmulV4.md``; acc = x1 @ x2 in int32)::

    no pertoken, no bias / int32 bias:   out = (acc + bias) * scale + offset
    bias bfloat16 / float32, no pertoken: out = acc * scale + bias
    pertoken, int32 bias:                out = (acc + bias) * scale * pertoken_scale
    pertoken, float bias:                out = acc * scale * pertoken_scale + bias
    output_dtype int32:                  out = acc + bias         (scale is not applied)

Which path the NPU takes (op-plugin ``op_plugin/ops/opapi/QuantMatmulKernelNpuOpApi.cpp``): a
float32 ``scale`` without ``pertoken_scale`` for an int8 or float16 output is first packed by
``npu_trans_quant_param(scale, offset)`` (scale truncated to fp19, offset rounded to int9), and
the kernel's fixed-point pipe applies that word; we do the same, so such scales lose their low
13 mantissa bits exactly as on the NPU.  The other paths apply the float32 (or bfloat16) scale in
float32.  int8 outputs are rounded half to even and saturated.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..quant import core as quant_core
from ..quant.trans_quant_param import trans_quant_param_reference
from . import _quant_matmul_a8w4 as a8w4
from . import _quant_matmul_int_groups as int_groups
from . import _quant_matmul_lowbit as lowbit
from . import integer

OP = "npu_quant_matmul"
SCHEMA = ("npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, "
          "Tensor? pertoken_scale=None, Tensor? bias=None, int? output_dtype=None, "
          "int? x1_dtype=None, int? x2_dtype=None, int? pertoken_scale_dtype=None, "
          "int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})
# output_dtype codes (ScalarType values) -> dtype, for the integer inputs this module emulates.
_OUT_CODES = {1: torch.int8, 5: torch.float16, 15: torch.bfloat16, 3: torch.int32}
_SCALE_DTYPES = (torch.float32, torch.int64, torch.bfloat16)
_BIAS_DTYPES = (torch.int32, torch.bfloat16, torch.float16, torch.float32)


def output_dtype_of(output_dtype) -> torch.dtype:
    if output_dtype is None:
        return torch.int8
    code = quant_core.dtype_code(output_dtype) if isinstance(output_dtype, torch.dtype) \
        else output_dtype
    checks.expect(code in _OUT_CODES, OP, "output_dtype",
                  "torch.int8, torch.float16, torch.bfloat16 or torch.int32 for int8 / int4 inputs",
                  lambda: quant_core.describe_code(output_dtype), ValueError)
    return _OUT_CODES[code]


def _logical_kn(x1: torch.Tensor, x2: torch.Tensor) -> tuple[int, int, int]:
    """(k of x1, k of x2, n) in int4/int8 elements; int4 shapes are a packed dim times 8."""
    if x1.dtype != torch.int32:
        return x1.shape[-1], x2.shape[-2], x2.shape[-1]
    if x2.is_contiguous():                    # (k, n // 8), packed along n
        return x1.shape[-1] * 8, x2.shape[-2], x2.shape[-1] * 8
    return x1.shape[-1] * 8, x2.shape[-2] * 8, x2.shape[-1]   # (n, k // 8) transposed


def _check_unemulated(pertoken_scale_dtype, scale_dtype, group_sizes, y_scale,
                      x1=None, x2=None) -> None:
    """What remains outside the emulation for int8 / int4 inputs."""
    for name, v in (("pertoken_scale_dtype", pertoken_scale_dtype), ("scale_dtype", scale_dtype)):
        checks.expect(v is None, OP, name,
                      "None for int8 / int4 inputs (it reinterprets MX float8_e8m0 scales of "
                      "float8 / float4 inputs)", lambda v=v: quant_core.describe_code(v),
                      ValueError)
    checks.expect(not group_sizes, OP, "group_sizes",
                  "None for int8 inputs with 1-D scales (int8 G-B takes 2-D scales, int4 K-G "
                  "2-D scale and offset)", lambda: list(group_sizes), ValueError)
    checks.expect(y_scale is None, OP, "y_scale", "None (not implemented)", "a tensor",
                  NotImplementedError)


def _check_inputs(x1, x2):
    integer.check_int_operands(OP, x1, x2)
    k1, k2, n = _logical_kn(x1, x2)
    checks.expect(k1 == k2, OP, "x2", lambda: f"a k dim equal to x1's ({k1})", k2, RuntimeError)
    try:
        batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except RuntimeError:
        checks.expect(False, OP, "x2", lambda: f"batch dims broadcastable with x1's "
                      f"{tuple(x1.shape[:-2])}", lambda: tuple(x2.shape[:-2]), RuntimeError)
    return x1.shape[-2], n, tuple(batch)


def _check_vector(name: str, t, sizes: tuple[int, ...], dtypes) -> None:
    checks.expect_dtype(t, dtypes, OP, name)
    checks.expect(t.dim() == 1 and t.shape[0] in sizes, OP, name,
                  lambda: "a 1-D tensor of size " + " or ".join(str(s) for s in sizes),
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def _check_bias(bias, n: int, batch: tuple[int, ...], out_dim: int) -> None:
    checks.expect_dtype(bias, _BIAS_DTYPES, OP, "bias")
    shape = tuple(bias.shape)
    allowed = [(n,)]
    if out_dim == 2:
        allowed.append((1, n))
    elif out_dim == 3:
        allowed.append((batch[0], 1, n))
    checks.expect(shape in allowed, OP, "bias",
                  lambda: f"one of the shapes {allowed} for a {out_dim}-D output", shape,
                  ValueError)


def _check_combination(x1, scale, offset, pertoken_scale, bias, out: torch.dtype) -> None:
    """The data-type combinations of the doc's table (A2 / A3; default mode is their union)."""
    if scale.dtype == torch.int64:
        checks.expect(out in (torch.int8, torch.float16), OP, "output_dtype",
                      "torch.int8 or torch.float16 when scale is int64", str(out), ValueError)
    if scale.dtype == torch.bfloat16:
        checks.expect(out in (torch.bfloat16, torch.int32), OP, "output_dtype",
                      "torch.bfloat16 or torch.int32 when scale is bfloat16", str(out), ValueError)
    if pertoken_scale is not None:
        checks.expect(out in (torch.float16, torch.bfloat16), OP, "pertoken_scale",
                      "None unless output_dtype is torch.float16 or torch.bfloat16",
                      lambda: f"a tensor with output_dtype {out}", ValueError)
        checks.expect(scale.dtype != torch.int64, OP, "scale",
                      "float32 or bfloat16 with pertoken_scale", "dtype torch.int64", TypeError)
    if offset is not None:
        checks.expect(x1.dtype == torch.int8 and out == torch.int8, OP, "offset",
                      "None unless x1 is int8 and output_dtype is torch.int8",
                      lambda: f"a tensor with x1 {x1.dtype} and output_dtype {out}", ValueError)
    if bias is not None and bias.dtype != torch.int32:
        ok = (bias.dtype == torch.bfloat16 and out == torch.bfloat16) or \
             (bias.dtype == torch.float32 and out == torch.bfloat16) or \
             (bias.dtype in (torch.float16, torch.float32) and out == torch.float16
              and pertoken_scale is not None)
        checks.expect(ok, OP, "bias",
                      "int32, or bfloat16 / float32 for a bfloat16 output, or float16 / float32 "
                      "for a float16 output with pertoken_scale",
                      lambda: f"dtype {bias.dtype} with output_dtype {out}", TypeError)


def _check_strict(x1, scale, pertoken_scale, bias, out) -> None:
    product = targets.expect_supported(OP, _SUPPORTED)
    if product != Product.ATLAS_INFERENCE:
        return
    rule = "on 310P (Atlas inference)"
    checks.expect(x1.dtype == torch.int8, OP, "x1", f"int8 {rule}", str(x1.dtype), TypeError)
    checks.expect(scale.dtype in (torch.int64, torch.float32), OP, "scale",
                  f"int64 or float32 {rule}", str(scale.dtype), TypeError)
    checks.expect(pertoken_scale is None, OP, "pertoken_scale", f"None {rule}", "a tensor",
                  ValueError)
    checks.expect(bias is None or bias.dtype == torch.int32, OP, "bias", f"int32 {rule}",
                  lambda: str(bias.dtype), TypeError)
    checks.expect(out in (torch.int8, torch.float16), OP, "output_dtype",
                  f"torch.int8 or torch.float16 {rule}", str(out), ValueError)


def check_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                       output_dtype=None, x1_dtype=None, x2_dtype=None,
                       pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                       y_scale=None):
    if a8w4.is_a8w4(x1, x2):
        a8w4.check_a8w4(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias,
                        output_dtype=output_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
                        scale_dtype=scale_dtype, group_sizes=group_sizes, y_scale=y_scale)
        return
    if lowbit.is_lowbit(x1, x2, x1_dtype, x2_dtype, scale, scale_dtype):
        lowbit.check_lowbit(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale,
                            bias=bias, output_dtype=output_dtype, x1_dtype=x1_dtype,
                            x2_dtype=x2_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
                            scale_dtype=scale_dtype, group_sizes=group_sizes, y_scale=y_scale)
        return
    if int_groups.is_int8_per_block(x1, scale, pertoken_scale):
        _check_unemulated(pertoken_scale_dtype, scale_dtype, None, None, x1, x2)
        int_groups.check_int8_per_block(x1, x2, scale, offset=offset,
                                        pertoken_scale=pertoken_scale, bias=bias,
                                        output_dtype=output_dtype, group_sizes=group_sizes,
                                        y_scale=y_scale)
        return
    if int_groups.is_int4_per_group(x1, scale, offset, group_sizes):
        _check_unemulated(pertoken_scale_dtype, scale_dtype, None, None)
        m, n, _ = _check_inputs(x1, x2)
        k, _, _ = _logical_kn(x1, x2)
        int_groups.check_int4_per_group(x1, x2, scale, offset=offset,
                                        pertoken_scale=pertoken_scale, bias=bias,
                                        output_dtype=output_dtype, group_sizes=group_sizes,
                                        y_scale=y_scale, m=m, k=k, n=n)
        return
    _check_unemulated(pertoken_scale_dtype, scale_dtype, group_sizes, y_scale, x1, x2)
    out = output_dtype_of(output_dtype)
    m, n, batch = _check_inputs(x1, x2)
    _check_vector("scale", scale, (1, n), _SCALE_DTYPES)
    if offset is not None:
        _check_vector("offset", offset, (1, n), (torch.float32,))
    if pertoken_scale is not None:
        _check_vector("pertoken_scale", pertoken_scale, (m,), (torch.float32,))
    if bias is not None:
        _check_bias(bias, n, batch, len(batch) + 2)
    _check_combination(x1, scale, offset, pertoken_scale, bias, out)
    named = {"x1": x1, "x2": x2, "scale": scale}
    for name, t in (("offset", offset), ("pertoken_scale", pertoken_scale), ("bias", bias)):
        if t is not None:
            named[name] = t
    checks.expect_same_device(named, OP)
    _check_strict(x1, scale, pertoken_scale, bias, out)


def quant_matmul_reference(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                           output_dtype=None, x1_dtype=None, x2_dtype=None,
                           pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                           y_scale=None):
    if a8w4.is_a8w4(x1, x2):
        return a8w4.a8w4_reference(x1, x2, scale, offset, pertoken_scale,
                                   a8w4._out_dtype(output_dtype))
    if lowbit.is_lowbit(x1, x2, x1_dtype, x2_dtype, scale, scale_dtype):
        return lowbit.lowbit_reference(x1, x2, scale, pertoken_scale=pertoken_scale, bias=bias,
                                       output_dtype=output_dtype, x1_dtype=x1_dtype,
                                       x2_dtype=x2_dtype,
                                       pertoken_scale_dtype=pertoken_scale_dtype,
                                       scale_dtype=scale_dtype)
    if int_groups.is_int8_per_block(x1, scale, pertoken_scale):
        return int_groups.int8_per_block_reference(x1, x2, scale,
                                                   pertoken_scale=pertoken_scale, bias=bias)
    if int_groups.is_int4_per_group(x1, scale, offset, group_sizes):
        a, b = integer.unpack_int4_operands(x1, x2)
        return int_groups.int4_per_group_reference(
            a, b, scale, offset, pertoken_scale, lowbit.OUT_CODES[lowbit._code(output_dtype)])
    out = output_dtype_of(output_dtype)
    a, b = integer.unpack_int4_operands(x1, x2)
    acc = integer.int_matmul(a, b)
    int_bias = bias is not None and bias.dtype == torch.int32
    if int_bias:
        acc = acc + bias
    if out == torch.int32:
        return acc
    packed = scale.dtype == torch.int64 or (
        scale.dtype == torch.float32 and pertoken_scale is None
        and out in (torch.int8, torch.float16))
    if packed:
        word = scale if scale.dtype == torch.int64 else trans_quant_param_reference(scale, offset)
        s, off = integer.unpack_scale_word(word)
        v = acc.to(torch.float32) * s
        if out == torch.int8:
            return integer.to_int8_saturated(v + off)
        return v.to(out)
    v = acc.to(torch.float32) * scale.to(torch.float32)
    if pertoken_scale is not None:
        v = v * pertoken_scale.unsqueeze(-1)
    if bias is not None and not int_bias:
        v = v + bias.to(torch.float32)
    if out == torch.int8:
        return integer.to_int8_saturated(v)
    return v.to(out)


quant_matmul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_quant_matmul,
                        reference=quant_matmul_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
quant_matmul_op.forbid_autograd("npu_quant_matmul has no backward on the NPU (inference only)")


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                     output_dtype=None, x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None,
                     scale_dtype=None, group_sizes=None, y_scale=None):
    """Quantized matmul: exact int32 ``x1 @ x2``, then dequantization to ``output_dtype``.

    Formula (aclnnQuantMatmulV4; ``acc = x1 @ x2`` accumulated exactly in int32)::

        no pertoken, int32 / no bias:  out = (acc + bias) * scale + offset
        float bias, no pertoken:       out = acc * scale + bias
        pertoken, int32 bias:          out = (acc + bias) * scale * pertoken_scale[m]
        pertoken, float bias:          out = acc * scale * pertoken_scale[m] + bias
        output_dtype=torch.int32:      out = acc + bias          (scale not applied)

    Parameters
    ----------
    x1 : Tensor
        ``(..., m, k)``, 2-D to 6-D, int8; or int32 holding eight int4 values each
        (``(..., m, k // 8)``, contiguous, low nibble first).
    x2 : Tensor
        ``(..., k, n)``, 2-D to 6-D, x1's dtype; batch dims broadcast with x1's.  int4: a
        contiguous ``(k, n // 8)`` or the transpose of a contiguous ``(n, k // 8)``.  A8W4:
        an int32 ``(k, n // 8)`` of packed int4 with an int8 x1 (2-D both).
    scale : Tensor
        ``(1,)`` or ``(n,)``: float32, bfloat16, or the int64 words of
        ``npu_trans_quant_param`` (fp19 scale and int9 offset).
    offset : Tensor, optional
        float32 ``(1,)`` or ``(n,)``; int8 x1 and int8 output only.  A8W4: required, float32
        ``(n,)``, the kernel's ``yOffset``.
    pertoken_scale : Tensor, optional
        float32 ``(m,)``; float16 / bfloat16 outputs only.  A8W4: required, ``(m,)`` (K-C) or ``(m, 1)`` (K-G).
    bias : Tensor, optional
        ``(n,)``; also ``(1, n)`` for 2-D outputs and ``(batch, 1, n)`` for 3-D ones.  int32
        (added to the accumulator), bfloat16 / float32 (bfloat16 output) or float16 / float32
        (float16 output with pertoken_scale), added after dequantization.
    output_dtype : torch.dtype, optional
        torch.int8 (default), torch.float16, torch.bfloat16 or torch.int32; for float8 /
        hifloat8 / float4 inputs torch.float16, torch.bfloat16 or torch.float32.
    x1_dtype, x2_dtype : int or dtype, optional
        Ascend 950: what an int8 / uint8 x1 / x2 carries -- ``torch_npu.hifloat8`` (290),
        ``torch.float8_e5m2`` / ``torch.float8_e4m3fn`` (23 / 24, 291 / 292),
        ``torch_npu.float4_e2m1fn_x2`` (296, two codes per byte along the tensor's contiguous
        dim).  ``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` tensors need neither.
    pertoken_scale_dtype, scale_dtype : int or dtype, optional
        ``torch_npu.float8_e8m0fnu`` (293): the scales are MX e8m0 codes (uint8 / int8, or
        ``torch.float8_e8m0fnu`` tensors, which need neither): ``pertoken_scale`` of x1
        ``(..., m, ceil(k / 64), 2)`` and ``scale`` of x2 ``(..., ceil(k / 64), n, 2)``, block
        ``2i + j`` at ``[i, j]`` -- the layout npu_dynamic_mx_quant writes (transpose a weight's
        ``(n, ceil(k / 64), 2)`` scale with the weight).
    group_sizes : list of int, optional
        ``[group_m, group_n, group_k]``: ``[1, 1, 32]`` (0 entries inferred) in the MX mode.
        The per-block float32 modes, G-B ``[1, 128, 128]`` (float8 / hifloat8 / int8) and B-B
        ``[128, 128, 128]`` (float8 / hifloat8), are selected by 2-D scales; int4 K-G
        ``[1, 1, 256]`` by a 2-D float32 scale and float16 offset ``(ceil(k / 256), n)``:
        ``out = pertoken_scale * sum_g (x1_g @ (x2_g - offset_g)) * scale_g``.
    y_scale : Tensor, optional
        The T-CG float8 x float4 mode: raises NotImplementedError.

    Returns
    -------
    Tensor of shape ``broadcast(batch) + (m, n)`` and dtype ``output_dtype``.

    Constraints
    -----------
    Last dims of x1 and x2 at most 65535.  The dtype table of the doc (A2 / A3): int64 scale
    only for int8 / float16 outputs; bfloat16 scale only for bfloat16 / int32 outputs;
    pertoken_scale only for float16 / bfloat16 outputs.  Strict 310P: int8 inputs, int64 /
    float32 scale, no pertoken_scale, int32 bias, int8 / float16 output.

    A8W4 (A2 / A3; int8 x1 ``(m, k)``, int4 x2 packed in int32 ``(k, n // 8)``; see
    :mod:`npu_anywhere.ops.matmul._quant_matmul_a8w4`): ``out = ((x1 @ (x2 * scale)) + offset)
    * pertoken_scale`` with int64 ``scale`` words, per channel ``(n,)`` (K-C) or per group of
    256 along k ``(ceil(k / 256), n)`` (K-G, ``group_sizes=[0, 0, 256]``), float32 ``offset``
    ``(n,)`` = ``8 * sum_k(x2 * scale)`` and a float16 / bfloat16 output.

    Low-bit inputs (Ascend 950, aclnnQuantMatmulV5): see
    :mod:`npu_anywhere.ops.matmul._quant_matmul_lowbit` -- static ``(x1 @ x2 + bias) * scale``
    (int64 word, or float32 scale without pertoken_scale, packed to fp19 first), dynamic
    ``x1 @ x2 * scale * pertoken_scale + bias`` and MX ``sum_j (block dot) * x1s * x2s + bias``
    (float32 bias); the dot products are exact products summed in float64, rounded once to
    float32.  Strict mode: only the 950 takes them.

    Notes
    -----
    As op-plugin does, a float32 scale without pertoken_scale for an int8 / float16 output goes
    through ``npu_trans_quant_param`` first (fp19 truncation, offset rounded to int9); with an
    int64 scale the word's offset is used.  int8 outputs round half to even and saturate.  The
    int32 accumulation is exact on every device (``torch._int_mm`` on CPU, exact float32 K-chunks
    elsewhere).  Accepts FRACTAL_NZ weights only as the ND tensors npu_format_cast returns here.

    Examples
    --------
    >>> x1 = torch.randint(-5, 5, (1, 256, 768), dtype=torch.int8)
    >>> x2 = torch.randint(-5, 5, (31, 768, 16), dtype=torch.int8)
    >>> scale, offset = torch.randn(16), torch.randn(16)
    >>> bias = torch.randint(-5, 5, (31, 1, 16), dtype=torch.int32)
    >>> npu_anywhere.npu_quant_matmul(x1, x2, scale, offset=offset, bias=bias).shape
    torch.Size([31, 256, 16])
    """
    return quant_matmul_op(x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale,
                           bias=bias, output_dtype=output_dtype, x1_dtype=x1_dtype,
                           x2_dtype=x2_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
                           scale_dtype=scale_dtype, group_sizes=group_sizes, y_scale=y_scale)


TORCH_NPU_FUNCTIONS = {"npu_quant_matmul": npu_quant_matmul}
