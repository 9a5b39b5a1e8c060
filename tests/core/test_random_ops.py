"""Ops that draw from torch's generator carry ``torch.Tag.nondeterministic_seeded``, so graph
passes keep two identical calls apart (each gets its own dropout mask)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere  # noqa: F401  (registers the ops)
from npu_anywhere.library import REGISTRY

RANDOM_OPS = ["npu_dropout_with_add_softmax", "npu_fused_attention_score_fwd",
              "npu_multi_head_attention", "npu_fusion_attention", "npu_fusion_attention_v3",
              "_npu_dropout", "npu_sim_exponential_", "npu_top_k_top_p_sample",
              "npu_random_choice_with_mask"]


@pytest.mark.parametrize("name", RANDOM_OPS)
def test_random_ops_are_tagged(name):
    assert torch.Tag.nondeterministic_seeded in REGISTRY[name].overload.tags


def test_deterministic_ops_are_not_tagged():
    for name in ("npu_rms_norm", "npu_fusion_attention_grad", "npu_dropout_with_add_softmax_backward"):
        assert torch.Tag.nondeterministic_seeded not in REGISTRY[name].overload.tags


def test_compiled_graph_keeps_two_identical_random_calls_apart():
    x = torch.zeros(1, 32, 128, 128)
    x1 = torch.randn(1, 32, 128, 128)

    def twice(a, b):
        first = torch.ops.npu.npu_dropout_with_add_softmax(a, b, 1.0, 0.5, -1)
        second = torch.ops.npu.npu_dropout_with_add_softmax(a, b, 1.0, 0.5, -1)
        return first[0], second[0]

    torch.manual_seed(0)
    eager = twice(x, x1)
    assert not torch.equal(eager[0], eager[1])
    compiled = torch.compile(twice, fullgraph=True, backend="aot_eager")
    got = compiled(x, x1)
    assert not torch.equal(got[0], got[1])
