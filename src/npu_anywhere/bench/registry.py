"""Benchmark registry: cases with input makers, bytes moved and contenders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
