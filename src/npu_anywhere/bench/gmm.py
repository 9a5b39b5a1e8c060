"""Benchmark cases for the grouped matmul family: npu_grouped_matmul on MoE shapes.

DeepSeek-like expert GEMM: T tokens x top-k 8 routed rows over E = 64 experts with skewed
loads (a Zipf-like spread, six experts empty), H = 2048 -> I = 1408.  Contenders:

* ``naive``: the per-expert loop MoE code hand-writes (a boolean mask per expert, gather,
  matmul, scatter back), in the input dtype;
* ``dense_roof``: one ``torch.mm`` of the same total FLOPs ([rows, H] @ [H, I]), the roof
  this machine reaches in this run;
* ``mm_loop``: the bare per-expert ``torch.mm`` into preallocated output rows (what the op
  runs, without its checks, group_list read and output allocation);
* ``npu_anywhere``: ``npu_grouped_matmul([x], [w], group_list=counts, split_item=2,
  group_type=0, group_list_type=1)`` on the rows sorted by expert.

The figure that matters is ``npu_anywhere`` / ``dense_roof`` (both in the table); the copy
floor is not a bound for a compute-bound op.  ``mm_loop`` separates the op's own cost from the
GEMM library's: at T=512 (64 experts of ~64 rows) the per-expert GEMMs of a few dozen rows run
far below the large-GEMM rate on these CPUs, and the op stays within ~10% of the bare loop.
"""

from __future__ import annotations

import torch

from ..ops.gmm.grouped_matmul import npu_grouped_matmul
from .registry import Case, register

# name: (tokens T, top-k, experts E, hidden H, intermediate I)
PRESETS = {
    "deepseek-moe-4k": (4096, 8, 64, 2048, 1408),
    "deepseek-moe-512": (512, 8, 64, 2048, 1408),
}
DTYPES = (torch.float32, torch.bfloat16)
EMPTY_EXPERTS = 6


def skewed_counts(rows: int, experts: int, gen: torch.Generator) -> torch.Tensor:
    """Rows per expert: Zipf-like weights 1 / (rank + 1)^0.8, a few experts given none."""
    weights = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** 0.8
    weights = weights[torch.randperm(experts, generator=gen)]
    weights[torch.randperm(experts, generator=gen)[:EMPTY_EXPERTS]] = 0
    counts = torch.multinomial(weights, rows, replacement=True, generator=gen)
    return torch.bincount(counts, minlength=experts).to(torch.int64)


def naive_moe_loop(x, w, expert_of_row, counts):
    """Per expert: select its rows with a mask, matmul, write them back."""
    y = x.new_zeros(x.shape[0], w.shape[2])
    for e in range(w.shape[0]):
        mask = expert_of_row == e
        if mask.any():
            y[mask] = x[mask] @ w[e]
    return y


def dense_roof(x, w, expert_of_row, counts):
    return x @ w[0]


def mm_loop(x, w, expert_of_row, counts):
    """One torch.mm per non-empty expert slice, written in place into the output rows."""
    y = x.new_empty(x.shape[0], w.shape[2])
    start = 0
    for e, c in enumerate(counts.tolist()):
        if c:
            torch.mm(x[start:start + c], w[e], out=y[start:start + c])
        start += c
    return y


def _grouped(x, w, expert_of_row, counts):
    return npu_grouped_matmul([x], [w], group_list=counts, split_item=2, group_type=0,
                              group_list_type=1)[0]


def _case(preset: str, dtype: torch.dtype) -> Case:
    t, top_k, e, h, i = PRESETS[preset]
    rows = t * top_k

    def make(device):
        gen = torch.Generator().manual_seed(0)
        counts = skewed_counts(rows, e, gen)
        expert_of_row = torch.repeat_interleave(torch.arange(e), counts)
        x = torch.randn(rows, h, generator=gen).to(device=device, dtype=dtype)
        w = (torch.randn(e, h, i, generator=gen) / h ** 0.5).to(device=device, dtype=dtype)
        return x, w, expert_of_row.to(device), counts.to(device)

    size = torch.finfo(dtype).bits // 8
    nbytes = size * (rows * h + e * h * i + rows * i)
    return Case(
        name=f"npu_grouped_matmul {preset} {str(dtype)[6:]}", op="npu_grouped_matmul",
        preset=preset, dtype=dtype, make_inputs=make, bytes_moved=nbytes,
        # mm_loop in float32 only: a bfloat16 torch.mm runs a generic kernel on AVX2 CPUs.
        contenders={
            "naive": naive_moe_loop,
            "dense_roof": dense_roof,
            **({"mm_loop": mm_loop} if dtype == torch.float32 else {}),
            "npu_anywhere": _grouped,
        },
        check="naive",
        # dense_roof computes another product (same FLOPs): excluded from the comparison.
        tolerance={"dense_roof": float("inf")})


for _preset in PRESETS:
    for _dtype in DTYPES:
        register(_case(_preset, _dtype))
