"""Input validation shared by every op's reference, fake kernel and dispatcher.

All checks go through ``torch._check*`` so that they also work on symbolic sizes under
FakeTensor / ``torch.compile`` and survive ``python -O``.  Every message has one shape:

    "<op>: expected <param> <requirement>, but got <actual>"

so eager, FakeTensor and compiled calls raise the same words.  The exception type says
what went wrong: ValueError for a bad value (a mode string, a size), TypeError for a bad
dtype, NotImplementedError for a documented feature we cannot emulate, RuntimeError for
shape relations (what torch itself raises for those).

torch_npu checks its arguments with ``TORCH_CHECK``, which raises RuntimeError whatever the
fault, so code written against it catches RuntimeError.  Our ValueError, TypeError and
IndexError are therefore raised as :class:`NpuValueError`, :class:`NpuTypeError` and
:class:`NpuIndexError`, which are both (``except ValueError`` and ``except RuntimeError``
both catch an :class:`NpuValueError`); NotImplementedError already derives from RuntimeError.
Under ``torch.compile`` Dynamo wraps any error of a fake kernel in its own RuntimeError
subclass (``TorchRuntimeError``, the message kept), whichever class we raise.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from .npu_wording import suffix


class NpuValueError(ValueError, RuntimeError):
    """A bad argument value; a RuntimeError too, as torch_npu's ``TORCH_CHECK`` raises."""


class NpuTypeError(TypeError, RuntimeError):
    """A bad argument type or dtype; a RuntimeError too, as torch_npu's ``TORCH_CHECK`` raises."""


class NpuIndexError(IndexError, RuntimeError):
    """An index out of range; a RuntimeError too, as torch_npu's ``TORCH_CHECK`` raises."""


ERROR_CLASSES: dict[type, type] = {
    ValueError: NpuValueError,
    TypeError: NpuTypeError,
    IndexError: NpuIndexError,
}
"""The class raised for each requested class (others are raised as requested)."""


def _raiser(error: type) -> Callable[..., None]:
    def check(cond: Any, build: Callable[[], str]) -> None:
        torch._check_with(error, cond, build)
    return check


_RAISERS: dict[type, Callable[..., None]] = {
    RuntimeError: torch._check,
    ValueError: _raiser(NpuValueError),
    TypeError: _raiser(NpuTypeError),
    IndexError: _raiser(NpuIndexError),
    NotImplementedError: torch._check_not_implemented,
}


def error_class(error: type) -> type:
    """The class :func:`expect` raises when asked for ``error``."""
    return ERROR_CLASSES.get(error, error)


def message(op: str, param: str, requirement: str, actual: Any) -> str:
    # torch_npu's own sentence follows where op-plugin's tests match its words (npu_wording)
    return f"{op}: expected {param} {requirement}, but got {actual}" + suffix(op, param, actual)


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

    raiser = _RAISERS.get(error)
    if raiser is None:       # any other exception class: raised as asked
        raiser = _raiser(error)
    raiser(cond, build)


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
