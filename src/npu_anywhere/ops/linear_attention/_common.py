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


def expect_qkv(query, key, value, op: str, max_heads: int, max_dim: int):
    """``(T, Nk, Dk, Nv, Dv)`` of query / key ``(T, Nk, Dk)`` and value ``(T, Nv, Dv)``, with
    the head counts and dims in ``[1, max_heads]`` / ``[1, max_dim]`` and ``Nv`` a multiple of
    ``Nk`` (value heads are grouped over key heads)."""
    t_len, nk, dk = query.shape
    expect_shape(key, (t_len, nk, dk), op, "key", "(T, Nk, Dk), query's shape")
    checks.expect(value.shape[0] == t_len, op, "value", lambda: f"T = {t_len} rows (query's "
                  "first dim), shape (T, Nv, Dv)", shape(value), RuntimeError)
    nv, dv = value.shape[1], value.shape[2]
    for name, size, high in (("Nk", nk, max_heads), ("Nv", nv, max_heads), ("Dk", dk, max_dim),
                             ("Dv", dv, max_dim)):
        checks.expect(1 <= size <= high, op, name, f"in [1, {high}]", size, ValueError)
    checks.expect(nv % nk == 0, op, "Nv", lambda: f"a multiple of Nk = {nk} (value heads are "
                  "grouped over key heads)", nv, ValueError)
    return t_len, nk, dk, nv, dv


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
