"""torch_npu.npu_moe_finalize_routing.

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_finalize_routing.md
for drop_pad_mode 1-3, its golden ``moe_finalize_routing_np`` and
test/test_custom_ops/test_npu_moe_finalize_routing_v2.py followed)::

    j(n, k) = expanded_src_to_dst_row[k * N + n]     drop_pad_mode 0, 1 (column order)
            = expanded_src_to_dst_row[n * K + k]     drop_pad_mode 2, 3 (row order)
    row(n, k) = expanded_permuted_rows[j(n, k)]  (rows flattened from (E, C, H) in modes 1, 3),
                0 where j(n, k) = -1 (a token dropped by the capacity)
    out[n] = skip1[n] + skip2[n] + sum_k scales[n, k] * (row(n, k) + bias[expert[n, k]])

Missing ``scales`` count as 1, missing ``bias``/``skip`` as 0.  As in the golden, a dropped
token still adds ``scales * bias``.  Computed in float32 (float64 kept): the K terms summed in
k order, then skip1 and skip2 added, rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float, expect_int32_ids

OP = "npu_moe_finalize_routing"
SCHEMA = ("npu_moe_finalize_routing(Tensor expanded_permuted_rows, Tensor? skip1, Tensor? skip2, "
          "Tensor? bias, Tensor? scales, Tensor expanded_src_to_dst_row, "
          "Tensor? export_for_source_row, int? drop_pad_mode=0, int? k=1) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def _rows_and_k(expanded_src_to_dst_row, scales, k):
    total = expanded_src_to_dst_row.shape[0]
    if scales is not None:
        rows = scales.shape[0]
        return rows, (total // rows if rows else scales.shape[1])
    k = 1 if k is None else k
    return total // k, k


def check_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales,
                           expanded_src_to_dst_row, export_for_source_row, drop_pad_mode=0, k=1):
    op = OP
    mode = 0 if drop_pad_mode is None else drop_pad_mode
    checks.expect_one_of(mode, (0, 1, 2, 3), op, "drop_pad_mode")
    rows_t = expanded_permuted_rows
    expect_float(op, "expanded_permuted_rows", rows_t)
    dims = 3 if mode in (1, 3) else 2
    checks.expect(rows_t.dim() == dims, op, "expanded_permuted_rows",
                  f"a {dims}-D tensor when drop_pad_mode is {mode}",
                  lambda: f"shape {tuple(rows_t.shape)}", ValueError)
    expect_int32_ids(op, "expanded_src_to_dst_row", expanded_src_to_dst_row, dims=1)
    checks.expect(k is None or k > 0, op, "k", "> 0", repr(k), ValueError)
    hidden = rows_t.shape[-1]
    if scales is not None:
        checks.expect_dim(scales, 2, op, "scales")
        checks.expect_dtype(scales, (rows_t.dtype, torch.float32), op, "scales")
        checks.expect(scales.shape[0] * scales.shape[1] == expanded_src_to_dst_row.shape[0], op,
                      "scales", lambda: f"NUM_ROWS * K = expanded_src_to_dst_row.size(0) = "
                      f"{expanded_src_to_dst_row.shape[0]} elements",
                      lambda: f"shape {tuple(scales.shape)}", RuntimeError)
    else:
        kk = 1 if k is None else k
        checks.expect(expanded_src_to_dst_row.shape[0] % kk == 0, op, "expanded_src_to_dst_row",
                      f"a length divisible by k = {kk}",
                      lambda: f"{expanded_src_to_dst_row.shape[0]}", RuntimeError)
    rows, kk = _rows_and_k(expanded_src_to_dst_row, scales, k)
    checks.expect(skip1 is not None or skip2 is None, op, "skip2", "None when skip1 is None",
                  "a tensor", ValueError)
    named = {"expanded_permuted_rows": rows_t}
    for name, t in (("skip1", skip1), ("skip2", skip2)):
        if t is not None:
            checks.expect(tuple(t.shape) == (rows, hidden), op, name,
                          f"shape (NUM_ROWS, H) = ({rows}, {hidden})",
                          lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)
            named[name] = t
    if bias is not None:
        checks.expect(bias.dim() == 2 and bias.shape[1] == hidden, op, "bias",
                      f"shape (E, H) with H = {hidden}", lambda: f"shape {tuple(bias.shape)}",
                      RuntimeError)
        named["bias"] = bias
        checks.expect(export_for_source_row is not None, op, "export_for_source_row",
                      "a tensor when bias is given", "None", ValueError)
    checks.expect_same_dtype(named, op)
    if export_for_source_row is not None:
        expect_int32_ids(op, "export_for_source_row", export_for_source_row)
        checks.expect(tuple(export_for_source_row.shape) == (rows, kk), op,
                      "export_for_source_row", f"shape (NUM_ROWS, K) = ({rows}, {kk})",
                      lambda: f"shape {tuple(export_for_source_row.shape)}", RuntimeError)
    targets.expect_supported(op, _SUPPORTED)


def finalize_routing_reference(expanded_permuted_rows, skip1, skip2, bias, scales,
                               expanded_src_to_dst_row, export_for_source_row, drop_pad_mode=0,
                               k=1):
    mode = 0 if drop_pad_mode is None else drop_pad_mode
    rows, kk = _rows_and_k(expanded_src_to_dst_row, scales, k)
    hidden = expanded_permuted_rows.shape[-1]
    ct = compute_dtype(expanded_permuted_rows.dtype)
    idx = expanded_src_to_dst_row.to(torch.int64)
    idx = idx.view(kk, rows).t() if mode in (0, 1) else idx.view(rows, kk)
    table = expanded_permuted_rows.reshape(-1, hidden)
    experts = export_for_source_row.to(torch.int64) if bias is not None else None
    weights = scales.to(ct) if scales is not None else None
    # One gathered (NUM_ROWS, H) slice per k, accumulated in k order: no (NUM_ROWS, K, H)
    # temporary, and the loop the compiled provider fuses into a single pass over the rows.
    total = None
    for j in range(kk):
        col = idx[:, j]
        term = table.index_select(0, col.clamp(min=0)).to(ct)
        if mode in (1, 3):
            term = torch.where((col >= 0).unsqueeze(-1), term, 0)
        if experts is not None:
            term = term + bias.index_select(0, experts[:, j]).to(ct)
        if weights is not None:
            term = term * weights[:, j:j + 1]
        total = term if total is None else total + term
    out = total if total is not None else expanded_permuted_rows.new_zeros(rows, hidden, dtype=ct)
    if skip1 is not None:
        out = out + skip1.to(ct)
    if skip2 is not None:
        out = out + skip2.to(ct)
    return out.to(expanded_permuted_rows.dtype)


finalize_routing_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_finalize_routing,
                            reference=finalize_routing_reference, metadata_check=True,
                            info=OpInfo(api="torch_npu"))
finalize_routing_op.forbid_autograd("torch_npu defines no backward for it")


def _finalize_key(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                  export_for_source_row, drop_pad_mode=0, k=1):
    rows, kk = _rows_and_k(expanded_src_to_dst_row, scales, k)
    return ("finalize", drop_pad_mode or 0, expanded_permuted_rows.dtype,
            None if scales is None else scales.dtype, skip1 is not None, skip2 is not None,
            bias is not None, kk, expanded_permuted_rows.shape[-1],
            expanded_permuted_rows.device.type)


# The reference's k loop fused into one pass: each output row reads its K source rows once
# (the eager loop makes ~5 passes over (NUM_ROWS, H) per k).
compiled.register(finalize_routing_op, key=_finalize_key)


def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales,
                             expanded_src_to_dst_row, export_for_source_row, drop_pad_mode=0,
                             k=1):
    """Combine the experts' outputs back into token order, weighted, plus residuals.

    Formula (seed 004; drop modes from op-plugin's newer doc)::

        out[n] = skip1[n] + skip2[n]
                 + sum_k scales[n, k] * (expanded_permuted_rows[j(n, k)] + bias[expert[n, k]])
        j(n, k) = expanded_src_to_dst_row[k * N + n]   (drop_pad_mode 0, 1: column order)
                = expanded_src_to_dst_row[n * K + k]   (drop_pad_mode 2, 3: row order)

    Parameters
    ----------
    expanded_permuted_rows : Tensor
        ``(NUM_ROWS * K, H)`` (modes 0, 2) or ``(E, C, H)`` (modes 1, 3; index ``-1`` = dropped),
        float16, bfloat16 or float32.
    skip1, skip2 : Tensor, optional
        ``(NUM_ROWS, H)``, ``expanded_permuted_rows``'s dtype; skip2 needs skip1.
    bias : Tensor, optional
        ``(E, H)``; needs ``export_for_source_row``.
    scales : Tensor, optional
        ``(NUM_ROWS, K)`` (the dtype of the rows, or float32); None counts as 1.
    expanded_src_to_dst_row : Tensor
        ``(NUM_ROWS * K,)`` int32, e.g. init_routing's ``expanded_row_idx``.
    export_for_source_row : Tensor, optional
        ``(NUM_ROWS, K)`` int32 expert ids (for ``bias``).
    drop_pad_mode : {0, 1, 2, 3}
    k : int, default 1
        K when ``scales`` is None (op-plugin's schema; NUM_ROWS = len(index) // k).

    Returns
    -------
    Tensor ``(NUM_ROWS, H)`` in ``expanded_permuted_rows``'s dtype (float32 sum, one rounding).

    Notes
    -----
    As op-plugin's golden, a dropped token (index -1) still adds ``scales * bias``.  Strict
    mode: A2 and A3.  Inference only.
    """
    return finalize_routing_op(expanded_permuted_rows, skip1, skip2, bias, scales,
                               expanded_src_to_dst_row, export_for_source_row, drop_pad_mode, k)


TORCH_NPU_FUNCTIONS = {OP: npu_moe_finalize_routing}
