"""Op database entries of the runtime family: npu_prefetch and the float-status ops."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _prefetch() -> None:
    e = _entry("npu_prefetch")
    e.samples += [
        Sample("weight", lambda: ((torch.randn(4, 6), None, 64), dict(offset=8))),
        Sample("dependency", lambda: ((torch.randn(3, dtype=torch.float16), torch.ones(2),
                                       1 << 20), {})),
    ]
    e.errors += [
        ErrorSample("max_size", lambda: ((torch.randn(4), None, 0), {}), ValueError,
                    "npu_prefetch: expected max_size > 0, but got 0"),
        ErrorSample("offset_negative", lambda: ((torch.randn(4), None, 8), dict(offset=-1)),
                    ValueError, "npu_prefetch: expected offset >= 0"),
        ErrorSample("offset_past", lambda: ((torch.randn(4), None, 8), dict(offset=16)),
                    ValueError, "npu_prefetch: expected offset inside the weight's 16 bytes"),
    ]


def _float_status() -> None:
    _entry("npu_alloc_float_status").samples += [
        Sample("any_tensor", lambda: ((torch.randn(1, 2, 3),), {})),
        Sample("int_tensor", lambda: ((torch.ones(2, dtype=torch.int32),), {})),
    ]
    for name in ("npu_get_float_status", "npu_clear_float_status"):
        e = _entry(name)
        e.samples += [Sample("status", lambda: ((torch.rand(8),), {})),
                      Sample("mode_1", lambda: ((torch.rand(2),), dict(mode=1)))]
        e.errors += [
            ErrorSample("dtype", lambda: ((torch.rand(8).half(),), {}), TypeError,
                        f"{name}: expected self dtype in"),
            ErrorSample("mode", lambda: ((torch.rand(8),), dict(mode=2)), ValueError,
                        f"{name}: expected mode 0 or 1, but got 2"),
        ]


_prefetch()
_float_status()
