"""The per-rank matmul of the communication-fused ops, in float32 before any collective.

Each function returns the rank's float32 partial result; the op then runs its collective on it
and rounds once to the output dtype.  The pieces are the matmul family's own:
weight dequantization from ``ops/matmul/weight_quant_batchmatmul.py`` (the kernel's x-dtype
roundings of the dequantized weight), exact int32 accumulation and the int64 scale-word
decoding from ``ops/matmul/integer.py``.
"""

from __future__ import annotations

import torch

from ... import checks
from ..matmul import integer
from ..matmul.weight_quant_batchmatmul import dequantize

FLOAT_DTYPES = (torch.float16, torch.bfloat16)
# y_dtype / output_dtype codes (ScalarType values) the quantized paths can produce.
OUT_CODES = {5: torch.float16, 15: torch.bfloat16}


def out_dtype_of(op: str, param: str, value, default: torch.dtype) -> torch.dtype:
    """A ScalarType or ScalarType code naming float16 or bfloat16; ``default`` for None."""
    if value is None:
        return default
    if isinstance(value, torch.dtype):
        checks.expect(value in FLOAT_DTYPES, op, param, "torch.float16 or torch.bfloat16",
                      str(value), ValueError)
        return value
    checks.expect(value in OUT_CODES, op, param,
                  "5 (torch.float16) or 15 (torch.bfloat16)", value, ValueError)
    return OUT_CODES[value]


def float_mm(x1: torch.Tensor, x2: torch.Tensor, bias=None) -> torch.Tensor:
    y = torch.matmul(x1.to(torch.float32), x2.to(torch.float32))
    return y if bias is None else y + bias.to(torch.float32)


def weight_quant_mm(x1, x2, scale, offset, group_size: int, bias=None) -> torch.Tensor:
    """``x1 @ ((x2 + offset) * scale)`` with the weight held in x1's dtype, as the weight-quant
    matmul kernel does."""
    w = dequantize(x2, scale, offset, group_size, x1.dtype, x2.shape[0])
    return float_mm(x1, w, bias)


def scale_values(scale: torch.Tensor) -> torch.Tensor:
    """A dequantization scale as float32 values (an int64 word is decoded first)."""
    if scale.dtype == torch.int64:
        return integer.unpack_scale_word(scale)[0]
    return scale.to(torch.float32)


def quant_mm(x1, x2, scale, pertoken_scale=None, bias=None) -> torch.Tensor:
    """``(x1 @ x2 + bias_int32) * scale [* pertoken_scale]`` with exact int32 accumulation;
    ``scale`` per-tensor / per-channel, ``pertoken_scale`` one value per row of x1 (any
    shape with that many values)."""
    acc = integer.int_matmul(x1, x2)
    if bias is not None:
        acc = acc + bias.to(torch.int32)
    v = acc.to(torch.float32) * scale_values(scale).reshape(-1)
    if pertoken_scale is not None:
        v = v * pertoken_scale.to(torch.float32).reshape(*x1.shape[:-1], 1)
    return v
