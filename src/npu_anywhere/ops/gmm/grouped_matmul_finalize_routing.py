"""torch_npu.npu_grouped_matmul_finalize_routing: int8 grouped matmul, then the MoE combine.

Formula (seed 004; op-plugin golden ``test/test_custom_ops/
test_npu_grouped_matmul_finalize_routing.py``, ``supported_op_exec``)::

    mm[r]  = float32(x[r] @ weight[e(r)]) * scale[e(r)] * pertoken_scale[r]   (e(r): r's group)
    out[r] = mm[r] * logit[r]
    y      = zeros(output_bs or m, n);  y[row_index[r]] += out[r]        (scatter add)
    y[shared_input_offset : shared_input_offset + len(shared_input)]
          += shared_input_weight * float32(shared_input)

Rows past the groups (``sum(group_list) < m``) add nothing.  Output float32 (the only dtype
op-plugin's ``GroupedMatmulFinalizeRoutingKernelNpuOpApi.cpp`` accepts).  The a8w4 form (int4
weight, bias and offset) is in :mod:`.finalize_routing_a8w4`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import compute, finalize_routing_a8w4, grouping

OP = "npu_grouped_matmul_finalize_routing"
SCHEMA = ("npu_grouped_matmul_finalize_routing(Tensor x, Tensor w, Tensor group_list, *, "
          "Tensor? scale=None, Tensor? bias=None, Tensor? offset=None, "
          "Tensor? pertoken_scale=None, Tensor? shared_input=None, Tensor? logit=None, "
          "Tensor? row_index=None, ScalarType? dtype=None, float? shared_input_weight=1.0, "
          "int? shared_input_offset=0, int? output_bs=0, int? group_list_type=1, "
          "int[]? tuning_config=None, int? x_dtype=None, int? w_dtype=None, "
          "int? scale_dtype=None, int? pertoken_scale_dtype=None) -> Tensor")
_SUPPORTED = frozenset({Product.A2, Product.A3})
MAX_EXPERTS = 256


def check_finalize_routing(x, w, group_list, *, scale=None, bias=None, offset=None,
                           pertoken_scale=None, shared_input=None, logit=None, row_index=None,
                           dtype=None, shared_input_weight=1.0, shared_input_offset=0,
                           output_bs=0, group_list_type=1, tuning_config=None, x_dtype=None,
                           w_dtype=None, scale_dtype=None, pertoken_scale_dtype=None):
    product = targets.expect_supported(OP, _SUPPORTED)
    for name, value in (("x_dtype", x_dtype), ("w_dtype", w_dtype),
                        ("scale_dtype", scale_dtype),
                        ("pertoken_scale_dtype", pertoken_scale_dtype)):
        checks.expect(value is None, OP, name,
                      "None (hifloat8 / mxfp4 / float8_e8m0 inputs are not emulated)",
                      lambda value=value: dtypes.name(value), NotImplementedError)
    checks.expect_dtype(x, (torch.int8,), OP, "x")
    checks.expect(w.dtype in (torch.int8, torch.int32), OP, "w",
                  "int8, or int32 packing 8 int4 (a8w4)", lambda: dtypes.name(w.dtype),
                  TypeError)
    checks.expect_dim(x, 2, OP, "x")
    a8w4 = w.dtype == torch.int32
    m, k = x.shape
    if a8w4:
        finalize_routing_a8w4.check(OP, x, w, scale, bias, offset, product)
        e, n = w.shape[0], w.shape[2] * finalize_routing_a8w4.INT4_PER_WORD
    else:
        checks.expect_dim(w, 3, OP, "w")
        e, n = w.shape[0], w.shape[2]
        checks.expect(w.shape[1] == k, OP, "w", lambda: f"shape [e, {k}, n] (x's k)",
                      lambda: f"shape {tuple(w.shape)}")
    checks.expect(e <= MAX_EXPERTS, OP, "w", f"at most {MAX_EXPERTS} experts", e, ValueError)
    checks.expect(group_list_type in (0, 1), OP, "group_list_type",
                  "0 (cumsum) or 1 (counts)", repr(group_list_type), ValueError)
    grouping.check_group_list_meta(OP, group_list, group_list_type or 0, MAX_EXPERTS)
    checks.expect(group_list.shape[0] == e, OP, "group_list",
                  lambda: f"one entry per expert ({e})", lambda: group_list.shape[0],
                  ValueError)
    checks.expect(dtype in (None, torch.float32), OP, "dtype", "None or torch.float32",
                  repr(dtype), ValueError)
    if not a8w4:
        checks.expect(bias is None and offset is None, OP, "bias",
                      "None with int8 w (bias and offset belong to the a8w4 form)",
                      "a tensor", ValueError)
        checks.expect(scale is not None, OP, "scale", "a float32 [e, n] tensor", "None",
                      ValueError)
        checks.expect_dtype(scale, (torch.float32,), OP, "scale")
        checks.expect(tuple(scale.shape) == (e, n), OP, "scale", lambda: f"shape ({e}, {n})",
                      lambda: tuple(scale.shape))
    for name, t in (("pertoken_scale", pertoken_scale), ("logit", logit)):
        if t is not None:
            checks.expect_dtype(t, (torch.float32,), OP, name)
            checks.expect(tuple(t.shape) == (m,), OP, name, lambda: f"shape ({m},) (x's rows)",
                          lambda t=t: tuple(t.shape))
    rows = output_bs or m
    checks.expect(output_bs is None or output_bs >= 0, OP, "output_bs",
                  "a non-negative row count (0: x's rows)", output_bs, ValueError)
    if row_index is not None:
        checks.expect_dtype(row_index, (torch.int32, torch.int64), OP, "row_index")
        checks.expect(tuple(row_index.shape) == (m,), OP, "row_index",
                      lambda: f"shape ({m},) (x's rows)", lambda: tuple(row_index.shape))
    if shared_input is not None:
        checks.expect_dtype(shared_input, (torch.bfloat16,), OP, "shared_input")
        checks.expect_dim(shared_input, 2, OP, "shared_input")
        offset_ = shared_input_offset or 0
        checks.expect(shared_input.shape[1] == n and 0 <= offset_ and
                      offset_ + shared_input.shape[0] <= rows, OP, "shared_input",
                      lambda: f"[b, {n}] rows fitting in the {rows} output rows from "
                              f"shared_input_offset {offset_}",
                      lambda: f"shape {tuple(shared_input.shape)}")
    for name, t in (("group_list", group_list), ("w", w), ("scale", scale),
                    ("pertoken_scale", pertoken_scale), ("shared_input", shared_input),
                    ("logit", logit), ("row_index", row_index)):
        if t is not None:
            checks.expect(t.device == x.device, OP, name, f"x's device ({x.device})",
                          t.device)


def finalize_routing_reference(x, w, group_list, *, scale=None, bias=None, offset=None,
                               pertoken_scale=None, shared_input=None, logit=None,
                               row_index=None, dtype=None, shared_input_weight=1.0,
                               shared_input_offset=0, output_bs=0, group_list_type=1,
                               tuning_config=None, x_dtype=None, w_dtype=None,
                               scale_dtype=None, pertoken_scale_dtype=None):
    a8w4 = w.dtype == torch.int32
    m = x.shape[0]
    n = w.shape[2] * (finalize_routing_a8w4.INT4_PER_WORD if a8w4 else 1)
    rows = output_bs or m
    segs = grouping.segments(OP, group_list, group_list_type or 0, m, w.shape[0], "m")
    if row_index is not None and m:
        lo, hi = int(row_index.min()), int(row_index.max())
        checks.expect(lo >= 0 and hi < rows, OP, "row_index",
                      lambda: f"values in [0, {rows}) (the output rows)",
                      lambda: f"values in [{lo}, {hi}]", ValueError)
    if a8w4:
        return _combine_a8w4(x, w, segs, rows, n, scale, bias, offset, pertoken_scale, logit,
                             row_index, shared_input, shared_input_weight, shared_input_offset)
    mm = compute.quant_groups(x, segs, compute.Params([w], True), compute.Params(None, True),
                              compute.Params([scale], True), pertoken_scale, n,
                              torch.float32, 0)
    if logit is not None:
        mm = mm * logit.unsqueeze(-1)
    if row_index is None:
        y = mm if rows == m else torch.zeros(rows, n, dtype=torch.float32, device=x.device)
        if rows != m:
            take = min(rows, m)
            y[:take] = mm[:take]
    else:
        y = torch.zeros(rows, n, dtype=torch.float32, device=x.device)
        y.index_add_(0, row_index.to(torch.int64), mm)
    if shared_input is not None:
        start = shared_input_offset or 0
        weight = 1.0 if shared_input_weight is None else shared_input_weight
        y[start:start + shared_input.shape[0]] += weight * shared_input.to(torch.float32)
    return y


def _combine_a8w4(x, w, segs, rows, n, scale, bias, offset, pertoken_scale, logit, row_index,
                  shared_input, shared_input_weight, shared_input_offset):
    """The a8w4 kernel's order: shared rows written first, then each row atomically added."""
    mm = finalize_routing_a8w4.expert_rows(x, w, scale, bias, offset, pertoken_scale, logit,
                                           segs)
    y = torch.zeros(rows, n, dtype=torch.float32, device=x.device)
    if shared_input is not None:
        start = shared_input_offset or 0
        weight = 1.0 if shared_input_weight is None else shared_input_weight
        y[start:start + shared_input.shape[0]] = weight * shared_input.to(torch.float32)
    if row_index is None:
        take = min(rows, x.shape[0])
        y[:take] += mm[:take]
    else:
        y.index_add_(0, row_index.to(torch.int64), mm)
    return y


