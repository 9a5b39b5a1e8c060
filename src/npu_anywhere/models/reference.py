"""The transformers side of the comparison: tiny configs, seeded models, an eager greedy loop.

Everything here is plain Hugging Face ``transformers`` (``attn_implementation="eager"``) and
plain PyTorch, so it is an independent oracle for the engine.
"""

from __future__ import annotations

import time
from typing import List, Optional, Sequence, Tuple

import torch

Tensor = torch.Tensor

_COMMON = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, intermediate_size=128,
               max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
               # Wider than the usual 0.02 so that the logits are not all near zero and
               # greedy choices are well separated.
               initializer_range=0.15)

TINY = {
    "llama": dict(_COMMON),
    "qwen2": dict(_COMMON, use_sliding_window=False),
    "qwen2_moe": dict(_COMMON, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=64, norm_topk_prob=False,
                      decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False),
    "mixtral": dict(_COMMON, num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
}


def tiny_model(model_type: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A transformers ``*ForCausalLM`` built from a tiny config with seeded random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **TINY[model_type])
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                             dtype=dtype)
    return model.eval()


def pretrained_model(path: str, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                dtype=dtype).eval()


@torch.no_grad()
def greedy(model, prompt: Sequence[int], max_new_tokens: int,
           device: Optional[torch.device] = None) -> Tuple[List[int], List[Tensor], float]:
    """transformers' own KV-cached greedy loop: (tokens, float32 logits per step, seconds)."""
    from transformers import DynamicCache

    device = device or next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=device)
    cache = DynamicCache()
    tokens: List[int] = []
    logits: List[Tensor] = []
    start = time.perf_counter()
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    for step in range(max_new_tokens):
        row = out.logits[0, -1].float()
        tok = int(row.argmax())
        logits.append(row)
        tokens.append(tok)
        if step + 1 < max_new_tokens:
            out = model(input_ids=torch.tensor([[tok]], device=device),
                        past_key_values=out.past_key_values, use_cache=True)
    return tokens, logits, time.perf_counter() - start
