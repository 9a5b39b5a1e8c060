"""torch_npu.npu_quantize: static per-channel (or per-tensor) quantization.

Formula (seed 004)::

    div_mode=True:   result = (input / scales) + zero_points
    div_mode=False:  result = (input * scales) + zero_points

op-plugin (``op_plugin/ops/opapi/QuantizeKernelNpuOpApi.cpp``) runs div_mode=True through
aclnnQuantize and div_mode=False through aclnnAscendQuantV3 with ``round_mode="round"``; the two
accept different dtypes, scale shapes and axes, so the check has a branch per mode.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import core

OP = "npu_quantize"
SCHEMA = ("npu_quantize(Tensor self, Tensor scales, Tensor? zero_points, int dtype, int axis=1, "
          "bool div_mode=True) -> Tensor")

# div_mode=True: aclnnQuantize outputs; div_mode=False: aclnnAscendQuantV3 outputs.
_DIV_FORMATS = ("int8", "uint8", "int32", "float8_e4m3fn", "float8_e5m2", "hifloat8")
_DIV_SPELLED = ("torch.qint8", "torch.quint8", "torch.qint32", "torch.int8", "torch.uint8",
                "torch.int32", "torch.float8_e4m3fn", "torch.float8_e5m2", "torch_npu.hifloat8")
_MUL_FORMATS = ("int8", "int4", "float8_e4m3fn", "float8_e5m2", "hifloat8")
_MUL_SPELLED = ("torch.qint8", "torch.int8", "torch.quint4x2", "torch.float8_e4m3fn",
                "torch.float8_e5m2", "torch_npu.hifloat8")
# Codes that name a format above but that op-plugin does not route there (its meta function and
# its kernel path disagree for them), so they are rejected rather than guessed.
_MUL_REJECTED_CODES = (3, 14, 285)          # int32/qint32 (would be packed int4), torch_npu.int4
_ZERO_POINT_DTYPES = (torch.int8, torch.uint8, torch.int32, torch.bfloat16, torch.float32)

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})


def _format(dtype, div_mode: bool) -> core.QuantFormat:
    if div_mode:
        return core.parse_dst_type(dtype, op=OP, param="dtype", allowed=_DIV_FORMATS,
                                   spelled=_DIV_SPELLED)
    code = core.dtype_code(dtype) if isinstance(dtype, (int, torch.dtype)) else dtype
    if code in _MUL_REJECTED_CODES:
        checks.expect(False, OP, "dtype", f"one of {list(_MUL_SPELLED)} when div_mode is False",
                      core.describe_code(dtype), ValueError)
    return core.parse_dst_type(dtype, op=OP, param="dtype", allowed=_MUL_FORMATS,
                               spelled=_MUL_SPELLED)


def _mul_axis(x: torch.Tensor, axis: int) -> int:
    """div_mode=False: axis -2 is the second-to-last dim, anything > -2 the last (op-plugin maps
    ``axis < -1 ? axis : -1`` before calling aclnnAscendQuantV3)."""
    return x.dim() - 2 if axis == -2 else x.dim() - 1


def check_quantize(self, scales, zero_points, dtype, axis=1, div_mode=True):
    x = self
    fmt = _format(dtype, div_mode)
    checks.expect_dtype(x, FLOATING, OP, "input")
    checks.expect_dtype(scales, FLOATING, OP, "scales")
    checks.expect(1 <= x.dim() <= 8, OP, "input", "1 to 8 dims", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    named = {"input": x, "scales": scales}
    if zero_points is not None:
        named["zero_points"] = zero_points
    checks.expect_same_device(named, OP)
    if div_mode:
        _check_div(x, scales, zero_points, axis)
    else:
        _check_mul(x, scales, zero_points, axis, fmt)
    _check_strict(x, scales, zero_points, div_mode, fmt, axis)


def _check_div(x, scales, zero_points, axis) -> None:
    """aclnnQuantize: 1-D scales of size 1 or x.shape[axis]; 1-D zero_points of the same size."""
    checks.expect_dim(scales, 1, OP, "scales")
    n = scales.shape[0]
    if zero_points is not None:
        checks.expect_dtype(zero_points, _ZERO_POINT_DTYPES, OP, "zero_points")
        checks.expect_dim(zero_points, 1, OP, "zero_points")
        checks.expect(zero_points.shape[0] == n, OP, "zero_points",
                      lambda: f"the size of scales ({n})", lambda: zero_points.shape[0])
    if n == 1:
        return                                       # per tensor: axis is not used
    checks.expect(-x.dim() <= axis < x.dim(), OP, "axis",
                  lambda: f"a dim of input (in [{-x.dim()}, {x.dim() - 1}])", axis, IndexError)
    size = x.shape[axis]
    checks.expect(n == size, OP, "scales",
                  lambda: f"size 1 or the size of input's dim {axis} ({size})", n)


def _check_mul(x, scales, zero_points, axis, fmt) -> None:
    """aclnnAscendQuantV3: scales 1-D (size 1 or x's axis size) or x.dim()-D with 1 everywhere but
    the axis; zero_points of scales' shape and dtype; axis -2 or >= -1 (the last dim)."""
    checks.expect(axis >= -2, OP, "axis", "-2 (second-to-last dim) or >= -1 (last dim) when "
                  "div_mode is False", axis, ValueError)
    checks.expect(axis < x.dim(), OP, "axis", lambda: f"less than input's dim count ({x.dim()})",
                  axis, ValueError)
    checks.expect(axis != -2 or x.dim() >= 2, OP, "axis",
                  "-2 only for input with at least 2 dims", lambda: f"-2 with shape "
                  f"{tuple(x.shape)}", ValueError)
    ax = _mul_axis(x, axis)
    size = x.shape[ax]
    if scales.dim() == 1:
        ok = scales.shape[0] in (1, size)
    else:
        ok = scales.dim() == x.dim() and all(
            (scales.shape[i] in (1, size)) if i == ax else scales.shape[i] == 1
            for i in range(x.dim()))
    checks.expect(ok, OP, "scales",
                  lambda: f"shape (1,) or ({size},), or {x.dim()} dims that are 1 except dim "
                  f"{ax} (1 or {size})", lambda: f"shape {tuple(scales.shape)}")
    if zero_points is not None:
        checks.expect(zero_points.dtype == scales.dtype, OP, "zero_points",
                      lambda: f"the dtype of scales ({scales.dtype}) when div_mode is False",
                      str(zero_points.dtype), TypeError)
        checks.expect(zero_points.shape == scales.shape, OP, "zero_points",
                      lambda: f"the shape of scales {tuple(scales.shape)}",
                      lambda: tuple(zero_points.shape))
    if fmt.name == "int4":
        checks.expect(x.shape[-1] % 8 == 0, OP, "input",
                      "a last dim divisible by 8 for torch.quint4x2 output", x.shape[-1],
                      ValueError)


def _check_strict(x, scales, zero_points, div_mode, fmt, axis) -> None:
    product = targets.expect_supported(OP, _SUPPORTED)
    if product is None:
        return
    name = product.value
    if product == Product.ATLAS_INFERENCE:
        checks.expect(x.dtype != torch.bfloat16, OP, "input", "float32 or float16 on 310P",
                      str(x.dtype), TypeError)
        checks.expect(div_mode, OP, "div_mode", "True on 310P (div_mode=False is A2 only)",
                      div_mode, ValueError)
    if product != Product.ASCEND_950:
        checks.expect(fmt.name in ("int8", "uint8", "int32", "int4"), OP, "dtype",
                      lambda: f"an integer format on {name} (float8/hifloat8 need the 950)",
                      fmt.name, ValueError)
    if div_mode:
        allowed = (torch.float32,) if product == Product.ATLAS_INFERENCE else \
            (torch.float32, torch.bfloat16)
        if product == Product.ASCEND_950:
            allowed = FLOATING
        checks.expect(scales.dtype in allowed, OP, "scales",
                      lambda: f"dtype in {[str(d) for d in allowed]} on {name}",
                      str(scales.dtype), TypeError)
        if zero_points is not None:
            zp_allowed = (torch.int8, torch.uint8, torch.int32)
            if product != Product.ATLAS_INFERENCE:
                zp_allowed += (torch.bfloat16,)
            if product == Product.ASCEND_950:
                zp_allowed += (torch.float32,)
            checks.expect(zero_points.dtype in zp_allowed, OP, "zero_points",
                          lambda: f"dtype in {[str(d) for d in zp_allowed]} on {name}",
                          str(zero_points.dtype), TypeError)
            if zero_points.dtype == torch.bfloat16:
                checks.expect(x.dtype == torch.bfloat16 and scales.dtype == torch.bfloat16, OP,
                              "input", "bfloat16 input and scales with bfloat16 zero_points",
                              f"input {x.dtype}, scales {scales.dtype}", TypeError)
        if scales.dtype == torch.bfloat16:
            checks.expect(x.dtype == torch.bfloat16, OP, "input",
                          "bfloat16 when scales is bfloat16", str(x.dtype), TypeError)
    else:
        checks.expect(scales.dtype == x.dtype, OP, "scales",
                      lambda: f"the dtype of input ({x.dtype}) when div_mode is False on {name}",
                      str(scales.dtype), TypeError)


def quantize_reference(self, scales, zero_points, dtype, axis=1, div_mode=True):
    x = self
    fmt = _format(dtype, div_mode)
    v = core.to_float32(x)
    s = scales.to(torch.float32)
    zp = None if zero_points is None else zero_points.to(torch.float32)
    if div_mode:
        if s.shape[0] != 1:
            # A 1-D scale of the axis' size, viewed along that axis.
            ax = axis % x.dim()
            view = [1] * x.dim()
            view[ax] = s.shape[0]
            s = s.reshape(view)
            zp = None if zp is None else zp.reshape(view)
        t = v / s
    else:
        if s.dim() == 1:
            view = [1] * x.dim()
            view[_mul_axis(x, axis)] = s.shape[0]
            s = s.reshape(view)
            zp = None if zp is None else zp.reshape(view)
        t = v * s
    if zp is not None:
        t = t + zp
    # Both kernels round half to even on every product (aclnnQuantize: CAST_RINT;
    # aclnnAscendQuantV3's "round" is CAST_RINT in the A2/A3 kernel and in the 950 kernel's
    # TPL_ROUND_MODE_ROUND casts) and saturate; hifloat8 rounds half away from zero
    # (CAST_ROUND) in both.
    return core.cast_to(t, fmt, round_mode="round" if fmt.name == "hifloat8" else "rint")


quantize_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_quantize,
                    reference=quantize_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
quantize_op.forbid_autograd("npu_quantize has no backward on the NPU")


def npu_quantize(input=None, scales=None, zero_points=None, dtype=None, axis=1, div_mode=True,
                 **kwargs):
    """Static quantization with per-channel (or per-tensor) scales and zero points.

    Formula (seed 004)::

        div_mode=True:   result = round((input / scales) + zero_points)
        div_mode=False:  result = round((input * scales) + zero_points)

    scales / zero_points broadcast along every dim but the quantization axis.

    Parameters
    ----------
    input : Tensor
        float32, float16 or bfloat16 (310P: no bfloat16), 1 to 8 dims, any strides.  ``self=``
        (op-plugin's name) is accepted as an alias.
    scales : Tensor
        Any float dtype (strict mode applies each product's list).  div_mode=True: 1-D of size 1
        or ``input.shape[axis]``.  div_mode=False: 1-D of size 1 or the axis' size, or a tensor
        with input's dim count that is 1 everywhere but the axis.
    zero_points : Tensor or None
        div_mode=True: 1-D, scales' size, int8 / uint8 / int32 / bfloat16 (/ float32 on the
        950).  div_mode=False: scales' shape and dtype.
    dtype : dtype or int
        div_mode=True: ``torch.qint8`` / ``torch.int8``, ``torch.quint8`` / ``torch.uint8``,
        ``torch.qint32`` / ``torch.int32``, float8 types (950).  div_mode=False: ``torch.qint8``
        / ``torch.int8``, ``torch.quint4x2`` (int4 packed in int32), float8 types (950).
        Both: ``torch_npu.hifloat8`` (290, 950).
    axis : int
        div_mode=True: the dim scales run along (any valid dim; unused for size-1 scales).
        div_mode=False: -2 means the second-to-last dim, any other value >= -1 the last dim
        (the default 1 included); it must be less than input's dim count.
    div_mode : bool

    Returns
    -------
    Tensor
        input's shape, dtype int8 / uint8 / int32 / float8 per ``dtype`` (hifloat8: uint8
        holding the codes); for
        ``torch.quint4x2`` int32 with last dim / 8 (element ``8k + j`` in bits ``4j..4j+3``).

    Constraints
    -----------
    quint4x2 needs a last dim divisible by 8.  Strict mode: 310P has no bfloat16, no
    div_mode=False; integer outputs only before the 950; div_mode=False needs scales of input's
    dtype (aclnnAscendQuantV3); div_mode=True scales float32 (310P) or float32/bfloat16 (A2/A3),
    bfloat16 scales or zero points need bfloat16 input.

    Notes
    -----
    Computed in float32 (scales, zero points converted to float32 first), one division or
    multiplication and one addition, then rounded **half to even** on every product and
    saturated to the output range (the CANN goldens clip: int8 [-128, 127], uint8 [0, 255],
    int4 [-8, 7]); NaN gives 0, +-inf the range ends:

    * div_mode=True, aclnnQuantize: the kernel casts with CAST_RINT (hicann/ops-nn
      ``quant/quantize/op_kernel/arch35/quantize.h``).
    * div_mode=False, aclnnAscendQuantV3 with round_mode "round": the A2/A3 kernel converts
      with CAST_RINT (``quant/ascend_quant_v2/op_kernel/ascend_quant_v2.h`` ``CastOut``).  On
      the 950 the tiling maps "round" to its ``MODE_ROUND`` key for int8/int4 (``MODE_RINT``
      for float8; ``quant/ascend_quant_v2/op_host/ascend_quant_v2_regbase_tiling.cpp``
      ``GetRoundMode``), but that key only selects the template ``TPL_ROUND_MODE_ROUND``, for
      which the shared kernel's integer casts are CAST_RINT
      (``quant/ascend_quant_v2/op_kernel/ascend_quant_v2_apt.cpp`` runs the
      ``quant/quantize/op_kernel/arch35/quantize_*_regbase.h`` kernels; ``quantize.h``
      ``CAST_TRAIT_FP32_TO_INT16`` / ``CAST_TRAIT_HALF_TO_INT8``).  The CANN golden
      (``quant/ascend_quant_v2/tests/assets/golden.py``: ``np.round``) and op-plugin's
      (``test/test_custom_ops/test_npu_quantize.py``: ``np.round``) agree: 2.5 -> 2, 3.5 -> 4
      on A2, A3 and the 950 alike.

    float8 outputs round half to even, saturate to +-448 / +-57344 and map NaN to +0
    (``CAST_TRAIT_FP32_TO_FP8E5M2`` / ``E4M3``: ``SatMode::SAT``).  hifloat8 outputs round half
    away from zero (CAST_ROUND: aclnnQuantize's kernel has no round mode, and op-plugin passes
    "round" to aclnnAscendQuantV3, whose tiling maps it to CAST_ROUND for hifloat8,
    ``quant/ascend_quant_v2/op_host/ascend_quant_v2_regbase_tiling.cpp``) and saturate to
    +-32768 with NaN -> 0 (``CAST_TRAIT_FP32_TO_HIFP8``, ``SatMode::SAT``).

    Examples
    --------
    >>> x = torch.tensor([[1.5, 2.5, -300.0, 7.4]])
    >>> npu_anywhere.npu_quantize(x, torch.tensor([1.0]), None, torch.qint8, -1, True)
    tensor([[   2,    2, -128,    7]], dtype=torch.int8)
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return quantize_op(input, scales, zero_points, dtype, axis, div_mode)


def _key(self, scales, zero_points, dtype, axis=1, div_mode=True):
    return (core.dtype_code(dtype) if isinstance(dtype, torch.dtype) else dtype, div_mode,
            self.dtype, scales.dtype, None if zero_points is None else zero_points.dtype,
            self.device.type)


compiled.register(quantize_op, key=_key)


TORCH_NPU_FUNCTIONS = {"npu_quantize": npu_quantize}
