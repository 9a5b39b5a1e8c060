"""Dtype, shape and product rules shared by the mHC ops (messages in the project's shape)."""

from __future__ import annotations

import torch

from ... import checks, dtypes
from ...targets import Product

HALF_TYPES = (torch.float16, torch.bfloat16)
FLOAT32 = (torch.float32,)
SUPPORTED = frozenset({Product.ASCEND_950})   # every mHC doc lists the 950 only
STREAM_COUNTS = (4, 6, 8)


allowed = dtypes.with_float64


def expect_dtype(op: str, name: str, t: torch.Tensor, documented: tuple) -> None:
    checks.expect_dtype(t, allowed(documented), op, name)


compute_dtype = dtypes.float_compute


def expect_dims(op: str, name: str, t: torch.Tensor, dims: tuple) -> None:
    checks.expect(t.dim() in dims, op, name,
                  lambda: " or ".join(f"{d}-D" for d in dims) + " tensor",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_shape(op: str, name: str, t: torch.Tensor, shape, what: str) -> None:
    shape = tuple(shape)
    checks.expect(tuple(t.shape) == shape, op, name, lambda: f"the shape {what} = {list(shape)}",
                  lambda: f"shape {list(t.shape)}", RuntimeError)


def expect_nonempty(op: str, tensors: dict) -> None:
    for name, t in tensors.items():
        if t is not None:
            checks.expect_nonempty(t, op, name)


def expect_stream_count(op: str, name: str, n: int) -> None:
    checks.expect(n in STREAM_COUNTS, op, name, "n (its size(-2)) one of [4, 6, 8]", n,
                  ValueError)


def expect_devices(op: str, tensors: dict) -> None:
    present = {k: v for k, v in tensors.items() if v is not None}
    if len(present) > 1:
        checks.expect_same_device(present, op)


def expect_flag(op: str, name: str, value: int) -> None:
    checks.expect_one_of(value, (0, 1), op, name)
