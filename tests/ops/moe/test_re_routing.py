"""npu_moe_re_routing against the doc's formula, written as plain Python loops: blocks of
``expert_token_num_per_rank[i, j]`` tokens leave rank-major order (rank i, expert j) and land
in expert-major order (expert j, rank i); the gather index names each row's source."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def golden(tokens, counts, scales=None):
    c = counts.tolist()
    ranks, experts = len(c), len(c[0])
    src_start, pos = {}, 0
    for i in range(ranks):
        for j in range(experts):
            src_start[i, j] = pos
            pos += c[i][j]
    order = [src_start[i, j] + r for j in range(experts) for i in range(ranks)
             for r in range(c[i][j])]
    rows = [tokens[s] for s in order]
    out_scales = (torch.ones(len(order)) if scales is None
                  else torch.stack([scales[s] for s in order]))
    per_expert = [sum(c[i][j] for i in range(ranks)) for j in range(experts)]
    return torch.stack(rows), out_scales, order, per_expert


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("count_dtype", [torch.int32, torch.int64])
def test_matches_the_doc_formula(dtype, count_dtype):
    gen = torch.Generator().manual_seed(0)
    # 3 ranks x 4 experts with empty blocks, an empty expert and a rank sending nothing to it.
    counts = torch.tensor([[2, 0, 3, 1], [0, 0, 4, 2], [1, 0, 0, 5]], dtype=count_dtype)
    rows = int(counts.sum())
    tokens = (torch.randn(rows, 5, generator=gen) * 20).to(dtype)
    scales = torch.rand(rows, generator=gen)
    out, out_scales, idx, per_expert = na.npu_moe_re_routing(tokens, counts,
                                                             per_token_scales=scales)
    want, want_scales, want_idx, want_counts = golden(tokens, counts, scales)
    assert out.dtype == dtype and torch.equal(out, want)
    assert torch.equal(out_scales, want_scales)
    assert idx.dtype == torch.int32 and idx.tolist() == want_idx
    assert per_expert.dtype == count_dtype and per_expert.tolist() == want_counts


def test_without_scales_and_non_contiguous_tokens():
    counts = torch.tensor([[1, 2], [3, 0]])
    wide = torch.arange(6 * 8, dtype=torch.float32).view(6, 8).to(torch.bfloat16)
    tokens = wide[:, ::2]
    out, out_scales, idx, per_expert = na.npu_moe_re_routing(tokens, counts)
    want, _, want_idx, want_counts = golden(tokens.contiguous(), counts)
    assert torch.equal(out, want) and idx.tolist() == want_idx == [0, 3, 4, 5, 1, 2]
    assert torch.equal(out_scales, torch.ones(6)) and per_expert.tolist() == want_counts


def test_bad_inputs():
    tokens = torch.zeros(4, 8, dtype=torch.float16)
    counts = torch.tensor([[2, 2]])
    f = na.npu_moe_re_routing
    with pytest.raises(TypeError, match="npu_moe_re_routing: expected tokens dtype in"):
        f(tokens.double(), counts)
    with pytest.raises(ValueError, match="npu_moe_re_routing: expected idx_type 0"):
        f(tokens, counts, idx_type=1)
    with pytest.raises(ValueError, match="npu_moe_re_routing: expected expert_token_num_type 1"):
        f(tokens, counts, expert_token_num_type=0)
    with pytest.raises(RuntimeError, match="npu_moe_re_routing: expected per_token_scales shape"):
        torch.ops.npu.npu_moe_re_routing(tokens, counts, per_token_scales=torch.ones(3))
    with pytest.raises(TypeError, match="npu_moe_re_routing: expected expert_token_num_per_rank "
                                        "dtype in"):
        f(tokens, counts.float())
    with na.strict("A2"):
        with pytest.raises(TypeError, match="npu_moe_re_routing: expected tokens dtype in"):
            f(tokens.float(), counts)


def test_byte_tokens_move_unchanged():
    # Ascend 950: hifloat8 / float4 tokens as uint8 bytes, named by tokens_dtype (290: hifloat8).
    counts = torch.tensor([[1, 1], [2, 0]], dtype=torch.int32)
    tokens = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=torch.uint8)
    out, _, idx, per_expert = na.npu_moe_re_routing(tokens, counts, tokens_dtype=290)
    want, _, want_idx, want_counts = golden(tokens, counts)
    assert out.dtype == torch.uint8 and torch.equal(out, want) and idx.tolist() == want_idx
    with pytest.raises(TypeError, match="npu_moe_re_routing: expected tokens dtype in"):
        na.npu_moe_re_routing(tokens.to(torch.float16), counts, tokens_dtype=290)
    with pytest.raises(ValueError, match="npu_moe_re_routing: expected tokens_dtype one of"):
        na.npu_moe_re_routing(tokens, counts, tokens_dtype=1)
    with na.strict("A2"):
        with pytest.raises(Exception, match="npu_moe_re_routing"):
            na.npu_moe_re_routing(tokens, counts, tokens_dtype=290)
