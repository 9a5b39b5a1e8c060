"""torch_npu.npu_grouped_matmul_swiglu_quant and npu_grouped_matmul_swiglu_quant_v2.

Grouped int8 matmul, per-channel x per-token dequantization, SwiGLU, per-token int8 dynamic
quantization (DeepSeek's MoE up-projection); v2 also with a packed int4 weight (A8W4, A4W4:
:mod:`.swiglu_quant_int4`).  The arithmetic is in :mod:`.swiglu_quant_core`.
Schemas from op-plugin's ``op_plugin_functions.yaml``; output shapes from its meta
registrations (``[m, n/2]`` int8, ``[m]`` float32, and for v1 a reserved 0-D offset).
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import grouping, swiglu_quant_int4, swiglu_quant_mx
from .swiglu_quant_core import a8w8_dequant, int4_dequant, swiglu_quant

OP = "npu_grouped_matmul_swiglu_quant"
SCHEMA = ("npu_grouped_matmul_swiglu_quant(Tensor x, Tensor weight, Tensor group_list, "
          "Tensor weight_scale, Tensor x_scale, *, Tensor? bias=None, Tensor? offset=None) "
          "-> (Tensor, Tensor, Tensor)")
OP_V2 = "npu_grouped_matmul_swiglu_quant_v2"
SCHEMA_V2 = ("npu_grouped_matmul_swiglu_quant_v2(Tensor x, Tensor[] weight, "
             "Tensor[] weight_scale, Tensor x_scale, Tensor group_list, *, "
             "Tensor? smooth_scale=None, Tensor[]? weight_assist_matrix=None, Tensor? bias=None, "
             "int? dequant_mode=0, int? dequant_dtype=0, int? quant_mode=0, int? quant_dtype=1, "
             "int? group_list_type=0, int[]? tuning_config=None, int? x_dtype=None, "
             "int? weight_dtype=None, int? weight_scale_dtype=None, int? x_scale_dtype=None) "
             "-> (Tensor, Tensor)")
MAX_EXPERTS = 1024
_SUPPORTED = frozenset({Product.A2, Product.A3})
_SUPPORTED_V2 = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
# quant_dtype: the doc's enum 0 and the yaml default 1 (torch.int8's ScalarType code) are int8.
_INT8_CODES = (0, 1)


# The documented 5-D FRACTAL_NZ weight ``[e, n/32, k/16, 16, 32]``: 16 x 32 tiles of (k, n),
# the tiles ordered n-block major, so that ``W[e, k, n] = w5[e, n//32, k//16, k%16, n%32]``.
NZ_K0, NZ_N0 = 16, 32


def _logical_kn(w: torch.Tensor) -> tuple[int, int]:
    """(k, n) of a 3-D ``[e, k, n]`` or 5-D NZ weight."""
    if w.dim() == 5:
        return w.shape[2] * NZ_K0, w.shape[1] * NZ_N0
    return w.shape[1], w.shape[2]


def logical_weight(w: torch.Tensor) -> torch.Tensor:
    """The ``[e, k, n]`` values of a weight, undoing the 5-D NZ tiling (a 3-D one as it is).

    ``npu_format_cast(w, 29)`` keeps the logical 3-D shape here; a 5-D weight is the NZ
    storage itself (as code that builds it by hand, or views a cast tensor, passes it).
    """
    if w.dim() != 5:
        return w
    e, k, n = w.shape[0], *_logical_kn(w)
    return w.permute(0, 2, 3, 1, 4).reshape(e, k, n)


def _check_common(op, x, w, group_list, weight_scale, x_scale, scale_dtypes,
                  group_list_type) -> None:
    checks.expect_dtype(x, (torch.int8,), op, "x")
    checks.expect_dim(x, 2, op, "x")
    checks.expect(w.dtype == torch.int8, op, "weight",
                  "int8, or int32 packing 8 int4 (A8W4)", lambda: dtypes.name(w.dtype),
                  TypeError)
    checks.expect(w.dim() == 3 or (w.dim() == 5 and tuple(w.shape[3:]) == (NZ_K0, NZ_N0)),
                  op, "weight",
                  "a 3-D [e, k, n] tensor or its 5-D NZ form [e, n/32, k/16, 16, 32]",
                  lambda: f"shape {tuple(w.shape)}", ValueError)
    m, k = x.shape
    e, (kw, n) = w.shape[0], _logical_kn(w)
    checks.expect(kw == k, op, "weight", lambda: f"k = {k} (x's k)",
                  lambda: f"shape {tuple(w.shape)}")
    checks.expect(n % 2 == 0, op, "weight", "an even n (SwiGLU halves it)", n, ValueError)
    checks.expect(e <= MAX_EXPERTS, op, "weight", f"at most {MAX_EXPERTS} experts", e,
                  ValueError)
    grouping.check_group_list_meta(op, group_list, group_list_type, MAX_EXPERTS)
    # aclnnGroupedMatmulSwigluQuant: "groupList的长度应小于等于weight的专家数" (the first
    # len(group_list) experts take part; the doc's own example passes 2 entries for 16).
    checks.expect(1 <= group_list.shape[0] <= e, op, "group_list",
                  lambda: f"1 to {e} entries (at most one per expert)",
                  lambda: f"{group_list.shape[0]} entries", ValueError)
    checks.expect_dtype(weight_scale, scale_dtypes, op, "weight_scale")
    checks.expect(tuple(weight_scale.shape) == (e, n), op, "weight_scale",
                  lambda: f"shape ({e}, {n})", lambda: tuple(weight_scale.shape))
    checks.expect_dtype(x_scale, (torch.float32,), op, "x_scale")
    checks.expect(tuple(x_scale.shape) == (m,), op, "x_scale", lambda: f"shape ({m},)",
                  lambda: tuple(x_scale.shape))
    for name, t in (("weight", w), ("group_list", group_list),
                    ("weight_scale", weight_scale), ("x_scale", x_scale)):
        checks.expect(t.device == x.device, op, name, f"x's device ({x.device})", t.device)


def check_swiglu_quant(x, weight, group_list, weight_scale, x_scale, *, bias=None,
                       offset=None):
    targets.expect_supported(OP, _SUPPORTED)
    if weight.dtype == torch.int32:             # A8W4: packed int4 weight, bias the assist
        swiglu_quant_int4.check_v1(OP, x, weight, weight_scale, x_scale, bias)
        _check_group_list(OP, x, group_list, 0, weight.shape[0])
    else:
        _check_common(OP, x, weight, group_list, weight_scale, x_scale,
                      (torch.float32, torch.float16, torch.bfloat16), 0)
        checks.expect(bias is None, OP, "bias",
                      "None (a reserved input with an int8 weight)", "a tensor", ValueError)
    checks.expect(offset is None, OP, "offset", "None (a reserved input)", "a tensor",
                  ValueError)


def check_swiglu_quant_v2(x, weight, weight_scale, x_scale, group_list, *, smooth_scale=None,
                          weight_assist_matrix=None, bias=None, dequant_mode=0,
                          dequant_dtype=0, quant_mode=0, quant_dtype=1, group_list_type=0,
                          tuning_config=None, x_dtype=None, weight_dtype=None,
                          weight_scale_dtype=None, x_scale_dtype=None):
    op = OP_V2
    product = targets.expect_supported(op, _SUPPORTED_V2)
    glt = 0 if group_list_type is None else group_list_type
    checks.expect(glt in (0, 1), op, "group_list_type", "0 (cumsum) or 1 (counts)",
                  repr(group_list_type), ValueError)
    mx_form = swiglu_quant_mx.is_mx(x, weight_scale_dtype, x_scale_dtype, quant_mode,
                                    dequant_mode)
    # The doc's product tables: MX on Ascend 950 only; A8W4 / A4W4 on A2 / A3 only.
    checks.expect(not (mx_form and product in (Product.A2, Product.A3)), op, "x",
                  "int8 on A2 / A3 (the float8 / MX forms are Ascend 950's)", x.dtype,
                  ValueError)
    checks.expect(not (product == Product.ASCEND_950 and weight[0].dtype == torch.int32), op,
                  "weight", "int8 or float8 on Ascend 950 (A8W4 / A4W4 are A2 / A3 forms)",
                  weight[0].dtype, ValueError)
    if mx_form:
        e = swiglu_quant_mx.check(op, x, weight, weight_scale, x_scale, quant_dtype, quant_mode,
                                  dequant_mode, x_dtype, weight_dtype, weight_scale_dtype,
                                  x_scale_dtype)
        _check_group_list(op, x, group_list, glt, e)
        for name, value in (("smooth_scale", smooth_scale),
                            ("weight_assist_matrix", weight_assist_matrix)):
            checks.expect(value is None, op, name, "None in the MX form", "a value",
                          ValueError)
    else:
        _check_v2_integer(op, x, weight, weight_scale, x_scale, group_list, glt, smooth_scale,
                          weight_assist_matrix, dequant_mode, quant_mode, quant_dtype,
                          (x_dtype, weight_dtype, weight_scale_dtype, x_scale_dtype))
    checks.expect(bias is None, op, "bias", "None (only the default is supported)",
                  "a tensor", ValueError)
    # 0 is the A2/A3 doc's float32; op-plugin passes torch dtypes (torch.int8, the 950
    # default, and torch.float32 both mean a float32 dequantization here).
    dq = None if dequant_dtype in (None, 0) else dtypes.code_to_dtype(dequant_dtype)
    checks.expect(dq not in (torch.float16, torch.bfloat16), op, "dequant_dtype",
                  "0, torch.int8 or torch.float32 (a float16 / bfloat16 dequantization is not "
                  "emulated)", lambda: dtypes.name(dequant_dtype), NotImplementedError)
    checks.expect(dq in (None, torch.int8, torch.float32), op, "dequant_dtype",
                  "0 (float32), torch.int8, torch.float32, torch.float16 or torch.bfloat16",
                  lambda: dtypes.name(dequant_dtype), ValueError)


def _check_group_list(op, x, group_list, glt, e) -> None:
    checks.expect(e <= MAX_EXPERTS, op, "weight", f"at most {MAX_EXPERTS} experts", e,
                  ValueError)
    grouping.check_group_list_meta(op, group_list, glt, MAX_EXPERTS)
    # aclnnGroupedMatmulSwigluQuant: "groupList的长度应小于等于weight的专家数" (the first
    # len(group_list) experts take part; the doc's own example passes 2 entries for 16).
    checks.expect(1 <= group_list.shape[0] <= e, op, "group_list",
                  lambda: f"1 to {e} entries (at most one per expert)",
                  lambda: f"{group_list.shape[0]} entries", ValueError)
    checks.expect(group_list.device == x.device, op, "group_list",
                  f"x's device ({x.device})", group_list.device)


def _check_v2_integer(op, x, weight, weight_scale, x_scale, group_list, glt, smooth_scale,
                      weight_assist_matrix, dequant_mode, quant_mode, quant_dtype,
                      dtype_overrides) -> None:
    """The A2/A3 forms: A8W8 (int8 weight), A8W4 / A4W4 (packed int4 weight)."""
    for name, value in zip(("x_dtype", "weight_dtype", "weight_scale_dtype", "x_scale_dtype"),
                           dtype_overrides):
        checks.expect(value is None, op, name,
                      "None (the float4 / hifloat8 forms are not emulated)",
                      lambda value=value: dtypes.name(value), NotImplementedError)
    checks.expect(len(weight) == 1, op, "weight", "a list of one [e, k, n] tensor",
                  lambda: f"{len(weight)} tensors", ValueError)
    checks.expect(len(weight_scale) == 1, op, "weight_scale", "a list of one [e, n] tensor",
                  lambda: f"{len(weight_scale)} tensors", ValueError)
    if weight[0].dtype == torch.int32:          # A8W4 / A4W4: packed int4 weight
        swiglu_quant_int4.check(op, x, weight[0], weight_scale[0], x_scale, smooth_scale,
                                weight_assist_matrix, dequant_mode)
        _check_group_list(op, x, group_list, glt, weight[0].shape[0])
    else:
        _check_common(op, x, weight[0], group_list, weight_scale[0], x_scale,
                      (torch.float32,), glt)
        checks.expect(smooth_scale is None, op, "smooth_scale",
                      "None with int8 weight (it belongs to the A4W4 form)", "a tensor",
                      ValueError)
        checks.expect(weight_assist_matrix is None, op, "weight_assist_matrix",
                      "None with int8 weight (it belongs to the A8W4 form)", "a list",
                      ValueError)
        checks.expect(dequant_mode in (None, 0), op, "dequant_mode",
                      "0 (per-token x, per-channel weight) with int8 weight",
                      repr(dequant_mode), ValueError)
    checks.expect(quant_mode in (None, 0), op, "quant_mode", "0 (per-token)",
                  repr(quant_mode), ValueError)
    checks.expect(quant_dtype is None or quant_dtype in _INT8_CODES, op, "quant_dtype",
                  "int8 (0, or torch.int8's code 1)", lambda: dtypes.name(quant_dtype),
                  ValueError)


def _segments(op, group_list, group_list_type, x, weight):
    return grouping.segments(op, group_list, group_list_type, x.shape[0], weight.shape[0], "m")


def swiglu_quant_reference(x, weight, group_list, weight_scale, x_scale, *, bias=None,
                           offset=None):
    segs = _segments(OP, group_list, 0, x, weight)
    if weight.dtype == torch.int32:
        c = int4_dequant("a8w4", x, swiglu_quant_int4.weight_values(weight), weight_scale,
                         bias, x_scale, segs)
    else:
        c = a8w8_dequant(x, logical_weight(weight), weight_scale, x_scale, segs)
    q, scale = swiglu_quant(c)
    return q, scale, torch.zeros((), dtype=torch.float32, device=x.device)


def swiglu_quant_v2_reference(x, weight, weight_scale, x_scale, group_list, *,
                              smooth_scale=None, weight_assist_matrix=None, bias=None,
                              dequant_mode=0, dequant_dtype=0, quant_mode=0, quant_dtype=1,
                              group_list_type=0, tuning_config=None, x_dtype=None,
                              weight_dtype=None, weight_scale_dtype=None, x_scale_dtype=None):
    if swiglu_quant_mx.is_mx(x, weight_scale_dtype, x_scale_dtype, quant_mode, dequant_mode):
        e = weight[0].shape[0] if len(weight) == 1 and weight[0].dim() != 2 else len(weight)
        segs = grouping.segments(OP_V2, group_list, group_list_type or 0, x.shape[0], e, "m")
        return swiglu_quant_mx.compute(x, weight, weight_scale, x_scale, segs, quant_dtype)
    segs = _segments(OP_V2, group_list, group_list_type or 0, x, weight[0])
    w = weight[0]
    if w.dtype != torch.int32:
        c = a8w8_dequant(x, logical_weight(w), weight_scale[0], x_scale, segs)
        return swiglu_quant(c)
    kind = "a8w4" if x.dtype == torch.int8 else "a4w4"
    assist = None if weight_assist_matrix is None else weight_assist_matrix[0]
    c = int4_dequant(kind, x, swiglu_quant_int4.weight_values(w), weight_scale[0], assist,
                     x_scale, segs)
    if kind == "a8w4":
        return swiglu_quant(c)
    return swiglu_quant(c, smooth=smooth_scale, segments=segs, scale_then_reciprocal=False)


def _outputs(x, n):
    m = x.shape[0]
    return (x.new_empty((m, n // 2), dtype=torch.int8),
            x.new_empty((m,), dtype=torch.float32))


def _fake(x, weight, group_list, weight_scale, x_scale, **kwargs):
    n = (swiglu_quant_int4.logical_kn(weight)[1] if weight.dtype == torch.int32
         else _logical_kn(weight)[1])
    return (*_outputs(x, n), x.new_empty((), dtype=torch.float32))


def _fake_v2(x, weight, weight_scale, x_scale, group_list, *, weight_scale_dtype=None,
             x_scale_dtype=None, quant_mode=0, dequant_mode=0, quant_dtype=1, **kwargs):
    if swiglu_quant_mx.is_mx(x, weight_scale_dtype, x_scale_dtype, quant_mode, dequant_mode):
        return swiglu_quant_mx.fake_outputs(x, weight, quant_dtype)
    w = weight[0]
    n = swiglu_quant_int4.logical_kn(w)[1] if w.dtype == torch.int32 else _logical_kn(w)[1]
    return _outputs(x, n)


swiglu_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_swiglu_quant,
                        reference=swiglu_quant_reference, fake=_fake,
                        info=OpInfo(api="torch_npu"))
swiglu_quant_op.forbid_autograd(f"{OP} has no backward in torch_npu")
swiglu_quant_v2_op = NpuOp(SCHEMA_V2, namespace=TORCH_NPU_NS, check=check_swiglu_quant_v2,
                           reference=swiglu_quant_v2_reference, fake=_fake_v2,
                           info=OpInfo(api="torch_npu"))
swiglu_quant_v2_op.forbid_autograd(f"{OP_V2} has no backward in torch_npu")


def npu_grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, *,
                                    bias=None, offset=None):
    """Grouped int8 matmul + dequant + SwiGLU + per-token int8 quant (DeepSeek MoE).

    Formula (``e(r)``: the group of row r; ``group_list`` is a cumsum)::

        A8W8: c = float32(x @ weight[e]) * weight_scale[e] * x_scale[r]
        A8W4: x = 16 * hi + lo + 8;  c = (c_hi * 16 + c_lo + bias[e]) * x_scale[r]
        s = silu(c[:, :n/2]) * c[:, n/2:]
        output = int8(round(s * 127 / max|s|)),  output_scale = max|s| / 127   (per row)

    The A8W4 form (int4 weight) is not on the torch_npu page; its inputs follow
    ``aclnn_grouped_matmul_swiglu_quant.cpp`` (hicann/ops-transformer) and its steps the
    ``grouped_matmul_swiglu_quant_a8w4_msd_*.h`` kernels, shared with v2 (see
    ``ops/gmm/swiglu_quant_core.py``: float16 k-group sums of each half's int32 product times
    the fp19-read scale).

    Parameters
    ----------
    x : Tensor
        int8 ``[m, k]``.
    weight : Tensor
        int8 ``[e, k, n]`` (the NZ cast real code applies keeps this shape here), n even, or
        the 5-D NZ storage ``[e, n/32, k/16, 16, 32]`` (``W[e, k, n] =
        w5[e, n // 32, k // 16, k % 16, n % 32]``).  A8W4: int32 ``[e, k, n/8]`` packing 8
        int4 along n, or its NZ storage ``[e, n/64, k/16, 16, 8]``.
    group_list : Tensor
        int64 ``[e]``, cumulative row counts (at most m).
    weight_scale : Tensor
        ``[e, n]`` float32, float16 or bfloat16.  A8W4: int64 words with the float32 scale
        in the low 32 bits, ``[e, n]`` (per channel) or ``[e, G, n]`` (per k-group).
    x_scale : Tensor
        float32 ``[m]``.
    bias : Tensor, optional
        None with an int8 weight (reserved); required with an int4 weight: float32 ``[e, n]``,
        the assist matrix ``8 * sum_k(weight * scale)`` computed offline.
    offset : None
        Reserved input.

    Returns
    -------
    (output, output_scale, output_offset)
        int8 ``[m, n/2]``, float32 ``[m]`` and a reserved 0-D float32.  Rows past
        ``group_list[-1]`` are 0 (the NPU leaves them dirty; the doc says to cut them off).

    Notes
    -----
    Strict mode: A2 and A3.  No autograd.
    """
    return swiglu_quant_op(x, weight, group_list, weight_scale, x_scale, bias=bias,
                           offset=offset)


def npu_grouped_matmul_swiglu_quant_v2(x, weight, weight_scale, x_scale, group_list, *,
                                       smooth_scale=None, weight_assist_matrix=None,
                                       bias=None, dequant_mode=0, dequant_dtype=0,
                                       quant_mode=0, quant_dtype=1, group_list_type=0,
                                       tuning_config=None, x_dtype=None, weight_dtype=None,
                                       weight_scale_dtype=None, x_scale_dtype=None):
    """v2 of :func:`npu_grouped_matmul_swiglu_quant`: list arguments, int4-weight forms.

    Formulas (op-plugin's v2 page; steps and roundings in ``ops/gmm/swiglu_quant_core.py``)::

        A8W8: C = (x @ W[e]) * x_scale * w_scale[e]
        A8W4: x = 16 * hi + lo + 8;  C = (C_hi * 16 + C_lo + weight_assist_matrix[e]) * x_scale
        A4W4: C = (x @ W[e]) * x_scale * w_scale[e]
        S = silu(C[:, :n/2]) * C[:, n/2:]          (A4W4: S = S * smooth_scale[e])
        output = round(S / output_scale),  output_scale = max|S| / 127   (int8, per row)

    Parameters
    ----------
    x : Tensor
        int8 ``[m, k]`` (A8W8, A8W4) or int32 ``[m, k/8]`` packing 8 int4 each (A4W4).
    weight : list of one Tensor
        int8 ``[e, k, n]`` (or its 5-D NZ storage ``[e, n/32, k/16, 16, 32]``, as in v1), or
        int32 ``[e, k, n/8]`` packing 8 int4 along n (or its NZ storage
        ``[e, n/64, k/16, 16, 8]``) for A8W4 / A4W4.
    weight_scale : list of one Tensor
        float32 ``[e, n]`` (A8W8); int64 ``[e, n]`` or per k-group ``[e, G, n]`` words with
        the float32 scale in the low 32 bits (A8W4, A4W4; read as the fixpipe's fp19).
    x_scale : Tensor
        float32 ``[m]``.
    group_list : Tensor
        int64 ``[e]``: cumsum (group_list_type 0, the default) or counts (1).
    smooth_scale : Tensor, optional
        A4W4 only, required there: float32 ``[e, n/2]`` or ``[e]``.
    weight_assist_matrix : list of one Tensor, optional
        A8W4 only, required there: float32 ``[e, n]``, ``8 * sum_k(W * w_scale)`` (offline).
    bias : None
    dequant_mode : int, default 0
        0 per-channel weight scale; 1 per-group (A8W4 with a ``[e, G, n]`` scale).
    quant_mode : 0
    dequant_dtype : int or torch.dtype, default 0
        A float32 dequantization: 0 (the A2/A3 doc), torch.float32 or torch.int8 (the 950
        default).  float16 / bfloat16 (950) raise NotImplementedError.
    quant_dtype : int, default 1
        int8: 0 (the doc's enum) or 1 (torch.int8's code, the yaml default).
    tuning_config : list of int, optional
        Ignored.

    Returns
    -------
    (output, output_scale)
        int8 ``[m, n/2]`` and float32 ``[m]``; rows past the groups are 0.

    Notes
    -----
    Strict mode: 950, A2 and A3.  No autograd.  The Ascend 950 MXFP8 form (float8 x and
    weight, e8m0 ``weight_scale`` ``[e, ceil(k/64), n, 2]`` and ``x_scale`` ``[m, ceil(k/64),
    2]``, ``quant_mode=2``; output float8 ``[m, n/2]`` or packed float4 ``[m, n/4]`` with an
    e8m0 scale ``[m, ceil(n/2/64), 2]``) is in :mod:`.swiglu_quant_mx`; its float4 / hifloat8
    inputs and per-token float8 form raise NotImplementedError.
    """
    return swiglu_quant_v2_op(
        x, _as_list(weight), _as_list(weight_scale), x_scale, group_list, smooth_scale=smooth_scale,
        weight_assist_matrix=weight_assist_matrix, bias=bias, dequant_mode=dequant_mode,
        dequant_dtype=dequant_dtype, quant_mode=quant_mode, quant_dtype=quant_dtype,
        group_list_type=group_list_type, tuning_config=tuning_config, x_dtype=x_dtype,
        weight_dtype=weight_dtype, weight_scale_dtype=weight_scale_dtype,
        x_scale_dtype=x_scale_dtype)


def _as_list(value):
    return [value] if isinstance(value, torch.Tensor) else list(value)


TORCH_NPU_FUNCTIONS = {
    "npu_grouped_matmul_swiglu_quant": npu_grouped_matmul_swiglu_quant,
    "npu_grouped_matmul_swiglu_quant_v2": npu_grouped_matmul_swiglu_quant_v2,
}
