"""The ``compiled`` provider: an op's reference, compiled by ``torch.compile`` (Inductor).

Why this path (see docs/architecture.md, "Speed"): the reference is written as a few whole-tensor
PyTorch ops, each of which reads and writes the full tensor, allocates a temporary and pays a
fixed per-op cost.  Inductor fuses the reference into one loop (C++/OpenMP on CPU, Triton on CUDA)
that reads each input once and writes each output once, while the reference stays the single
source of the semantics (and the oracle the provider is tested against).

Tiering.  Compiling takes seconds, which a script that calls an op once (a unit test, a golden
check) should never pay.  So a specialization -- (op, mode, dtype, device...) as the op's ``key``
function defines it -- runs the eager reference until it has been called ``compile_after`` times
(default 8, ``NPU_ANYWHERE_COMPILE_AFTER``; ``never`` disables the provider), and is compiled on
the next call.  A decode loop or a training step compiles within its first iterations.

Other costs, contained:

* Each specialization gets its own code object, so they do not compete for dynamo's
  per-function recompile limit.  Shapes start static and turn dynamic on the first shape change
  (torch.compile's automatic dynamic shapes); Inductor caches compiled code on disk.  Keys name
  the sizes a model keeps fixed (hidden size, head size): each gets static code of its own, and
  only the token count turns dynamic (DeepSeek normalizes three widths per layer; one shared
  dynamic kernel for all of them is markedly slower at decode sizes).
* If compilation fails (no C++ compiler, unsupported platform), the provider logs why once,
  disables itself and the call runs the reference.  A call that fails because of its own
  arguments fails the eager reference too: then that error is raised and the provider stays on.
* The first call of a specialization waits for the compiler (seconds); that is logged at INFO,
  once per specialization, naming the switch that avoids it.
* Intermediate roundings are kept (``emulate_precision_casts``), so compiled results equal the
  reference's up to the operations whose bits depend on the CPU on either side: eager ATen's
  reductions sum in an order set by the vector width, ``addcmul`` may fuse into an FMA and float32
  ``sqrt`` is not correctly rounded.  References that must match bit for bit (the cache writes)
  avoid all three.
"""

from __future__ import annotations

import contextlib
import logging
import os
import types
from typing import Any, Callable, Hashable, Iterator, Optional

import torch

log = logging.getLogger("npu_anywhere.kernels.compiled")


DEFAULT_OPTIONS = {
    # Inductor otherwise drops `t.to(low).to(float32)` round trips inside a fused kernel, which
    # would erase the intermediate roundings some NPU kernels perform (and the references
    # reproduce): the compiled provider must compute exactly what the reference computes.
    "emulate_precision_casts": True,
}


ENV_VAR = "NPU_ANYWHERE_COMPILE_AFTER"


def parse_compile_after(text: str, source: str = ENV_VAR) -> Optional[int]:
    """``"8"`` -> 8; ``"never"`` / ``"off"`` / ``"none"`` -> None; anything else: ValueError."""
    value = text.strip().lower()
    if value in ("never", "off", "none"):
        return None
    if not value.isdigit():   # also rejects "-1", "1.5" and ""
        raise ValueError(f"{source}: expected a non-negative integer (calls before compiling) "
                         f"or 'never', but got {text!r}")
    return int(value)


def _compile_after_from_env() -> Optional[int]:
    return parse_compile_after(os.environ.get(ENV_VAR, "8"))


_compile_after: Optional[int] = _compile_after_from_env()


def compile_after() -> Optional[int]:
    """Calls of a specialization before it is compiled (None: never compile)."""
    return _compile_after


@contextlib.contextmanager
def compiling_after(calls: Optional[int]) -> Iterator[None]:
    """Temporarily change the tiering threshold (``0``: compile on first call)."""
    global _compile_after
    previous, _compile_after = _compile_after, calls
    try:
        yield
    finally:
        _compile_after = previous


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
                 options: Optional[dict] = None, op_name: Optional[str] = None):
        self._fn = fn
        self._op_name = op_name or getattr(fn, "__name__", "op")
        self._key = key
        self._options = {**DEFAULT_OPTIONS, **(options or {})}
        self._compiled: dict[Hashable, Callable[..., Any]] = {}
        self._calls: dict[Hashable, int] = {}
        self._disabled: Optional[str] = None

    def supports(self, *args: Any, **kwargs: Any) -> Optional[str]:
        if self._disabled is not None:
            return self._disabled
        threshold = _compile_after
        if threshold is None:
            return "disabled (NPU_ANYWHERE_COMPILE_AFTER=never)"
        # Dynamo only: torch.compiler.is_compiling() is process-wide, and would turn the
        # provider off in every thread while one thread compiles.
        if torch.compiler.is_dynamo_compiling():
            return "called while torch.compile is tracing"
        key = self._key(*args, **kwargs)
        if key in self._compiled:
            return None
        calls = self._calls.get(key, 0) + 1
        self._calls[key] = calls
        if calls <= threshold:
            return "specialization not hot yet (compiles after NPU_ANYWHERE_COMPILE_AFTER calls)"
        return None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self.run_as(self._key(*args, **kwargs), *args, **kwargs)

    def run_as(self, key: Hashable, /, *args: Any, **kwargs: Any) -> Any:
        """``run`` for callers that pass ``fn`` other arguments than the op's (views of
        them, say) and so compute the specialization key from the op's arguments themselves.
        (``key`` is positional-only: ops have arguments named ``key``.)"""
        compiled = self._compiled.get(key)
        if compiled is None:
            tag = "_".join(str(k).replace("torch.", "") for k in
                           (key if isinstance(key, tuple) else (key,)))
            compiled = torch.compile(_fresh_code(self._fn, tag), fullgraph=True,
                                     options=self._options)
            self._compiled[key] = compiled
            log.info("compiling %s %s (this call waits for the compiler; set %s=never to stay "
                     "eager)", self._op_name, tag, ENV_VAR)
        try:
            return compiled(*args, **kwargs)
        except Exception as exc:
            # Either the compiler is missing or broken (never fail a call because of it), or
            # the call itself is bad, which the eager reference then rejects too: its error is
            # the call's error, and the provider stays on for the calls that are fine.
            result = self._fn(*args, **kwargs)
            self._disabled = f"disabled after a compilation failure: {type(exc).__name__}: {exc}"
            log.warning("npu_anywhere compiled provider %s", self._disabled)
            return result


def register(op, fn: Callable[..., Any] | None = None, *, key: Callable[..., Hashable],
             options: Optional[dict] = None) -> CompiledProvider:
    """Add a ``compiled`` provider to ``op`` compiling ``fn`` (default: the op's reference).

    ``options`` are Inductor options, added to :data:`DEFAULT_OPTIONS`.
    """
    provider = CompiledProvider(fn or op.providers.reference.fn, key, options, op_name=op.name)
    op.add_provider(CompiledProvider.name, provider.run, provider.supports)
    return provider
