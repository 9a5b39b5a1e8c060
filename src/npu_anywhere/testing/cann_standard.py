"""The CANN ecosystem precision standard: mean and max relative error (MERE / MARE) against a
per-dtype threshold."""

from __future__ import annotations

import numpy as np
import torch

from ._arrays import dtype_of, finite_or_zero, normalize_dtype, prepare, split_nonfinite
from .verdict import Verdict

__all__ = ["cann_mere_mare", "cann_threshold", "judge_cann"]


_CANN_EPS = 1e-7

_CANN_THRESHOLDS = {
    torch.float16: 2.0**-10,
    torch.bfloat16: 2.0**-7,
    torch.float32: 2.0**-13,
    torch.float8_e4m3fn: 2.0**-3,
    torch.float8_e5m2: 2.0**-2,
}


def cann_threshold(dtype: object) -> float:
    """The CANN ecosystem threshold ``T`` for ``dtype``.

    Parameters
    ----------
    dtype : torch.dtype, numpy dtype or str
        float16, bfloat16, float32, float8_e4m3fn or float8_e5m2.

    Returns
    -------
    float
        ``2**-10`` (float16), ``2**-7`` (bfloat16), ``2**-13`` (float32),
        ``2**-3`` (float8_e4m3fn) or ``2**-2`` (float8_e5m2).

    Raises
    ------
    ValueError
        For any other dtype (float64 included: the standard does not cover it).
    """
    key = normalize_dtype(dtype)
    if key not in _CANN_THRESHOLDS:
        known = ", ".join(str(d) for d in _CANN_THRESHOLDS)
        raise ValueError(f"the CANN ecosystem standard has no threshold for {key}; known: {known}")
    return _CANN_THRESHOLDS[key]


def cann_mere_mare(
    actual: torch.Tensor | np.ndarray,
    golden: torch.Tensor | np.ndarray,
) -> tuple[float, float]:
    """Mean and max relative error as defined by the CANN ecosystem standard.

    Parameters
    ----------
    actual, golden : torch.Tensor or numpy.ndarray
        Same shape; any device and real dtype.

    Returns
    -------
    mere, mare : float
        ``rel = |actual - golden| / (|golden| + 1e-7)`` in float64;
        ``mere = mean(rel)``, ``mare = max(rel)``.  Matched NaN/inf pairs
        contribute a relative error of 0, mismatched ones ``inf``.  Empty
        inputs give ``(0.0, 0.0)``.

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    a, g = prepare(actual, golden)
    if a.size == 0:
        return 0.0, 0.0
    matched, mismatched = split_nonfinite(a, g)
    keep = ~matched & ~mismatched
    a = finite_or_zero(a, keep)
    g = finite_or_zero(g, keep)
    rel = np.abs(a - g) / (np.abs(g) + _CANN_EPS)
    rel[mismatched] = np.inf
    return float(rel.mean()), float(rel.max())


def judge_cann(
    actual: torch.Tensor | np.ndarray,
    golden: torch.Tensor | np.ndarray,
    dtype: object = None,
) -> Verdict:
    """Judge ``actual`` with the CANN ecosystem standard.

    Passes when ``MERE < T`` and ``MARE < 10 * T`` (both strict), with ``T``
    from :func:`cann_threshold`.

    Parameters
    ----------
    actual, golden : torch.Tensor or numpy.ndarray
        Same shape; any device and real dtype.
    dtype : torch.dtype, numpy dtype or str, optional
        Dtype whose threshold applies; defaults to the dtype of ``actual``.

    Returns
    -------
    Verdict
        ``standard="cann-ecosystem"``, metrics ``mere``, ``mare`` and ``T``.

    Raises
    ------
    ValueError
        On shape mismatch or a dtype without a threshold.
    """
    # Reject bad inputs (type, shape) before complaining about the dtype.
    mere, mare = cann_mere_mare(actual, golden)
    threshold = cann_threshold(dtype_of(actual) if dtype is None else dtype)
    passed = mere < threshold and mare < 10 * threshold
    return Verdict(
        passed=passed,
        standard="cann-ecosystem",
        metrics={"mere": mere, "mare": mare, "T": threshold},
    )
