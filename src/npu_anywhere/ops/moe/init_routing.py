"""torch_npu.npu_moe_init_routing (v1) and npu_moe_compute_expert_tokens.

init_routing formula (seed 004; op-plugin test/test_custom_ops/test_npu_moe_init_routing.py is
the golden followed)::

    expanded_expert_idx, sorted_row_idx = stable key-value sort(expert_idx.flat, row_idx.flat)
    expanded_row_idx[sorted_row_idx[i]] = i
    expanded_x[i] = x[sorted_row_idx[i] % NUM_ROWS]        for i < min(NUM_ROWS, active_num) * K

compute_expert_tokens (seed 004; golden test_npu_moe_compute_tokens.py, a binary search for the
last row of each expert)::

    expert_tokens[e] = #{i : sorted_expert_for_source_row[i] <= e}     e = 0 .. num_expert-1
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import expect_float, expect_int32_ids, inverse_permutation, stable_sort

OP = "npu_moe_init_routing"
SCHEMA = ("npu_moe_init_routing(Tensor x, Tensor row_idx, Tensor expert_idx, int active_num) "
          "-> (Tensor, Tensor, Tensor)")
TOKENS_OP = "npu_moe_compute_expert_tokens"
TOKENS_SCHEMA = ("npu_moe_compute_expert_tokens(Tensor sorted_expert_for_source_row, "
                 "int num_expert) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_MAX_X_ELEMENTS = 2 ** 24          # seed 004: "shape大小需要小于2^24"
_MAX_TOKENS_LEN = 2147483647


def check_init_routing(x, row_idx, expert_idx, active_num):
    op = OP
    expect_float(op, "x", x)
    checks.expect_dim(x, 2, op, "x")
    expect_int32_ids(op, "expert_idx", expert_idx)
    expect_int32_ids(op, "row_idx", row_idx)
    checks.expect(tuple(row_idx.shape) == tuple(expert_idx.shape), op, "row_idx",
                  lambda: f"the shape of expert_idx {tuple(expert_idx.shape)}",
                  lambda: f"shape {tuple(row_idx.shape)}", RuntimeError)
    checks.expect(expert_idx.shape[0] == x.shape[0], op, "expert_idx",
                  lambda: f"x.size(0) = {x.shape[0]} rows", lambda: f"{expert_idx.shape[0]} rows",
                  RuntimeError)
    checks.expect(isinstance(active_num, int) and active_num >= 0, op, "active_num",
                  ">= 0", repr(active_num), ValueError)
    checks.expect_same_device({"x": x, "row_idx": row_idx, "expert_idx": expert_idx}, op)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(x.numel() < _MAX_X_ELEMENTS, op, "x", "fewer than 2**24 elements",
                      lambda: f"{x.numel()}", ValueError)


def init_routing_reference(x, row_idx, expert_idx, active_num):
    rows, k = expert_idx.shape
    sorted_expert, perm = stable_sort(expert_idx.reshape(-1).to(torch.int64))
    sorted_row = row_idx.reshape(-1).to(torch.int64).index_select(0, perm)
    # expanded_row_idx is the inverse of sorted_row (row_idx holds a permutation of 0..N*K-1).
    expanded_row_idx = inverse_permutation(sorted_row).to(torch.int32)
    kept = min(rows, active_num) * k
    source = sorted_row[:kept] % rows if rows > 0 else sorted_row[:kept]
    expanded_x = x.index_select(0, source)
    return expanded_x, expanded_row_idx, sorted_expert.to(torch.int32)


def check_compute_expert_tokens(sorted_expert_for_source_row, num_expert):
    op = TOKENS_OP
    t = sorted_expert_for_source_row
    expect_int32_ids(op, "sorted_expert_for_source_row", t, dims=1)
    checks.expect(t.numel() < _MAX_TOKENS_LEN, op, "sorted_expert_for_source_row",
                  "fewer than 2147483647 elements", lambda: f"{t.numel()}", ValueError)
    checks.expect(isinstance(num_expert, int) and num_expert > 0, op, "num_expert", "> 0",
                  repr(num_expert), ValueError)
    targets.expect_supported(op, _SUPPORTED)


def compute_expert_tokens_reference(sorted_expert_for_source_row, num_expert):
    t = sorted_expert_for_source_row
    experts = torch.arange(num_expert, dtype=t.dtype, device=t.device)
    return torch.searchsorted(t.contiguous(), experts, right=True).to(torch.int32)


init_routing_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_init_routing,
                        reference=init_routing_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
init_routing_op.forbid_autograd("torch_npu defines no backward for it")
compute_expert_tokens_op = NpuOp(TOKENS_SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_compute_expert_tokens,
                                 reference=compute_expert_tokens_reference, metadata_check=True,
                                 info=OpInfo(api="torch_npu"))


def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
    """Sort the ``(NUM_ROWS, K)`` expert choices and gather the tokens in expert order.

    Formula (seed 004)::

        expanded_expert_idx, sorted_row_idx = keyValueSort(expert_idx, row_idx)   # stable
        expanded_row_idx[sorted_row_idx[i]] = i
        expanded_x[i] = x[sorted_row_idx[i] % NUM_ROWS]

    Parameters
    ----------
    x : Tensor
        ``(NUM_ROWS, H)`` float16, bfloat16 or float32.
    row_idx : Tensor
        int32 of ``expert_idx``'s shape: a permutation of ``0 .. NUM_ROWS*K-1``, usually
        ``npu_moe_gating_top_k_softmax``'s ``row_idx`` (``row_idx[n, k] = k * NUM_ROWS + n``).
    expert_idx : Tensor
        ``(NUM_ROWS, K)`` int32 expert ids.
    active_num : int
        ``>= 0``; ``expanded_x`` keeps ``min(NUM_ROWS, active_num) * K`` rows.

    Returns
    -------
    (expanded_x, expanded_row_idx, expanded_expert_idx) : ``(min(NUM_ROWS, active_num) * K, H)``
    in ``x``'s dtype, then two int32 ``(NUM_ROWS * K,)`` tensors.

    Constraints
    -----------
    Strict mode: A2 and A3; ``x`` fewer than ``2**24`` elements.

    Notes
    -----
    The sort is stable on the flattened ``expert_idx`` (ties by flat position ``n * K + k``), as
    op-plugin's golden (``np.argsort(kind="stable")``).  A ``row_idx`` that is not a permutation
    gives unspecified ``expanded_row_idx`` entries, as on the NPU.  Inference only.
    """
    return init_routing_op(x, row_idx, expert_idx, active_num)


def npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert):
    """For each expert ``e < num_expert``, one past the last row of ``e`` in the sorted ids.

    Formula (seed 004, a binary search per expert)::

        expert_tokens[e] = #{i : sorted_expert_for_source_row[i] <= e}

    ``sorted_expert_for_source_row``: 1-D int32, sorted ascending (e.g. init_routing's
    ``expanded_expert_idx``).  Returns an int32 ``(num_expert,)`` tensor: the cumulative token
    counts that ``npu_grouped_matmul(group_list_type=0)`` takes.  Strict mode: A2 and A3.
    """
    return compute_expert_tokens_op(sorted_expert_for_source_row, num_expert)


TORCH_NPU_FUNCTIONS = {
    OP: npu_moe_init_routing,
    TOKENS_OP: npu_moe_compute_expert_tokens,
}
