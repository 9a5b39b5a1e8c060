"""Wall time per ``torch_npu.npu_*`` function while a block of code runs.

The engine calls ``torch_npu.npu_x(...)`` through the module attribute, so replacing the
attributes with timing wrappers for the duration of a ``with OpTimer():`` block sees every call.
Times are host wall times of eager calls (on CPU that is the op's compute time; on an
asynchronous device the wrapper synchronizes so that each op's time is its own).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Dict, List, Tuple

import torch


class OpTimer:
    def __init__(self, module=None):
        if module is None:
            import torch_npu as module
        self.module = module
        self.seconds: Dict[str, float] = defaultdict(float)
        self.calls: Dict[str, int] = defaultdict(int)
        self._saved: Dict[str, object] = {}

    def _sync(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def _wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            self._sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._sync()
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1
        return timed

    def __enter__(self) -> "OpTimer":
        for name in dir(self.module):
            fn = getattr(self.module, name)
            if name.startswith("npu_") and callable(fn):
                self._saved[name] = fn
                setattr(self.module, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(self.module, name, fn)
        self._saved.clear()

    def rows(self) -> List[Tuple[str, int, float]]:
        """``(op, calls, seconds)``, slowest first."""
        return sorted(((n, self.calls[n], s) for n, s in self.seconds.items()),
                      key=lambda r: -r[2])
