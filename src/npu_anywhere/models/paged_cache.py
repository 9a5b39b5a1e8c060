"""Paged KV cache: a pool of fixed-size blocks per layer and a block allocator.

Each layer owns ``key_cache`` / ``value_cache`` of shape ``[num_blocks, block_size, Nkv, D]``
(the ND form ``npu_scatter_pa_kv_cache(cache_mode="Norm")`` writes).  A sequence owns a list
of block ids (its block table row); token ``pos`` lives in slot
``table[pos // block_size] * block_size + pos % block_size``.
"""

from __future__ import annotations

from typing import List, Sequence

import torch


class BlockPool:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device):
        self.block_size = block_size
        self.num_blocks = num_blocks
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.key_caches = [torch.zeros(shape, dtype=dtype, device=device)
                           for _ in range(num_layers)]
        self.value_caches = [torch.zeros(shape, dtype=dtype, device=device)
                             for _ in range(num_layers)]
        # Hand blocks out from the top so that block tables are not the identity.
        self._free: List[int] = list(range(num_blocks))

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def grow(self, table: List[int], num_tokens: int) -> None:
        """Extend ``table`` in place so that it covers ``num_tokens`` tokens."""
        need = self.blocks_for(num_tokens) - len(table)
        if need > len(self._free):
            raise RuntimeError(f"paged cache: expected {need} free blocks, but got "
                               f"{len(self._free)}")
        for _ in range(max(need, 0)):
            table.append(self._free.pop())

    def release(self, table: List[int]) -> None:
        self._free.extend(reversed(table))
        table.clear()

    def slots(self, table: Sequence[int], start: int, stop: int) -> List[int]:
        bs = self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]

    def block_table(self, tables: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
        """``[B, max_blocks]`` int32, padded with -1 (vLLM's padding id)."""
        width = max(len(t) for t in tables)
        rows = [list(t) + [-1] * (width - len(t)) for t in tables]
        return torch.tensor(rows, dtype=torch.int32, device=device)
