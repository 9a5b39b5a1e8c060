"""Benchmark cases for the RoPE family."""

from __future__ import annotations


import torch

from ..ops.posembedding import (apply_rotary_pos_emb, npu_apply_rotary_pos_emb, npu_mrope,
                                npu_rotary_mul)
from .registry import Case, register, with_reference

# name: (B, S, Nq, Nk, D)
PRESETS = {
    "prefill": (4, 1024, 32, 8, 128),
    "decode": (16, 1, 32, 8, 128),
}
DTYPES = (torch.float32, torch.bfloat16)


def rope_tables(batch: int, seq: int, dim: int, dtype: torch.dtype, device) -> tuple:
    """Real RoPE cos/sin (BS1D), so repeated in-place application stays bounded."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)            # half-mode layout of the angles
    cos = angles.cos().to(dtype)[None, :, None, :].expand(batch, seq, 1, dim).contiguous()
    sin = angles.sin().to(dtype)[None, :, None, :].expand(batch, seq, 1, dim).contiguous()
    return cos.to(device), sin.to(device)


def _rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def naive_pair(q, k, cos, sin):
    """What users hand-write today (HF ``apply_rotary_pos_emb``), in the input dtype."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def naive_rotary_mul(x, r1, r2):
    return r1 * x + r2 * _rotate_half(x)


_compiled_pair = torch.compile(naive_pair, dynamic=False)
_compiled_rotary_mul = torch.compile(naive_rotary_mul, dynamic=False)


def _pair_case(preset: str, dtype: torch.dtype) -> Case:
    b, s, nq, nk, d = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(b, s, nq, d, generator=gen).to(device=device, dtype=dtype)
        k = torch.randn(b, s, nk, d, generator=gen).to(device=device, dtype=dtype)
        cos, sin = rope_tables(b, s, d, dtype, device)
        return q, k, cos, sin

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (2 * b * s * (nq + nk) * d + 2 * b * s * d)
    return Case(
        name=f"apply_rotary_pos_emb {preset} {str(dtype)[6:]}", op="apply_rotary_pos_emb",
        preset=preset, dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_pair,
            "compiled": _compiled_pair,
            "reference": with_reference(apply_rotary_pos_emb),
            "npu_anywhere": apply_rotary_pos_emb,
            "in_place": npu_apply_rotary_pos_emb,
        })


def _rotary_mul_case(preset: str, dtype: torch.dtype) -> Case:
    b, s, nq, _, d = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(b, s, nq, d, generator=gen).to(device=device, dtype=dtype)
        cos, sin = rope_tables(1, s, d, dtype, device)
        return x, cos, sin

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (2 * b * s * nq * d + 2 * s * d)
    return Case(
        name=f"npu_rotary_mul {preset} {str(dtype)[6:]}", op="npu_rotary_mul", preset=preset,
        dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_rotary_mul,
            "compiled": _compiled_rotary_mul,
            "reference": with_reference(npu_rotary_mul),
            "npu_anywhere": npu_rotary_mul,
        })


for _preset in PRESETS:
    for _dtype in DTYPES:
        register(_pair_case(_preset, _dtype))
        register(_rotary_mul_case(_preset, _dtype))



# -- npu_mrope (Qwen2-VL-style M-RoPE: 3 sections, 28/4 heads of 128) -----------------------

MROPE_TOKENS = {"decode": 64, "prefill": 8192}
MROPE_HEADS = (28, 4, 128)          # query heads, key heads, head_size
MROPE_SECTION = [16, 24, 24]


def naive_mrope(positions, query, key, cos_sin_cache, head_size):
    """The doc formula in eager PyTorch, in the input dtype (what users hand-write)."""
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    cos = torch.cat([m[i] for i, m in enumerate(cos.split(MROPE_SECTION, dim=-1))], dim=-1)
    sin = torch.cat([m[i] for i, m in enumerate(sin.split(MROPE_SECTION, dim=-1))], dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    outs = []
    for x in (query, key):
        heads = x.view(x.shape[0], -1, head_size)
        x1, x2 = torch.chunk(heads, 2, dim=-1)
        outs.append(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).reshape(x.shape))
    return tuple(outs)


_compiled_mrope = torch.compile(naive_mrope, dynamic=False)


def _mrope_case(preset: str, dtype: torch.dtype) -> Case:
    tokens = MROPE_TOKENS[preset]
    nq, nk, head = MROPE_HEADS

    def make(device):
        gen = torch.Generator().manual_seed(0)
        positions = torch.randint(0, 32768, (3, tokens), generator=gen).to(device)
        query = torch.randn(tokens, nq * head, generator=gen).to(device=device, dtype=dtype)
        key = torch.randn(tokens, nk * head, generator=gen).to(device=device, dtype=dtype)
        angles = torch.rand(32768, head // 2, generator=gen, dtype=torch.float64) * 6.3
        cache = torch.cat((angles.cos(), angles.sin()), -1).to(device=device, dtype=dtype)
        return positions, query, key, cache, head

    def ours(positions, query, key, cache, head):
        return npu_mrope(positions, query, key, cache, head, mrope_section=MROPE_SECTION)

    size = torch.finfo(dtype).bits // 8
    # q and k read and written once, plus one cache row and the positions per token
    nbytes = size * tokens * (2 * (nq + nk) * head + head) + 8 * 3 * tokens
    return Case(
        name=f"npu_mrope {preset} {str(dtype)[6:]}", op="npu_mrope", preset=preset,
        dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_mrope,
            "compiled": _compiled_mrope,
            "reference": with_reference(ours),
            "npu_anywhere": ours,
        })


for _preset in MROPE_TOKENS:
    for _dtype in DTYPES:
        register(_mrope_case(_preset, _dtype))
