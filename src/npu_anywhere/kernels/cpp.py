"""Hand-written C++ CPU kernels, built through Inductor's own C++ code cache.

Some CPU hot spots are loops no ATen call or Inductor fusion expresses well (a paged decode
that must read each cache row once; a per-row top-k of a few of many values).  Their source is
compiled with :class:`torch._inductor.codecache.CppPythonBindingsCodeCache`: the same compiler,
ISA detection (``at::vec`` for AVX2 / AVX-512 / NEON), OpenMP runtime and on-disk cache as the
compiled kernels, so nothing is added to the install.

A :class:`CppKernel` follows the tiering of ``kernels/compiled.py``: it is not built before a
specialization has been asked for ``NPU_ANYWHERE_COMPILE_AFTER`` times, never with ``never``,
and once per process (one build serves every shape).  A failed build (no compiler, an
unsupported platform) is logged once and turns the kernel off, so callers fall back.
"""

from __future__ import annotations

import logging
from typing import Callable, Hashable, Optional, Sequence

from . import compiled

log = logging.getLogger("npu_anywhere.kernels.cpp")


class CppKernel:
    """One C++ source with an ``extern "C" void kernel(...)`` entry of ``argtypes``."""

    def __init__(self, label: str, argtypes: Sequence[str], source: str,
                 build: Optional[Callable[[], Callable]] = None):
        self.label = label
        self._argtypes = list(argtypes)
        self._source = source
        self._build = build or self._load
        self._fn: Optional[Callable] = None
        self._calls: dict[Hashable, int] = {}
        self.disabled: Optional[str] = None

    def _load(self) -> Callable:
        from torch._inductor.codecache import CppPythonBindingsCodeCache
        return CppPythonBindingsCodeCache.load_pybinding(self._argtypes, self._source)

    @property
    def built(self) -> bool:
        return self._fn is not None

    def ready(self, key: Hashable) -> Optional[str]:
        """None when the kernel may run for ``key`` now (building it if needed), else why not."""
        if self.disabled is not None:
            return self.disabled
        if self._fn is not None:
            return None
        threshold = compiled.compile_after()
        if threshold is None:
            return f"disabled ({compiled.ENV_VAR}=never)"
        calls = self._calls.get(key, 0) + 1
        self._calls[key] = calls
        if calls <= threshold:
            return f"specialization not hot yet (builds after {compiled.ENV_VAR} calls)"
        log.info("building the %s C++ kernel (once per process and cache; set %s=never to stay "
                 "on the fallback)", self.label, compiled.ENV_VAR)
        try:
            self._fn = self._build()
        except Exception as exc:     # no compiler, an unsupported platform: never fail a call
            self.disabled = f"disabled after a build failure: {type(exc).__name__}: {exc}"
            log.warning("npu_anywhere %s kernel %s", self.label, self.disabled)
            return self.disabled
        return None

    def __call__(self, *args):
        return self._fn(*args)
