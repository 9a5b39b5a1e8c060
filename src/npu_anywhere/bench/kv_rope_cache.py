"""Benchmark cases for npu_kv_rmsnorm_rope_cache (DeepSeek MLA shapes: Dv 512, Dk 64, bf16,
PA_BNSD cache of 128-slot blocks).

Decode (64 tokens) and prefill (8192 tokens) into two cache sizes 16x apart (128 and 2048
blocks): the in-place write should cost the tokens written, the same for both caches.
Contenders:

* ``naive``: the eager composition users write -- RMSNorm, de-interleave + RoPE, rounding,
  then ``index_put`` into each cache;
* ``compiled``: ``torch.compile`` of ``naive``;
* ``npu_anywhere``: ``npu_kv_rmsnorm_rope_cache(..., cache_mode="PA_BNSD")``.
"""

from __future__ import annotations

import torch

from ..ops.kv_rope_cache import npu_kv_rmsnorm_rope_cache
from .registry import Case, register

TOKENS = {"decode": 64, "prefill": 8192}
BLOCKS = (128, 2048)                # 16x apart
BLOCK_SIZE, DV, DK = 128, 512, 64
DTYPE = torch.bfloat16
EPS = 1e-5


def naive(kv, gamma, cos, sin, index, k_cache, ckv_cache):
    x = kv[..., :DV].float()
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS) * gamma.float()
    r = kv[..., DV:].float()
    x1, x2 = r[..., 0::2], r[..., 1::2]
    k = torch.cat((x1, x2), -1) * cos.float() + torch.cat((-x2, x1), -1) * sin.float()
    k_cache.view(-1, DK)[index] = k.reshape(-1, DK).to(k_cache.dtype)
    ckv_cache.view(-1, DV)[index] = y.reshape(-1, DV).to(ckv_cache.dtype)
    return k_cache, ckv_cache


_compiled_naive = torch.compile(naive, dynamic=False)


def ours(kv, gamma, cos, sin, index, k_cache, ckv_cache):
    npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache,
                              cache_mode="PA_BNSD")
    return k_cache, ckv_cache


def _case(preset: str, blocks: int) -> Case:
    tokens = TOKENS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)

        def rnd(*shape):
            return torch.randn(*shape, generator=gen).to(device=device, dtype=DTYPE)
        kv = rnd(tokens, 1, 1, DV + DK)
        gamma, cos, sin = rnd(DV), rnd(tokens, 1, 1, DK), rnd(tokens, 1, 1, DK)
        k_cache = torch.zeros(blocks, BLOCK_SIZE, 1, DK, dtype=DTYPE, device=device)
        ckv_cache = torch.zeros(blocks, BLOCK_SIZE, 1, DV, dtype=DTYPE, device=device)
        index = torch.randperm(blocks * BLOCK_SIZE, generator=gen)[:tokens]
        return kv, gamma, cos, sin, index.to(device), k_cache, ckv_cache

    item = DTYPE.itemsize
    # kv, cos, sin read once, both cache rows written once, plus the index
    nbytes = tokens * ((DV + DK) * item + 2 * DK * item + (DV + DK) * item + 8)
    return Case(
        name=f"npu_kv_rmsnorm_rope_cache {preset} nb{blocks} bf16",
        op="npu_kv_rmsnorm_rope_cache", preset=preset, dtype=DTYPE, make_inputs=make,
        bytes_moved=nbytes,
        contenders={"naive": naive, "compiled": _compiled_naive, "npu_anywhere": ours},
        check="naive", tolerance={"naive": 0.0, "compiled": 1e-2, "npu_anywhere": 1e-2})


for _preset in TOKENS:
    for _blocks in BLOCKS:
        register(_case(_preset, _blocks))
