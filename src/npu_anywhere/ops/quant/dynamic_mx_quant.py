"""torch_npu.npu_dynamic_mx_quant: MX (microscaling) quantization along any axis.

Formula (hicann/ops-nn ``quant/dynamic_mx_quant/docs/aclnnDynamicMxQuantV3.md``; blocks of
``block_size`` consecutive elements along ``axis``, a short last block padded with zeros)::

    scale_alg 0:  shared_exp = floor(log2(max|V_i|)) - emax;      mxscale = 2^shared_exp
    scale_alg 1:  S = max(max|V_i|, max_low_bound) / DTYPE_MAX;   mxscale = 2^ceil_exp(S)
    scale_alg 2:  float4_e2m1 with dst_type_max (see mx.scale_codes)
    P_i = cast_to_dst_type(V_i / mxscale, round_mode)

The arithmetic is :func:`npu_anywhere.ops.quant.mx.quantize`, which follows the 950 kernels
(``quant/dynamic_mx_quant/op_kernel/arch35/dynamic_mx_quant_tail_axis*.h``, the not-tail-axis
variants compute the same per block); this module adds the axis handling and the layouts.
"""

from __future__ import annotations

import math

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core, mx

OP = "npu_dynamic_mx_quant"
SCHEMA = ("npu_dynamic_mx_quant(Tensor input, *, int axis=-1, str round_mode=\"rint\", "
          "int dst_type=296, int block_size=32, int? scale_alg=0, float dst_type_max=0.0, "
          "float max_low_bound=0.0) -> (Tensor, Tensor)")

X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_DIMS = 7
MAX_BLOCK_SIZE = 1024
FP4_ROUND_MODES = ("rint", "floor", "round")
SCALE_ALGS = {"float4_e2m1": (0, 2), "float4_e1m2": (0,), "float8_e4m3fn": (0, 1),
              "float8_e5m2": (0, 1)}
DST_TYPE_MAX_RANGE = (6.0, 12.0)
DST_SPELLED = ("torch_npu.float4_e2m1fn_x2 (296, default)", "torch_npu.float4_e1m2fn_x2 (297)",
               "torch.float8_e5m2 / torch_npu.float8_e5m2 (23 / 291)",
               "torch.float8_e4m3fn / torch_npu.float8_e4m3fn (24 / 292)")
_FLOAT4_CODES = {dtypes.FLOAT4_E2M1FN_X2: "float4_e2m1", dtypes.FLOAT4_E1M2FN_X2: "float4_e1m2"}
_TORCH_FLOAT4 = getattr(torch, "float4_e2m1fn_x2", None)
_TORCH_FLOAT4_CODE = 45          # ScalarType::Float4_e2m1fn_x2, what a torch dtype becomes
SUPPORTED = frozenset({Product.ASCEND_950})


def mx_format(dst_type) -> mx.MXFormat:
    """The element format of a ``dst_type`` (torch dtype, ScalarType code or torch_npu code)."""
    if not isinstance(dst_type, bool):
        if _TORCH_FLOAT4 is not None and dst_type is _TORCH_FLOAT4:
            return mx.FLOAT4_FORMATS["float4_e2m1"]
        if isinstance(dst_type, int) and dst_type == _TORCH_FLOAT4_CODE:
            return mx.FLOAT4_FORMATS["float4_e2m1"]
        if isinstance(dst_type, int) and dst_type in _FLOAT4_CODES:
            return mx.FLOAT4_FORMATS[_FLOAT4_CODES[dst_type]]
    fmt = core.format_of(dst_type)
    if fmt is None or fmt.name not in ("float8_e5m2", "float8_e4m3fn"):
        checks.expect(False, OP, "dst_type", f"one of {list(DST_SPELLED)}",
                      core.describe_code(dst_type), ValueError)
    return mx.FORMATS[fmt.name]


def _scale_alg(scale_alg) -> int:
    return 0 if scale_alg is None else scale_alg


