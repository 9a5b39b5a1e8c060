"""torch_npu's ``TestCase.assertRtolEqual`` precision rule: :func:`assert_rtol_equal` and its
:class:`~.verdict.Verdict` form for :func:`~.compare.compare`."""

from __future__ import annotations

import numpy as np
import torch

from ._arrays import dtype_of, finite_or_zero, normalize_dtype, prepare, split_nonfinite, to_float64
from .verdict import Verdict

__all__ = ["assert_rtol_equal"]


# Floor for the relative-error denominator, so an exact zero on both sides
# does not divide by zero.  6e-8 is about the smallest float16 subnormal.
_TINY16 = 6e-8
_TINY = 1e-9
_BF16_RTOL = 1e-3
_BF16_ATOL = 1e-3


def _check_precision(name: str, value: object) -> float:
    """Validate a tolerance argument and return it as a float."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return value


def _rtol_check(
    a: np.ndarray,
    b: np.ndarray,
    dtypes: set[torch.dtype],
    prec: float,
    prec16: float,
) -> tuple[bool, dict[str, float], str]:
    """Shared core of :func:`assert_rtol_equal` and the ``torch_npu`` verdict.

    ``a`` and ``b`` are flat float64 arrays of equal size; ``dtypes`` holds
    the dtype(s) that choose the rule.  Returns ``(passed, metrics,
    failure_message)``; the message is empty on success.
    """
    matched, mismatched = split_nonfinite(a, b)
    keep = ~matched & ~mismatched
    a = finite_or_zero(a, keep)
    b = finite_or_zero(b, keep)
    abs_err = np.abs(a - b)
    n_nonfinite = int(mismatched.sum())
    metrics: dict[str, float] = {
        "max_abs_err": float(abs_err.max(initial=0.0)),
        "nonfinite_mismatch": n_nonfinite,
    }
    if n_nonfinite:
        return False, metrics, f"{n_nonfinite} element(s) have mismatched NaN/inf positions"

    # The coarser of the two dtypes decides which rule applies.
    if torch.bfloat16 in dtypes:
        # bf16 has too few bits for an outlier budget; use plain allclose.
        bad = abs_err > _BF16_ATOL + _BF16_RTOL * np.abs(b)
        n_bad = int(bad.sum())
        metrics["allclose_violations"] = n_bad
        metrics["RTOL"] = _BF16_RTOL
        metrics["ATOL"] = _BF16_ATOL
        if n_bad:
            return False, metrics, (
                f"bfloat16 allclose(rtol={_BF16_RTOL:g}, atol={_BF16_ATOL:g}) failed for "
                f"{n_bad} of {a.size} elements (max abs err {metrics['max_abs_err']:.6g})"
            )
        return True, metrics, ""

    if torch.float16 in dtypes:
        tol, tiny = prec16, _TINY16
    else:
        tol, tiny = prec, _TINY
    # Symmetric relative error, so argument order (golden first, as in
    # torch_npu's own tests, or second) does not matter.
    denom = np.maximum(np.maximum(np.abs(a), np.abs(b)), tiny)
    rel_err = abs_err / denom
    n_rel = int((rel_err > tol).sum())
    n_abs = int((abs_err > tol).sum())
    allowed = a.size * tol
    metrics.update(
        {
            "max_rel_err": float(rel_err.max(initial=0.0)),
            "rel_outliers": n_rel,
            "abs_outliers": n_abs,
            "PREC": tol,
            "ALLOWED": allowed,
        }
    )
    if n_rel > allowed and n_abs > allowed:
        return False, metrics, (
            f"{n_rel} of {a.size} elements exceed the relative tolerance {tol:g} and "
            f"{n_abs} exceed the absolute tolerance {tol:g}; at most {allowed:g} of "
            f"either are allowed (max abs err {metrics['max_abs_err']:.6g}, "
            f"max rel err {metrics['max_rel_err']:.6g})"
        )
    return True, metrics, ""


def assert_rtol_equal(
    x: torch.Tensor | np.ndarray,
    y: torch.Tensor | np.ndarray,
    prec: float = 1e-4,
    prec16: float = 1e-3,
) -> None:
    """Assert closeness the way torch_npu's ``TestCase.assertRtolEqual`` does.

    Parameters
    ----------
    x, y : torch.Tensor or numpy.ndarray
        The two results, any device, any real dtype.  Order does not matter
        except for bfloat16, where ``y`` is the reference of ``allclose``.
    prec : float, optional
        Tolerance for every dtype except float16 and bfloat16.
    prec16 : float, optional
        Tolerance used when either input is float16.

    Raises
    ------
    AssertionError
        On shape mismatch, NaN/inf mismatch, or when too many elements are
        out of tolerance; the message gives the counts.

    Notes
    -----
    Computation is in float64.  With ``n = x.size`` and ``p`` the tolerance
    (``prec16`` if either input is float16, ``prec`` otherwise):

    * abs error ``e = |x - y|``;
    * rel error ``e / max(|x|, |y|, tiny)`` with ``tiny = 6e-8`` for float16
      and ``1e-9`` otherwise (symmetric in ``x`` and ``y``);
    * the check fails only if **more than** ``n * p`` elements have rel error
      ``> p`` **and** more than ``n * p`` elements have abs error ``> p``.
      Exactly ``n * p`` outliers still pass.

    If either input is bfloat16 the outlier budget is dropped and every
    element must satisfy ``e <= 1e-3 + 1e-3 * |y|`` (``allclose`` with
    ``rtol = atol = 1e-3``).  NaN in the same positions of both counts as
    equal; an infinity must be matched by the same infinity.
    """
    prec = _check_precision("prec", prec)
    prec16 = _check_precision("prec16", prec16)
    a = to_float64(x, "x")
    b = to_float64(y, "y")
    if a.shape != b.shape:
        raise AssertionError(f"assert_rtol_equal failed: shape mismatch: x {a.shape} vs y {b.shape}")
    dtypes = {dtype_of(x), dtype_of(y)}
    passed, _, message = _rtol_check(a.reshape(-1), b.reshape(-1), dtypes, prec, prec16)
    if not passed:
        raise AssertionError(f"assert_rtol_equal failed: {message}")


def _judge_torch_npu(actual: object, golden: object, dtype: object = None) -> Verdict:
    """:func:`assert_rtol_equal` (default precisions) as a :class:`Verdict`."""
    a, g = prepare(actual, golden)
    if dtype is None:
        dtypes = {dtype_of(actual), dtype_of(golden)}
    else:
        dtypes = {normalize_dtype(dtype)}
    passed, metrics, _ = _rtol_check(a, g, dtypes, 1e-4, 1e-3)
    return Verdict(passed=passed, standard="torch_npu", metrics=metrics)
