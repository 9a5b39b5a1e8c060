"""torch_npu.npu_dequant_swiglu_quant: dequantize, SwiGLU (or its clamped variant), quantize.

Formula (seed 004; op-plugin
``docs/zh/custom_APIs/torch_npu/torch_npu-npu_dequant_swiglu_quant.md``; hicann/ops-nn
``quant/dequant_swiglu_quant/docs/aclnnDequantSwigluQuantV2.md``)::

    d   = (x + bias_int32) * weight_scale[g] * activation_scale[r] (+ bias_float)
    act = swiglu(d)                          (swiglu_mode 0 / 1 / 2)
    static:  y = cast(act / quant_scale[g] + quant_offset[g]),  scale = 0
    dynamic: t = act * quant_scale[g];  scale = max|t| / DTYPE_MAX
             y = cast(t * (DTYPE_MAX / max|t|))        (float4: cast(t / scale))

Outputs int8, float8, hifloat8 or packed float4 (two codes per uint8); ``activate_dim`` may
name another dim to cut into halves (dynamic quantization along the last dim then).
Precision order and rounding: see :func:`npu_dequant_swiglu_quant`.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..activation.glu_core import clipped_glu_fp32, glu_halves, swiglu_fp32
from ..quant import core, mx

OP = "npu_dequant_swiglu_quant"
SCHEMA = ("npu_dequant_swiglu_quant(Tensor x, *, Tensor? weight_scale=None, "
          "Tensor? activation_scale=None, Tensor? bias=None, Tensor? quant_scale=None, "
          "Tensor? quant_offset=None, Tensor? group_index=None, bool activate_left=False, "
          "int quant_mode=0, int? dst_type=None, int? round_mode=None, int? activate_dim=None, "
          "int swiglu_mode=0, float clamp_limit=7.0, float glu_alpha=1.702, "
          "float glu_bias=1.0) -> (Tensor, Tensor)")

SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
ROUND_MODES = {0: "rint", 1: "round", 2: "floor", 3: "ceil", 4: "trunc"}
DST_FORMATS = ("int8", "float8_e5m2", "float8_e4m3fn", "hifloat8")
DST_SPELLED = ("torch.int8 (1)", "torch_npu.float8_e5m2 (291)", "torch_npu.float8_e4m3fn (292)",
               "torch_npu.hifloat8 (290)", "torch_npu.float4_e2m1 (296)",
               "torch_npu.float4_e1m2 (297)")
FLOAT4_CODES = {296: "float4_e2m1", 297: "float4_e1m2"}
GROUP_MAX_H = 10496
NLAST_MAX_W = 5120
FLOAT_X = (torch.float16, torch.bfloat16)
FLOAT_X_LOOSE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SCALE_LOOSE = (torch.float32, torch.float64)
QSCALE = (torch.float32, torch.float16, torch.bfloat16)


def parse_format(dst_type) -> core.QuantFormat | mx.MXFormat:
    """The output format: a :class:`core.QuantFormat`, or for the float4 codes 296 / 297 the
    :class:`mx.MXFormat` of :data:`mx.FLOAT4_FORMATS` (uint8 storage, two codes per byte)."""
    if isinstance(dst_type, int) and not isinstance(dst_type, bool) and dst_type in FLOAT4_CODES:
        return mx.FLOAT4_FORMATS[FLOAT4_CODES[dst_type]]
    return core.parse_dst_type(dst_type, op=OP, param="dst_type", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def _is_fp4(fmt) -> bool:
    return isinstance(fmt, mx.MXFormat)


def _dtype_max(fmt) -> float:
    """``DTYPE_MAX`` of dynamic quantization (the 950 kernels' ``scalarMaxNum_``)."""
    return fmt.max_value if _is_fp4(fmt) else core.max_value(fmt)


def activation_axis(x_dim: int, activate_dim) -> int:
    """The non-negative split dim (None: the last dim)."""
    return x_dim - 1 if activate_dim is None else activate_dim % x_dim


def _expect_rows(name, t, groups, width, what):
    """``t`` is ``[groups, width]`` or (one group) ``[width]``."""
    ok = (t.dim() == 2 and t.shape[0] == groups and t.shape[1] == width) or \
        (t.dim() == 1 and groups == 1 and t.shape[0] == width)
    checks.expect(ok, OP, name, lambda: f"shape [{groups}, {width}] ({what})",
                  lambda: tuple(t.shape))


def check_other_axis(x, axis, activate_dim, grouped, quant_mode, swiglu_mode, product):
    """Rules for an ``activate_dim`` other than the last dim of ``x`` (the 950's
    ``DequantSwigluQuantV35NlastTiling`` / ``op_kernel/arch35/dequant_swiglu_quant_nlast.h``;
    the reasons for the NotImplementedErrors are in :func:`npu_dequant_swiglu_quant`)."""
    checks.expect(x.shape[axis] % 2 == 0, OP, "x",
                  lambda: f"an even size at activate_dim {activate_dim}",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(not grouped, OP, "group_index",
                  "None when activate_dim is not the last dim of x", "a tensor", ValueError)
    if product is not None:
        checks.expect(product is Product.ASCEND_950, OP, "activate_dim",
                      lambda: f"the last dim of x on {product.value} (other dims: 950 only)",
                      activate_dim, ValueError)
        checks.expect(x.shape[-1] <= NLAST_MAX_W, OP, "x",
                      f"a last dim (the last dim of y) of at most {NLAST_MAX_W} when "
                      "activate_dim is not the last dim", x.shape[-1], ValueError)
    checks.expect(swiglu_mode == 0, OP, "swiglu_mode",
                  "0 when activate_dim is not the last dim (swiglu_mode 1 / 2 along another "
                  "dim are not emulated)", swiglu_mode, NotImplementedError)
    checks.expect(quant_mode == 1, OP, "quant_mode",
                  "1 (dynamic) when activate_dim is not the last dim (static quantization along "
                  "another dim is not emulated)", quant_mode, NotImplementedError)


def check_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None,
                               quant_scale=None, quant_offset=None, group_index=None,
                               activate_left=False, quant_mode=0, dst_type=None, round_mode=None,
                               activate_dim=None, swiglu_mode=0, clamp_limit=7.0, glu_alpha=1.702,
                               glu_bias=1.0):
    product = targets.expect_supported(OP, SUPPORTED)
    strict = product is not None
    fmt = parse_format(dst_type)
    checks.expect_one_of(quant_mode, (0, 1), OP, "quant_mode")
    checks.expect_one_of(swiglu_mode, (0, 1, 2), OP, "swiglu_mode")
    checks.expect(math.isfinite(clamp_limit) and clamp_limit > 0, OP, "clamp_limit",
                  "a positive finite number", clamp_limit, ValueError)
    checks.expect(math.isfinite(glu_alpha), OP, "glu_alpha", "a finite number", glu_alpha,
                  ValueError)
    checks.expect(math.isfinite(glu_bias), OP, "glu_bias", "a finite number", glu_bias,
                  ValueError)
    if round_mode is not None:
        checks.expect_one_of(round_mode, tuple(ROUND_MODES), OP, "round_mode")
    # aclnnDequantSwigluQuantV2.md and the 950 tiling (dequant_swiglu_quant_tiling_arch35.cpp):
    # "rint" only for int8 / float8 output, "round" only for hifloat8, all five for float4;
    # None means "rint" (op-plugin maps None to 0).  No product accepts anything else.
    if fmt.name == "hifloat8":
        checks.expect(round_mode == 1, OP, "round_mode", "1 (round) for hifloat8 output",
                      round_mode, ValueError)
    elif not _is_fp4(fmt):
        checks.expect(round_mode in (None, 0), OP, "round_mode",
                      "None or 0 (rint) for int8 and float8 output", round_mode, ValueError)
    is_int = x.dtype == torch.int32
    checks.expect_dtype(x, (torch.int32,) + (FLOAT_X if strict else FLOAT_X_LOOSE), OP, "x")
    checks.expect(x.dim() >= 2, OP, "x", "a tensor with at least 2 dims",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    if activate_dim is not None:
        checks.expect(-x.dim() <= activate_dim < x.dim(), OP, "activate_dim",
                      lambda: f"in [{-x.dim()}, {x.dim() - 1}]", activate_dim, ValueError)
    axis = activation_axis(x.dim(), activate_dim)
    last = axis == x.dim() - 1
    grouped = group_index is not None
    d = x.shape[-1]
    checks.expect(d != 0, OP, "x", "a non-empty last dim", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    if last:
        checks.expect(d % 2 == 0, OP, "x", "an even last dim", d, ValueError)
        h = width = d // 2                 # width: the last dim of y (and of quant_scale)
    else:
        check_other_axis(x, axis, activate_dim, grouped, quant_mode, swiglu_mode, product)
        h = width = d
    if _is_fp4(fmt):
        checks.expect(width % 2 == 0, OP, "x",
                      "a y last dim that is even for float4 output (two values per byte)",
                      lambda: f"y last dim {width} (x shape {tuple(x.shape)})", ValueError)
    groups = 1
    devices = {"x": x}
    if grouped:
        checks.expect_dtype(group_index, (torch.int64,) if strict else (torch.int64, torch.int32),
                            OP, "group_index")
        checks.expect_dim(group_index, 1, OP, "group_index")
        groups = group_index.shape[0]
        checks.expect(groups >= 1, OP, "group_index", "at least one group",
                      lambda: tuple(group_index.shape), ValueError)
        devices["group_index"] = group_index
    s_dtypes = (torch.float32,) if strict else SCALE_LOOSE
    if weight_scale is not None:
        checks.expect_dtype(weight_scale, s_dtypes, OP, "weight_scale")
        if is_int:
            _expect_rows("weight_scale", weight_scale, groups, d, "[groupNum, 2H]")
        devices["weight_scale"] = weight_scale
    if activation_scale is not None:
        checks.expect(is_int, OP, "activation_scale", "None when x is not int32",
                      "a tensor", ValueError)
        checks.expect_dtype(activation_scale, s_dtypes, OP, "activation_scale")
        tokens = math.prod(x.shape[:-1])
        lead = tuple(x.shape[:-1])
        ok = tuple(activation_scale.shape) in ((tokens,), (tokens, 1), lead, lead + (1,))
        checks.expect(ok, OP, "activation_scale",
                      lambda: f"shape [{tokens}] or [{tokens}, 1] (one per token)",
                      lambda: tuple(activation_scale.shape))
        devices["activation_scale"] = activation_scale
    if bias is not None:
        checks.expect(is_int, OP, "bias", "None when x is not int32", "a tensor", ValueError)
        b_dtypes = (torch.int32,) if (strict and product is not Product.ASCEND_950) else \
            (torch.int32, torch.float32, torch.float16, torch.bfloat16)
        checks.expect_dtype(bias, b_dtypes, OP, "bias")
        _expect_rows("bias", bias, groups, d, "[2H], or [groupNum, 2H] with group_index")
        devices["bias"] = bias
    if quant_scale is not None:
        checks.expect_dtype(quant_scale, QSCALE if strict else QSCALE + (torch.float64,), OP,
                            "quant_scale")
        if quant_mode == 0:
            if strict:
                checks.expect(quant_scale.dtype == torch.float32, OP, "quant_scale",
                              "float32 in static quantization", quant_scale.dtype, TypeError)
            ok = (quant_scale.dim() == 2 and tuple(quant_scale.shape) == (groups, h)) or \
                (quant_scale.dim() == 1 and quant_scale.shape[0] == groups)
            checks.expect(ok, OP, "quant_scale",
                          lambda: f"shape [{groups}, {h}] or [{groups}] (static quantization)",
                          lambda: tuple(quant_scale.shape))
        else:
            _expect_rows("quant_scale", quant_scale, groups, width,
                         "[groupNum, H]" if last else "the last dim of x")
        devices["quant_scale"] = quant_scale
    if quant_offset is not None and quant_mode == 0:
        checks.expect_dtype(quant_offset, QSCALE if strict else QSCALE + (torch.float64,), OP,
                            "quant_offset")
        ok = (quant_offset.dim() == 2 and tuple(quant_offset.shape) == (groups, h)) or \
            (quant_offset.dim() == 1 and quant_offset.shape[0] == groups)
        checks.expect(ok, OP, "quant_offset",
                      lambda: f"shape [{groups}, {h}] or [{groups}] (static quantization)",
                      lambda: tuple(quant_offset.shape))
        devices["quant_offset"] = quant_offset
    checks.expect_same_device(devices, OP)
    # Every product requires weight_scale for int32 x (seed 004; ops-nn
    # dequant_swiglu_quant_tiling_base.cpp checkWeightBiasActivate, "int32时 weight_scale为必选项";
    # the grouped DequantSwigluQuantDskTiling::CheckWeightScale; the 950's CheckInputWeightScale).
    if is_int:
        checks.expect(weight_scale is not None, OP, "weight_scale",
                      "a tensor when x is int32 (seed 004)", "None", ValueError)
    if strict:
        if grouped:
            checks.expect(quant_mode == 1, OP, "quant_mode",
                          "1 (dynamic) when group_index is given", quant_mode, ValueError)
            checks.expect(bias is None and quant_offset is None, OP, "bias",
                          "None (and quant_offset None) when group_index is given",
                          "a tensor", ValueError)
            checks.expect(h <= GROUP_MAX_H and h % 64 == 0, OP, "x",
                          f"H = x.shape[-1] / 2 at most {GROUP_MAX_H} and a multiple of 64 "
                          "with group_index", h, ValueError)
    if grouped and quant_mode == 0:
        # Static quantization needs quant_offset (aclnnDequantSwigluQuantV2.md: "静态量化中
        # quantOffset必须输入"; the grouped A2/A3 tiling's CheckForStaticQuant rejects a null one;
        # only the 950 tiling, dequant_swiglu_quant_tiling_arch35.cpp, would run without it).
        checks.expect(quant_offset is not None, OP, "quant_offset",
                      "a tensor in static quantization (quant_mode 0) with group_index", "None",
                      ValueError)
    if strict:
        if product is Product.ASCEND_950 and not is_int:
            # dequant_swiglu_quant_tiling_arch35.cpp CheckInputWeightScale: "weight_scale must
            # be None when x's datatype is in [bfloat16, float16]" (A2/A3 ignore it).
            checks.expect(weight_scale is None, OP, "weight_scale",
                          "None when x is float16 or bfloat16 on 950", "a tensor", ValueError)
        if product is not Product.ASCEND_950:
            checks.expect(fmt.name == "int8", OP, "dst_type",
                          lambda: f"torch.int8 on {product.value} (other outputs are 950 only)",
                          fmt.name, ValueError)


def _group_rows(m, group_index, device):
    """Group id of each of ``m`` rows (count mode) and a mask of rows inside a group."""
    ends = group_index.to(torch.int64).cumsum(0).contiguous()
    rows = torch.arange(m, device=device, dtype=torch.int64)
    gid = torch.searchsorted(ends, rows, right=True)
    return gid.clamp(max=ends.shape[0] - 1), gid < ends.shape[0]


def _per_row(t, gid, dtype, per_tensor=False):
    """``[G, width]`` or ``[width]`` parameter (``per_tensor``: ``[G]``, one value per group)
    -> what multiplies the ``(tokens, width)`` rows."""
    t = t.to(dtype)
    if t.dim() == 1:
        if not per_tensor:
            return t                                      # [width]: one group
        t = t.unsqueeze(-1)                               # [G] -> [G, 1]
    return t[0] if gid is None else t[gid]


def dequant_swiglu_quant_reference(x, *, weight_scale=None, activation_scale=None, bias=None,
                                   quant_scale=None, quant_offset=None, group_index=None,
                                   activate_left=False, quant_mode=0, dst_type=None,
                                   round_mode=None, activate_dim=None, swiglu_mode=0,
                                   clamp_limit=7.0, glu_alpha=1.702, glu_bias=1.0):
    fmt = parse_format(dst_type)
    mode = ROUND_MODES[0 if round_mode is None else round_mode]     # rint, or round (hifloat8)
    axis = activation_axis(x.dim(), activate_dim)
    out_shape = list(x.shape)
    out_shape[axis] //= 2
    d = x.shape[-1]
    loose64 = x.dtype == torch.float64 or any(
        t is not None and t.dtype == torch.float64
        for t in (weight_scale, activation_scale, quant_scale, quant_offset))
    cdt = torch.float64 if loose64 else torch.float32
    rows = x.reshape(-1, d)
    m = rows.shape[0]
    gid, inside = (None, None) if group_index is None else _group_rows(m, group_index, x.device)
    if x.dtype == torch.int32:
        if bias is not None and bias.dtype == torch.int32:
            rows = rows + _per_row(bias, gid, torch.int32)     # int32 add before the cast
        v = rows.to(cdt)
        if weight_scale is not None:
            v = v * _per_row(weight_scale, gid, cdt)
        if activation_scale is not None:
            v = v * activation_scale.reshape(m, 1).to(cdt)
        if bias is not None and bias.dtype != torch.int32:
            v = v + _per_row(bias, gid, cdt)
    else:
        v = rows.to(cdt)                    # float x: no dequantization (op-plugin golden)
    if axis != x.dim() - 1:                 # halves along another dim (swiglu_mode 0 only)
        act = swiglu_fp32(v.reshape(x.shape), axis, activate_left=bool(activate_left))
        act = act.reshape(-1, d)
    elif swiglu_mode == 0:
        act = swiglu_fp32(v, -1, activate_left=bool(activate_left))
    else:
        if swiglu_mode == 1:                # even / odd positions; activate_left has no effect
            gate, linear = glu_halves(v, -1, interleaved=True)
        else:                               # halves, activate_left picks the gate half
            first, second = glu_halves(v, -1)
            gate, linear = (first, second) if activate_left else (second, first)
        act = clipped_glu_fp32(gate, linear, alpha=glu_alpha, limit=clamp_limit, bias=glu_bias)
    fp4 = _is_fp4(fmt)
    if quant_mode == 0:
        t = act
        if quant_scale is not None:
            t = t / _per_row(quant_scale, gid, cdt, per_tensor=True)
        if quant_offset is not None:
            t = t + _per_row(quant_offset, gid, cdt, per_tensor=True)
        scale = torch.zeros(act.shape[0], dtype=torch.float32, device=x.device)
    else:
        t = act if quant_scale is None else act * _per_row(quant_scale, gid, cdt)
        amax = torch.linalg.vector_norm(t, ord=float("inf"), dim=-1, keepdim=True)
        top = _dtype_max(fmt)
        if fp4:                             # the 950 kernel: t / (max / DTYPE_MAX)
            t = t / (amax / top)
        else:
            t = t * (torch.full_like(amax, top) / amax)
        scale = (amax / top).squeeze(-1).to(torch.float32)
    if fp4:
        y = mx.cast_fp4(t, fmt, mode, via_bfloat16=True)
    else:
        y = core.cast_to(t, fmt, round_mode=mode)
    if inside is not None:
        y = torch.where(inside.unsqueeze(-1), y, torch.zeros_like(y))
        scale = torch.where(inside, scale, torch.zeros_like(scale))
    return y.reshape(*out_shape[:-1], y.shape[-1]), scale.reshape(out_shape[:-1])


dequant_swiglu_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dequant_swiglu_quant,
                                reference=dequant_swiglu_quant_reference, metadata_check=True,
                                info=OpInfo(api="torch_npu"))
dequant_swiglu_quant_op.forbid_autograd(
    "npu_dequant_swiglu_quant has no backward in op-plugin's derivatives.yaml (integer outputs)")


def npu_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None,
                             quant_scale=None, quant_offset=None, group_index=None,
                             activate_left=False, quant_mode=0, swiglu_mode=0, clamp_limit=7.0,
                             glu_alpha=1.702, glu_bias=1.0, dst_type=None, round_mode=None,
                             activate_dim=None):
    """Dequantize (int32 matmul output), SwiGLU or its clamped variant, then quantize.

    Formula (seed 004; op-plugin doc page; aclnnDequantSwigluQuant(V2))::

        d = float(x + bias) * weight_scale[g] * activation_scale[r]     (x int32; bias int32)
        d = d + bias                                                    (float bias, 950)
        d = float(x)                                                    (x float16 / bfloat16)
        swiglu_mode 0: act = swish(d[:, :H]) * d[:, H:]   (activate_left=True)
                             d[:, :H] * swish(d[:, H:])   (False, default)
        swiglu_mode 1: g = clamp(d[:, 0::2], max=L); l = clamp(d[:, 1::2], -L, L)
                       act = g * sigmoid(alpha * g) * (l + glu_bias)
        swiglu_mode 2: as 1 with the halves of mode 0 (activate_left picks g)
        quant_mode 0: y = cast(act / quant_scale[g] + quant_offset[g]);  scale = 0
        quant_mode 1: t = act * quant_scale[g];  scale = max|t| / DTYPE_MAX
                      y = cast(t * (DTYPE_MAX / max|t|))         (int8, float8, hifloat8)
                      y = cast(t / scale)                        (float4)

    ``g`` is the group of row ``r`` (``group_index`` holds token counts); ``DTYPE_MAX`` is 127
    for int8 (float8_e5m2 57344, float8_e4m3fn 448, hifloat8 32768, float4_e2m1 6,
    float4_e1m2 1.75); ``cast`` to int8 rounds half to even, saturates to [-128, 127] and maps
    NaN to 0.  With ``activate_dim`` another dim than the last, the halves are taken along that
    dim (``d.chunk(2, activate_dim)``) and the rest, max and scale included, runs along the last
    dim as above.

    Parameters
    ----------
    x : Tensor
        ``[TokensNum, 2H]`` (more leading dims are flattened into tokens), int32, float16 or
        bfloat16 (float32/float64 too outside strict mode).  Last dim even (the
        ``activate_dim`` dim even instead when that is another dim).
    weight_scale : Tensor, optional
        float32 ``[groupNum, 2H]`` (``[2H]`` accepted without groups; ``2H`` is the last dim of
        x).  Required for int32 x in strict mode (seed 004; op-plugin's newer page only
        recommends it: without it the int32 values are used as they are).  Accepted and
        ignored for float x.
    activation_scale : Tensor, optional
        float32, one per token: ``[TokensNum]`` or ``[TokensNum, 1]`` (or ``x.shape[:-1]``).
        int32 x only.
    bias : Tensor, optional
        int32 (added to x before the cast) or, on the 950, float32/float16/bfloat16 (added after
        the dequant multiplies); ``[2H]`` or ``[groupNum, 2H]``.  int32 x only.
    quant_scale : Tensor, optional
        float32/float16/bfloat16.  Dynamic: ``[groupNum, H]`` smooth scales (multiplied; with
        another ``activate_dim``: ``[x.shape[-1]]``, the last dim of y).  Static:
        ``[groupNum, H]`` or per tensor ``[groupNum]`` (divided; float32 in strict mode).
    quant_offset : Tensor, optional
        Static only (ignored in dynamic mode): quant_scale's shapes.
    group_index : Tensor, optional
        int64 ``[groupNum]`` (int32 accepted outside strict mode), tokens per group.  None
        when ``activate_dim`` is not the last dim (seed 004, aclnnDequantSwigluQuantV2.md).
    activate_left : bool
        swiglu_mode 0/2: True activates the first half (seed: ``swish(split[0]) * split[1]``).
    quant_mode : int
        0 static, 1 dynamic.
    swiglu_mode, clamp_limit, glu_alpha, glu_bias
        See the formula; clamp_limit must be positive and finite, glu_alpha/glu_bias finite.
    dst_type : int, optional
        op-plugin's 950 extra (aclnnDequantSwigluQuantV2's ``dstType``): int8 (1, default),
        float8_e5m2 (291), float8_e4m3fn (292) (half to even, saturating to +-57344 / +-448
        with NaN -> +0: the 950 kernel's ``CAST_FP32_TO_FP8`` is ``SatMode::SAT``), hifloat8
        (290, uint8 codes: half away from zero, saturating to +-32768, NaN -> 0),
        ``torch_npu.float4_e2m1`` (296) and ``torch_npu.float4_e1m2`` (297): uint8 bytes with
        two float4 codes each (element ``2i`` of the last dim in the low nibble, op-plugin's
        ``apply_tensor_without_format(..., Byte)`` with the last dim halved); a float4 code is
        the sign in bit 3 and, for e2m1, 0 0.5 1 1.5 2 3 4 6 as codes 0..7, for e1m2 the
        magnitude ``4 |v|`` (0, 0.25, ..., 1.75).  float4 values saturate to +-6 / +-1.75 and
        NaN gives +0 (see the notes for the rounding).
    round_mode : int, optional
        0 rint, 1 round, 2 floor, 3 ceil, 4 trunc (None means 0).  int8 and float8 output take
        only None / 0 and hifloat8 only 1; float4 output takes all five
        (aclnnDequantSwigluQuantV2.md, ``dequant_swiglu_quant_tiling_arch35.cpp``).
    activate_dim : int, optional
        The dim cut into halves, in ``[-x.dim(), x.dim() - 1]`` (None: the last dim).  Another
        dim than the last needs ``quant_mode=1``, ``swiglu_mode=0`` and no group_index.

    Returns
    -------
    (y, scale)
        ``y``: ``x.shape`` with the ``activate_dim`` dim halved (the last dim by default:
        ``x.shape[:-1] + (H,)``), int8 (or the float8 dtype; hifloat8: uint8; float4: uint8
        with the last dim halved once more).  ``scale``: float32, ``y.shape[:-1]`` (one per
        row of y along its last dim): ``max|t| / DTYPE_MAX`` in dynamic mode (the
        dequantization scale, unlike npu_swiglu_quant's multiplier), zeros in static mode.  An
        all-zero row gives scale 0 and y 0 (0 / 0 = NaN, which every cast maps to 0; a NaN
        row: scale NaN, y 0).  Rows past the groups' total are 0 (garbage on the NPU).

    Constraints
    -----------
    Products: A2, A3 (seed) and the 950 (aclnnDequantSwigluQuantV2).  Strict mode: float64 and
    float32 x rejected, weight_scale None for float x on the 950 (its tiling rejects one),
    group_index needs quant_mode 1, no bias /
    quant_offset, and H <= 10496 with H % 64 == 0; dst_type / round_mode other than the default,
    float bias and an ``activate_dim`` other than the last dim only on the 950 (A2/A3: int8,
    rint and ``activateDim`` -1 only, aclnnDequantSwigluQuantV2.md), and on the 950 with
    another ``activate_dim`` the last dim of y at most 5120 (same page; the table says "less
    than 5120", the constraints section "not more than").  Every product: float4 output needs
    an even last dim of y; group_index None with another ``activate_dim``; a non-empty last
    dim of x; int32 x needs weight_scale (``dequant_swiglu_quant_tiling_base.cpp``,
    ``checkWeightBiasActivate``, and the grouped / 950 tilings); static quantization with
    group_index needs quant_offset (aclnnDequantSwigluQuantV2.md).  group_index values
    (sum <= TokensNum) are not checked (data; the NPU reads out of bounds).

    Notes
    -----
    * Precision order and the split conventions follow op-plugin's golden (``test/test_custom_ops/
      test_npu_dequant_swiglu_quant.py``): int32 bias added in int32, then float32 multiplies by
      weight_scale and activation_scale, float bias added after; swiglu in float32; static mode
      divides by quant_scale then adds the offset; dynamic mode multiplies by quant_scale, then
      by ``DTYPE_MAX / max`` and returns ``max / DTYPE_MAX``; rounding by ``numpy.rint`` (half
      to even), clamp to [-128, 127].  float x is not dequantized (weight_scale ignored), as in
      the golden.
    * Dynamic mode follows that golden, ``y = cast(t * (DTYPE_MAX / max|t|))`` with the
      multiplier rounded once to float32 (no aclnn doc gives the formula: aclnnDequantSwigluQuant
      (V2).md and op-plugin's page only write ``Quant`` / ``dynamicquant``).  The kernels order
      the operations differently: the A2/A3 kernel (``quant/dequant_swiglu_quant/op_kernel/
      dequant_swiglu_quant_dynamic_base.hpp``) computes ``scale = max / 127`` as a float32
      scalar and multiplies by ``1 / scale``; the 950 kernel (``op_kernel/arch35/
      dequant_swiglu_quant.h``) divides ``t / scale`` with ``scale = max / DTYPE_MAX``.  The
      scale output is the same (``max / DTYPE_MAX``, one division) but ``y`` can differ from
      ours in the last float32 bit of the quotient, i.e. by 1 where ``t * DTYPE_MAX / max``
      lies within an ulp of a .5 tie (on 5 * 10^6 random normal values, 256 per row, the four
      orders -- ours, the golden's, the A2/A3 and the 950 kernels' -- disagree in 3 or 4
      elements; op-plugin's tests compare with a tolerance).  The row maximum itself is exact
      everywhere, so ``t = +-max`` quantizes to ``+-DTYPE_MAX`` on every path.  (The golden
      also evaluates ``127 / max`` as torch does, ``reciprocal(max) * 127``, and uses 127 for
      float outputs when quant_scale is given; we use one rounding and each format's
      ``DTYPE_MAX``, as the 950 kernel's ``scalarMaxNum_`` does.)
    * float4 output exists only on the 950, and op-plugin's golden has no float4 case (its
      ``transform_output`` returns nothing for 296 / 297), so float4 follows the 950 kernels
      (``op_kernel/arch35/dequant_swiglu_quant_common.h`` ``CastY``, ``dequant_swiglu_quant.h``,
      ``dequant_swiglu_quant_nlast.h``, ``dequant_swiglu_quant_dynamic_not_full_vf.h``): a
      per-row float32 scale with ``DTYPE_MAX`` 6 / 1.75 (not MX e8m0 blocks; op-plugin's
      golden ``MAX_VALUE_WITH_FLOAT4E2M1`` / ``...E1M2`` agree), the dynamic quotient
      ``t / scale`` (divided, as the kernel and the CANN TTK golden do), then two roundings:
      float32 -> bfloat16 (``CAST_FP32_TO_BF16``, half to even) and bfloat16 -> float4 with
      ``round_mode`` (``CAST_BF16_TO_FP4_*``), see :func:`mx.cast_fp4`.  So ``floor`` is
      applied to the bfloat16 value (``floor(2 - 2**-12)`` gives 2, not 1.5) and a float32
      value within half a bfloat16 ulp of a float4 tie rounds as the tie.  The CANN TTK golden
      (``tests/st/arch35/assets/golden.py``, hicann/ops-nn commit a73608a) instead rounds the
      float32 value once, half to even, with ``ml_dtypes``, whatever ``round_mode`` says; its
      kernel tests compare with a tolerance.  A zero result keeps its sign (``-0.1`` rounds to
      the code of -0, 8).
    * ``activate_dim`` other than the last dim follows the 950 kernel selected for it
      (``DequantSwigluQuantV35NlastTiling``, ``op_kernel/arch35/dequant_swiglu_quant_nlast.h``):
      x is viewed as ``[pre, 2 * cut, last]``, the two halves along the cut dim are dequantized
      with the same ``weight_scale`` / ``bias`` along the last dim and each row with its own
      activation scale, ``act = swish(A) * B`` with ``activate_left`` choosing ``A``, then
      ``quant_scale`` (length ``x.shape[-1]``) multiplies, and each row of the last dim gets
      ``scale = max / DTYPE_MAX`` and ``y = cast(t / scale)`` (we order the int8 / float8 /
      hifloat8 quotient as on the last dim, see above; output and scale shapes: op-plugin's
      ``npu_dequant_swiglu_quant_meta``).  Two combinations raise NotImplementedError because
      the sources contradict each other or say nothing: (1) ``quant_mode=0``:
      aclnnDequantSwigluQuantV2.md says another dim supports *only* static quantization, but
      that kernel has no static path (it ignores quant_mode and quant_offset, multiplies by
      quant_scale and quantizes dynamically) and every such case of the CANN kernel tests
      (``tests/st/arch35/ttk_kernel_dequant_swiglu_quant.csv``) is dynamic; we emulate the
      dynamic mode the kernel and the tests pin down. (2) ``swiglu_mode`` 1 / 2: that kernel
      only computes the standard swiglu (it ignores swiglu_mode), and no source says what the
      clamped variants mean along another dim.  (The CANN TTK golden moves the activation dim
      to the end and takes the max along it; that contradicts the kernel, the scale shape
      ``y.shape[:-1]`` the 950 tiling checks (``CheckOutputScale``) and the shapes of its own
      test cases.)
    * swiglu_mode 1 splits even/odd positions and ignores activate_left (golden and
      aclnnDequantSwigluQuantV2.md: ``x_glu`` the even indices); swiglu_mode 2 (op-plugin's
      page) uses the halves.  Built on glu_core (``swiglu_fp32``, ``clipped_glu_fp32``), whose
      activate_left convention is the same as this op's.
    * op-plugin's C++ wrapper (``op_plugin/ops/opapi/DequantSwigluQuantOpApi.cpp``) forces int8,
      rint and the last dim before the 950 and raises for quant_mode / swiglu_mode / clamp_limit
      / glu_alpha / glu_bias outside their ranges, as here.
    * No autograd.

    Examples
    --------
    >>> x = torch.randint(-10, 10, (8, 64), dtype=torch.int32)
    >>> y, scale = npu_anywhere.npu_dequant_swiglu_quant(
    ...     x, weight_scale=torch.rand(1, 64), activation_scale=torch.rand(8, 1), quant_mode=1)
    >>> y.shape, y.dtype, scale.shape
    (torch.Size([8, 32]), torch.int8, torch.Size([8]))
    >>> y, scale = npu_anywhere.npu_dequant_swiglu_quant(
    ...     torch.randn(4, 6, 16, dtype=torch.bfloat16), quant_mode=1, dst_type=296,
    ...     activate_dim=1)
    >>> y.shape, y.dtype, scale.shape
    (torch.Size([4, 3, 8]), torch.uint8, torch.Size([4, 3]))
    """
    return dequant_swiglu_quant_op(
        x, weight_scale=weight_scale, activation_scale=activation_scale, bias=bias,
        quant_scale=quant_scale, quant_offset=quant_offset, group_index=group_index,
        activate_left=activate_left, quant_mode=quant_mode, dst_type=dst_type,
        round_mode=round_mode, activate_dim=activate_dim, swiglu_mode=swiglu_mode,
        clamp_limit=clamp_limit, glu_alpha=glu_alpha, glu_bias=glu_bias)


TORCH_NPU_FUNCTIONS = {"npu_dequant_swiglu_quant": npu_dequant_swiglu_quant}
