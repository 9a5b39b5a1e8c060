"""Benchmark cases for the activation family: npu_swiglu on decode and prefill shapes."""

from __future__ import annotations

import torch

from ..ops.activation.swiglu import npu_swiglu
from .registry import Case, register, with_reference

# name: (tokens T, intermediate size I); the input is (T, 2*I) = cat([gate, up], -1)
PRESETS = {
    "decode I=11008": (64, 11008),
    "decode I=18944": (64, 18944),
    "prefill I=11008": (8192, 11008),
}
DTYPES = (torch.float32, torch.bfloat16)


def naive_swiglu(x):
    """What users hand-write (seed 004: swish(A) * B), in the input dtype."""
    a, b = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(a) * b


_compiled_swiglu = torch.compile(naive_swiglu, dynamic=False)


def _swiglu_case(preset: str, dtype: torch.dtype) -> Case:
    tokens, inter = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(tokens, 2 * inter, generator=gen, dtype=torch.float32)
        return (x.to(device=device, dtype=dtype),)

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (2 * tokens * inter + tokens * inter)
    return Case(
        name=f"npu_swiglu {preset} {str(dtype)[6:]}", op="npu_swiglu", preset=preset,
        dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        contenders={
            "naive": naive_swiglu,
            "compiled": _compiled_swiglu,
            "reference": with_reference(npu_swiglu),
            "npu_anywhere": npu_swiglu,
        })


for _preset in PRESETS:
    for _dtype in DTYPES:
        register(_swiglu_case(_preset, _dtype))
