"""Benchmark cases for the MoE routing family on DeepSeek-like routing shapes.

T = 4096 tokens, E = 64 experts, top-k 8, H = 2048, float32 and bfloat16.  Contenders:

* ``naive``: what MoE code hand-writes today.  Gating: softmax + ``topk`` + an arange for the
  row index.  Init routing: a boolean mask and ``nonzero`` per expert, gathering that expert's
  rows (the per-expert loop of eager MoE layers).  Finalize: the doc formula, one gather and
  weighted add per k in the input dtype.  Permute / unpermute: Megatron's eager twin
  (argsort + index_select; index_copy + probs product + sum); with a routing map, Megatron's
  ``permute`` / ``unpermute`` (masked_select of the transposed map + index_select;
  probs product + scatter_add); the padded routing-map unpermute: Megatron's
  ``unpermute(drop_and_pad=True)`` (expert-major probs gather, product, scatter_add).
* ``reference``: the op's eager reference; ``npu_anywhere``: the op through its providers (the
  gating ops' C++ stable top-k on CPU, the padded routing-map unpermute's level scatter, the
  compiled providers where the tiering has kicked in).

The gating case runs in float32 only: bfloat16 softmax values tie often over 64 experts, the
op ranks ties by expert id after rounding (its golden), and a plain ``topk`` picks other
experts, so the naive contender would not compute the same thing.

Bytes moved: every input read once and every output written once.
"""

from __future__ import annotations

import torch

from ..ops.moe.finalize_routing import npu_moe_finalize_routing
from ..ops.moe.gating_top_k_softmax import npu_moe_gating_top_k_softmax
from ..ops.moe.init_routing_v2 import npu_moe_init_routing_v2
from ..ops.moe.token_permute import npu_moe_token_permute, npu_moe_token_unpermute
from ..ops.moe.token_permute_routing_map import npu_moe_token_permute_with_routing_map
from ..ops.moe.token_unpermute_routing_map import npu_moe_token_unpermute_with_routing_map
from .registry import Case, register, with_reference

# name: (tokens T, experts E, top-k K, hidden H)
PRESETS = {"deepseek-route-4k": (4096, 64, 8, 2048)}
DTYPES = (torch.float32, torch.bfloat16)


def _routing_inputs(t, e, k, h, dtype, device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
    logits = torch.randn(t, e, generator=gen).to(device=device, dtype=dtype)
    ids = torch.topk(torch.rand(t, e, generator=gen), k, dim=-1).indices.to(torch.int32)
    return x, logits, ids.to(device)


# -- gating ----------------------------------------------------------------------------------

def naive_gating(logits, k):
    p = torch.softmax(logits.float(), dim=-1)
    y, idx = torch.topk(p, k, dim=-1)
    n = logits.shape[0]
    row_idx = torch.arange(n * k, dtype=torch.int32, device=logits.device).view(k, n).t()
    return y.to(logits.dtype), idx.to(torch.int32), row_idx.contiguous()


def _gating_case(preset, dtype):
    t, e, k, _ = PRESETS[preset]

    def make(device):
        return _routing_inputs(t, e, k, 8, dtype, device)[1], k

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_gating_top_k_softmax {preset} {str(dtype)[6:]}",
        op="npu_moe_gating_top_k_softmax", preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=size * t * e + (size + 8) * t * k,
        contenders={
            "naive": naive_gating,
            "reference": with_reference(lambda x, k: npu_moe_gating_top_k_softmax(x, None, k)),
            "npu_anywhere": lambda x, k: npu_moe_gating_top_k_softmax(x, None, k),
        })


# -- init routing ------------------------------------------------------------------------------

