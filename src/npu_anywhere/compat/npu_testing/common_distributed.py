"""``torch_npu.testing.common_distributed``: the multi-device skip of torch_npu's tests.

Semantics followed: torch_npu ``torch_npu/testing/common_distributed.py``.  Here ``torch.npu``
is npu_anywhere's device API: ``is_available()`` is False unless the NPU is claimed
(``NPU_ANYWHERE_CLAIM_NPU=1``) and ``device_count()`` is the number of local devices, so
multi-card tests skip on a CPU-only machine, as they would on a single-card host.
"""

from __future__ import annotations

import functools
import unittest
from typing import Callable

from .. import device as _device

__all__ = ["skipIfUnsupportMultiNPU"]


def skipIfUnsupportMultiNPU(npu_number_needed: int) -> Callable[[Callable], Callable]:
    """Skip the decorated test unless ``npu_number_needed`` devices are available."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run_if_enough_devices(self, *args, **kwargs):
            if not _device.is_available() or _device.device_count() < npu_number_needed:
                raise unittest.SkipTest(f"Multi-NPU {npu_number_needed} condition not satisfied")
            return fn(self, *args, **kwargs)
        return run_if_enough_devices
    return decorate
