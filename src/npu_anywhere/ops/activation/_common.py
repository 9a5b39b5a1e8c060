"""Checks shared by the activation ops (messages in the project's shape, see checks.py)."""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING

HALF_AND_FLOAT = (torch.float16, torch.float32)


def allowed_dtypes(documented: tuple = FLOATING) -> tuple:
    """The documented float dtypes, plus float64 outside strict mode (gradcheck, fp64 goldens)."""
    return documented if targets.current() is not None else documented + (torch.float64,)


def expect_float(op: str, name: str, t: torch.Tensor, documented: tuple = FLOATING) -> None:
    checks.expect_dtype(t, allowed_dtypes(documented), op, name)


def expect_rank(op: str, name: str, t: torch.Tensor, lo: int, hi: int) -> None:
    n = t.dim()
    checks.expect(lo <= n <= hi, op, name, lambda: f"a tensor with {lo} to {hi} dims",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_split_dim(op: str, name: str, t: torch.Tensor, dim: int) -> int:
    """``dim`` in [-t.dim(), t.dim() - 1] and t.shape[dim] even; returns dim normalized."""
    n = t.dim()
    checks.expect(-n <= dim < n, op, "dim",
                  lambda: f"in the range [{-n}, {n - 1}] for a {n}-D {name}", dim, IndexError)
    d = dim % n
    size = t.shape[d]
    checks.expect(size % 2 == 0, op, name, lambda: f"an even size along dim {dim} (the axis "
                  "cut into two halves)", lambda: f"shape {tuple(t.shape)}", ValueError)
    return d


def expect_halved(op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor,
                  dim: int) -> None:
    """``t`` has ``ref``'s shape with dim ``dim`` halved."""
    want = list(ref.shape)
    want[dim] = want[dim] // 2
    checks.expect(list(t.shape) == want, op, name,
                  lambda: f"the shape of {ref_name} {tuple(ref.shape)} with dim {dim} halved "
                  f"{tuple(want)}", lambda: tuple(t.shape))


def expect_same_shape(op: str, name: str, t: torch.Tensor, ref_name: str,
                      ref: torch.Tensor) -> None:
    checks.expect(t.shape == ref.shape, op, name,
                  lambda: f"the shape of {ref_name} {tuple(ref.shape)}", lambda: tuple(t.shape))


def expect_no_bf16_on(op: str, name: str, t: torch.Tensor, product, products) -> None:
    if product in products:
        checks.expect(t.dtype != torch.bfloat16, op, name,
                      lambda: f"a dtype other than bfloat16 on {product.value}", "bfloat16",
                      TypeError)


def expect_nonempty_on(op: str, name: str, t: torch.Tensor, product, products) -> None:
    if product in products:
        checks.expect(t.numel() != 0, op, name,
                      lambda: f"a non-empty tensor on {product.value}",
                      lambda: f"shape {tuple(t.shape)}", ValueError)
