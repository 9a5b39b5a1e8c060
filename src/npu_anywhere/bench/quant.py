"""Benchmark cases for the quantization family: npu_dynamic_quant (per-token int8),
npu_quant_max (given scale, float8 output, |x| max) and npu_dynamic_block_quant (one scale per
1 x 128 block, int8)."""

from __future__ import annotations

import torch

from ..ops.quant import npu_dynamic_quant
from ..ops.quant.dynamic_block_quant import npu_dynamic_block_quant
from ..ops.quant.quant_max import npu_quant_max
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


def naive_quant_max(x, scale):
    """seed 004: ``y = cast(x * scale)`` to float8_e5m2 (saturating), ``amax = max(|x|)``."""
    y = (x.float() * scale).clamp(-57344.0, 57344.0).to(torch.float8_e5m2)
    return y, x.abs().amax().float().reshape(1)


_compiled_quant_max = torch.compile(naive_quant_max, dynamic=False)
BLOCK = 128


def naive_block_quant(x):
    """aclnnDynamicBlockQuant with 1 x 128 blocks: ``scale = max|block| / 127``,
    ``y = round(x / scale)``."""
    m, n = x.shape
    blocks = x.float().reshape(m, n // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=-1, keepdim=True) / 127
    y = torch.round(blocks / scale).clamp(-128, 127).to(torch.int8)
    return y.reshape(m, n), scale.squeeze(-1)


_compiled_block_quant = torch.compile(naive_block_quant, dynamic=False)


def ours_quant_max(x, scale):
    return npu_quant_max(x, scale, dst_dtype=torch.float8_e5m2)


def _more_cases(preset: str, tokens: int, hidden: int, dtype: torch.dtype) -> list[Case]:
    def make_x(device):
        gen = torch.Generator().manual_seed(1)
        return torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)

    elems, size = tokens * hidden, torch.finfo(dtype).bits // 8
    tag = f"{preset} T{tokens} H{hidden} {str(dtype)[6:]}"
    quant_max = Case(
        name=f"npu_quant_max {tag}", op="npu_quant_max", preset=preset, dtype=dtype,
        make_inputs=lambda device: (make_x(device), torch.tensor([0.5], device=device)),
        bytes_moved=elems * (size + 1) + 8,
        contenders={"naive": naive_quant_max, "compiled": _compiled_quant_max,
                    "reference": with_reference(ours_quant_max), "npu_anywhere": ours_quant_max})
    # naive/compiled divide by the scale as the doc writes; near a .5 tie a value may round the
    # other way than the kernel's order of operations (a difference of 1 in 127).
    block_quant = Case(
        name=f"npu_dynamic_block_quant {tag}", op="npu_dynamic_block_quant", preset=preset,
        dtype=dtype, make_inputs=lambda device: (make_x(device),),
        bytes_moved=elems * (size + 1) + elems // BLOCK * 4,
        contenders={"naive": naive_block_quant, "compiled": _compiled_block_quant,
                    "reference": with_reference(npu_dynamic_block_quant),
                    "npu_anywhere": npu_dynamic_block_quant},
        tolerance={"naive": 1.0 / 64, "compiled": 1.0 / 64})
    return [quant_max, block_quant]


for _preset, _shapes in PRESETS.items():
    for _t, _h in _shapes[:1]:
        for _case_ in _more_cases(_preset, _t, _h, torch.bfloat16):
            register(_case_)
