"""The routing ops chained as MoE layers use them, against the dense formula
``out[n] = sum_k w[n, k] * (x[n] @ W[e[n, k]])`` in float64, eager and under
``torch.compile(fullgraph=True)`` (static and dynamic shapes).

The expert matmul is ``npu_grouped_matmul`` (group_list counts, split_item=2, group_type=0);
the chains are the sglang / vllm-ascend one (gating -> init_routing_v2 -> gmm ->
finalize_routing) and the MindSpeed one (permute -> gmm -> unpermute).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

T, H, N_OUT, E, K = 12, 8, 6, 5, 2


def problem(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=gen)
    logits = torch.randn(T, E, generator=gen)
    w = torch.randn(E, H, N_OUT, generator=gen) / 3
    return x, logits, w


def dense(x, weights, ids, w):
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    for n in range(x.shape[0]):
        for j in range(ids.shape[1]):
            out[n] += float(weights[n, j]) * (x[n].double() @ w[int(ids[n, j])].double())
    return out


def expert_matmul(rows, counts, w):
    return na.npu_grouped_matmul([rows], [w], group_list=counts, split_item=2, group_type=0,
                                 group_list_type=1)[0]


def routed_layer(x, logits, w):
    weights, ids, _ = na.npu_moe_gating_top_k_softmax(logits, None, k=K)
    rows, row_idx, counts, _ = na.npu_moe_init_routing_v2(
        x, ids, active_num=T * K, expert_num=E, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, active_expert_range=[0, E])
    y = expert_matmul(rows, counts, w)
    # row_idx_type 0: row_idx[n * K + k] is the expert row of choice (n, k): row order, mode 2.
    return na.npu_moe_finalize_routing(y, None, None, None, weights, row_idx, ids, 2), \
        weights, ids


def v1_layer(x, logits, w):
    weights, ids, row_idx = na.npu_moe_gating_top_k_softmax(logits, None, k=K)
    rows, expanded_row_idx, expanded_ids = na.npu_moe_init_routing(x, row_idx, ids, T)
    cumsum = na.npu_moe_compute_expert_tokens(expanded_ids, E)
    y = na.npu_grouped_matmul([rows], [w], group_list=cumsum.long(), split_item=2, group_type=0,
                              group_list_type=0)[0]
    # v1's row_idx is column order (k * N + n): finalize mode 0.
    return na.npu_moe_finalize_routing(y, None, None, None, weights, expanded_row_idx, ids, 0), \
        weights, ids


def permute_layer(x, logits, w):
    weights, ids, _ = na.npu_moe_gating_top_k_softmax(logits, None, k=K)
    permuted, sorted_indices = na.npu_moe_token_permute(x, ids.to(torch.int32))
    counts = torch.bincount(ids.reshape(-1), minlength=E).long()
    y = expert_matmul(permuted, counts, w)
    return na.npu_moe_token_unpermute(y, sorted_indices, probs=weights), weights, ids


@pytest.mark.parametrize("layer", [routed_layer, v1_layer, permute_layer])
def test_chain_matches_dense(layer):
    x, logits, w = problem()
    out, weights, ids = layer(x, logits, w)
    assert_close_to_golden(out, dense(x, weights, ids, w))


def test_drop_pad_chain_equals_dense_when_nothing_is_dropped():
    x, logits, w = problem(1)
    weights, ids, _ = na.npu_moe_gating_top_k_softmax(logits, None, k=K)
    cap = T    # every expert can take every token: nothing dropped
    rows, row_idx, _, _ = na.npu_moe_init_routing_v2(
        x, ids, expert_num=E, drop_pad_mode=1, expert_capacity=cap, expert_tokens_num_type=1,
        expert_tokens_num_flag=True)
    y = torch.bmm(rows, w)                        # (E, C, N): one matmul per expert slot block
    out = na.npu_moe_finalize_routing(y, None, None, None, weights, row_idx, ids, 3)
    assert_close_to_golden(out, dense(x, weights, ids, w))


def _routing_only(x, logits, bias):
    weights, ids, _ = na.npu_moe_gating_top_k_softmax(logits, None, k=K)
    rows, row_idx, counts, _ = na.npu_moe_init_routing_v2(
        x, ids, active_num=x.shape[0] * K, expert_num=E, expert_tokens_num_type=1,
        expert_tokens_num_flag=True)
    y = rows * 2.0
    out = na.npu_moe_finalize_routing(y, x, None, bias, weights, row_idx, ids, 2)
    return out, counts


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(_routing_only, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    bias = torch.randn(E, H)
    for rows in (T, T + 3):
        x, logits = torch.randn(rows, H), torch.randn(rows, E)
        got = compiled(x, logits, bias)
        want = _routing_only(x, logits, bias)
        assert torch.equal(got[1], want[1])
        torch.testing.assert_close(got[0], want[0])
