"""Helpers shared by the cache/scatter ops: dtype lists and eager value checks.

Index *values* (slots, offsets, positions) can only be checked on real tensors: those checks run
in the eager kernels, before the first write, and never under FakeTensor (the ops give
explicit fake kernels).  Shapes, dtypes and the other metadata are checked by each op's
``check_*`` function, which eager, FakeTensor and ``torch.compile`` share.
"""

from __future__ import annotations

from typing import Iterable

import torch

from ... import checks, dtypes, targets

INDEX_DTYPES = (torch.int32, torch.int64)

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def allowed_dtypes(default: Iterable[torch.dtype],
                   per_product: dict[targets.Product, Iterable[torch.dtype]]) -> tuple:
    """The dtypes accepted now: ``default`` outside strict mode, else the active product's."""
    product = targets.current()
    if product is None:
        return tuple(default)
    return tuple(per_product.get(product, ()))


def expect_dtype_now(t: torch.Tensor, default: Iterable[torch.dtype],
                     per_product: dict[targets.Product, Iterable[torch.dtype]], op: str,
                     param: str) -> None:
    """``t.dtype`` must be allowed in the current mode; in strict mode the message names the
    product."""
    allowed = allowed_dtypes(default, per_product)
    if t.dtype in allowed:
        return
    product = targets.current()
    names = [dtypes.name(d) for d in allowed]
    where = "" if product is None else f" on {product.value}"
    checks.expect(False, op, param, f"dtype in {names}{where}", dtypes.name(t.dtype), TypeError)


def int_list(t: torch.Tensor) -> list[int]:
    """The values of an integer tensor as Python ints (one device sync)."""
    return t.reshape(-1).tolist()


def expect_in_range(values: torch.Tensor, low: int, high: int, op: str, param: str,
                    what: str = "values", why: str = "") -> None:
    """Every element of ``values`` in ``[low, high)``; IndexError naming the first bad one."""
    if values.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(values.reshape(-1).to(torch.int64)))
    if lo >= low and hi < high:
        return
    flat = values.reshape(-1).to(torch.int64)
    bad = int(((flat < low) | (flat >= high)).nonzero()[0, 0])
    checks.expect(False, op, param, f"{what} in [{low}, {high - 1}]{why}",
                  f"{int(flat[bad])} at flat position {bad}", IndexError)


def expect_nonnegative(values: torch.Tensor, op: str, param: str) -> None:
    """Every element of ``values`` >= 0; ValueError naming the first negative one."""
    if values.numel() == 0 or int(values.min()) >= 0:
        return
    flat = values.reshape(-1)
    bad = int((flat < 0).nonzero()[0, 0])
    checks.expect(False, op, param, "non-negative values",
                  f"{int(flat[bad])} at flat position {bad}", ValueError)
