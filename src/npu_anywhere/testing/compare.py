"""Precision judges: compare a result (from an NPU or anywhere) to a golden.

Three published standards are implemented:

``"cann-ecosystem"``
    The CANN ecosystem standard: mean and max relative error (MERE / MARE)
    against a per-dtype threshold ``T``.  See :func:`judge_cann`.
``"msprobe"``
    The msprobe API precision check: cosine similarity, then max absolute
    error, then the "error share" (双百 / 双千 / 双万) rule.  See
    :func:`judge_msprobe`.
``"torch_npu"``
    torch_npu's ``TestCase.assertRtolEqual``.  See :func:`assert_rtol_equal`.

All judges take torch tensors (any device, any real dtype, bfloat16
included) or numpy arrays, and do their arithmetic in float64 numpy.
Non-finite values are compared exactly in every judge: NaN in the same
positions of both inputs counts as equal, an infinity must be matched by
the same infinity, and any other NaN/inf disagreement fails.

Each standard lives in its own module (:mod:`.cann_standard`, :mod:`.msprobe_standard`,
:mod:`.rtol_standard`; the shared input handling in :mod:`._arrays`, the result type in
:mod:`.verdict`); this module names them and dispatches by name.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .cann_standard import cann_mere_mare, cann_threshold, judge_cann
from .msprobe_standard import judge_msprobe
from .rtol_standard import _judge_torch_npu, assert_rtol_equal
from .verdict import Verdict

__all__ = [
    "Verdict",
    "assert_rtol_equal",
    "cann_mere_mare",
    "cann_threshold",
    "judge_cann",
    "judge_msprobe",
    "compare",
]


_STANDARDS: dict[str, Callable[..., Verdict]] = {
    "cann-ecosystem": judge_cann,
    "msprobe": judge_msprobe,
    "torch_npu": _judge_torch_npu,
}


def compare(
    actual: torch.Tensor | np.ndarray,
    golden: torch.Tensor | np.ndarray,
    standard: str = "cann-ecosystem",
    dtype: object = None,
) -> Verdict:
    """Judge ``actual`` against ``golden`` with a named standard.

    Parameters
    ----------
    actual, golden : torch.Tensor or numpy.ndarray
        Same shape; any device and real dtype (bfloat16 included).
    standard : {"cann-ecosystem", "msprobe", "torch_npu"}, optional
        ``"cann-ecosystem"`` calls :func:`judge_cann`, ``"msprobe"`` calls
        :func:`judge_msprobe`, ``"torch_npu"`` runs :func:`assert_rtol_equal`
        (default precisions) and reports its outcome as a verdict.
    dtype : torch.dtype, numpy dtype or str, optional
        Dtype whose thresholds apply; defaults to the dtype of ``actual``
        (for ``"torch_npu"``: the coarser of the two input dtypes).

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        For an unknown standard, a shape mismatch or an unsupported dtype.
    """
    judge = _STANDARDS.get(standard)
    if judge is None:
        choices = ", ".join(repr(name) for name in _STANDARDS)
        raise ValueError(f"unknown standard {standard!r}; choose one of {choices}")
    return judge(actual, golden, dtype=dtype)
