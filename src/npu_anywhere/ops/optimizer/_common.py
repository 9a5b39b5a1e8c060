"""Checks and argument handling shared by the optimizer ops."""

from __future__ import annotations

from typing import Any

import torch

from ... import checks, dtypes

FLOATING = (torch.float16, torch.bfloat16, torch.float32)
HALF_FLOAT = (torch.float16, torch.float32)


allowed = dtypes.with_float64


compute_dtype = dtypes.float_compute


def check_state(op: str, grad: torch.Tensor, var: torch.Tensor, m: torch.Tensor,
                v: torch.Tensor, documented: tuple, min_dims: int = 0, max_dims: int = 8) -> None:
    """``var`` of a documented float dtype with ``min_dims``..``max_dims`` dims;
    ``m``, ``v`` and ``grad`` with ``var``'s shape and dtype, all on one device."""
    checks.expect_dtype(var, allowed(documented), op, "var")
    checks.expect(min_dims <= var.dim() <= max_dims, op, "var",
                  f"a tensor with {min_dims} to {max_dims} dims",
                  lambda: f"shape {tuple(var.shape)}", ValueError)
    for name, t in (("m", m), ("v", v), ("grad", grad)):
        checks.expect(t.shape == var.shape, op, name,
                      lambda: f"the shape of var {tuple(var.shape)}",
                      lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)
    checks.expect_same_dtype({"var": var, "m": m, "v": v, "grad": grad}, op)
    checks.expect_same_device({"var": var, "m": m, "v": v, "grad": grad}, op)


def rounded(value: Any, dtype: torch.dtype) -> float:
    """``value`` as the op-plugin adapter hands it over: a 1-element tensor of ``dtype``."""
    if dtype == torch.float64:
        return float(value)
    return float(torch.tensor(float(value), dtype=dtype))


def as_number(value: Any) -> Any:
    """A 1-element tensor passed for a Scalar (op-plugin's tests do that) as a Python number."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def outputs(op: str, out: Any, var: Any, m: Any, v: Any) -> tuple:
    """``(var, m, v)`` from ``out=(var, m, v)`` or the ``var=``, ``m=``, ``v=`` keywords."""
    if out is not None:
        checks.expect(isinstance(out, (tuple, list)) and len(out) == 3
                      and all(isinstance(t, torch.Tensor) for t in out), op, "out",
                      "a tuple of three tensors (var, m, v)", lambda: repr(type(out)), TypeError)
        checks.expect(var is None and m is None and v is None, op, "out",
                      "given alone (not with var=, m=, v=)", "both", TypeError)
        return tuple(out)
    checks.expect(var is not None and m is not None and v is not None, op, "out",
                  "the tensors to update, out=(var, m, v) (torch_npu implements only the "
                  "out= form)", "none", RuntimeError)
    return var, m, v