def naive_init_routing(x, ids, experts):
    k = ids.shape[1]
    flat = ids.reshape(-1)
    chunks, sources, counts = [], [], []
    for e in range(experts):
        pos = (flat == e).nonzero().squeeze(-1)          # flat positions, ascending
        sources.append(pos)
        chunks.append(x[pos // k])
        counts.append(pos.numel())
    order = torch.cat(sources)
    expanded_row_idx = torch.empty_like(order)
    expanded_row_idx[order] = torch.arange(order.numel(), device=order.device)
    return (torch.cat(chunks), expanded_row_idx.to(torch.int32),
            torch.tensor(counts, dtype=torch.int64, device=x.device))


def _init_routing_v2(x, ids, experts):
    out = npu_moe_init_routing_v2(x, ids, active_num=ids.numel(), expert_num=experts,
                                  expert_tokens_num_type=1, expert_tokens_num_flag=True)
    return out[:3]


def _init_routing_case(preset, dtype):
    t, e, k, h = PRESETS[preset]

    def make(device):
        x, _, ids = _routing_inputs(t, e, k, h, dtype, device)
        return x, ids, e

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_init_routing_v2 {preset} {str(dtype)[6:]}", op="npu_moe_init_routing_v2",
        preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=size * t * h + size * t * k * h + 8 * t * k + 8 * e,
        contenders={
            "naive": naive_init_routing,
            "reference": with_reference(_init_routing_v2),
            "npu_anywhere": _init_routing_v2,
        })


# -- finalize routing ------------------------------------------------------------------------

def naive_finalize(rows, skip1, bias, scales, src_to_dst, ids):
    n, k = scales.shape
    out = skip1.clone()
    idx = src_to_dst.long().view(n, k)
    for j in range(k):
        out += scales[:, j:j + 1] * (rows[idx[:, j]] + bias[ids[:, j].long()])
    return out


def _finalize(rows, skip1, bias, scales, src_to_dst, ids):
    return npu_moe_finalize_routing(rows, skip1, None, bias, scales, src_to_dst, ids, 2)


def _finalize_case(preset, dtype):
    t, e, k, h = PRESETS[preset]

    def make(device):
        x, logits, ids = _routing_inputs(t, e, k, h, dtype, device)
        gen = torch.Generator().manual_seed(1)
        rows = torch.randn(t * k, h, generator=gen).to(device=device, dtype=dtype)
        bias = torch.randn(e, h, generator=gen).to(device=device, dtype=dtype)
        scales = torch.rand(t, k, generator=gen).to(device=device, dtype=dtype)
        src_to_dst = torch.randperm(t * k, generator=gen).to(device=device, dtype=torch.int32)
        return rows, x, bias, scales, src_to_dst, ids

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_finalize_routing {preset} {str(dtype)[6:]}",
        op="npu_moe_finalize_routing", preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=size * (t * k * h + 2 * t * h + e * h + t * k) + 8 * t * k,
        tolerance={"rtol": 2e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {},
        contenders={
            "naive": naive_finalize,
            "reference": with_reference(_finalize),
            "npu_anywhere": _finalize,
        })


# -- permute / unpermute -----------------------------------------------------------------------

def naive_permute_unpermute(tokens, indices, probs):
    k = indices.shape[1]
    perm = torch.argsort(indices.reshape(-1), stable=True)
    permuted = tokens.index_select(0, perm // k)
    out = torch.zeros(perm.numel(), tokens.shape[1], dtype=tokens.dtype, device=tokens.device)
    out.index_copy_(0, perm, permuted)
    return (out.view(-1, k, tokens.shape[1]) * probs.unsqueeze(-1)).sum(dim=1)


def _permute_unpermute(tokens, indices, probs):
    permuted, sorted_indices = npu_moe_token_permute(tokens, indices)
    return npu_moe_token_unpermute(permuted, sorted_indices, probs=probs)


def _permute_case(preset, dtype):
    t, e, k, h = PRESETS[preset]

    def make(device):
        x, _, ids = _routing_inputs(t, e, k, h, dtype, device)
        probs = torch.softmax(torch.rand(t, k), -1).to(device=device, dtype=dtype)
        return x, ids.long(), probs

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_token_permute+unpermute {preset} {str(dtype)[6:]}",
        op="npu_moe_token_permute", preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=size * (2 * t * h + 2 * t * k * h + t * k) + 16 * t * k,
        tolerance={"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {},
        contenders={
            "naive": naive_permute_unpermute,
            "reference": with_reference(_permute_unpermute),
            "npu_anywhere": _permute_unpermute,
        })


def naive_routing_map_pair(tokens, routing_map, probs):
    t, hidden = tokens.shape
    experts = routing_map.shape[1]
    map_t = routing_map.bool().t().contiguous()
    token_ids = torch.arange(t, device=tokens.device).unsqueeze(0).expand(experts, -1)
    sorted_indices = token_ids.masked_select(map_t)
    permuted_probs = probs.t().contiguous().masked_select(map_t)
    permuted = tokens.index_select(0, sorted_indices)
    weighted = permuted * permuted_probs.unsqueeze(-1)
    out = torch.zeros(t, hidden, dtype=tokens.dtype, device=tokens.device)
    return out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), weighted)