def check_dynamic_mx_quant(input, *, axis=-1, round_mode="rint", dst_type=296, block_size=32,
                           scale_alg=0, dst_type_max=0.0, max_low_bound=0.0):
    x = input
    checks.expect_dtype(x, X_DTYPES, OP, "input")
    checks.expect(1 <= x.dim() <= MAX_DIMS, OP, "input", f"1 to {MAX_DIMS} dims",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(-x.dim() <= axis < x.dim(), OP, "axis",
                  lambda: f"in [{-x.dim()}, {x.dim() - 1}]", axis, IndexError)
    fmt = mx_format(dst_type)
    checks.expect(0 < block_size <= MAX_BLOCK_SIZE and block_size % mx.BLOCK_SIZE == 0, OP,
                  "block_size", f"a positive multiple of 32 no greater than {MAX_BLOCK_SIZE}",
                  block_size, ValueError)
    alg = _scale_alg(scale_alg)
    algs = SCALE_ALGS[fmt.name]
    checks.expect(alg in algs, OP, "scale_alg", lambda: f"one of {list(algs)} for {fmt.name}",
                  alg, ValueError)
    if fmt.packed:
        checks.expect_one_of(round_mode, FP4_ROUND_MODES, OP, "round_mode")
        checks.expect(x.shape[-1] % 2 == 0, OP, "input",
                      lambda: f"an even last dim for {fmt.name} output (two codes per byte)",
                      lambda: f"shape {tuple(x.shape)}", ValueError)
    else:
        checks.expect(round_mode == "rint", OP, "round_mode",
                      lambda: f"'rint' for {fmt.name} output", repr(round_mode), ValueError)
    if alg == 2 or x.dtype == torch.float32:
        checks.expect(block_size == mx.BLOCK_SIZE, OP, "block_size",
                      lambda: "32 with scale_alg 2 or float32 input", block_size, ValueError)
    if x.dtype == torch.float32:
        n = x.shape[axis]
        checks.expect(n >= mx.BLOCK_SIZE, OP, "input",
                      "a quantized axis of at least 32 elements when float32", n, ValueError)
    lo, hi = DST_TYPE_MAX_RANGE
    checks.expect(dst_type_max == 0.0 or lo <= dst_type_max <= hi, OP, "dst_type_max",
                  f"0.0 or a value in [{lo}, {hi}]", dst_type_max, ValueError)
    checks.expect(not math.isnan(max_low_bound) and max_low_bound >= 0.0, OP, "max_low_bound",
                  "a value >= 0", max_low_bound, ValueError)
    checks.expect(max_low_bound == 0.0 or alg == 1, OP, "max_low_bound",
                  "0.0 unless scale_alg is 1", max_low_bound, ValueError)
    targets.expect_supported(OP, SUPPORTED)


def dynamic_mx_quant_reference(input, *, axis=-1, round_mode="rint", dst_type=296,
                               block_size=32, scale_alg=0, dst_type_max=0.0,
                               max_low_bound=0.0):
    fmt = mx_format(dst_type)
    d = input.dim()
    ax = axis % d
    last = ax == d - 1
    v = input if last else input.movedim(ax, -1)
    y, scale = mx.quantize(v, fmt, block_size=block_size, round_mode=round_mode,
                           scale_alg=_scale_alg(scale_alg), dst_type_max=dst_type_max,
                           max_low_bound=max_low_bound, pack=last)
    if last:
        return y, scale
    # Along another axis: the elements go back in place (float4 codes are then packed along
    # the last dim, as the output is always (..., n / 2)); the scale's block-pair dim goes
    # where the axis was and its pair index stays last -- the doc's "every two rows
    # interleaved" layout: mxscale[..., i, ..., j] is block 2i + j.
    y = y.movedim(-1, ax)
    if fmt.packed:
        y = mx.pack_fp4(y)
    scale = scale.movedim(-2, ax).contiguous()
    return y.contiguous(), scale


dynamic_mx_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dynamic_mx_quant,
                            reference=dynamic_mx_quant_reference, metadata_check=True,
                            info=OpInfo(api="torch_npu"))
dynamic_mx_quant_op.forbid_autograd("npu_dynamic_mx_quant has no backward on the NPU")


