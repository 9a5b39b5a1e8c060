"""msprobe's API precision check: cosine similarity, max absolute error, then the error-share
rule (双百 / 双千 / 双万)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ._arrays import dtype_of, finite_or_zero, normalize_dtype, prepare, split_nonfinite
from .verdict import Verdict

__all__ = ["judge_msprobe"]


_MSPROBE_COSINE_MIN = 0.99
_MSPROBE_MAX_ABS_ERR = 1e-3
# (双百, 双千, 双万): an element is an outlier if its error exceeds the
# level, and the share of outliers must stay below the same level.
_MSPROBE_LEVELS = (1e-2, 1e-3, 1e-4)
_MSPROBE_LEVEL_NAMES = ("双百", "双千", "双万")


@dataclass(frozen=True)
class _MsprobeRule:
    small_value: float  # |golden| below this is judged by absolute error
    small_value_atol: float  # absolute error allowed there
    required: int  # index into _MSPROBE_LEVELS that must pass
    warn: int  # index whose failure only warns


_MSPROBE_HALF = _MsprobeRule(small_value=1e-3, small_value_atol=1e-5, required=0, warn=1)
_MSPROBE_SINGLE = _MsprobeRule(small_value=1e-6, small_value_atol=1e-9, required=1, warn=2)

_MSPROBE_RULES = {
    torch.float16: _MSPROBE_HALF,
    torch.bfloat16: _MSPROBE_HALF,
    torch.float32: _MSPROBE_SINGLE,
    # float64 results are held to the float32 rule: msprobe defines no
    # stricter one.
    torch.float64: _MSPROBE_SINGLE,
}


def _cosine(a: np.ndarray, g: np.ndarray) -> float:
    """Cosine similarity; 1.0 when both are all-zero, 0.0 when only one is."""
    peak_a = float(np.abs(a).max(initial=0.0))
    peak_g = float(np.abs(g).max(initial=0.0))
    if peak_a == 0 and peak_g == 0:
        return 1.0
    if peak_a == 0 or peak_g == 0:
        return 0.0
    # Cosine ignores each vector's scale; normalising by the peak first keeps
    # the squared norms from overflowing for huge float64 values.
    a = a / peak_a
    g = g / peak_g
    cosine = np.dot(a, g) / (np.linalg.norm(a) * np.linalg.norm(g))
    # Rounding can push an exact match a hair above 1.
    return float(min(cosine, 1.0))


def judge_msprobe(
    actual: torch.Tensor | np.ndarray,
    golden: torch.Tensor | np.ndarray,
    dtype: object = None,
) -> Verdict:
    """Judge ``actual`` with msprobe's API precision rules.

    Steps, all in float64 on the flattened inputs:

    1. Cosine similarity must be ``> 0.99`` (two all-zero inputs count as
       1.0; exactly one all-zero input as 0.0).  Otherwise FAIL.
    2. If the max absolute error is ``< 0.001``: PASS.
    3. Otherwise the error-share rule.  Each element's error is
       ``|a - g| / |g|``, except in the small-value region ``|g| < 1e-3``
       (float16/bfloat16) or ``|g| < 1e-6`` (float32), where the element is
       an outlier iff ``|a - g| > 1e-5`` (resp. ``1e-9``) at every level.
       For each level ``L`` in 1e-2 (双百), 1e-3 (双千), 1e-4 (双万) the
       share of elements with error ``> L`` must be ``< L``.  float16 and
       bfloat16 must pass 双百 (a 双千 failure adds a warning); float32 must
       pass 双千 (a 双万 failure adds a warning).

    Parameters
    ----------
    actual, golden : torch.Tensor or numpy.ndarray
        Same shape; any device and real dtype.
    dtype : torch.dtype, numpy dtype or str, optional
        Dtype whose rule applies; defaults to the dtype of ``actual``.
        float64 uses the float32 rule.

    Returns
    -------
    Verdict
        ``standard="msprobe"``; metrics ``cosine``, ``max_abs_err``,
        ``share_1e-2``, ``share_1e-3``, ``share_1e-4`` and
        ``nonfinite_mismatch``.

    Raises
    ------
    ValueError
        On shape mismatch or an unsupported dtype.

    Notes
    -----
    Matched NaN/inf pairs are set to zero on both sides (zero error, no
    contribution to the cosine).  Any mismatched NaN/inf fails the check.
    """
    a, g = prepare(actual, golden)
    key = normalize_dtype(dtype_of(actual) if dtype is None else dtype)
    rule = _MSPROBE_RULES.get(key)
    if rule is None:
        known = ", ".join(str(d) for d in _MSPROBE_RULES)
        raise ValueError(f"msprobe has no precision rule for {key}; known: {known}")

    matched, mismatched = split_nonfinite(a, g)
    keep = ~matched & ~mismatched
    a = finite_or_zero(a, keep)
    g = finite_or_zero(g, keep)

    abs_err = np.abs(a - g)
    g_abs = np.abs(g)
    small = g_abs < rule.small_value
    # Outside the small-value region |g| >= small_value > 0, so the division
    # is safe; inside it the value is replaced by the absolute-error test.
    rel_err = abs_err / np.where(small, 1.0, g_abs)
    small_outlier = small & (abs_err > rule.small_value_atol)
    size = max(a.size, 1)
    shares = [
        float(np.where(small, small_outlier, rel_err > level).sum() / size)
        for level in _MSPROBE_LEVELS
    ]
    cosine = _cosine(a, g)
    max_abs_err = float(abs_err.max(initial=0.0))
    n_nonfinite = int(mismatched.sum())
    metrics: dict[str, float] = {
        "cosine": cosine,
        "max_abs_err": max_abs_err,
        "share_1e-2": shares[0],
        "share_1e-3": shares[1],
        "share_1e-4": shares[2],
        "nonfinite_mismatch": n_nonfinite,
    }

    def verdict(passed: bool, warnings: tuple[str, ...] = ()) -> Verdict:
        return Verdict(passed=passed, standard="msprobe", metrics=metrics, warnings=warnings)

    if n_nonfinite or not cosine > _MSPROBE_COSINE_MIN:
        return verdict(False)
    if max_abs_err < _MSPROBE_MAX_ABS_ERR:
        return verdict(True)
    level_ok = [share < level for share, level in zip(shares, _MSPROBE_LEVELS)]
    warnings: tuple[str, ...] = ()
    if not level_ok[rule.warn]:
        level = _MSPROBE_LEVELS[rule.warn]
        warnings = (
            f"{_MSPROBE_LEVEL_NAMES[rule.warn]} not met: "
            f"{shares[rule.warn]:.3g} of elements have error > {level:g}",
        )
    return verdict(level_ok[rule.required], warnings)
