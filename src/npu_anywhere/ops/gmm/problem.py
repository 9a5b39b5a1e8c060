"""npu_grouped_matmul's arguments checked and read as one problem (metadata only).

The call forms (seed 004 and op-plugin's newer page, ``docs/zh/custom_APIs/torch_npu/
torch_npu-npu_grouped_matmul.md``; shapes from op-plugin's meta registration)::

    group_type -1  split_item 0/1   x_i [.., k_i] (2-6 D) @ weight_i [k_i, n_i] -> y_i [.., n_i]
    group_type  0  split_item 2/3   x [m, k] (one tensor or a list stacked on m) with weight
                                    [E, k, n] or E tensors [k, n]             -> y [m, n]
    group_type  2  split_item 0-3   x [m, k] @ weight [k, n], k cut by group_list
                                    -> E tensors [m, n] (0/1) or y [E, m, n] (2/3)

Kinds: ``float`` (x and weight float), ``quant`` (int8 x and weight, int32 accumulation then
``scale`` / ``per_token_scale``), ``antiquant`` (float16/bfloat16 x, int8 or packed-int4 int32
weight dequantized with ``antiquant_scale`` / ``antiquant_offset``), ``a8w4`` / ``a4w4`` (int8
or packed-int4 x with a packed-int4 weight: :mod:`.lowbit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ... import checks, dtypes, targets
from ...targets import Product
from . import grouping, lowbit

OP = "npu_grouped_matmul"
MAX_LIST = 128                 # "列表最大长度为128"
MAX_GROUPS = 1024              # "group_list第1维最大支持1024"
INT4_PER_INT32 = 8
ACT_TYPES = {0: "none", 1: "relu", 2: "gelu_tanh", 4: "fast_gelu", 5: "silu"}

# Seed 004: A2 and Atlas inference (310P); the newer page adds A3.
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE})

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu)
# The bias dtype each float x takes (table 1: float16 -> float16, bfloat16/float32 -> float32).
_FLOAT_BIAS = {torch.float16: torch.float16, torch.bfloat16: torch.float32,
               torch.float32: torch.float32, torch.float64: torch.float64}


@dataclass(frozen=True)
class Problem:
    kind: str                  # "float", "quant", "antiquant", "a8w4" or "a4w4"
    group_type: int
    split_item: int
    single_weight: bool        # one [E, k, n] tensor rather than a list of [k, n]
    n_experts: int
    out_dtype: torch.dtype
    int4: bool                 # weight packs 8 int4 values per int32 along its last dim
    group_list_type: int       # as read (A8W4 reads any group_list as group sizes)


def _n_of(w: torch.Tensor) -> int:
    n = w.shape[-1]
    return n * INT4_PER_INT32 if w.dtype == torch.int32 else n


def _resolve_out_dtype(output_dtype) -> Optional[torch.dtype]:
    if output_dtype is None:
        return None
    value = dtypes.code_to_dtype(output_dtype)
    checks.expect(isinstance(value, torch.dtype), OP, "output_dtype",
                  "float16, bfloat16, float32, int8 or int32",
                  lambda: dtypes.name(output_dtype), ValueError)
    return value


def _expect_none(name: str, value) -> None:
    checks.expect(value is None, OP, name, "None (a reserved parameter)",
                  lambda: "a value", ValueError)


def _kind(x0: torch.Tensor, w0: torch.Tensor, antiquant_scale, product) -> str:
    floats = _FLOATS if product is not None else _FLOATS + (torch.float64,)
    for name, t in (("x", x0), ("weight", w0)):
        # op-plugin's Ascend 950 goldens (float8 / MX float4 x and weight) have no doc page.
        checks.expect(t.dtype not in _FLOAT8, OP, name,
                      "no float8 tensor (the Ascend 950 float8 / MX paths are not emulated)",
                      t.dtype, NotImplementedError)
    checks.expect_dtype(x0, floats + (torch.int8, torch.int32), OP, "x")
    low = lowbit.kind_of(x0, w0)
    if low is not None:
        return low
    if x0.dtype == torch.int32:            # packed int4 x pairs with a packed int4 weight
        checks.expect_dtype(w0, (torch.int32,), OP, "weight")
    if x0.dtype == torch.int8:
        checks.expect_dtype(w0, (torch.int8,), OP, "weight")
        return "quant"
    if w0.dtype in (torch.int8, torch.int32):
        checks.expect_dtype(x0, (torch.float16, torch.bfloat16), OP, "x")
        checks.expect(antiquant_scale is not None, OP, "antiquant_scale",
                      "a list of tensors when weight is int8 or packed int4 (int32)",
                      "None", ValueError)
        return "antiquant"
    checks.expect_dtype(w0, (x0.dtype,), OP, "weight")
    return "float"


def check(x, weight, bias=None, scale=None, offset=None, antiquant_scale=None,
          antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
          activation_quant_scale=None, activation_quant_offset=None, split_item=0,
          group_type=None, group_list_type=0, act_type=0, tuning_config=None,
          output_dtype=None, x_dtype=None, weight_dtype=None, scale_dtype=None,
          per_token_scale_dtype=None) -> Problem:
    """Every documented metadata rule; returns the problem the compute reads."""
    product = targets.expect_supported(OP, SUPPORTED)
    split_item = 0 if split_item is None else split_item
    group_list_type = 0 if group_list_type is None else group_list_type
    act_type = 0 if act_type is None else act_type
    checks.expect(split_item in (0, 1, 2, 3), OP, "split_item", "one of [0, 1, 2, 3]",
                  repr(split_item), ValueError)
    # The parentheses carry torch_npu's own sentences, which callers match on.
    checks.expect(group_type is not None, OP, "group_type",
                  "one of [-1, 0, 2] (Requires manual passing group_type: it has no default "
                  "with a tensor group_list)", "None", ValueError)
    checks.expect(group_type in (-1, 0, 2), OP, "group_type",
                  "one of [-1, 0, 2] (The group type must be -1, 0 or 2)", repr(group_type),
                  ValueError)
    checks.expect(group_list_type in (0, 1, 2), OP, "group_list_type", "one of [0, 1, 2]",
                  repr(group_list_type), ValueError)
    checks.expect(act_type in ACT_TYPES, OP, "act_type",
                  "one of [0, 1, 2, 4, 5] (none, relu, gelu_tanh, fast_gelu, silu)",
                  repr(act_type), ValueError)
    for name, value in (("activation_input", activation_input),
                        ("activation_quant_scale", activation_quant_scale),
                        ("activation_quant_offset", activation_quant_offset)):
        _expect_none(name, value)
    for name, value in (("x_dtype", x_dtype), ("weight_dtype", weight_dtype),
                        ("scale_dtype", scale_dtype),
                        ("per_token_scale_dtype", per_token_scale_dtype)):
        checks.expect(value is None, OP, name,
                      "None (hifloat8 / mxfp4 / float8_e8m0 inputs are not emulated)",
                      lambda value=value: dtypes.name(value), NotImplementedError)
    checks.expect(0 < len(x) <= MAX_LIST, OP, "x", f"a list of 1 to {MAX_LIST} tensors",
                  lambda: f"{len(x)} tensors", ValueError)
    checks.expect(0 < len(weight) <= MAX_LIST, OP, "weight",
                  f"a list of 1 to {MAX_LIST} tensors", lambda: f"{len(weight)} tensors",
                  ValueError)
    x0, w0 = x[0], weight[0]
    kind = _kind(x0, w0, antiquant_scale, product)
    if kind != "a8w4":                     # only A8W4's asymmetric form reads an offset
        _expect_none("offset", offset)
    if kind in lowbit.KINDS:
        checks.expect(group_type == 0 and split_item in (2, 3), OP, "group_type",
                      "0 with split_item 2 or 3 for int4-weight quantized calls (A8W4 / A4W4)",
                      lambda: f"group_type {group_type}, split_item {split_item}", ValueError)
    for i, t in enumerate(x):
        checks.expect(t.dtype == x0.dtype, OP, f"x[{i}]", f"the dtype of x[0] ({x0.dtype})",
                      t.dtype, TypeError)
        checks.expect(t.device == x0.device, OP, f"x[{i}]", f"x[0]'s device ({x0.device})",
                      t.device)
    for i, t in enumerate(weight):
        checks.expect(t.dtype == w0.dtype, OP, f"weight[{i}]",
                      f"the dtype of weight[0] ({w0.dtype})", t.dtype, TypeError)
        checks.expect(t.device == x0.device, OP, f"weight[{i}]",
                      f"x[0]'s device ({x0.device})", t.device)
    single_weight = len(weight) == 1 and w0.dim() == 3
    n_experts = w0.shape[0] if single_weight else len(weight)
    int4 = w0.dtype == torch.int32

    if group_type == -1:
        _check_ungrouped(x, weight, group_list, split_item)
    elif group_type == 0:
        _check_m_grouped(x, weight, group_list, group_list_type, split_item, single_weight,
                         n_experts, kind)
    else:
        _check_k_grouped(x, weight, group_list, group_list_type, kind)
    if kind in lowbit.KINDS:
        out_dtype = lowbit.check(kind, x, weight, bias, scale, offset, per_token_scale,
                                 antiquant_scale, antiquant_offset, act_type,
                                 _resolve_out_dtype(output_dtype), single_weight, product)
        # A8W4 "会认为group_list_type=1": its group_list always holds the group sizes.
        group_list_type = 1 if kind == "a8w4" else group_list_type
    else:
        out_dtype = _check_quant(kind, x0, w0, scale, per_token_scale, antiquant_scale,
                                 antiquant_offset, act_type, _resolve_out_dtype(output_dtype),
                                 single_weight, n_experts, weight, x)
        _check_bias(kind, x0, bias, weight, single_weight, n_experts, scale, per_token_scale,
                    out_dtype, product)
    if product == Product.ATLAS_INFERENCE:
        _check_310p(x0, w0, group_type, act_type, weight)
    return Problem(kind, group_type, split_item, single_weight, n_experts, out_dtype, int4,
                   group_list_type)


def _check_ungrouped(x, weight, group_list, split_item) -> None:
    checks.expect(split_item in (0, 1), OP, "split_item", "0 or 1 when group_type is -1",
                  split_item, ValueError)
    checks.expect(group_list is None, OP, "group_list", "None when group_type is -1",
                  "a tensor", ValueError)
    checks.expect(len(x) == len(weight), OP, "weight",
                  lambda: f"as many tensors as x ({len(x)}) when group_type is -1",
                  len(weight), ValueError)
    rank = x[0].dim()
    for i, (xi, wi) in enumerate(zip(x, weight)):
        checks.expect(2 <= xi.dim() <= 6 and xi.dim() == rank, OP, f"x[{i}]",
                      lambda: f"2 to 6 dims, as many as x[0] ({rank})",
                      lambda xi=xi: f"shape {tuple(xi.shape)}", ValueError)
        checks.expect(wi.dim() == 2, OP, f"weight[{i}]", "a 2-D tensor [k, n]",
                      lambda wi=wi: f"shape {tuple(wi.shape)}", ValueError)
        checks.expect(xi.shape[-1] == wi.shape[0], OP, f"weight[{i}]",
                      lambda xi=xi: f"k = {xi.shape[-1]} rows (x[{i}]'s last dim)",
                      lambda wi=wi: f"shape {tuple(wi.shape)}")


def _check_m_grouped(x, weight, group_list, group_list_type, split_item, single_weight,
                     n_experts, kind) -> None:
    checks.expect(split_item in (2, 3), OP, "split_item", "2 or 3 when group_type is 0",
                  split_item, ValueError)
    checks.expect(group_list_type != 2 or kind == "quant", OP, "group_list_type",
                  "0 or 1 unless x and weight are int8 (2 is for int8 m-axis grouping)",
                  group_list_type, ValueError)
    for i, xi in enumerate(x):
        checks.expect(xi.dim() == 2, OP, f"x[{i}]", "a 2-D tensor [m, k] when group_type is 0",
                      lambda xi=xi: f"shape {tuple(xi.shape)}", ValueError)
    if single_weight:
        ws = [weight[0]]
    else:
        ws = list(weight)
        for i, wi in enumerate(ws):
            checks.expect(wi.dim() == 2, OP, f"weight[{i}]",
                          "a 2-D tensor [k, n] (or a single 3-D [E, k, n] tensor)",
                          lambda wi=wi: f"shape {tuple(wi.shape)}", ValueError)
    k, n = ws[0].shape[-2], ws[0].shape[-1]
    # x as a list (one tensor per weight, "multi-multi-single") pairs x[i] with weight[i], so
    # each group has its own k; a single x shares one k with every weight.
    per_group_k = len(x) > 1 and not single_weight and len(x) == len(ws)
    for i, wi in enumerate(ws):
        checks.expect(wi.shape[-1] == n, OP, f"weight[{i}]",
                      lambda: f"the n of weight[0] ({n}): all groups share one output",
                      lambda wi=wi: f"shape {tuple(wi.shape)}")
        checks.expect(per_group_k or wi.shape[-2] == k, OP, f"weight[{i}]",
                      lambda: f"k = {k} rows", lambda wi=wi: f"shape {tuple(wi.shape)}")
    for i, xi in enumerate(x):
        kx = xi.shape[1] * (INT4_PER_INT32 if xi.dtype == torch.int32 else 1)
        ki = ws[i].shape[-2] if per_group_k else k
        checks.expect(kx == ki, OP, f"x[{i}]",
                      lambda ki=ki: f"k = {ki} columns (weight's k)",
                      lambda xi=xi: f"shape {tuple(xi.shape)}")
    checks.expect(n_experts <= MAX_GROUPS, OP, "weight", f"at most {MAX_GROUPS} groups",
                  n_experts, ValueError)
    if len(x) > 1:
        checks.expect(len(x) == n_experts, OP, "x",
                      lambda: f"one tensor per weight ({n_experts}) when x is a list",
                      lambda: f"{len(x)} tensors", ValueError)
    else:
        checks.expect(group_list is not None, OP, "group_list",
                      "a tensor when x is a single tensor and group_type is 0", "None",
                      ValueError)
    if group_list is not None:
        grouping.check_group_list_meta(OP, group_list, group_list_type, MAX_GROUPS)
        checks.expect_same_device({"x": x[0], "group_list": group_list}, OP)
        if group_list_type != 2:
            checks.expect(group_list.shape[0] == n_experts, OP, "group_list",
                          lambda: f"one entry per weight ({n_experts})",
                          lambda: f"{group_list.shape[0]} entries", ValueError)


def _check_k_grouped(x, weight, group_list, group_list_type, kind) -> None:
    checks.expect(kind == "float", OP, "group_type",
                  "-1 or 0 for quantized and antiquantized calls (2 is float only)", 2,
                  ValueError)
    checks.expect(len(x) == 1 and len(weight) == 1, OP, "x",
                  "a single x and a single weight when group_type is 2",
                  lambda: f"{len(x)} x and {len(weight)} weight tensors", ValueError)
    x0, w0 = x[0], weight[0]
    checks.expect(x0.dim() == 2 and w0.dim() == 2, OP, "x",
                  "2-D x [m, k] and weight [k, n] when group_type is 2",
                  lambda: f"shapes {tuple(x0.shape)} and {tuple(w0.shape)}", ValueError)
    checks.expect(x0.shape[1] == w0.shape[0], OP, "weight",
                  lambda: f"k = {x0.shape[1]} rows (x's last dim)",
                  lambda: f"shape {tuple(w0.shape)}")
    checks.expect(group_list is not None, OP, "group_list", "a tensor when group_type is 2",
                  "None", ValueError)
    checks.expect(group_list_type in (0, 1), OP, "group_list_type",
                  "0 or 1 when group_type is 2", group_list_type, ValueError)
    grouping.check_group_list_meta(OP, group_list, group_list_type, MAX_GROUPS)
    checks.expect_same_device({"x": x0, "group_list": group_list}, OP)


def _per_expert(name, tensors, single_weight, n_experts, lead_single, lead_list) -> None:
    """A per-group parameter list: one [E, *lead] tensor for a 3-D weight, else E tensors."""
    if single_weight:
        checks.expect(len(tensors) == 1 and tuple(tensors[0].shape) == (n_experts, *lead_single),
                      OP, name, lambda: f"one tensor of shape {(n_experts, *lead_single)}",
                      lambda: [tuple(t.shape) for t in tensors])
    else:
        checks.expect(len(tensors) == n_experts, OP, name,
                      lambda: f"{n_experts} tensors (one per weight)", lambda: len(tensors))
        for i, t in enumerate(tensors):
            want = lead_list[i]
            checks.expect(tuple(t.shape) == want, OP, f"{name}[{i}]",
                          lambda want=want: f"shape {want}", lambda t=t: tuple(t.shape))


def _ns(weight, single_weight):
    if single_weight:
        return [_n_of(weight[0])] * weight[0].shape[0]
    return [_n_of(w) for w in weight]


def _check_quant(kind, x0, w0, scale, per_token_scale, antiquant_scale, antiquant_offset,
                 act_type, out, single_weight, n_experts, weight, x) -> torch.dtype:
    ns = _ns(weight, single_weight)
    n_single = ns[0]
    if kind == "float":
        for name, value in (("scale", scale), ("per_token_scale", per_token_scale),
                            ("antiquant_scale", antiquant_scale),
                            ("antiquant_offset", antiquant_offset)):
            checks.expect(value is None, OP, name, "None for float x and weight", "a value",
                          ValueError)
        checks.expect(act_type == 0, OP, "act_type",
                      "0 unless per-token quantized (only that path fuses an activation)",
                      act_type, ValueError)
        checks.expect(out in (None, x0.dtype), OP, "output_dtype",
                      lambda: f"None or x's dtype ({x0.dtype}) for float inputs", out,
                      ValueError)
        return x0.dtype
    if kind == "antiquant":
        for name, value in (("scale", scale), ("per_token_scale", per_token_scale)):
            checks.expect(value is None, OP, name, "None for antiquant (int weight) calls",
                          "a value", ValueError)
        checks.expect(act_type == 0, OP, "act_type", "0 for antiquant calls", act_type,
                      ValueError)
        checks.expect(out in (None, x0.dtype), OP, "output_dtype",
                      lambda: f"None or x's dtype ({x0.dtype})", out, ValueError)
        _check_antiquant(x0, w0, antiquant_scale, antiquant_offset, single_weight,
                         n_experts, weight, ns)
        return x0.dtype
    # quant: int8 x and weight
    for name, value in (("antiquant_scale", antiquant_scale),
                        ("antiquant_offset", antiquant_offset)):
        checks.expect(value is None, OP, name, "None for int8 x", "a value", ValueError)
    if scale is None:
        checks.expect(out == torch.int32, OP, "scale",
                      "a list of tensors unless output_dtype is int32", "None", ValueError)
        checks.expect(per_token_scale is None and act_type == 0, OP, "per_token_scale",
                      "None (and act_type 0) without scale", "a value", ValueError)
        return torch.int32
    sdt = scale[0].dtype
    checks.expect_dtype(scale[0], (torch.int64, torch.bfloat16, torch.float32), OP, "scale")
    for i, t in enumerate(scale):
        checks.expect(t.dtype == sdt, OP, f"scale[{i}]", f"the dtype of scale[0] ({sdt})",
                      t.dtype, TypeError)
    _per_expert("scale", scale, single_weight, n_experts, (n_single,), [(n,) for n in ns])
    if per_token_scale is not None:
        checks.expect(sdt != torch.int64, OP, "scale",
                      "bfloat16 or float32 with per_token_scale", sdt, TypeError)
        checks.expect(len(per_token_scale) == len(x), OP, "per_token_scale",
                      lambda: f"one tensor per x ({len(x)})", len(per_token_scale), ValueError)
        for i, (t, xi) in enumerate(zip(per_token_scale, x)):
            checks.expect_dtype(t, (torch.float32,), OP, f"per_token_scale[{i}]")
            checks.expect(tuple(t.shape) == (xi.shape[0],), OP, f"per_token_scale[{i}]",
                          lambda xi=xi: f"shape ({xi.shape[0]},) (x's rows)",
                          lambda t=t: tuple(t.shape))
    else:
        checks.expect(act_type == 0, OP, "act_type",
                      "0 unless per_token_scale is given (only per-token quant fuses it)",
                      act_type, ValueError)
    if sdt == torch.int64:
        checks.expect(out in (None, torch.int8), OP, "output_dtype",
                      "None or int8 with an int64 (npu_trans_quant_param) scale", out,
                      ValueError)
        return torch.int8
    allowed = (torch.bfloat16, torch.float16)
    checks.expect(out in allowed, OP, "output_dtype",
                  "bfloat16 or float16 with a float scale", out, ValueError)
    return out


def _check_antiquant(x0, w0, antiquant_scale, antiquant_offset, single_weight, n_experts,
                     weight, ns) -> None:
    ks = [weight[0].shape[-2]] if single_weight else [w.shape[0] for w in weight]
    a0 = antiquant_scale[0]
    checks.expect_dtype(a0, (x0.dtype,), OP, "antiquant_scale")
    lead = a0.dim() - (1 if single_weight else 0)
    checks.expect(lead in (1, 2), OP, "antiquant_scale",
                  "per-channel [E, n] / [n_i] or per-group [E, G, n] / [G_i, n_i] shapes",
                  lambda: f"shape {tuple(a0.shape)}", ValueError)
    per_group = lead == 2
    checks.expect(not per_group or w0.dtype == torch.int32, OP, "antiquant_scale",
                  "per-channel shapes for int8 weight (per-group is for int4)",
                  lambda: f"shape {tuple(a0.shape)}", ValueError)
    if per_group:
        g = a0.shape[-2]
        gs = [g] * len(ks) if single_weight else [t.shape[0] for t in antiquant_scale]
        for i, (k, gi) in enumerate(zip(ks, gs)):
            checks.expect(k % gi == 0 and k // gi == ks[0] // gs[0], OP, "antiquant_scale",
                          "a group count G dividing every k, with one group length for all",
                          lambda k=k, gi=gi: f"G = {gi} for k = {k}", ValueError)
        single, per_list = (g, ns[0]), [(g, n) for n in ns]
    else:
        single, per_list = (ns[0],), [(n,) for n in ns]
    if not single_weight and per_group:
        per_list = [(t.shape[0], n) for t, n in zip(antiquant_scale, ns)]
    _per_expert("antiquant_scale", antiquant_scale, single_weight, n_experts, single,
                per_list)
    if antiquant_offset is not None:
        for i, t in enumerate(antiquant_offset):
            checks.expect_dtype(t, (x0.dtype,), OP, f"antiquant_offset[{i}]")
        _per_expert("antiquant_offset", antiquant_offset, single_weight, n_experts, single,
                    [tuple(t.shape) for t in antiquant_scale])
    if w0.dtype == torch.int32:
        for i, wi in enumerate(weight):
            checks.expect(wi.stride(-1) == 1, OP, f"weight[{i}]",
                          "a packed int4 weight with n innermost (transposed int4 weight is "
                          "not emulated)", lambda wi=wi: f"strides {wi.stride()}",
                          NotImplementedError)


def _check_bias(kind, x0, bias, weight, single_weight, n_experts, scale=None,
                per_token_scale=None, out_dtype=None, product=None) -> None:
    if bias is None:
        return
    want = (torch.int32,) if kind == "quant" else (_FLOAT_BIAS[x0.dtype],)
    if kind == "quant" and bias[0].dtype != torch.int32:
        want = _check_quant_float_bias(bias[0].dtype, scale, per_token_scale, out_dtype,
                                       product)
    for i, t in enumerate(bias):
        checks.expect_dtype(t, want, OP, f"bias[{i}]")
    ns = _ns(weight, single_weight)
    _per_expert("bias", bias, single_weight, n_experts, (ns[0],), [(n,) for n in ns])


def _check_quant_float_bias(dtype, scale, per_token_scale, out_dtype, product):
    """Formulas 2-2 / 3-2: an int8 call's float bias, added after dequantization.

    The Ascend 950 checker (``AclnnGroupedMatmul91095Checker::CheckInt8QuantDtype``) takes
    bfloat16 or float32 for bfloat16 output and float16 or float32 for float16 output; its
    epilogue (``gqmm_mix_online_dynamic.h``) adds it in float32 after the scales.  A2 / A3
    (``aclnn_grouped_matmul.cpp``, ``grouped_matmul_quant_mixcore.h``) take only bfloat16,
    and add it only on the per-token path (the per-channel epilogue has no bias step).
    """
    checks.expect(scale is not None and scale[0].dtype != torch.int64, OP, "bias",
                  "int32 unless scale is float32 / bfloat16 (a float bias with an int64 "
                  "scale or int32 output is not emulated)", dtype, NotImplementedError)
    if product in (Product.A2, Product.A3):
        checks.expect(dtype == torch.bfloat16, OP, "bias",
                      "int32 or bfloat16 for int8 x on A2 / A3", dtype, TypeError)
        checks.expect(per_token_scale is not None, OP, "bias",
                      "int32 without per_token_scale on A2 / A3 (their per-channel epilogue "
                      "adds no bfloat16 bias)", dtype, ValueError)
        return (torch.bfloat16,)
    return (out_dtype, torch.float32)


def _check_310p(x0, w0, group_type, act_type, weight) -> None:
    # Atlas inference: float16 only, m-axis grouping with a 3-D weight, n a multiple of 16.
    checks.expect_dtype(x0, (torch.float16,), f"{OP} (310P)", "x")
    checks.expect(group_type == 0, f"{OP} (310P)", "group_type", "0 on Atlas inference",
                  group_type, ValueError)
    checks.expect(len(weight) == 1 and w0.dim() == 3 and w0.shape[-1] % 16 == 0,
                  f"{OP} (310P)", "weight", "one 3-D tensor with n a multiple of 16",
                  lambda: f"{len(weight)} tensors, shape {tuple(w0.shape)}", ValueError)
