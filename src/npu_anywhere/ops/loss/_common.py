"""Dtype rules and checks shared by the loss ops (messages in the project's shape)."""

from __future__ import annotations

import torch

from ... import checks, targets

FLOAT16_32 = (torch.float16, torch.bfloat16, torch.float32)
HALF_TYPES = (torch.float16, torch.bfloat16)


def allowed(documented: tuple) -> tuple:
    """The documented dtypes, plus float64 outside strict mode (gradcheck, fp64 goldens)."""
    return documented if targets.current() is not None else documented + (torch.float64,)


def expect_float(op: str, name: str, t: torch.Tensor, documented: tuple = FLOAT16_32) -> None:
    checks.expect_dtype(t, allowed(documented), op, name)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels' vector math is float32 (16-bit inputs upcast); float64 stays float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def expect_dim(op: str, name: str, t: torch.Tensor, dim: int) -> None:
    checks.expect(t.dim() == dim, op, name, f"a {dim}-D tensor",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_shape(op: str, name: str, t: torch.Tensor, shape, what: str) -> None:
    shape = tuple(shape)
    checks.expect(tuple(t.shape) == shape, op, name, lambda: f"the shape {what} = {shape}",
                  lambda: f"shape {tuple(t.shape)}", RuntimeError)


def expect_devices(op: str, tensors: dict) -> None:
    present = {k: v for k, v in tensors.items() if v is not None}
    if len(present) > 1:
        checks.expect_same_device(present, op)
