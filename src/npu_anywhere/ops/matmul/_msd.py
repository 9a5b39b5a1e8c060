"""The MSD arithmetic of the A8W4 kernels (int8 activations, int4 weights), in one place.

The int4 cube unit cannot multiply int8 by int4, so the MSD pre-kernel splits each int8 value
into two int4 halves and the cube runs both halves (one matrix of twice the rows).  Every A8W4
kernel then does the same steps, which npu_quant_matmul (A8W4), npu_grouped_matmul (A8W4 /
A4W4), npu_grouped_matmul_finalize_routing (a8w4) and npu_grouped_matmul_swiglu_quant (A8W4 /
A4W4) share from here::

    split:        x = 16 * hi + lo + 8,   hi = floor(x / 16),  lo = (x & 15) - 8   (in [-8, 7])
    group sums:   D(a) = fp16 sum over k-groups g of fp16(int32(a[:, g] @ w[g]) * scale[g])
    dequant:      float32(D(hi)) * 16 + float32(D(lo))
    rows:         dequant + bias [+ rowsum(x) * offset]

The cube's int32 product is exact; the fixpipe dequantizes it with the group's scale (the fp19
field of the low word of the uint64 / int64 scale word, :func:`scale_rows`) and rounds it to
float16; the groups are added by float16 atomic adds in k order (a float16 + float16 sum done
in float32 and rounded once is the correctly rounded float16 sum: 24 >= 2 * 11 + 2 bits).
``bias`` is the offline term ``8 * sum_k(w * scale)`` that restores the ``+ 8`` of the low
half; ``offset`` the asymmetric ``antiquant_offset * scale``, times x's exact row sums.

Sources: hicann/ops-nn ``matmul/quant_batch_matmul_v4/op_kernel/quant_batch_matmul_v4_msd.h``
and hicann/ops-transformer ``gmm/grouped_matmul/op_kernel/grouped_matmul_antiquant_a8w4_msd.h``
(each with its ``_msd_pre`` kernel), op-plugin's goldens ``a8w4_quant_golden`` and
``gmm_a8w4_golden``.
"""

from __future__ import annotations

import torch

from .integer import int_mm, unpack_scale_word


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 x -> (hi, lo), int4 values in int8 with ``x = 16 * hi + lo + 8``."""
    hi = torch.bitwise_right_shift(x, 4)                        # arithmetic: floor(x / 16)
    lo = (torch.bitwise_and(x.to(torch.int16), 15) - 8).to(torch.int8)
    return hi, lo


def scale_rows(words: torch.Tensor) -> torch.Tensor:
    """``[G, n]`` float32 scales from ``[n]`` or ``[G, n]`` scale words (the fp19 field)."""
    s, _ = unpack_scale_word(words)
    return s.reshape(-1, s.shape[-1])


def group_sums(a: torch.Tensor, w: torch.Tensor, scale: torch.Tensor,
               group_k: int) -> torch.Tensor:
    """float16 ``D(a)``: ``a`` [r, k] and ``w`` [k, n] int4 values in int8, ``scale`` [G, n]
    float32, k cut into groups of ``group_k`` (the last one may be shorter)."""
    k = w.shape[0]
    acc = None
    for g in range(scale.shape[0]):
        ks = slice(g * group_k, min(k, (g + 1) * group_k))
        part = (int_mm(a[:, ks], w[ks]).to(torch.float32) * scale[g]).to(torch.float16)
        acc = part if acc is None else (acc.to(torch.float32) + part).to(torch.float16)
    return acc


def dequant(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor,
            group_k: int) -> torch.Tensor:
    """float32 ``16 * D(hi) + D(lo)`` of int8 x [r, k], both halves in one product per group
    (the kernel's 2r-row matrix)."""
    hi, lo = split(x)
    d_hi, d_lo = group_sums(torch.cat((hi, lo)), w, scale, group_k).to(torch.float32).split(
        x.shape[0])
    return d_hi * 16 + d_lo


def rows(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, group_k: int,
         bias: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """float32 ``dequant + bias [+ rowsum(x) * offset]`` (``bias`` / ``offset`` broadcast over
    rows; the row sums of int8 x are exact in float32)."""
    v = dequant(x, w, scale, group_k) + bias.to(torch.float32)
    if offset is not None:
        v = x.to(torch.float32).sum(-1, keepdim=True) * offset + v
    return v
