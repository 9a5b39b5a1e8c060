"""Exact integer GEMM and the helpers the quantized matmuls share.

Integer accumulation must be exact: the NPU's cube unit sums int8 x int8 products in int32.
On CPU ``torch._int_mm`` does exactly that (int8 inputs, int32 accumulator, any m/k/n here,
~15x faster than a float32 mm of the same shape on these machines).  Elsewhere the products are
summed in float32 over K chunks of at most 1024: each partial sum is bounded by
1024 * 128 * 128 = 2**24, which float32 holds exactly, and the chunks are added in int32.
"""

from __future__ import annotations

import torch

from ... import checks
from ..quant import core as quant_core
from ..quant.trans_quant_param import FP19_MASK, OFFSET_SHIFT

_EXACT_F32_CHUNK = 1024      # 1024 * 128 * 128 == 2**24: float32 is exact up to here


def int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int8 ``a [m, k]`` @ int8 ``b [k, n]`` -> int32 ``[m, n]``, exact."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return torch.zeros(m, n, dtype=torch.int32, device=a.device)
    if a.device.type == "cpu":
        return torch._int_mm(a.contiguous(), b)
    out = torch.zeros(m, n, dtype=torch.int32, device=a.device)
    for start in range(0, k, _EXACT_F32_CHUNK):
        stop = min(k, start + _EXACT_F32_CHUNK)
        part = torch.mm(a[:, start:stop].to(torch.float32), b[start:stop].to(torch.float32))
        out += part.to(torch.int32)
    return out


def int_matmul(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Batched exact int8 matmul with broadcasting batch dims: ``[..., m, k] @ [..., k, n]``."""
    m, k = x1.shape[-2:]
    n = x2.shape[-1]
    if x2.dim() == 2:
        # One weight for every batch: fold the batch into the rows (one GEMM).
        return int_mm(x1.reshape(-1, k), x2).reshape(*x1.shape[:-1], n)
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    a = x1.expand(*batch, m, k).reshape(-1, m, k)
    b = x2.expand(*batch, k, n).reshape(-1, k, n)
    if a.shape[0] == 0:
        return torch.zeros(*batch, m, n, dtype=torch.int32, device=x1.device)
    out = torch.stack([int_mm(a[i], b[i]) for i in range(a.shape[0])])
    return out.reshape(*batch, m, n)


def unpack_scale_word(word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """npu_trans_quant_param's int64 word -> (float32 scale, float32 offset).

    The scale is the fp19 field (bits 13..31, a float32 with its low 13 mantissa bits zero);
    the offset the 9-bit two's-complement field at bits 37..45.
    """
    bits = word & FP19_MASK
    bits = torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits).to(torch.int32)
    scale = bits.view(torch.float32)
    off = (word >> OFFSET_SHIFT) & 0x1FF
    off = torch.where(off >= 256, off - 512, off)
    return scale, off.to(torch.float32)


def to_int8_saturated(v: torch.Tensor) -> torch.Tensor:
    """float32 -> int8: round half to even, NaN -> 0, saturate to [-128, 127]."""
    return quant_core.saturate_int(quant_core.round_values(v, "rint"), quant_core.FORMATS["int8"])


# The byte-lane int4 unpack now is the quant core's own; the name stays for its callers.
unpack_int4_fast = quant_core.unpack_int4


def unpack_int4_operands(x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values of x1 ``[..., m, k]`` and x2 ``[..., k, n]`` for an int8 or int4 matmul.

    int8 operands pass through.  int4 operands are int32 words of 8 nibbles (low nibble
    first) packed along the last axis: x1 along k; x2 along n when it is a contiguous
    ``(k, n // 8)`` tensor, along k when it is the transpose of a contiguous ``(n, k // 8)``.
    """
    if x1.dtype != torch.int32:
        return x1, x2
    a = quant_core.unpack_int4(x1)
    if x2.is_contiguous():
        return a, quant_core.unpack_int4(x2)
    return a, quant_core.unpack_int4(x2.mT).mT


INT_OPERAND_DTYPES = (torch.int8, torch.int32)
"""int8, or int32 words holding eight int4 values."""
MAX_LAST_DIM = 65535


def check_int_operands(op: str, x1: torch.Tensor, x2: torch.Tensor) -> None:
    """The operand rules the int8 / int4 matmul ops share: one dtype of INT_OPERAND_DTYPES for
    both, 2 to 6 dims, not empty, last dims <= MAX_LAST_DIM; int4 words in the layouts
    :func:`unpack_int4_operands` reads (x1 contiguous; x2 a contiguous ``(k, n // 8)`` or the
    transpose of a contiguous ``(n, k // 8)``)."""
    checks.expect_dtype(x1, INT_OPERAND_DTYPES, op, "x1")
    checks.expect(x2.dtype == x1.dtype, op, "x2", lambda: f"the dtype of x1 ({x1.dtype})",
                  lambda: f"dtype {x2.dtype}", TypeError)
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect(2 <= t.dim() <= 6, op, name, "a tensor with 2 to 6 dims",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
        checks.expect_nonempty(t, op, name)
        checks.expect(t.shape[-1] <= MAX_LAST_DIM, op, name, f"a last dim <= {MAX_LAST_DIM}",
                      lambda t=t: t.shape[-1], ValueError)
    if x1.dtype == torch.int32:
        checks.expect(x1.is_contiguous(), op, "x1",
                      "a contiguous tensor when int4 is packed in int32", "a strided view",
                      ValueError)
        checks.expect(x2.is_contiguous() or x2.mT.is_contiguous(), op, "x2",
                      "contiguous (k, n // 8) or the transpose of a contiguous (n, k // 8) when "
                      "int4 is packed in int32", "another layout", ValueError)
