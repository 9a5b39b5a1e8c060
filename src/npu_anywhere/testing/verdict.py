"""The result type of the precision judges: :class:`Verdict`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Verdict"]


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
