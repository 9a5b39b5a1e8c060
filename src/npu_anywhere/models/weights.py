"""Hugging Face state dicts repacked into the fused layouts the engine's ops take.

- q/k/v projections are stacked into one ``[(Nq + 2 Nkv) D, H]`` matrix (one GEMM per layer, as
  vLLM's ``QKVParallelLinear``);
- gate and up projections are stacked ``[gate; up]`` so that ``npu_swiglu`` (SiLU of the first
  half times the second half) applies directly to the GEMM output;
- routed experts become ``[E, H, 2I]`` and ``[E, I, H]`` weight stacks, the ``k x n`` weight
  form ``npu_grouped_matmul`` with ``group_type=0`` takes.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Mapping, Optional

import torch

from .config import ModelConfig

Tensor = torch.Tensor


def _stack_experts(sd: Mapping[str, Tensor], prefix: str, names: tuple[str, str, str],
                   num_experts: int) -> tuple[Tensor, Tensor]:
    gate, up, down = names
    w13 = torch.stack([torch.cat([sd[f"{prefix}.{e}.{gate}.weight"],
                                  sd[f"{prefix}.{e}.{up}.weight"]]).t()
                       for e in range(num_experts)])
    w2 = torch.stack([sd[f"{prefix}.{e}.{down}.weight"].t() for e in range(num_experts)])
    return w13.contiguous(), w2.contiguous()


def pack(cfg: ModelConfig, sd: Mapping[str, Tensor], dtype: torch.dtype,
         device: torch.device) -> Dict[str, object]:
    """The engine's parameters from a Hugging Face ``*ForCausalLM`` state dict."""
    def t(x: Tensor) -> Tensor:
        return x.detach().to(device=device, dtype=dtype).contiguous()

    def opt(name: str) -> Optional[Tensor]:
        return t(sd[name]) if name in sd else None

    layers = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        layer = {
            "input_norm": t(sd[p + "input_layernorm.weight"]),
            "post_norm": t(sd[p + "post_attention_layernorm.weight"]),
            "w_qkv": t(torch.cat([sd[a + "q_proj.weight"], sd[a + "k_proj.weight"],
                                  sd[a + "v_proj.weight"]])),
            "b_qkv": (t(torch.cat([sd[a + "q_proj.bias"], sd[a + "k_proj.bias"],
                                   sd[a + "v_proj.bias"]]))
                      if a + "q_proj.bias" in sd else None),
            "w_o": t(sd[a + "o_proj.weight"]),
            "b_o": opt(a + "o_proj.bias"),
        }
        if cfg.model_type == "qwen2_moe":
            m = p + "mlp."
            w13, w2 = _stack_experts(sd, m + "experts", ("gate_proj", "up_proj", "down_proj"),
                                     cfg.num_experts)
            layer.update(router=t(sd[m + "gate.weight"]), w13=t(w13), w2=t(w2),
                         shared_gate_up=t(torch.cat([sd[m + "shared_expert.gate_proj.weight"],
                                                     sd[m + "shared_expert.up_proj.weight"]])),
                         shared_down=t(sd[m + "shared_expert.down_proj.weight"]),
                         shared_gate=t(sd[m + "shared_expert_gate.weight"]))
        elif cfg.model_type == "mixtral":
            m = p + "block_sparse_moe."
            w13, w2 = _stack_experts(sd, m + "experts", ("w1", "w3", "w2"), cfg.num_experts)
            layer.update(router=t(sd[m + "gate.weight"]), w13=t(w13), w2=t(w2))
        else:
            m = p + "mlp."
            layer.update(gate_up=t(torch.cat([sd[m + "gate_proj.weight"],
                                              sd[m + "up_proj.weight"]])),
                         down=t(sd[m + "down_proj.weight"]))
        layers.append(layer)
    embed = t(sd["model.embed_tokens.weight"])
    lm_head = embed if cfg.tie_word_embeddings or "lm_head.weight" not in sd \
        else t(sd["lm_head.weight"])
    return {"embed": embed, "final_norm": t(sd["model.norm.weight"]), "lm_head": lm_head,
            "layers": layers}


def load_checkpoint(path: str) -> tuple[dict, Dict[str, Tensor]]:
    """``(config dict, state dict)`` of a local Hugging Face checkpoint directory
    (``config.json`` plus ``*.safetensors`` shards)."""
    from safetensors.torch import load_file

    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    shards = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not shards:
        raise FileNotFoundError(f"models: expected *.safetensors files in {path}, but got none")
    state: Dict[str, Tensor] = {}
    for name in shards:
        state.update(load_file(os.path.join(path, name)))
    return config, state
