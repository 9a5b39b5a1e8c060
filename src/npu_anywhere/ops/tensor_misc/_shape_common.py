"""Shared pieces of the tensor_misc layout ops: argument checks and ``.out`` overloads."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ... import checks, dtypes
from ...library import define_out


def expect_int_list(op: str, param: str, values, length: int | None = None,
                    length_text: str | None = None, *, minimum: int | None = None) -> None:
    """``values`` is a list of ints (of ``length`` when given, each ``>= minimum``)."""
    if length is not None:
        checks.expect(len(values) == length, op, param,
                      lambda: length_text or f"{length} values", lambda: f"{list(values)}",
                      ValueError)
    if minimum is not None:
        checks.expect(all(v >= minimum for v in values), op, param,
                      f"values >= {minimum}", lambda: f"{list(values)}", ValueError)


def expect_permutation(op: str, param: str, perm: Sequence[int], n: int, what: str) -> None:
    """``perm`` is a permutation of ``range(n)`` (non-negative entries, as the kernels index)."""
    checks.expect(len(perm) == n and sorted(perm) == list(range(n)), op, param,
                  lambda: f"a permutation of 0..{n - 1} ({what})", lambda: f"{list(perm)}",
                  ValueError)


def numel_of(shape: Sequence[int]) -> int:
    count = 1
    for s in shape:
        count *= s
    return count


def make_out(schema: str, *, op: str, check: Callable[..., None],
             compute: Callable[..., torch.Tensor], shape_of: Callable[..., Sequence[int]],
             no_grad: str):
    """Define ``<op>.out``: ``out`` must have the result's shape and ``self``'s dtype; the
    result is computed as the functional op does and copied into ``out``."""

    def check_out(self, *args, out, **kwargs):
        check(self, *args, **kwargs)
        shape = tuple(shape_of(self, *args, **kwargs))
        checks.expect(tuple(out.shape) == shape and out.dtype == self.dtype, op, "out",
                      lambda: f"shape {shape} and dtype {dtypes.name(self.dtype)}",
                      lambda: f"shape {tuple(out.shape)} and dtype {dtypes.name(out.dtype)}",
                      RuntimeError)
        checks.expect_same_device({"self": self, "out": out}, op)

    def write(self, *args, out, **kwargs):
        out.copy_(compute(self, *args, **kwargs))

    _internal, public = define_out(schema, check=check_out, reference=write, no_grad=no_grad)
    return public
