"""Index math shared by the MoE routing ops.

Every routing op sorts the flattened ``(NUM_ROWS, K)`` expert ids with a *stable* sort, so ties
keep their flat position ``n * K + k`` (or ``k * NUM_ROWS + n`` for v1, whose flat order is its
``row_idx`` layout).  The sort runs on int64 keys (int32 ids widen losslessly) and returns int64
positions; outputs are cast to int32 once at the end.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from ... import checks
from ...kernels.cpu_memory import empty_huge


def all_true_in_eager(mask: torch.Tensor) -> bool:
    """Whether ``mask`` is known, without tracing, to be all True.

    An eager call may skip a masking pass over a large output when nothing is masked (about a
    fifth of npu_moe_init_routing_v2's time on 4096 x 8 rows of 2048); under FakeTensor, a
    trace or torch.compile the values are unknown (and a compiled graph fuses the mask into
    the gather anyway), so the pass stays.
    """
    if torch.compiler.is_compiling() or is_fake(mask):
        return False
    return bool(mask.all())


def weighted_row_sum(table: torch.Tensor, idx: torch.Tensor, skip: torch.Tensor | None,
                     weights: torch.Tensor | None, ct: torch.dtype) -> torch.Tensor:
    """``out[n] = sum_k weights[n, k] * table[idx[n, k]]`` in ``ct``, k ascending (the kernels'
    order), an entry where ``skip`` is True adding 0; ``idx`` must be valid rows everywhere.

    One gathered ``(N, H)`` slice per k, each rounded to ``ct``, weighted, then added: the loop
    a compiled provider fuses into one pass that reads each table row once.  Eager CPU calls
    gather every slice into the same two scratch buffers (a fresh slice per k is a fresh
    mmap whose page faults cost more than the copy) and write the sum into huge pages
    (:mod:`...kernels.cpu_memory`); the arithmetic is the same.
    """
    n, k = idx.shape
    hidden = table.shape[1]
    if k == 0:
        return table.new_zeros((n, hidden), dtype=ct)

    def weigh(term, j):
        if skip is not None:
            term = term.masked_fill_(skip[:, j:j + 1], 0)
        return term if weights is None else term.mul_(weights[:, j:j + 1])

    if torch.compiler.is_compiling() or is_fake(table):
        total = weigh(table.index_select(0, idx[:, 0]).to(ct), 0)
        for j in range(1, k):
            total = total.add_(weigh(table.index_select(0, idx[:, j]).to(ct), j))
        return total
    total = empty_huge((n, hidden), dtype=ct, like=table)
    term = torch.empty_like(total) if k > 1 else None
    narrow = None if table.dtype == ct else table.new_empty((n, hidden))
    for j in range(k):
        into = total if j == 0 else term
        if narrow is None:
            torch.index_select(table, 0, idx[:, j], out=into)
        else:
            into.copy_(torch.index_select(table, 0, idx[:, j], out=narrow))
        weigh(into, j)
        if j:
            total.add_(term)
    return total


def stable_sort(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sorted_keys, positions)`` of a 1-D tensor, ties in ascending position."""
    return torch.sort(keys, stable=True)


def stable_top_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest along -1, descending, equal values ranked by lower index first.

    The ranking the routing goldens get from a stable descending argsort, without a sort: each
    value's float32 bits, made order-preserving as a signed integer, go in the high 32 bits of
    an int64 key and the reversed index in the low 32 bits, so no two keys tie and the largest
    keys are the stable ranking (``torch.topk`` itself promises nothing about ties).  ``-0.0``
    ranks equal to ``+0.0``, as float comparison has it.  float64 values (accepted outside
    strict mode) take the stable sort.
    """
    if values.dtype == torch.float64:
        ordered, idx = torch.sort(values, dim=-1, descending=True, stable=True)
        return ordered[..., :k].contiguous(), idx[..., :k].contiguous()
    width = values.shape[-1]
    bits = (values.to(torch.float32) + 0.0).view(torch.int32).to(torch.int64)   # -0.0 -> +0.0
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)   # negative floats: reverse their order
    low = (width - 1) - torch.arange(width, dtype=torch.int64, device=values.device)
    keys = (bits << 32) | low
    if (torch.compiler.is_compiling() and values.dtype == torch.float32
            and k <= _PASSES_MAX_K and width >= _PASSES_MIN_WIDTH * k):
        top = _largest_by_passes(keys, k)
    else:
        top = torch.topk(keys, k, dim=-1, sorted=True).values
    idx = (width - 1) - (top & 0xFFFFFFFF)
    return values.gather(-1, idx), idx


# Compiled graphs rank few of many float32 values by k max-passes: Inductor fuses each pass
# into one vectorised reduction, where ATen's topk (which Inductor keeps as a call) works row by
# row.  Measured on CPU (4096 rows, one thread, best of 15-20): about 2x quicker for 8 of 256,
# 3x for 2 of 64, 1.3x for 8 of 64; slower for 4 of 8, 16 of 64 or 32 of 256, and for 16-bit
# values (Inductor then widens them again in every pass).
_PASSES_MAX_K = 8
_PASSES_MIN_WIDTH = 8


def _largest_by_passes(keys: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest of unique keys along -1, descending: each pass takes the largest key
    below the previous one (keys are unique, so nothing is taken twice or skipped)."""
    floor = torch.iinfo(keys.dtype).min
    best = keys.amax(dim=-1, keepdim=True)
    taken = [best]
    for _ in range(k - 1):
        # The floor stands in for the keys already taken; k <= width, so a row never runs out
        # (and a real key equal to the floor is then the answer anyway).
        best = torch.where(keys < best, keys, floor).amax(dim=-1, keepdim=True)
        taken.append(best)
    return torch.cat(taken, dim=-1)


def inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """``inv`` with ``inv[perm[i]] = i`` (``perm``: a 1-D int64 permutation)."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), dtype=perm.dtype, device=perm.device)
    return inv


def expect_int32_ids(op: str, param: str, t: torch.Tensor, dims: int = 2) -> None:
    checks.expect_dim(t, dims, op, param)
    checks.expect_dtype(t, (torch.int32,), op, param)


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The float dtypes the routing kernels take (float64 is accepted outside strict mode)."""


def expect_float(op: str, param: str, t: torch.Tensor) -> None:
    from ... import targets
    allowed = FLOAT_DTYPES if targets.current() is not None else FLOAT_DTYPES + (torch.float64,)
    checks.expect_dtype(t, allowed, op, param)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for the 16-bit floats and float32 (the kernels' vector math), float64 kept."""
    return torch.float64 if dtype == torch.float64 else torch.float32
