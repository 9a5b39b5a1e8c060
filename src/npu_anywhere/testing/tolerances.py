"""Per-dtype tolerances for comparing a kernel result against an fp64 golden.

The test-suite computes a *golden* reference in float64 and compares the
result of a kernel (which usually accumulates in float32 and rounds once to
its output dtype) against it.  The table below holds the ``allclose``-style
tolerances that fit such a result, in the spirit of PyTorch's / Inductor's
defaults:

==========  ========  ======
dtype       rtol      atol
==========  ========  ======
float64     1e-12     1e-12
float32     1.3e-6    1e-5
float16     1e-3      1e-5
bfloat16    1.6e-2    1e-5
==========  ========  ======

An element passes when ``|actual - golden| <= atol + rtol * |golden|``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "Tolerance",
    "TOLERANCES",
    "tolerance_for",
    "assert_close_to_golden",
]


@dataclass(frozen=True)
class Tolerance:
    """An ``allclose``-style tolerance pair.

    Parameters
    ----------
    rtol : float
        Relative tolerance, scaled by ``|golden|``.
    atol : float
        Absolute tolerance.

    Raises
    ------
    ValueError
        If either value is negative, NaN or infinite.
    """

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a real number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rtol=1e-12, atol=1e-12),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
}


def tolerance_for(
    dtype: torch.dtype,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> Tolerance:
    """Return the tolerance for ``dtype``, with optional overrides.

    Parameters
    ----------
    dtype : torch.dtype
        The dtype the result was produced in.
    rtol, atol : float, optional
        Values that replace the table entry.  When both are given, ``dtype``
        does not need to be in :data:`TOLERANCES` (useful for integer or
        float8 outputs with a hand-picked tolerance).

    Returns
    -------
    Tolerance

    Raises
    ------
    TypeError
        If ``dtype`` is not a ``torch.dtype``.
    ValueError
        If ``dtype`` has no table entry and not both overrides are given, or
        an override is negative or not finite.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    if rtol is not None and atol is not None:
        return Tolerance(rtol=rtol, atol=atol)
    base = TOLERANCES.get(dtype)
    if base is None:
        known = ", ".join(str(d) for d in TOLERANCES)
        raise ValueError(
            f"no default tolerance for {dtype}; known dtypes: {known}. "
            "Pass both rtol= and atol= to use a custom tolerance."
        )
    return Tolerance(
        rtol=base.rtol if rtol is None else rtol,
        atol=base.atol if atol is None else atol,
    )


def _as_float64_tensor(value: object, name: str) -> torch.Tensor:
    """Return ``value`` as a contiguous float64 CPU tensor."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    elif not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy.ndarray, "
            f"got {type(value).__name__}"
        )
    if value.is_complex():
        raise TypeError(f"{name} is complex ({value.dtype}); only real inputs are supported")
    # Move to CPU *before* upcasting: some accelerators have no float64.
    return value.detach().cpu().to(torch.float64).contiguous()


def _source_dtype(value: torch.Tensor | np.ndarray) -> torch.dtype:
    """The torch dtype of ``value`` before any upcasting."""
    if isinstance(value, np.ndarray):
        # from_numpy on an empty array maps numpy dtypes onto torch ones.
        return torch.from_numpy(np.empty(0, dtype=value.dtype)).dtype
    return value.dtype


def _format_index(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Turn a flat index into a per-dimension index tuple."""
    if len(shape) == 0:
        return ()
    return tuple(int(i) for i in np.unravel_index(flat_index, shape))


