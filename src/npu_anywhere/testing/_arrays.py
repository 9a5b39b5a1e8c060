"""Input handling shared by the precision judges: upcast to float64 numpy, dtype names,
shape checks and the split of non-finite pairs."""

from __future__ import annotations

import numpy as np
import torch

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


def to_float64(value: object, name: str) -> np.ndarray:
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


def normalize_dtype(dtype: object) -> torch.dtype:
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


def dtype_of(value: object) -> torch.dtype:
    """The dtype a judge should assume for ``value`` (before upcasting)."""
    if isinstance(value, torch.Tensor):
        return value.dtype
    return normalize_dtype(value.dtype)


def prepare(actual: object, golden: object) -> tuple[np.ndarray, np.ndarray]:
    """Upcast both inputs and check that their shapes agree."""
    a = to_float64(actual, "actual")
    g = to_float64(golden, "golden")
    if a.shape != g.shape:
        raise ValueError(f"shape mismatch: actual {a.shape} vs golden {g.shape}")
    return a.reshape(-1), g.reshape(-1)


def split_nonfinite(a: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def finite_or_zero(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``x`` where ``keep`` is true, 0 elsewhere (keeps arithmetic finite)."""
    return np.where(keep, x, 0.0)
