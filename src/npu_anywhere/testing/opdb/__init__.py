"""The op database: sample inputs and error inputs for every registered op.

Generic tests (tests/generic/) iterate over it: opcheck, fake-vs-eager metadata, identical
errors in eager and under FakeTensor, torch.compile(fullgraph=True).  One module per op family
(``testing/opdb/<family>.py``) adds its ops' entries with :func:`entry`; every module in this
package is imported, so adding a family needs no edit here.

Entries are keyed like :data:`npu_anywhere.library.REGISTRY`: the op's name, or
``<name>.<overload>`` for a named overload (``npu_grouped_matmul.List``, ``npu_x.out``).

Samples are small and built on demand (``make()`` returns fresh tensors each call, since some
ops write into their inputs).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Sample:
    name: str
    make: Callable[[], tuple[tuple, dict]]
    differentiable: bool = False   # run opcheck's autograd tests on it (use float64 inputs)


@dataclass
class ErrorSample:
    name: str
    make: Callable[[], tuple[tuple, dict]]
    error: type
    match: str


@dataclass
class OpEntry:
    op: str
    samples: list[Sample] = field(default_factory=list)
    errors: list[ErrorSample] = field(default_factory=list)


OPDB: dict[str, OpEntry] = {}


def entry(name: str) -> OpEntry:
    """The entry of op ``name`` (its registry name), created on first use."""
    return OPDB.setdefault(name, OpEntry(name))


def randn(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
