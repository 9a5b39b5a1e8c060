"""Attention, dense MLP and MoE blocks, each a sequence of ``torch_npu`` calls.

All blocks work on packed tokens ``x: [T, H]`` (the tokens of every sequence in the step, one
after another), as vllm-ascend does.  ``torch_npu`` is looked up at call time
(``torch_npu.npu_x(...)``) so that :mod:`.op_timer` can wrap the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F
import torch_npu

from .config import ModelConfig

Tensor = torch.Tensor
# sparse_mode 3 (rightDownCausal) takes the compressed 2048 x 2048 causal mask (True = masked).
_CAUSAL_2048: dict = {}


def causal_mask_2048(device: torch.device) -> Tensor:
    if device not in _CAUSAL_2048:
        _CAUSAL_2048[device] = torch.triu(
            torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)
    return _CAUSAL_2048[device]


@dataclass
class StepMeta:
    """What the attention of one step needs to know about the packed tokens.

    ``prefill`` steps pack whole prompts (TND, cumulative ``cu_q_lens``); decode steps carry one
    token per sequence (BSND with S = 1).  ``kv_lens`` are the per-sequence cache lengths after
    this step's tokens are written.
    """

    prefill: bool
    cos: Tensor            # [T, D]
    sin: Tensor            # [T, D]
    slots: Tensor          # [T] int32
    block_table: Tensor    # [B, max_blocks] int32
    kv_lens: List[int]
    cu_q_lens: List[int]   # prefill only


def attention(cfg: ModelConfig, w: dict, x: Tensor, meta: StepMeta, key_cache: Tensor,
              value_cache: Tensor) -> Tensor:
    t = x.shape[0]
    n, nkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    qkv = F.linear(x, w["w_qkv"], w["b_qkv"])
    q, k, v = qkv.split([n * d, nkv * d, nkv * d], dim=-1)
    # npu_apply_rotary_pos_emb rotates query and key in place, BSND with B = 1, S = T.
    q = q.reshape(1, t, n, d).contiguous()
    k = k.reshape(1, t, nkv, d).contiguous()
    cos = meta.cos.view(1, t, 1, d)
    sin = meta.sin.view(1, t, 1, d)
    torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND", rotary_mode="half")
    torch_npu.npu_scatter_pa_kv_cache(key=k.view(t, nkv, d), value=v.reshape(t, nkv, d),
                                      key_cache=key_cache, value_cache=value_cache,
                                      slot_mapping=meta.slots, cache_mode="Norm")
    nb, bs = key_cache.shape[:2]
    kc, vc = key_cache.view(nb, bs, nkv * d), value_cache.view(nb, bs, nkv * d)
    common = dict(num_heads=n, num_key_value_heads=nkv, scale=d ** -0.5,
                  block_table=meta.block_table, block_size=bs,
                  actual_seq_lengths_kv=meta.kv_lens)
    if meta.prefill:
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q.view(t, n, d), kc, vc, input_layout="TND", actual_seq_lengths=meta.cu_q_lens,
            sparse_mode=3, atten_mask=causal_mask_2048(x.device), **common)
    else:
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q.view(t, 1, n, d), kc, vc, input_layout="BSND", sparse_mode=0, **common)
    return F.linear(out.reshape(t, n * d), w["w_o"], w["b_o"])


def dense_mlp(gate_up: Tensor, down: Tensor, x: Tensor) -> Tensor:
    return F.linear(torch_npu.npu_swiglu(F.linear(x, gate_up), dim=-1), down)


def moe(cfg: ModelConfig, w: dict, x: Tensor) -> Tensor:
    """Routed experts: gating top-k softmax -> init routing v2 -> grouped matmul (SwiGLU) ->
    grouped matmul -> finalize routing; plus Qwen2-MoE's sigmoid-gated shared expert."""
    t, k, e = x.shape[0], cfg.top_k, cfg.num_experts
    logits = F.linear(x, w["router"])
    # Softmax over all experts in float32, then the top k (what transformers does).
    weights, expert_ids, _ = torch_npu.npu_moe_gating_top_k_softmax(logits.float(), None, k=k)
    if cfg.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(x.dtype)
    expanded_x, expanded_row_idx, expert_tokens, _ = torch_npu.npu_moe_init_routing_v2(
        x, expert_ids, active_num=t * k, expert_num=e, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, quant_mode=-1, row_idx_type=0, drop_pad_mode=0)
    group_list = expert_tokens.to(torch.int64)
    h = torch_npu.npu_grouped_matmul([expanded_x], [w["w13"]], group_list=group_list,
                                     split_item=2, group_type=0, group_list_type=1)[0]
    h = torch_npu.npu_swiglu(h, dim=-1)
    rows = torch_npu.npu_grouped_matmul([h], [w["w2"]], group_list=group_list,
                                        split_item=2, group_type=0, group_list_type=1)[0]
    # init_routing_v2 numbers the expanded rows token-major (n * K + k): drop_pad_mode 2.
    out = torch_npu.npu_moe_finalize_routing(
        rows, None, None, None, scales=weights, expanded_src_to_dst_row=expanded_row_idx,
        export_for_source_row=expert_ids, drop_pad_mode=2)
    if "shared_gate_up" in w:
        shared = dense_mlp(w["shared_gate_up"], w["shared_down"], x)
        out = out + torch.sigmoid(F.linear(x, w["shared_gate"])) * shared
    return out


def mlp(cfg: ModelConfig, w: dict, x: Tensor) -> Tensor:
    return moe(cfg, w, x) if cfg.is_moe else dense_mlp(w["gate_up"], w["down"], x)


def rope_tables(cfg: ModelConfig, max_positions: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """float32 ``[max_positions, D]`` cos / sin of the default (unscaled) RoPE, halves repeated
    (``rotary_mode="half"``), as transformers' ``LlamaRotaryEmbedding`` builds them."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64,
                                                       device=device).float() / d))
    freqs = torch.arange(max_positions, device=device).float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()
