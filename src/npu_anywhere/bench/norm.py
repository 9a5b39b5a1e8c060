"""Benchmark cases for the normalization family: npu_rms_norm and npu_add_rms_norm."""

from __future__ import annotations

import torch

from ..ops.norm.add_rms_norm import npu_add_rms_norm
from ..ops.norm.rms_norm import npu_rms_norm
from .registry import Case, register, with_reference

# name: (tokens T, hidden H)
PRESETS = {
    "decode": (64, 4096),
    "decode-h7168": (64, 7168),
    "prefill": (8192, 4096),
}
DTYPES = (torch.float32, torch.bfloat16)
EPS = 1e-6


def naive_rms_norm(x, gamma):
    """The doc formula as users hand-write it, in the input dtype."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return x * rstd * gamma, rstd


def naive_add_rms_norm(x1, x2, gamma):
    x = x1 + x2
    y, rstd = naive_rms_norm(x, gamma)
    return y, rstd, x


_compiled_rms_norm = torch.compile(naive_rms_norm, dynamic=False)
_compiled_add_rms_norm = torch.compile(naive_add_rms_norm, dynamic=False)


def _rms_norm(x, gamma):
    return npu_rms_norm(x, gamma, EPS)


def _add_rms_norm(x1, x2, gamma):
    return npu_add_rms_norm(x1, x2, gamma, EPS)


def _rms_norm_case(preset: str, dtype: torch.dtype) -> Case:
    t, h = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
        gamma = (1 + 0.1 * torch.randn(h, generator=gen)).to(device=device, dtype=dtype)
        return x, gamma

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (2 * t * h + h) + 4 * t
    return Case(
        name=f"npu_rms_norm {preset} {str(dtype)[6:]}", op="npu_rms_norm", preset=preset,
        dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_rms_norm,
            "compiled": _compiled_rms_norm,
            "reference": with_reference(_rms_norm),
            "npu_anywhere": _rms_norm,
        })


def _add_rms_norm_case(preset: str, dtype: torch.dtype) -> Case:
    t, h = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x1 = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
        x2 = torch.randn(t, h, generator=gen).to(device=device, dtype=dtype)
        gamma = (1 + 0.1 * torch.randn(h, generator=gen)).to(device=device, dtype=dtype)
        return x1, x2, gamma

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (4 * t * h + h) + 4 * t
    return Case(
        name=f"npu_add_rms_norm {preset} {str(dtype)[6:]}", op="npu_add_rms_norm",
        preset=preset, dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_add_rms_norm,
            "compiled": _compiled_add_rms_norm,
            "reference": with_reference(_add_rms_norm),
            "npu_anywhere": _add_rms_norm,
        })


for _preset in PRESETS:
    for _dtype in DTYPES:
        register(_rms_norm_case(_preset, _dtype))
        register(_add_rms_norm_case(_preset, _dtype))
