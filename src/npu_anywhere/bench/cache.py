"""Benchmark cases for the KV-cache family: npu_scatter_pa_kv_cache (ND cache, bfloat16).

Decode (64 tokens) and prefill (8192 tokens) into two cache sizes 16x apart (64 and 1024
blocks of 128 slots, 8 heads of 128): the in-place write should cost the tokens written, the
same for both caches, while the functional variant (which clones both caches, as op-plugin
does) grows with the cache.  Contenders:

* ``naive``: the eager composition users write, ``cache.view(-1, N, D)[slots] = key``;
* ``loop``: a Python loop over the tokens (the shape of op-plugin's golden);
* ``compiled``: ``torch.compile`` of ``naive``;
* ``npu_anywhere``: ``npu_scatter_pa_kv_cache(..., cache_mode="Norm")``;
* ``functional``: ``torch.ops.npu.npu_scatter_pa_kv_cache_functional``.
"""

from __future__ import annotations

import torch

from ..ops.cache import npu_scatter_pa_kv_cache, npu_scatter_pa_kv_cache_functional
from .registry import Case, register

TOKENS = {"decode": 64, "prefill": 8192}
BLOCKS = (64, 1024)                 # 16x apart
BLOCK_SIZE, HEADS, HEAD_DIM = 128, 8, 128
DTYPE = torch.bfloat16


def naive(key, value, key_cache, value_cache, slots):
    """What users hand-write for an ND paged cache (no negative slots in these cases)."""
    index = slots.long()
    key_cache.view(-1, key.shape[1], key.shape[2])[index] = key
    value_cache.view(-1, value.shape[1], value.shape[2])[index] = value
    return key_cache, value_cache


def loop(key, value, key_cache, value_cache, slots):
    block_size = key_cache.shape[1]
    for i, s in enumerate(slots.tolist()):
        key_cache[s // block_size, s % block_size] = key[i]
        value_cache[s // block_size, s % block_size] = value[i]
    return key_cache, value_cache


_compiled_naive = torch.compile(naive, dynamic=False)


def ours(key, value, key_cache, value_cache, slots):
    npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slots, cache_mode="Norm")
    return key_cache, value_cache


def functional(key, value, key_cache, value_cache, slots):
    return npu_scatter_pa_kv_cache_functional(key, value, key_cache, value_cache, slots,
                                              cache_mode="Norm")


def _case(preset: str, blocks: int) -> Case:
    tokens = TOKENS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        key = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).to(device=device, dtype=DTYPE)
        value = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).to(device=device, dtype=DTYPE)
        shape = (blocks, BLOCK_SIZE, HEADS, HEAD_DIM)
        key_cache = torch.zeros(shape, dtype=DTYPE, device=device)
        value_cache = torch.zeros(shape, dtype=DTYPE, device=device)
        slots = torch.randperm(blocks * BLOCK_SIZE, generator=gen)[:tokens].to(torch.int32)
        return key, value, key_cache, value_cache, slots.to(device)

    row = HEADS * HEAD_DIM * DTYPE.itemsize
    # each token's key and value read once and written once, plus its slot number
    nbytes = tokens * (4 * row + 4)
    return Case(
        name=f"npu_scatter_pa_kv_cache {preset} nb{blocks} bf16", op="npu_scatter_pa_kv_cache",
        preset=preset, dtype=DTYPE, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive,
            "loop": loop,
            "compiled": _compiled_naive,
            "npu_anywhere": ours,
            "functional": functional,
        },
        check="naive", tolerance={name: 0.0 for name in
                                  ("naive", "loop", "compiled", "npu_anywhere", "functional")})


for _preset in TOKENS:
    for _blocks in BLOCKS:
        register(_case(_preset, _blocks))
