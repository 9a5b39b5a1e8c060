"""Architecture numbers of a decoder-only model, read from a Hugging Face config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

DENSE = ("llama", "qwen2")
MOE = ("qwen2_moe", "mixtral")


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    attention_bias: bool
    tie_word_embeddings: bool
    # MoE (unused for dense models)
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = False

    @property
    def is_moe(self) -> bool:
        return self.model_type in MOE

    @classmethod
    def from_hf(cls, cfg: Any) -> "ModelConfig":
        """From a ``transformers`` config object or a ``config.json`` dict."""
        get = cfg.get if isinstance(cfg, Mapping) else (lambda k, d=None: getattr(cfg, k, d))
        model_type = get("model_type")
        if model_type not in DENSE + MOE:
            raise ValueError(f"models: expected model_type one of {DENSE + MOE}, but got "
                             f"{model_type!r}")
        if get("rope_scaling") not in (None, {}):
            raise ValueError(f"models: expected no rope_scaling, but got {get('rope_scaling')!r}")
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        head_dim: Optional[int] = get("head_dim") or hidden // heads
        moe: dict = {}
        if model_type == "qwen2_moe":
            if get("mlp_only_layers") or get("decoder_sparse_step", 1) != 1:
                raise ValueError("models: expected every qwen2_moe layer sparse "
                                 "(decoder_sparse_step 1, no mlp_only_layers)")
            moe = dict(num_experts=get("num_experts"), top_k=get("num_experts_per_tok"),
                       moe_intermediate_size=get("moe_intermediate_size"),
                       shared_expert_intermediate_size=get("shared_expert_intermediate_size"),
                       norm_topk_prob=bool(get("norm_topk_prob", False)))
        elif model_type == "mixtral":
            moe = dict(num_experts=get("num_local_experts"), top_k=get("num_experts_per_tok"),
                       moe_intermediate_size=get("intermediate_size"), norm_topk_prob=True)
        return cls(model_type=model_type, vocab_size=get("vocab_size"), hidden_size=hidden,
                   num_layers=get("num_hidden_layers"), num_heads=heads,
                   num_kv_heads=get("num_key_value_heads") or heads, head_dim=head_dim,
                   intermediate_size=get("intermediate_size"),
                   rms_norm_eps=get("rms_norm_eps"), rope_theta=get("rope_theta", 10000.0),
                   # Qwen2 always has q/k/v biases; Llama says so in attention_bias.
                   attention_bias=model_type in ("qwen2", "qwen2_moe")
                   or bool(get("attention_bias", False)),
                   tie_word_embeddings=bool(get("tie_word_embeddings", False)), **moe)