def assert_close_to_golden(
    actual: torch.Tensor,
    golden: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    msg: str = "",
) -> None:
    """Assert that ``actual`` matches a (usually float64) golden.

    Both tensors are moved to the CPU and upcast to float64, then every
    element must satisfy ``|actual - golden| <= atol + rtol * |golden|``.
    Non-finite values must agree exactly: NaN in the same positions of both
    counts as equal, and an infinity must be matched by an infinity of the
    same sign.

    Parameters
    ----------
    actual : torch.Tensor or numpy.ndarray
        The result under test, in any real dtype, on any device, any layout.
    golden : torch.Tensor or numpy.ndarray
        The reference, typically float64.
    dtype : torch.dtype, optional
        Dtype whose tolerance is used; defaults to ``actual.dtype``.
    rtol, atol : float, optional
        Overrides for the table tolerance (see :func:`tolerance_for`).
    msg : str, optional
        Prepended to the failure message.

    Raises
    ------
    AssertionError
        If the shapes differ or any element is out of tolerance.  The message
        names the tolerance used, the number of mismatches, the maximum
        absolute and relative errors and the index of the worst element.
    TypeError, ValueError
        For unsupported inputs or a dtype with no tolerance.
    """
    a = _as_float64_tensor(actual, "actual")
    g = _as_float64_tensor(golden, "golden")
    if dtype is None:
        dtype = _source_dtype(actual)
    tol = tolerance_for(dtype, rtol=rtol, atol=atol)
    prefix = f"{msg}: " if msg else ""

    if a.shape != g.shape:
        raise AssertionError(
            f"{prefix}shape mismatch: actual {tuple(a.shape)} vs golden {tuple(g.shape)}"
        )
    if a.numel() == 0:
        return

    shape = tuple(a.shape)
    a = a.reshape(-1)
    g = g.reshape(-1)
    finite = torch.isfinite(a) & torch.isfinite(g)
    # Non-finite pairs are equal only if both are NaN, or the same infinity.
    same_nonfinite = (torch.isnan(a) & torch.isnan(g)) | (torch.isinf(a) & (a == g))
    nonfinite_bad = ~finite & ~same_nonfinite

    # Zero out pairs that are not both finite so the arithmetic below stays
    # finite; the non-finite verdict is carried by ``nonfinite_bad``.
    a_f = torch.where(finite, a, torch.zeros_like(a))
    g_f = torch.where(finite, g, torch.zeros_like(g))
    abs_err = (a_f - g_f).abs()
    allowed = tol.atol + tol.rtol * g_f.abs()
    finite_bad = abs_err > allowed
    bad = finite_bad | nonfinite_bad
    n_bad = int(bad.sum())
    if n_bad == 0:
        return

    # Relative error w.r.t. golden; a nonzero error on a zero golden is inf.
    g_abs = g_f.abs()
    rel_err = torch.where(
        g_abs > 0,
        abs_err / torch.where(g_abs > 0, g_abs, torch.ones_like(g_abs)),
        torch.where(abs_err > 0, torch.full_like(abs_err, math.inf), torch.zeros_like(abs_err)),
    )
    # "Worst" = largest error relative to what was allowed; a non-finite
    # mismatch is infinitely bad.  ``allowed`` can be 0 when atol == rtol == 0.
    excess = torch.where(
        allowed > 0,
        abs_err / torch.where(allowed > 0, allowed, torch.ones_like(allowed)),
        torch.where(abs_err > 0, torch.full_like(abs_err, math.inf), torch.zeros_like(abs_err)),
    )
    excess = torch.where(nonfinite_bad, torch.full_like(excess, math.inf), excess)
    worst = int(torch.argmax(excess))
    worst_index = _format_index(worst, shape)

    lines = [
        f"{prefix}actual is not close to golden "
        f"({n_bad} of {a.numel()} elements mismatch; "
        f"dtype={dtype}, rtol={tol.rtol:g}, atol={tol.atol:g})",
        f"  max abs error: {float(abs_err.max()):.6g}",
        f"  max rel error: {float(rel_err.max()):.6g}",
        f"  worst element at index {worst_index}: "
        f"actual={float(a[worst]):.9g}, golden={float(g[worst]):.9g}",
    ]
    n_nonfinite = int(nonfinite_bad.sum())
    if n_nonfinite:
        lines.append(f"  {n_nonfinite} element(s) have mismatched NaN/inf")
    raise AssertionError("\n".join(lines))
