"""Benchmark case for npu_moe_gating_top_k on DeepSeek-V3 routing.

T = 4096 tokens, E = 256 experts in 8 groups, 4 groups kept, top-8, sigmoid scores with a
bias, groups scored by the sum of their two best experts, float32.  Contenders:

* ``naive``: the eager grouped top-k that MoE code hand-writes (DeepSeek-V3's gate, vLLM's
  ``grouped_topk``): sigmoid, bias, per-group ``topk(2)`` sum, ``topk`` of groups, a mask,
  ``topk`` of experts, gather, renormalise, scale.  Its ``topk`` makes no promise about ties;
  random float32 logits have none, so it matches the op here.
* ``compiled``: ``torch.compile`` of ``naive``.
* ``reference`` (eager; each stable ranking one ``torch.topk`` over tie-free int64 keys) and
  ``npu_anywhere`` (the op's providers: the compiled one once the call is hot).

Bytes moved: x and bias read once; y, expert_idx and the float32 norm written once.  No
bfloat16 case: bfloat16 logits tie often and the op then ranks by expert id, a plain topk not.
"""

from __future__ import annotations

import torch

from ..ops.moe.gating_top_k import npu_moe_gating_top_k
from .registry import Case, register, with_reference

# name: (tokens T, experts E, groups, kept groups, top-k)
PRESETS = {"deepseek-v3-route-4k": (4096, 256, 8, 4, 8)}
SCALE = 2.5


def naive_grouped_top_k(x, bias, k, k_group, group_count):
    scores = torch.sigmoid(x.float())
    choice = scores + bias.float()
    t, e = x.shape
    grouped = choice.view(t, group_count, e // group_count)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    best_groups = group_scores.topk(k_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, best_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand_as(grouped).reshape(t, e)
    masked = choice.masked_fill(expert_mask == 0, float("-inf"))
    idx = masked.topk(k, dim=-1).indices
    y = scores.gather(1, idx)
    y = y / (y.sum(dim=-1, keepdim=True) + 1e-20) * SCALE
    return y.to(x.dtype), idx.to(torch.int32), scores


_compiled_naive = torch.compile(naive_grouped_top_k, dynamic=False)


def _op(x, bias, k, k_group, group_count):
    return npu_moe_gating_top_k(x, k, bias=bias, k_group=k_group, group_count=group_count,
                                group_select_mode=1, norm_type=1, out_flag=True,
                                routed_scaling_factor=SCALE)


def _case(preset, dtype):
    t, e, groups, kept, k = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(t, e, generator=gen).to(device=device, dtype=dtype)
        bias = (torch.randn(e, generator=gen) * 0.1).to(device=device, dtype=dtype)
        return x, bias, k, kept, groups

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_gating_top_k {preset} {str(dtype)[6:]}", op="npu_moe_gating_top_k",
        preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=size * (t * e + e) + (size + 4) * t * k + 4 * t * e,
        contenders={
            "naive": naive_grouped_top_k,
            "compiled": _compiled_naive,
            "reference": with_reference(_op),
            "npu_anywhere": _op,
        })


for _preset in PRESETS:
    register(_case(_preset, torch.float32))