def _fake(x, w, group_list, *, output_bs=0, **kwargs):
    n = w.shape[2] * (finalize_routing_a8w4.INT4_PER_WORD if w.dtype == torch.int32 else 1)
    return x.new_empty((output_bs or x.shape[0], n), dtype=torch.float32)


finalize_routing_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_finalize_routing,
                            reference=finalize_routing_reference, fake=_fake,
                            info=OpInfo(api="torch_npu"))
finalize_routing_op.forbid_autograd(f"{OP} has no backward in torch_npu")


def npu_grouped_matmul_finalize_routing(x, weight=None, group_list=None, *, scale=None,
                                        bias=None, offset=None, pertoken_scale=None,
                                        shared_input=None, logit=None, row_index=None,
                                        dtype=None, shared_input_weight=1.0,
                                        shared_input_offset=0, output_bs=0,
                                        group_list_type=1, tuning_config=None, x_dtype=None,
                                        w_dtype=None, scale_dtype=None,
                                        pertoken_scale_dtype=None, **kwargs):
    """int8 grouped matmul with per-channel x per-token dequantization, then the MoE combine.

    Formula::

        mm[r] = float32(x[r] @ weight[e(r)]) * scale[e(r)] * pertoken_scale[r]
        y[row_index[r]] += mm[r] * logit[r]                  (y: zeros [output_bs or m, n])
        y[shared_input_offset : + b] += shared_input_weight * shared_input

    Parameters
    ----------
    x : Tensor
        int8 ``[m, k]``: the expanded (expert-sorted) token rows.
    weight : Tensor
        int8 ``[e, k, n]`` (``w=`` is accepted too, the yaml's name), or for a8w4 int32
        ``[e, k, n/8]`` packing 8 int4 along n (``npu_quantize(..., torch.quint4x2)``).
    group_list : Tensor
        int64 ``[e]``: rows per expert (group_list_type 1, the default) or their cumsum (0);
        the groups cover at most m rows.
    scale : Tensor
        float32 ``[e, n]`` per-channel dequantization scale; a8w4: int64 ``[e, 1, n]`` words
        with the float32 scale in the low 32 bits (``[e, G, n]``: G k-groups).
    bias, offset : Tensor, optional
        a8w4 only (None with int8 weight).  bias, required: float32 ``[e, n]``, the offline
        ``8 * sum_k(weight * scale)``; offset: float32 ``[e, 1, n]``, the asymmetric term
        added as ``rowsum(x) * offset``.  Steps: :mod:`.finalize_routing_a8w4`.
    pertoken_scale, logit : Tensor, optional
        float32 ``[m]``: per-row dequantization scale and routing weight.
    row_index : Tensor, optional
        int32/int64 ``[m]``: the output row each row is added into (values in
        ``[0, output_bs or m)``); without it row r goes to output row r.
    shared_input : Tensor, optional
        bfloat16 ``[b, n]``: a shared expert's output, added at ``shared_input_offset`` times
        ``shared_input_weight`` (default 1.0).
    dtype : torch.dtype, optional
        None or float32 (the only output dtype).
    output_bs : int, default 0
        Output rows (0: m).
    tuning_config : list of int, optional
        A tiling hint; ignored.

    Returns
    -------
    Tensor
        float32 ``[output_bs or m, n]``.

    Notes
    -----
    Strict mode: A2 and A3; a8w4 with k = 2048 and n = 7168 only (the doc's rule; any shape
    in default mode).  The hifloat8 / mxfp4 overrides are not emulated
    (NotImplementedError).  No autograd.
    """
    if kwargs:
        weight = accept_alias(OP, "weight", weight, "w", kwargs)
    return finalize_routing_op(
        x, weight, group_list, scale=scale, bias=bias, offset=offset,
        pertoken_scale=pertoken_scale, shared_input=shared_input, logit=logit,
        row_index=row_index, dtype=dtype, shared_input_weight=shared_input_weight,
        shared_input_offset=shared_input_offset, output_bs=output_bs,
        group_list_type=group_list_type, tuning_config=tuning_config, x_dtype=x_dtype,
        w_dtype=w_dtype, scale_dtype=scale_dtype, pertoken_scale_dtype=pertoken_scale_dtype)


TORCH_NPU_FUNCTIONS = {"npu_grouped_matmul_finalize_routing": npu_grouped_matmul_finalize_routing}
