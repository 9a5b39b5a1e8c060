"""The ``compiled`` provider: an op's reference, compiled by ``torch.compile`` (Inductor).

Why this path (see docs/architecture.md, "Speed"): the reference is written as a few whole-tensor
PyTorch ops, each of which reads and writes the full tensor and allocates a temporary.  On large
tensors that traffic, not arithmetic, is the cost.  Inductor fuses the reference into one loop
(C++/OpenMP on CPU, Triton on CUDA) that reads each input once and writes the output once -- the
bandwidth floor -- while the reference stays the single source of the semantics.  A hand-written
C++ extension would need a compiler at install time and a second copy of every formula.

Costs and how they are contained:

* Compilation takes seconds, once per specialization (op, mode, dtype, device), and is cached on
  disk by Inductor across processes.  Each specialization gets its own code object so the
  specializations do not compete for dynamo's per-function recompile limit.
* A compiled call costs more fixed overhead than a few eager ops, so the provider declines
  inputs smaller than ``min_numel`` (decode-sized calls run the reference).
* If compilation fails (no C++ compiler, unsupported platform), the provider logs why once,
  disables itself and the call runs the reference.
"""

from __future__ import annotations

import logging
import os
import types
from typing import Any, Callable, Hashable, Optional

import torch

log = logging.getLogger("npu_anywhere.kernels.compiled")

DEFAULT_MIN_NUMEL = int(os.environ.get("NPU_ANYWHERE_COMPILED_MIN_NUMEL", 1 << 18))


def _fresh_code(fn: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object (dynamo caches per code object)."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}__{tag}")
    copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


class CompiledProvider:
    """``fn`` compiled per specialization key; use ``run`` and ``supports`` as a provider."""

    name = "compiled"

    def __init__(self, fn: Callable[..., Any], key: Callable[..., Hashable],
                 size: Callable[..., int], min_numel: int = DEFAULT_MIN_NUMEL):
        self._fn = fn
        self._key = key
        self._size = size
        self.min_numel = min_numel
        self._compiled: dict[Hashable, Callable[..., Any]] = {}
        self._disabled: Optional[str] = None

    def supports(self, *args: Any, **kwargs: Any) -> Optional[str]:
        if self._disabled is not None:
            return self._disabled
        if torch.compiler.is_compiling():
            return "called while torch.compile is tracing"
        if self._size(*args, **kwargs) < self.min_numel:
            return f"fewer than {self.min_numel} elements: eager reference is faster"
        return None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        key = self._key(*args, **kwargs)
        compiled = self._compiled.get(key)
        if compiled is None:
            tag = "_".join(str(k).replace("torch.", "") for k in
                           (key if isinstance(key, tuple) else (key,)))
            compiled = torch.compile(_fresh_code(self._fn, tag), dynamic=True, fullgraph=True)
            self._compiled[key] = compiled
        try:
            return compiled(*args, **kwargs)
        except Exception as exc:  # compiler missing or broken: never fail a call because of it
            self._disabled = f"disabled after a compilation failure: {type(exc).__name__}: {exc}"
            log.warning("npu_anywhere compiled provider %s", self._disabled)
            return self._fn(*args, **kwargs)


def register(op, fn: Callable[..., Any] | None = None, *, key: Callable[..., Hashable],
             size: Callable[..., int], min_numel: int = DEFAULT_MIN_NUMEL) -> CompiledProvider:
    """Add a ``compiled`` provider to ``op`` compiling ``fn`` (default: the op's reference)."""
    provider = CompiledProvider(fn or op.providers.reference.fn, key, size, min_numel)
    op.add_provider(CompiledProvider.name, provider.run, provider.supports)
    return provider
