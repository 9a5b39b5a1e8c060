"""``npu_grouped_matmul.List``: the overload whose ``group_list`` is a list of ints.

op-plugin declares it beside the tensor form (``op_plugin_functions.yaml``)::

    npu_grouped_matmul.List(Tensor[] x, Tensor[] weight, *, ..., int[]? group_list=None, ...,
                            int? split_item=0, int? group_type=None, int? group_list_type=0,
                            int? act_type=0, ScalarType? output_dtype=None) -> Tensor[]

so ``torch.ops.npu.npu_grouped_matmul(x, w, group_list=[...])`` resolves to it.  Its kernel
(``GroupedMatmulKernelNpuOpApi.cpp``, the ``OptionalIntArrayRef group_list`` function, calling
the first ``aclnnGroupedMatmul``) knows no group type: ``group_list`` holds cumulative row
offsets of x, and ``split_item`` picks the scenario (seed 004, "group_list输入类型为List[int]时"):

* split_item 0/1, group_list given: one x, ``len(weight) == len(group_list)`` 2-D weights,
  one output ``[group_list[i] - group_list[i-1], n_i]`` per group ("单多多");
* split_item 0/1, no group_list: ``x_i @ weight_i`` per pair, x up to 6-D ("多多多");
* split_item 2/3: one output of all rows; one x needs group_list ending at its rows ("单多单"),
  several x may give one whose differences are their row counts ("多多单").

It is a composite over the tensor form (the same check, fake kernel and providers): the groups
become slices of x (split 0/1) or an int64 offsets tensor with ``group_type=0`` (split 2/3).
Rules of the list form, from the page: ``per_token_scale`` None; ``group_type``,
``group_list_type`` and ``act_type`` "仅支持传入None" -- accepted here also at the schema
defaults (0) and, for ``group_type``, at the value the split mode implies (-1 or 0), since the
kernel has no such parameter; int8 or float weights only (no packed int4), an int64 ``scale``;
offsets non-negative and non-decreasing (the kernel's own checks).  Strict mode: A2 and A3
(Atlas inference takes only a tensor group_list).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import NpuOp
from ...targets import Product
from .problem import OP

LIST_SCHEMA = (
    "npu_grouped_matmul.List(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, "
    "Tensor[]? scale=None, Tensor[]? offset=None, Tensor[]? antiquant_scale=None, "
    "Tensor[]? antiquant_offset=None, Tensor[]? per_token_scale=None, int[]? group_list=None, "
    "Tensor[]? activation_input=None, Tensor[]? activation_quant_scale=None, "
    "Tensor[]? activation_quant_offset=None, int? split_item=0, int? group_type=None, "
    "int? group_list_type=0, int? act_type=0, ScalarType? output_dtype=None) -> Tensor[]")

SUPPORTED = frozenset({Product.A2, Product.A3})


def _sizes(offsets) -> list[int]:
    return [int(b) - int(a) for a, b in zip([0, *offsets[:-1]], offsets)]


def check_grouped_matmul_list(x, weight, *, bias=None, scale=None, offset=None,
                              antiquant_scale=None, antiquant_offset=None, per_token_scale=None,
                              group_list=None, activation_input=None,
                              activation_quant_scale=None, activation_quant_offset=None,
                              split_item=0, group_type=None, group_list_type=0, act_type=0,
                              output_dtype=None) -> None:
    """The list form's own rules; the tensor form's check then sees the converted call."""
    targets.expect_supported(OP, SUPPORTED)
    split = 0 if split_item is None else split_item
    checks.expect(split in (0, 1, 2, 3), OP, "split_item", "one of [0, 1, 2, 3]",
                  repr(split_item), ValueError)
    implied = -1 if split in (0, 1) else 0
    checks.expect(group_type in (None, implied), OP, "group_type",
                  lambda: f"None with a list group_list (or {implied}, what split_item "
                          f"{split} implies)", repr(group_type), ValueError)
    for name, value in (("group_list_type", group_list_type), ("act_type", act_type)):
        checks.expect(value in (None, 0), OP, name, "None (or 0) with a list group_list",
                      repr(value), ValueError)
    checks.expect(per_token_scale is None, OP, "per_token_scale",
                  "None with a list group_list", lambda: "a list of tensors", ValueError)
    for i, w in enumerate(weight):
        checks.expect(w.dim() == 2, OP, f"weight[{i}]", "a 2-D tensor with a list group_list",
                      lambda w=w: f"shape {tuple(w.shape)}")
        checks.expect(w.dtype != torch.int32, OP, f"weight[{i}]",
                      "float or int8 with a list group_list (packed int4 takes a tensor "
                      "group_list)", lambda w=w: w.dtype, TypeError)
    for i, s in enumerate(scale or ()):
        checks.expect_dtype(s, (torch.int64,), OP, f"scale[{i}]")
    offsets = list(group_list or ())
    for i, value in enumerate(offsets):
        previous = offsets[i - 1] if i else 0
        checks.expect(value >= previous, OP, "group_list",
                      "non-negative, non-decreasing cumulative offsets",
                      lambda i=i, value=value, previous=previous:
                      f"{value} at index {i} after {previous}", ValueError)
    if not offsets:
        if split in (0, 1):
            checks.expect(len(x) == len(weight), OP, "x", lambda: f"one tensor per weight "
                          f"({len(weight)}) without a group_list", lambda: f"{len(x)} tensors")
        else:
            checks.expect(len(x) > 1, OP, "group_list", "a list of offsets when x is one "
                          "tensor and split_item is 2 or 3", "None", ValueError)
        return
    if split in (0, 1):
        checks.expect(len(x) == 1, OP, "x", "one tensor with a group_list and split_item 0 "
                      "or 1", lambda: f"{len(x)} tensors")
        checks.expect(len(weight) == len(offsets), OP, "weight",
                      lambda: f"one tensor per group_list entry ({len(offsets)})",
                      lambda: f"{len(weight)} tensors")
    if len(x) == 1:
        checks.expect(x[0].dim() == 2, OP, "x[0]", "a 2-D tensor with a group_list",
                      lambda: f"shape {tuple(x[0].shape)}")
        checks.expect(offsets[-1] == x[0].shape[0], OP, "group_list",
                      lambda: f"offsets ending at x's rows ({x[0].shape[0]})",
                      lambda: f"{offsets[-1]} last", ValueError)


def define_list_overload(tensor_op: NpuOp) -> NpuOp:
    """Define ``npu_grouped_matmul.List`` as a composite calling ``tensor_op``."""

    def composite(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
                  antiquant_offset=None, per_token_scale=None, group_list=None,
                  activation_input=None, activation_quant_scale=None,
                  activation_quant_offset=None, split_item=0, group_type=None,
                  group_list_type=0, act_type=0, output_dtype=None):
        check_grouped_matmul_list(
            x, weight, bias=bias, scale=scale, offset=offset, antiquant_scale=antiquant_scale,
            antiquant_offset=antiquant_offset, per_token_scale=per_token_scale,
            group_list=group_list, activation_input=activation_input,
            activation_quant_scale=activation_quant_scale,
            activation_quant_offset=activation_quant_offset, split_item=split_item,
            group_type=group_type, group_list_type=group_list_type, act_type=act_type,
            output_dtype=output_dtype)
        split = 0 if split_item is None else split_item
        offsets, tensor_list = list(group_list or ()), None
        if offsets and split in (0, 1):
            x = list(x[0].split(_sizes(offsets)))       # "单多多": the groups are slices of x
        elif offsets:
            tensor_list = torch.tensor(offsets, dtype=torch.int64, device=x[0].device)
        return tensor_op.overload(
            list(x), list(weight), bias=bias, scale=scale, offset=offset,
            antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
            group_list=tensor_list, activation_input=activation_input,
            activation_quant_scale=activation_quant_scale,
            activation_quant_offset=activation_quant_offset, split_item=split,
            group_type=-1 if split in (0, 1) else 0, group_list_type=0,
            output_dtype=output_dtype)

    return tensor_op.define_overload(LIST_SCHEMA, check=check_grouped_matmul_list,
                                     composite=composite)
