"""Benchmark cases for the matmul family: W8A8 (npu_quant_matmul), W4A16 and W8A16
(npu_weight_quant_batchmatmul) linear layers, K = N = 4096, decode (M = 16) and prefill
(M = 4096; W8A16 decode only).

Contenders, in one run:

* ``naive``: the formula as users write it -- dequantize to float, then a float32 matmul (int4
  words unpacked with two int8 shifts per byte, the cheapest eager unpack);
* ``float_roof``: ``torch.mm`` of float32 operands of the same shape (what an unquantized
  float32 layer costs here), excluded from the output comparison;
* ``reference`` (the eager oracle) and ``npu_anywhere`` (the dispatched op).
"""

from __future__ import annotations

import torch

from ..ops.matmul import integer
from ..ops.matmul.quant_matmul import npu_quant_matmul
from ..ops.matmul.weight_quant_batchmatmul import npu_weight_quant_batchmatmul
from ..ops.quant import core as quant_core
from .registry import Case, register, with_reference

K = N = 4096
PRESETS = {"decode": 16, "prefill": 4096}
GROUP = 128


def float_roof(x, w, *rest):
    return torch.mm(x, w)


# -- W8A8: int8 x int8, per-channel scale, per-token scale, bfloat16 output ---------------------

def naive_w8a8(x1, x2, scale, pertoken, *roof):
    return (torch.mm(x1.float(), x2.float()) * scale * pertoken[:, None]).to(torch.bfloat16)


def _w8a8(x1, x2, scale, pertoken, *roof):
    return npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)


def _w8a8_case(preset: str) -> Case:
    m = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x1 = torch.randint(-128, 128, (m, K), generator=gen, dtype=torch.int8)
        x2 = torch.randint(-128, 128, (K, N), generator=gen, dtype=torch.int8)
        scale = torch.rand(N, generator=gen) * 1e-4
        pertoken = torch.rand(m, generator=gen)
        return tuple(t.to(device) for t in (x1, x2, scale, pertoken))

    def roof(x1, x2, *rest):
        return float_roof(_roof_x(x1), _roof_w(x2))

    return Case(
        name=f"npu_quant_matmul W8A8 {preset}", op="npu_quant_matmul", preset=preset,
        dtype=torch.int8, make_inputs=make, bytes_moved=m * K + K * N + 2 * m * N + 4 * (m + N),
        contenders={"naive": naive_w8a8, "float_roof": _cached_roof(roof),
                    "reference": with_reference(_w8a8), "npu_anywhere": _w8a8},
        check="naive", tolerance={"float_roof": float("inf")})


# -- W4A16: bfloat16 activations, int4 weights packed in int32, per-group (128) scales ----------

def naive_w4a16(x, packed, scale):
    w = integer.unpack_int4_fast(packed).to(torch.float32)
    w = (w * scale.to(torch.float32).repeat_interleave(GROUP, dim=0)).to(torch.bfloat16)
    return torch.mm(x.float(), w.float()).to(torch.bfloat16)


def _w4a16(x, packed, scale):
    return npu_weight_quant_batchmatmul(x, packed, scale, antiquant_group_size=GROUP)


def _w4a16_case(preset: str) -> Case:
    m = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(m, K, generator=gen).to(torch.bfloat16)
        packed = quant_core.pack_int4(torch.randint(-8, 8, (K, N), generator=gen))
        scale = (torch.rand(K // GROUP, N, generator=gen) * 0.02).to(torch.bfloat16)
        return tuple(t.to(device) for t in (x, packed, scale))

    def roof(x, packed, scale):
        return float_roof(_roof_x(x), _roof_w(packed))

    return Case(
        name=f"npu_weight_quant_batchmatmul W4A16 {preset}", op="npu_weight_quant_batchmatmul",
        preset=preset, dtype=torch.bfloat16, make_inputs=make,
        bytes_moved=2 * m * K + K * N // 2 + 2 * (K // GROUP) * N + 2 * m * N,
        contenders={"naive": naive_w4a16, "float_roof": _cached_roof(roof),
                    "reference": with_reference(_w4a16), "npu_anywhere": _w4a16},
        check="naive", tolerance={"float_roof": float("inf")})


# -- W8A16: bfloat16 activations, int8 weights, per-channel scales ------------------------------

def naive_w8a16(x, w, scale):
    w = (w.to(torch.float32) * scale.to(torch.float32)).to(torch.bfloat16)
    return torch.mm(x.float(), w.float()).to(torch.bfloat16)


def _w8a16(x, w, scale):
    return npu_weight_quant_batchmatmul(x, w, scale)


def _w8a16_case(preset: str) -> Case:
    m = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(m, K, generator=gen).to(torch.bfloat16)
        w = torch.randint(-128, 128, (K, N), generator=gen, dtype=torch.int8)
        scale = (torch.rand(1, N, generator=gen) * 2e-3).to(torch.bfloat16)
        return tuple(t.to(device) for t in (x, w, scale))

    def roof(x, w, scale):
        return float_roof(_roof_x(x), _roof_w(w))

    return Case(
        name=f"npu_weight_quant_batchmatmul W8A16 {preset}", op="npu_weight_quant_batchmatmul",
        preset=preset, dtype=torch.bfloat16, make_inputs=make,
        bytes_moved=2 * m * K + K * N + 2 * N + 2 * m * N,
        contenders={"naive": naive_w8a16, "float_roof": _cached_roof(roof),
                    "reference": with_reference(_w8a16), "npu_anywhere": _w8a16},
        check="naive", tolerance={"float_roof": float("inf")})


# The roof multiplies float32 operands of the layer's shape; they are made once per shape so the
# roof times the GEMM alone, not the conversion.
_ROOF_OPERANDS: dict = {}


def _roof_x(x):
    key = ("x", tuple(x.shape), x.device)
    if key not in _ROOF_OPERANDS:
        _ROOF_OPERANDS[key] = torch.randn(x.shape[0], K, device=x.device)
    return _ROOF_OPERANDS[key]


def _roof_w(w):
    key = ("w", w.device)
    if key not in _ROOF_OPERANDS:
        _ROOF_OPERANDS[key] = torch.randn(K, N, device=w.device) / K ** 0.5
    return _ROOF_OPERANDS[key]


def _cached_roof(fn):
    return fn


for _preset in PRESETS:
    register(_w8a8_case(_preset))
    register(_w4a16_case(_preset))
register(_w8a16_case("decode"))
