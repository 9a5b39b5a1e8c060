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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

__all__ = [
    "Verdict",
    "assert_rtol_equal",
    "cann_mere_mare",
    "cann_threshold",
    "judge_cann",
    "judge_msprobe",
    "compare",
]


# ---------------------------------------------------------------------------
# Verdict
# ---------------------------------------------------------------------------


def _format_metric(value: float) -> str:
    """Short rendering: scientific for small/large values, plain otherwise."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    value = float(value)
    if value == 0 or not np.isfinite(value):
        return f"{value:g}"
    if 1e-2 <= abs(value) < 1e3:
        # Cosine similarity and error shares need more than two digits.
        return f"{value:.6g}"
    return f"{value:.1e}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of one precision judge.

    Parameters
    ----------
    passed : bool
        Whether the result meets the standard.
    standard : str
        Name of the standard, e.g. ``"cann-ecosystem"``.
    metrics : dict of str to float
        Measured values.  Keys spelled in capitals (``"T"``) are the limits
        the measurements were held against; ``str()`` shows them in
        parentheses.
    warnings : tuple of str
        Findings that do not fail the check but deserve a look.

    Notes
    -----
    ``bool(verdict)`` is ``verdict.passed``, so ``assert judge(...)`` works.
    """

    passed: bool
    standard: str
    metrics: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Copy so later changes to the caller's objects cannot alter a
        # frozen verdict.
        object.__setattr__(self, "passed", bool(self.passed))
        object.__setattr__(self, "metrics", dict(self.metrics))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        measured = [f"{k}={_format_metric(v)}" for k, v in self.metrics.items() if not k.isupper()]
        limits = [f"{k}={_format_metric(v)}" for k, v in self.metrics.items() if k.isupper()]
        parts = [self.standard, "PASS" if self.passed else "FAIL", *measured]
        if limits:
            parts.append(f"({' '.join(limits)})")
        if self.warnings:
            parts.append(f"[warnings: {'; '.join(self.warnings)}]")
        return " ".join(parts)


# ---------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------

# numpy dtype names that torch spells the same way; ml_dtypes' bfloat16 and
# float8 arrays also report these names.
_NAMED_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
)

_DTYPE_ALIASES = {
    "fp64": torch.float64,
    "double": torch.float64,
    "fp32": torch.float32,
    "float": torch.float32,
    "fp16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
}


def _to_float64(value: object, name: str) -> np.ndarray:
    """Return ``value`` as a float64 numpy array on the host."""
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise TypeError(f"{name} is complex ({value.dtype}); only real inputs are supported")
        # Move to the CPU first: some accelerators cannot hold float64.  The
        # upcast happens in torch because numpy has no bfloat16/float8.
        return value.detach().cpu().to(torch.float64).numpy()
    if isinstance(value, np.ndarray):
        if np.iscomplexobj(value):
            raise TypeError(f"{name} is complex ({value.dtype}); only real inputs are supported")
        return value.astype(np.float64)
    raise TypeError(
        f"{name} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}"
    )


