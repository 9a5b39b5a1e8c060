"""The decoder stack over packed tokens, with a paged KV cache.

One layer, as transformers' Llama / Qwen2 / Qwen2-MoE / Mixtral decoder layers compute it::

    h1 = h + Attn(RMSNorm(h));   h_next = h1 + MLP(RMSNorm(h1))

written with ``npu_add_rms_norm`` (returns ``(norm(x1 + x2), rstd, x1 + x2)``), so each residual
add is fused into the next norm, and the first layer uses ``npu_rms_norm``.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
import torch_npu

from .config import ModelConfig
from .layers import StepMeta, attention, mlp, rope_tables
from .paged_cache import BlockPool
from .weights import pack

Tensor = torch.Tensor


class Engine:
    """Parameters, RoPE tables and the paged KV cache of one model."""

    def __init__(self, cfg: ModelConfig, state_dict: Mapping[str, Tensor], *,
                 dtype: torch.dtype = torch.float32, device: str = "npu", block_size: int = 16,
                 num_blocks: int = 256, max_positions: int = 4096):
        self.cfg = cfg
        self.dtype = dtype
        self.device = torch.empty(0, device=device).device   # "npu" is the local device
        self.params = pack(cfg, state_dict, dtype, self.device)
        self.cos, self.sin = rope_tables(cfg, max_positions, self.device)
        self.pool = BlockPool(cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads,
                              cfg.head_dim, dtype, self.device)

    def _meta(self, prefill: bool, positions: List[int], slots: List[int],
              tables: Sequence[Sequence[int]], kv_lens: List[int],
              q_lens: List[int]) -> StepMeta:
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        cu = torch.tensor(q_lens).cumsum(0).tolist()
        return StepMeta(prefill=prefill, cos=self.cos[pos].to(self.dtype),
                        sin=self.sin[pos].to(self.dtype),
                        slots=torch.tensor(slots, dtype=torch.int32, device=self.device),
                        block_table=self.pool.block_table(tables, self.device),
                        kv_lens=kv_lens, cu_q_lens=cu)

    def forward(self, tokens: Tensor, meta: StepMeta, last_rows: Tensor) -> Tensor:
        """Float32 logits ``[len(last_rows), vocab]`` of the packed rows ``last_rows``."""
        cfg, p = self.cfg, self.params
        h = F.embedding(tokens, p["embed"])
        residual: Optional[Tensor] = None
        for i, w in enumerate(p["layers"]):
            if residual is None:
                x, _ = torch_npu.npu_rms_norm(h, w["input_norm"], epsilon=cfg.rms_norm_eps)
                residual = h
            else:
                x, _, residual = torch_npu.npu_add_rms_norm(h, residual, w["input_norm"],
                                                            cfg.rms_norm_eps)
            h = attention(cfg, w, x, meta, self.pool.key_caches[i], self.pool.value_caches[i])
            x, _, residual = torch_npu.npu_add_rms_norm(h, residual, w["post_norm"],
                                                        cfg.rms_norm_eps)
            h = mlp(cfg, w, x)
        x, _, _ = torch_npu.npu_add_rms_norm(h, residual, p["final_norm"], cfg.rms_norm_eps)
        return F.linear(x[last_rows], p["lm_head"]).float()

    def prefill(self, prompts: Sequence[Sequence[int]], tables: Sequence[List[int]]) -> Tensor:
        """Write whole prompts into the cache (TND attention); logits of each last token."""
        for prompt, table in zip(prompts, tables):
            self.pool.grow(table, len(prompt))
        q_lens = [len(p) for p in prompts]
        positions = [i for n in q_lens for i in range(n)]
        slots = [s for p, t in zip(prompts, tables) for s in self.pool.slots(t, 0, len(p))]
        meta = self._meta(True, positions, slots, tables, q_lens, q_lens)
        tokens = torch.tensor([t for p in prompts for t in p], device=self.device)
        last = torch.tensor(q_lens, device=self.device).cumsum(0) - 1
        return self.forward(tokens, meta, last)

    def decode(self, tokens: Sequence[int], positions: Sequence[int],
               tables: Sequence[List[int]]) -> Tensor:
        """One new token per sequence at ``positions`` (BSND decode attention); its logits."""
        slots = []
        for pos, table in zip(positions, tables):
            self.pool.grow(table, pos + 1)
            slots += self.pool.slots(table, pos, pos + 1)
        kv_lens = [p + 1 for p in positions]
        meta = self._meta(False, list(positions), slots, tables, kv_lens, [1] * len(tokens))
        toks = torch.tensor(list(tokens), device=self.device)
        return self.forward(toks, meta, torch.arange(len(tokens), device=self.device))