def npu_dynamic_mx_quant(input, *, axis=-1, round_mode="rint", dst_type=296, block_size=32,
                         scale_alg=0, dst_type_max=0.0, max_low_bound=0.0):
    """MX quantization: one power-of-two scale (an e8m0 code) per ``block_size`` elements along
    ``axis``, the elements divided by it and cast to a float8 or float4 format.

    Formula (aclnnDynamicMxQuantV3; ``emax`` 2 for float4_e2m1, 0 for float4_e1m2, 8 for
    float8_e4m3fn, 15 for float8_e5m2; ``DTYPE_MAX`` 6, 1.75, 448, 57344)::

        scale_alg 0 (OCP):    shared_exp = floor(log2(max_i |V_i|)) - emax
        scale_alg 1 (float8): S = max(max_i |V_i|, max_low_bound) / DTYPE_MAX (float32),
                              shared_exp = exponent of S, rounded up unless S is a power of 2
        scale_alg 2 (e2m1):   dst_type_max 0 / 6 / 7: exponent of the bfloat16 block max,
                              rounded up past a mantissa threshold, minus 2; 6..12: as 1
                              with DTYPE_MAX = dst_type_max
        mxscale = 2^shared_exp (e8m0 code shared_exp + 127)
        P_i     = cast_to_dst_type(V_i / mxscale, round_mode)

    Parameters
    ----------
    input : Tensor
        float16, bfloat16 or float32; 1 to 7 dims; any strides.
    axis : int
        The quantized axis, in ``[-D, D - 1]`` (default -1).
    round_mode : {'rint', 'floor', 'round'}
        Element rounding: half to even, toward -inf, half away from zero.  float4 outputs take
        all three, float8 outputs only 'rint'.
    dst_type : int or dtype
        ``torch_npu.float4_e2m1fn_x2`` (296, default), ``torch_npu.float4_e1m2fn_x2`` (297),
        ``torch.float8_e5m2`` (23 / 291), ``torch.float8_e4m3fn`` (24 / 292).
    block_size : int
        A multiple of 32 in [32, 1024] (default 32); 32 for scale_alg 2 and float32 input.
    scale_alg : int, optional
        0 (default) for every format, 1 for float8, 2 for float4_e2m1.
    dst_type_max : float
        0.0 or 6.0 .. 12.0: ``DTYPE_MAX`` of scale_alg 2 (0 means 6).
    max_low_bound : float
        >= 0, nonzero only with scale_alg 1: the block maximum is raised to at least this.

    Returns
    -------
    (y, mxscale)
        ``y``: the elements, input's shape, float8_e4m3fn / float8_e5m2; for float4 uint8
        ``(..., n / 2)`` with two codes per byte along the last dim (element ``2i`` in the
        low nibble), whatever the axis.  ``mxscale``: uint8 e8m0 codes (``2^(code - 127)``,
        255 for a block with inf / NaN), the input's shape with the axis replaced by
        ``ceil(ceil(n / block_size) / 2)`` and a trailing dim of 2: block ``2i + j`` of a
        line at index ``i`` of the axis and ``j`` of the last dim (an odd block count is
        padded with code 0).  View it with ``.view(torch.float8_e8m0fnu)`` for the values.

    Constraints
    -----------
    Ascend 950 only (strict mode).  float4 outputs need an even last dim.

    Notes
    -----
    Bit-exact with the 950 kernels as far as their sources tell (see
    :mod:`npu_anywhere.ops.quant.mx`): under scale_alg 0 a block whose code clamps to 0 is
    written as zeros; elements are scaled by the exact power of two ``2^-shared_exp``, rounded
    once on the format's grid, saturated, NaN -> +0.  The float32 input rule "quantized axis
    of at least 32" is the aclnn doc's.

    Examples
    --------
    >>> x = torch.randn(4, 64, dtype=torch.bfloat16)
    >>> y, mxscale = npu_anywhere.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    >>> y.dtype, tuple(mxscale.shape)
    (torch.float8_e4m3fn, (4, 1, 2))
    """
    return dynamic_mx_quant_op(input, axis=axis, round_mode=round_mode, dst_type=dst_type,
                               block_size=block_size, scale_alg=scale_alg,
                               dst_type_max=dst_type_max, max_low_bound=max_low_bound)


TORCH_NPU_FUNCTIONS = {"npu_dynamic_mx_quant": npu_dynamic_mx_quant}
