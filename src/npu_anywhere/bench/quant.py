"""Benchmark cases for the quantization family: npu_dynamic_quant (per-token int8)."""

from __future__ import annotations

import torch

from ..ops.quant import npu_dynamic_quant
from .registry import Case, register, with_reference

# name: (T tokens, H hidden)
PRESETS = {
    "decode": [(64, 4096), (64, 7168)],
    "prefill": [(8192, 4096)],
}
DTYPES = (torch.float16, torch.bfloat16)


def naive_dynamic_quant(x):
    """The doc formula as users write it in eager PyTorch (float32 math, per-row scale)."""
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True) / 127
    y = torch.round(x / scale).clamp(-128, 127).to(torch.int8)
    return y, scale.squeeze(-1)


_compiled_dynamic_quant = torch.compile(naive_dynamic_quant, dynamic=False)


def _case(preset: str, tokens: int, hidden: int, dtype: torch.dtype) -> Case:
    def make(device):
        gen = torch.Generator().manual_seed(0)
        return (torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype),)

    nbytes = tokens * hidden * (torch.finfo(dtype).bits // 8) + tokens * hidden + tokens * 4
    # naive/compiled divide by the scale, the A2 kernel multiplies by its reciprocal: near a .5
    # tie a value can round the other way (a difference of 1 in 127).
    return Case(
        name=f"npu_dynamic_quant {preset} T{tokens} H{hidden} {str(dtype)[6:]}",
        op="npu_dynamic_quant", preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=nbytes,
        contenders={
            "naive": naive_dynamic_quant,
            "compiled": _compiled_dynamic_quant,
            "reference": with_reference(npu_dynamic_quant),
            "npu_anywhere": npu_dynamic_quant,
        },
        tolerance={"naive": 1.0 / 64, "compiled": 1.0 / 64})


for _preset, _shapes in PRESETS.items():
    for _t, _h in _shapes:
        for _dtype in DTYPES:
            register(_case(_preset, _t, _h, _dtype))
