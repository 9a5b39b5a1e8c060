"""Golden steps shared by the A8W4 (MSD) grouped-matmul tests, written from the kernels.

``dequant_fp16_groups`` is the MSD kernels' per-k-group dequantization: each group's exact
integer product times its scale rounded to float16, the groups summed in float16
(``grouped_matmul_swiglu_quant_a8w4_msd_*.h``,
``grouped_matmul_finalize_routing_antiquant_a8w4_msd.h``).
"""

import torch


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """int4 values (in int8) -> int32 words of 8, low nibble first, along the last dim."""
    nib = (values.long() & 0xF).reshape(*values.shape[:-1], -1, 8)
    words = (nib << torch.arange(0, 32, 4)).sum(-1)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def dequant_fp16_groups(a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Sum over k-groups, in float16, of float16(int32(a[:, g] @ w[g]) * scales[g]), as
    float32 (``scales``: ``[groups, n]``, equal k-groups over ``a``'s columns)."""
    step = a.shape[1] // scales.shape[0]
    acc = None
    for j in range(scales.shape[0]):
        ks = slice(j * step, (j + 1) * step)
        part = ((a[:, ks].long() @ w[ks].long()).double() * scales[j].double()).half()
        acc = part if acc is None else (acc.double() + part.double()).half()
    return acc.float()
