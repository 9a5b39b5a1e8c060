"""Benchmark registry: cases with input makers, bytes moved and contenders."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ..dispatch import use_providers


@dataclass
class Case:
    """One benchmark: an op on one preset shape and dtype.

    ``make_inputs(device)`` returns the arguments; each contender is called as
    ``fn(*inputs)``.  ``bytes_moved`` is the minimum traffic (inputs read once, outputs written
    once) used for GB/s and for the bandwidth-floor ratio.  ``check`` names the contender whose
    output the others must match before timing.
    """
    name: str
    op: str
    preset: str
    dtype: torch.dtype
    make_inputs: Callable[[torch.device], tuple]
    bytes_moved: int
    contenders: dict[str, Callable[..., Any]]
    check: str = "reference"
    tolerance: dict[str, float] = field(default_factory=dict)


CASES: list[Case] = []


def with_reference(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with the reference provider forced: the eager oracle as a contender."""
    def call(*args: Any) -> Any:
        with use_providers("reference"):
            return fn(*args)
    return call


def register(case: Case) -> Case:
    CASES.append(case)
    return case


class CompileOnFirstCall:
    """``torch.compile(fn, **options)``, done when the result is first called.

    ``torch.compile`` itself imports dynamo and Inductor (seconds); a case module that compiles
    its ``naive`` contender at import would make ``bench --list`` and ``-k`` filtering pay for
    every case.  Use :func:`compile_later` in case modules.
    """

    def __init__(self, compile_fn: Callable[..., Any], fn: Callable[..., Any],
                 options: dict[str, Any]):
        self._compile_fn, self._fn, self._options = compile_fn, fn, options
        self._compiled: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._compiled is None:
            self._compiled = self._compile_fn(self._fn, **self._options)
        return self._compiled(*args, **kwargs)


def compile_later(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Like ``torch.compile`` (also as a decorator), compiling on the first call."""
    if fn is None:
        return lambda f: compile_later(f, **options)
    return CompileOnFirstCall(_real_compile, fn, options)


_real_compile = torch.compile


@contextlib.contextmanager
def deferred_compile() -> Iterator[None]:
    """While case modules import, ``torch.compile(...)`` means :func:`compile_later`.

    Keeps ``bench --list`` and filtered runs from importing Inductor for cases they will not
    run, without every case module having to remember to.
    """
    previous = torch.compile
    torch.compile = compile_later
    try:
        yield
    finally:
        torch.compile = previous
