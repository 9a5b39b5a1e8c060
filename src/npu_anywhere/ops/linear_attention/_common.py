"""Checks shared by the gated-delta-rule ops.

Metadata (shapes, dtypes, which optional inputs are given) is checked by each op's ``check_*``
function, which eager, FakeTensor and ``torch.compile`` share.  Values (sequence lengths,
state indices, accepted-token counts) can only be read from real tensors: :func:`int_values`
and the range checks below run in the eager kernels, before anything is written, and the ops
give explicit fake kernels that never read them.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes


def shape(t: torch.Tensor):
    return lambda: f"shape {tuple(t.shape)}"


def expect_given(t, op: str, param: str, why: str) -> None:
    checks.expect(t is not None, op, param, f"a tensor ({why})", "None", ValueError)


def expect_dtype(t: torch.Tensor, allowed: tuple, op: str, param: str, where: str = "") -> None:
    if t.dtype in allowed:
        return
    names = [dtypes.name(d) for d in allowed]
    checks.expect(False, op, param, f"dtype in {names}{where}", dtypes.name(t.dtype), TypeError)


def expect_shape(t: torch.Tensor, want: tuple, op: str, param: str, described: str) -> None:
    checks.expect(tuple(t.shape) == tuple(want), op, param,
                  lambda: f"shape {tuple(want)} {described}", shape(t), RuntimeError)


def int_values(t: torch.Tensor) -> list[int]:
    """The values of a small integer tensor as Python ints (one device sync)."""
    return [int(x) for x in t.reshape(-1).tolist()]


def expect_values_in(values: list[int], low: int, high: int, op: str, param: str,
                     what: str, error: type = ValueError) -> None:
    """Every value in ``[low, high]``; the message names the first one outside."""
    for i, x in enumerate(values):
        if not low <= x <= high:
            checks.expect(False, op, param, f"{what} in [{low}, {high}]",
                          f"{x} at position {i}", error)