def _normalize_dtype(dtype: object) -> torch.dtype:
    """Accept a torch dtype, a numpy dtype or a name such as ``"bf16"``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        if dtype in _DTYPE_ALIASES:
            return _DTYPE_ALIASES[dtype]
        name = dtype.removeprefix("torch.")
        candidate = getattr(torch, name, None)
        if isinstance(candidate, torch.dtype):
            return candidate
        raise ValueError(f"unknown dtype name {dtype!r}")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a torch.dtype, numpy dtype or str, got {dtype!r}") from None
    if np_dtype.name in _NAMED_DTYPES:
        return getattr(torch, np_dtype.name)
    try:
        return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype
    except TypeError:
        raise ValueError(f"numpy dtype {np_dtype} has no torch equivalent") from None


def _dtype_of(value: object) -> torch.dtype:
    """The dtype a judge should assume for ``value`` (before upcasting)."""
    if isinstance(value, torch.Tensor):
        return value.dtype
    return _normalize_dtype(value.dtype)


def _prepare(actual: object, golden: object) -> tuple[np.ndarray, np.ndarray]:
    """Upcast both inputs and check that their shapes agree."""
    a = _to_float64(actual, "actual")
    g = _to_float64(golden, "golden")
    if a.shape != g.shape:
        raise ValueError(f"shape mismatch: actual {a.shape} vs golden {g.shape}")
    return a.reshape(-1), g.reshape(-1)


def _split_nonfinite(a: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classify pairs that are not both finite.

    Returns
    -------
    matched : ndarray of bool
        Both NaN, or the same infinity: these pairs count as equal.
    mismatched : ndarray of bool
        Any other pair with a NaN or an infinity: these pairs fail.
    """
    finite = np.isfinite(a) & np.isfinite(g)
    matched = (np.isnan(a) & np.isnan(g)) | (np.isinf(a) & (a == g))
    return matched, ~finite & ~matched


def _finite_or_zero(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``x`` where ``keep`` is true, 0 elsewhere (keeps arithmetic finite)."""
    return np.where(keep, x, 0.0)


# ---------------------------------------------------------------------------
# torch_npu: assertRtolEqual
# ---------------------------------------------------------------------------

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
    matched, mismatched = _split_nonfinite(a, b)
    keep = ~matched & ~mismatched
    a = _finite_or_zero(a, keep)
    b = _finite_or_zero(b, keep)
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
    a = _to_float64(x, "x")
    b = _to_float64(y, "y")
    if a.shape != b.shape:
        raise AssertionError(f"assert_rtol_equal failed: shape mismatch: x {a.shape} vs y {b.shape}")
    dtypes = {_dtype_of(x), _dtype_of(y)}
    passed, _, message = _rtol_check(a.reshape(-1), b.reshape(-1), dtypes, prec, prec16)
    if not passed:
        raise AssertionError(f"assert_rtol_equal failed: {message}")


def _judge_torch_npu(actual: object, golden: object, dtype: object = None) -> Verdict:
    """:func:`assert_rtol_equal` (default precisions) as a :class:`Verdict`."""
    a, g = _prepare(actual, golden)
    if dtype is None:
        dtypes = {_dtype_of(actual), _dtype_of(golden)}
    else:
        dtypes = {_normalize_dtype(dtype)}
    passed, metrics, _ = _rtol_check(a, g, dtypes, 1e-4, 1e-3)
    return Verdict(passed=passed, standard="torch_npu", metrics=metrics)


# ---------------------------------------------------------------------------
# CANN ecosystem standard: MERE / MARE
# ---------------------------------------------------------------------------

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
    key = _normalize_dtype(dtype)
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
    a, g = _prepare(actual, golden)
    if a.size == 0:
        return 0.0, 0.0
    matched, mismatched = _split_nonfinite(a, g)
    keep = ~matched & ~mismatched
    a = _finite_or_zero(a, keep)
    g = _finite_or_zero(g, keep)
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
    threshold = cann_threshold(_dtype_of(actual) if dtype is None else dtype)
    passed = mere < threshold and mare < 10 * threshold
    return Verdict(
        passed=passed,
        standard="cann-ecosystem",
        metrics={"mere": mere, "mare": mare, "T": threshold},
    )


# ---------------------------------------------------------------------------
# msprobe API precision check
# ---------------------------------------------------------------------------

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
    a, g = _prepare(actual, golden)
    key = _normalize_dtype(_dtype_of(actual) if dtype is None else dtype)
    rule = _MSPROBE_RULES.get(key)
    if rule is None:
        known = ", ".join(str(d) for d in _MSPROBE_RULES)
        raise ValueError(f"msprobe has no precision rule for {key}; known: {known}")

    matched, mismatched = _split_nonfinite(a, g)
    keep = ~matched & ~mismatched
    a = _finite_or_zero(a, keep)
    g = _finite_or_zero(g, keep)

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


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------

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
