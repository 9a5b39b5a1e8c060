"""Index math shared by the MoE routing ops.

Every routing op sorts the flattened ``(NUM_ROWS, K)`` expert ids with a *stable* sort, so ties
keep their flat position ``n * K + k`` (or ``k * NUM_ROWS + n`` for v1, whose flat order is its
``row_idx`` layout).  The sort runs on int64 keys (int32 ids widen losslessly) and returns int64
positions; outputs are cast to int32 once at the end.
"""

from __future__ import annotations

import torch

from ... import checks


def stable_sort(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sorted_keys, positions)`` of a 1-D tensor, ties in ascending position."""
    return torch.sort(keys, stable=True)


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
