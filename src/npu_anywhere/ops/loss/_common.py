"""Dtype rules and checks shared by the loss ops (messages in the project's shape)."""

from __future__ import annotations

import torch

from ... import checks, dtypes

FLOAT16_32 = (torch.float16, torch.bfloat16, torch.float32)
HALF_TYPES = (torch.float16, torch.bfloat16)


allowed = dtypes.with_float64


def expect_float(op: str, name: str, t: torch.Tensor, documented: tuple = FLOAT16_32) -> None:
    checks.expect_dtype(t, allowed(documented), op, name)


compute_dtype = dtypes.float_compute


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