def _routing_map_pair(tokens, routing_map, probs):
    t, hidden = tokens.shape
    k = int(routing_map.shape[1] and routing_map[0].sum())
    permuted, _, sorted_indices = npu_moe_token_permute_with_routing_map(
        tokens, routing_map, probs=probs, num_out_tokens=t * k)
    return npu_moe_token_unpermute_with_routing_map(permuted, sorted_indices, [t, hidden],
                                                    probs=probs, routing_map=routing_map)


def _routing_map_case(preset, dtype):
    t, e, k, h = PRESETS[preset]

    def make(device):
        x, _, ids = _routing_inputs(t, e, k, h, dtype, device)
        routing_map = torch.zeros(t, e, dtype=torch.bool, device=device).scatter(
            1, ids.long(), True)
        probs = torch.softmax(torch.rand(t, e), -1).to(device=device, dtype=dtype)
        return x, routing_map, probs

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_moe_token_permute+unpermute_with_routing_map {preset} {str(dtype)[6:]}",
        op="npu_moe_token_unpermute_with_routing_map", preset=preset, dtype=dtype,
        make_inputs=make,
        bytes_moved=size * (2 * t * h + 2 * t * k * h + t * e + t * k) + t * e + 4 * t * k,
        tolerance={"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {},
        contenders={
            "naive": naive_routing_map_pair,
            "reference": with_reference(_routing_map_pair),
            "npu_anywhere": _routing_map_pair,
        })


def naive_unpermute_padded(permuted, sorted_indices, probs, routing_map):
    """Megatron's eager ``unpermute(drop_and_pad=True)``: each row's prob read from the
    expert-major flat probs, the weighted rows scatter-added into the tokens."""
    t, experts = probs.shape
    hidden = permuted.shape[1]
    capacity = permuted.shape[0] // experts
    token = sorted_indices.long()
    flat = (torch.arange(experts, device=token.device).unsqueeze(1) * t
            + token.view(experts, capacity)).reshape(-1)
    row_probs = probs.t().contiguous().view(-1).index_select(0, flat)
    weighted = permuted * row_probs.unsqueeze(-1)
    out = torch.zeros(t, hidden, dtype=permuted.dtype, device=permuted.device)
    return out.scatter_add_(0, token.unsqueeze(1).expand(-1, hidden), weighted)


def _unpermute_padded(permuted, sorted_indices, probs, routing_map):
    return npu_moe_token_unpermute_with_routing_map(
        permuted, sorted_indices, [probs.shape[0], permuted.shape[1]], probs=probs,
        routing_map=routing_map, drop_and_pad=True)


def _unpermute_padded_case(preset, dtype):
    t, e, k, h = PRESETS[preset]
    capacity = t * k // e

    def make(device):
        x, _, ids = _routing_inputs(t, e, k, h, dtype, device)
        routing_map = torch.zeros(t, e, dtype=torch.bool, device=device).scatter(
            1, ids.long(), True)
        probs = torch.softmax(torch.rand(t, e), -1).to(device=device, dtype=dtype)
        # Megatron's padded permute: per expert its routed tokens, then unrouted ones (the
        # padding, all pointing at the lowest-numbered tokens), cut at the capacity.
        order = routing_map.t().to(torch.int8).argsort(dim=-1, descending=True, stable=True)
        sorted_indices = order[:, :capacity].reshape(-1).to(torch.int32)
        return x.index_select(0, sorted_indices), sorted_indices, probs, routing_map

    size = torch.finfo(dtype).bits // 8
    rows = e * capacity
    return Case(
        name=f"npu_moe_token_unpermute_with_routing_map padded {preset} {str(dtype)[6:]}",
        op="npu_moe_token_unpermute_with_routing_map", preset=preset, dtype=dtype,
        make_inputs=make,
        bytes_moved=size * (rows * h + t * h + t * e) + t * e + 4 * rows,
        tolerance={"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {},
        contenders={
            "naive": naive_unpermute_padded,
            "reference": with_reference(_unpermute_padded),
            "npu_anywhere": _unpermute_padded,
        })


for _preset in PRESETS:
    for _dtype in DTYPES:
        if _dtype == torch.float32:
            # bfloat16 softmax values tie often over 64 experts and the op ranks ties by expert
            # id after rounding (its golden); a plain topk picks other experts, so no bf16 case.
            register(_gating_case(_preset, _dtype))
        register(_init_routing_case(_preset, _dtype))
        register(_finalize_case(_preset, _dtype))
        register(_permute_case(_preset, _dtype))
        register(_routing_map_case(_preset, _dtype))
        register(_unpermute_padded_case(_preset, _dtype))
