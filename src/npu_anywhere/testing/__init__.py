"""Helpers for checking numerical results against a golden reference.

:mod:`.tolerances` holds the per-dtype tolerance table the test-suite uses
against float64 goldens; :mod:`.compare` implements published precision
standards (CANN ecosystem, msprobe, torch_npu) that users can call on NPU
results.  This subpackage imports nothing else from ``npu_anywhere``.
"""

from .compare import (
    Verdict,
    assert_rtol_equal,
    cann_mere_mare,
    cann_threshold,
    compare,
    judge_cann,
    judge_msprobe,
)
from .tolerances import TOLERANCES, Tolerance, assert_close_to_golden, tolerance_for

__all__ = [
    "TOLERANCES",
    "Tolerance",
    "Verdict",
    "assert_close_to_golden",
    "assert_rtol_equal",
    "cann_mere_mare",
    "cann_threshold",
    "compare",
    "judge_cann",
    "judge_msprobe",
    "tolerance_for",
]
