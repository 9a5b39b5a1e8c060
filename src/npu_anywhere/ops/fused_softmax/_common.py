"""Pieces shared by the fused softmax ops: dtype rules, the float32 softmax and its gradient."""

from __future__ import annotations

import torch

from ... import checks, targets


def allowed_dtypes(documented: tuple) -> tuple:
    """The documented dtypes, plus float64 outside strict mode (gradcheck, float64 goldens)."""
    return documented if targets.current() is not None else documented + (torch.float64,)


def expect_dtype(op: str, name: str, t: torch.Tensor, documented: tuple) -> None:
    checks.expect_dtype(t, allowed_dtypes(documented), op, name)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels compute in float32; float64 inputs (not an NPU dtype) stay float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_compute_scalar(value, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (the kernels cast their float attributes before use)."""
    return float(torch.tensor(float(value), dtype=dtype))


def softmax_grad(grad: torch.Tensor, y: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """d softmax: ``y * (grad - sum(grad * y))`` along ``dim`` (AscendC SoftmaxGrad)."""
    return y * (grad - (grad * y).sum(dim, keepdim=True))


def expect_shape_4d(op: str, name: str, t: torch.Tensor) -> None:
    checks.expect(t.dim() == 4, op, name, "a 4-D tensor (N, C, H, W)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_same_shape(op: str, name: str, t: torch.Tensor, ref_name: str,
                      ref: torch.Tensor) -> None:
    checks.expect(t.shape == ref.shape, op, name,
                  lambda: f"the shape of {ref_name} {tuple(ref.shape)}", lambda: tuple(t.shape))


def scalar_value(op: str, name: str, value) -> float:
    """A Scalar attribute as a float; bool and complex are rejected as the kernels do."""
    checks.expect(isinstance(value, (int, float)) and not isinstance(value, bool), op, name,
                  "a float or int scalar", lambda: repr(value), TypeError)
    return float(value)
