"""Benchmark cases for the fused-quant family: npu_add_rms_norm_quant."""

from __future__ import annotations

import torch

from ..ops.fused_quant.add_rms_norm_quant import npu_add_rms_norm_quant
from .registry import Case, register, with_reference

# name: (tokens T, hidden H)
PRESETS = {
    "decode": (64, 4096),
    "decode-h7168": (64, 7168),
    "prefill": (8192, 4096),
}
DTYPES = (torch.bfloat16,)
EPS = 1e-6


def naive_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1):
    """The doc formula as users hand-write it: norm in the input dtype, quantize in float32."""
    x = x1 + x2
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gamma
    q = torch.round(y.float() / scales1 + zero_points1).clamp(-128, 127).to(torch.int8)
    return q, torch.zeros_like(q), x


_compiled = torch.compile(naive_add_rms_norm_quant, dynamic=False)


def _fused(x1, x2, gamma, scales1, zero_points1):
    return npu_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1, epsilon=EPS)


def _case(preset: str, dtype: torch.dtype) -> Case:
    t, h = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x1 = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
        x2 = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
        gamma = (1 + 0.1 * torch.randn(h, generator=gen)).to(device=device, dtype=dtype)
        scales1 = (0.02 + 0.01 * torch.rand(h, generator=gen)).to(device=device)
        zero_points1 = torch.randint(-4, 5, (h,), generator=gen, dtype=torch.int32).to(device)
        return x1, x2, gamma, scales1, zero_points1

    size = torch.finfo(dtype).bits // 8
    # read x1, x2, gamma, scales, zero points; write x and the two int8 outputs
    nbytes = size * (3 * t * h + h) + 8 * h + 2 * t * h
    return Case(
        name=f"npu_add_rms_norm_quant {preset} {str(dtype)[6:]}", op="npu_add_rms_norm_quant",
        preset=preset, dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_add_rms_norm_quant,
            "compiled": _compiled,
            "reference": with_reference(_fused),
            "npu_anywhere": _fused,
        })


for _preset in PRESETS:
    for _dtype in DTYPES:
        register(_case(_preset, _dtype))
