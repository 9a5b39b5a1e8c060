"""Input validation shared by every op's reference, fake kernel and dispatcher.

All checks go through ``torch._check*`` so that they also work on symbolic sizes under
FakeTensor / ``torch.compile`` and survive ``python -O``.  Every message has one shape:

    "<op>: expected <param> <requirement>, but got <actual>"

so eager, FakeTensor and compiled calls raise the same words.  The exception type says
what went wrong: ValueError for a bad value (a mode string, a size), TypeError for a bad
dtype, NotImplementedError for a documented feature we cannot emulate, RuntimeError for
shape relations (what torch itself raises for those).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

_RAISERS: dict[type, Callable[..., None]] = {
    RuntimeError: torch._check,
    ValueError: torch._check_value,
    TypeError: torch._check_type,
    IndexError: torch._check_index,
    NotImplementedError: torch._check_not_implemented,
}


def message(op: str, param: str, requirement: str, actual: Any) -> str:
    return f"{op}: expected {param} {requirement}, but got {actual}"


def expect(cond: Any, op: str, param: str, requirement: str | Callable[[], str],
           actual: Any | Callable[[], Any], error: type = RuntimeError) -> None:
    """Raise ``error`` with the project's message shape unless ``cond`` holds.

    ``requirement`` and ``actual`` may be zero-argument callables so that descriptions are
    only built on failure (checks run on every call, including decode-sized ones).
    """
    if cond is True:  # fast path: plain Python bools dominate eager calls
        return

    def build() -> str:
        value = actual() if callable(actual) else actual
        req = requirement() if callable(requirement) else requirement
        return message(op, param, req, value)

    _RAISERS[error](cond, build)


def expect_one_of(value: Any, choices: Iterable[Any], op: str, param: str) -> None:
    choices = tuple(choices)
    if value in choices:
        return
    expect(False, op, param, f"one of {list(choices)}", repr(value), ValueError)


def expect_dim(t: torch.Tensor, dims: int | Sequence[int], op: str, param: str) -> None:
    allowed = (dims,) if isinstance(dims, int) else tuple(dims)
    if t.dim() in allowed:
        return
    req = f"a {allowed[0]}-D tensor" if len(allowed) == 1 else \
        f"a tensor with one of {list(allowed)} dims"
    expect(False, op, param, req, f"shape {tuple(t.shape)}", ValueError)


def expect_dtype(t: torch.Tensor, dtypes: Iterable[torch.dtype], op: str, param: str) -> None:
    dtypes = tuple(dtypes)
    if t.dtype in dtypes:
        return
    names = [str(d).replace("torch.", "") for d in dtypes]
    expect(False, op, param, f"dtype in {names}", str(t.dtype).replace("torch.", ""),
           TypeError)


def expect_same_dtype(tensors: dict[str, torch.Tensor], op: str) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            expect(False, op, name, f"the same dtype as {first_name} ({_dt(first.dtype)})",
                   _dt(t.dtype), TypeError)


def expect_same_device(tensors: dict[str, torch.Tensor], op: str) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            expect(False, op, name, f"to be on {first_name}'s device ({first.device})",
                   str(t.device), RuntimeError)


def expect_nonempty(t: torch.Tensor, op: str, param: str) -> None:
    expect(t.numel() != 0, op, param, "a non-empty tensor", lambda: f"shape {tuple(t.shape)}",
           ValueError)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
