"""npu_moe_update_expert against the seed's own golden (seed 004 / op-plugin
test_moe_update_expert.py): a per-element Python loop over the EPLB table, and the pruning rule
``scale < threshold * sum(scales)`` in float32."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import npu_anywhere as na

OP = "npu_moe_update_expert"


def make_case(bs=16, k=4, experts=12, f=4, world_size=6, seed=0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, f, size=(experts, 1))
    table = np.zeros((experts, f - 1))
    for i in range(experts):
        ranks = rng.permutation(world_size)
        table[i, :counts[i, 0]] = ranks[:counts[i, 0]]
    table = torch.from_numpy(np.hstack((counts, table))).to(torch.int32)
    ids = torch.from_numpy(rng.integers(0, experts, size=(bs, k))).to(torch.int32)
    scales = torch.from_numpy(-np.sort(-rng.uniform(0, 0.25, size=(bs, k)), axis=1)).float()
    threshold = torch.from_numpy(rng.uniform(0, 0.15, size=(1, k))).float()
    active = torch.arange(bs) < int(rng.integers(0, bs + 1))
    return ids, table, scales, threshold, active


def golden(ids, table, rank, world_size, balance_mode, scales=None, threshold=None,
           active=None):
    bs, k = ids.shape
    out = torch.zeros(bs, k, dtype=torch.int64)
    mask = torch.ones(bs, k, dtype=torch.bool)
    for i in range(bs):
        for j in range(k):
            e = int(ids[i, j])
            count = int(table[e, 0])
            if balance_mode == 0:
                out[i, j] = table[e, rank // math.ceil(world_size / count) + 1]
            else:
                out[i, j] = table[e, i % count + 1]
            if scales is not None:
                row = scales[i].float()
                if active is not None and not active[i]:
                    mask[i, j] = False
                else:
                    mask[i, j] = not bool(row[j] < threshold.reshape(-1)[j] * sum(row))
    return out, mask


@pytest.mark.parametrize("balance_mode,rank", [(0, 0), (0, 5), (1, -1)])
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
def test_mapping_matches_seed_golden(balance_mode, rank, ids_dtype):
    ids, table, *_ = make_case(seed=rank + 2)
    world_size = 6 if balance_mode == 0 else -1
    out, mask = na.npu_moe_update_expert(ids.to(ids_dtype), table, local_rank_id=rank,
                                         world_size=world_size, balance_mode=balance_mode)
    want, _ = golden(ids, table, rank, 6, balance_mode)
    assert out.dtype == ids_dtype and torch.equal(out.long(), want)
    assert mask.dtype == torch.bool and bool(mask.all())      # nothing pruned without scales


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_active", [False, True])
def test_pruning_matches_seed_golden(scale_dtype, with_active):
    ids, table, scales, threshold, active = make_case(bs=40, k=8, experts=20, f=5,
                                                      world_size=8, seed=7)
    scales = scales.to(scale_dtype)
    active = active if with_active else None
    out, mask = na.npu_moe_update_expert(ids, table, expert_scales=scales,
                                         pruning_threshold=threshold.reshape(-1),
                                         active_mask=active, local_rank_id=3, world_size=8)
    want, want_mask = golden(ids, table, 3, 8, 0, scales, threshold, active)
    assert torch.equal(out.long(), want) and torch.equal(mask, want_mask)
    assert 0 < int(want_mask.sum()) < want_mask.numel()       # the case prunes some, not all


def test_threshold_tie_is_kept():
    # 0.5 + 0.25 + 0.25 = 1 exactly: a scale equal to threshold * sum is kept (kernel: GE).
    ids = torch.zeros(2, 3, dtype=torch.int32)
    table = torch.tensor([[1, 9], [1, 8], [1, 7]], dtype=torch.int32)
    scales = torch.tensor([[0.5, 0.25, 0.25], [0.5, 0.25, 0.25]])
    threshold = torch.tensor([[0.25, 0.25, 0.2500001]])
    out, mask = na.npu_moe_update_expert(ids, table, expert_scales=scales,
                                         pruning_threshold=threshold,
                                         active_mask=torch.tensor([True, False]),
                                         balance_mode=1)
    assert out.tolist() == [[9, 9, 9], [9, 9, 9]]
    assert mask.tolist() == [[True, True, False], [False, False, False]]


def test_single_instance_and_non_contiguous_inputs_untouched():
    # Expert 1 has one instance: always column 1, whatever the rank.
    table = torch.tensor([[2, 4, 5, 0], [1, 6, 0, 0], [3, 1, 2, 3]], dtype=torch.int32)
    ids = torch.tensor([[1, 0, 2], [2, 1, 0]], dtype=torch.int32).t().contiguous().t()
    scales = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]).t().contiguous().t()
    assert not (ids.is_contiguous() or scales.is_contiguous())
    before = (ids.clone(), table.clone(), scales.clone())
    for rank in range(4):
        out, _ = na.npu_moe_update_expert(ids, table, expert_scales=scales,
                                          pruning_threshold=torch.full((3,), 0.25),
                                          local_rank_id=rank, world_size=4)
        assert torch.equal(out.long(), golden(ids, table, rank, 4, 0)[0])
        assert out[0, 0] == 6 and out[1, 1] == 6
    assert all(torch.equal(a, b) for a, b in zip(before, (ids, table, scales)))


def test_bad_inputs():
    ids, table, scales, threshold, active = make_case()
    fn = na.npu_moe_update_expert
    by_token = {"balance_mode": 1}
    cases = [
        (ValueError, "expected balance_mode one of", (ids, table), {"balance_mode": 2}),
        (ValueError, "expected world_size in", (ids, table), {"local_rank_id": 0}),
        (ValueError, "expected local_rank_id in", (ids, table),
         {"local_rank_id": 6, "world_size": 6}),
        (TypeError, "expected expert_ids dtype in", (ids.short(), table), by_token),
        (ValueError, "expected expert_ids K = size", (torch.zeros(2, 17, dtype=torch.int32),
                                                      torch.ones(20, 2, dtype=torch.int32)),
         by_token),
        (ValueError, "expected expert_ids BS = size", (torch.zeros(513, 2, dtype=torch.int32),
                                                       table), by_token),
        (ValueError, "expected eplb_table between K", (ids, table[:3]), by_token),
        (ValueError, "expected eplb_table F = size", (ids, torch.ones(12, 8, dtype=torch.int32)),
         {"local_rank_id": 0, "world_size": 6}),
        (ValueError, "expected pruning_threshold a tensor exactly when expert_scales",
         (ids, table), dict(by_token, expert_scales=scales)),
        (ValueError, "expected active_mask None unless", (ids, table),
         dict(by_token, active_mask=active)),
        (TypeError, "expected pruning_threshold dtype in", (ids, table),
         dict(by_token, expert_scales=scales, pruning_threshold=threshold.double())),
        (RuntimeError, "expected pruning_threshold shape", (ids, table),
         dict(by_token, expert_scales=scales, pruning_threshold=threshold[:, :2])),
        (RuntimeError, "expected expert_scales expert_ids' shape", (ids, table),
         dict(by_token, expert_scales=scales[:3], pruning_threshold=threshold)),
        (IndexError, "expected expert_ids values in", (ids * 0 + 12, table), by_token),
        (ValueError, "expected eplb_table instance counts", (ids, table * 0), by_token),
        (ValueError, "expected active_mask every True before every False", (ids, table),
         dict(by_token, expert_scales=scales, pruning_threshold=threshold,
              active_mask=torch.arange(16) % 2 == 0)),
    ]
    for error, words, args, kwargs in cases:
        with pytest.raises(error, match=f"{OP}: {words}"):
            fn(*args, **kwargs)
    with pytest.raises(RuntimeError, match=f"{OP}: expected inputs that do not require grad"):
        fn(ids, table, expert_scales=scales.requires_grad_(), pruning_threshold=threshold,
           balance_mode=1)


def test_strict_mode():
    ids, table, scales, threshold, _ = make_case()
    with na.strict("A3"):
        na.npu_moe_update_expert(ids, table, expert_scales=scales.half(),
                                 pruning_threshold=threshold, balance_mode=1)
        with pytest.raises(TypeError, match=f"{OP}: expected expert_scales dtype in"):
            na.npu_moe_update_expert(ids, table, expert_scales=scales.double(),
                                     pruning_threshold=threshold, balance_mode=1)
    with na.strict("A2"), pytest.raises(RuntimeError, match=f"{OP}: expected a product"):
        na.npu_moe_update_expert(ids, table, balance_mode=1)
