"""Shared GroupNorm math for npu_group_norm_silu and npu_group_norm_swish (+ its grad).

Formula (aclnnGroupNormSilu / aclnnGroupNormSwish)::

    input (N, C, *) is split into G groups of C/G channels; over each (n, g):
    mean = E[x];  var = E[(x - mean)^2] (biased);  rstd = 1 / sqrt(var + eps)
    y    = (x - mean) * rstd * gamma[c] + beta[c]

Computed in float32 (float64 for float64 input).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ... import checks
from .rms_core import MAX_DIMS, compute_dtype


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_group_input(op: str, input: torch.Tensor, groups: int, group_name: str,
                      allowed_dtypes) -> None:
    checks.expect_dtype(input, allowed_dtypes, op, "input")
    checks.expect(2 <= input.dim() <= MAX_DIMS, op, "input",
                  lambda: f"a 2-D to {MAX_DIMS}-D tensor (N, C, ...)",
                  lambda: f"shape {tuple(input.shape)}", ValueError)
    checks.expect(groups > 0, op, group_name, "> 0", groups, ValueError)
    c = input.shape[1]
    checks.expect(c % groups == 0, op, "input",
                  lambda: f"a channel dim (dim 1) divisible by {group_name} ({groups})", c,
                  ValueError)


def check_affine(op: str, input: torch.Tensor, name: str, t: Optional[torch.Tensor],
                 allowed_dtypes) -> None:
    """weight/bias: 1-D with C elements, dtype input's or float32."""
    if t is None:
        return
    checks.expect_dtype(t, allowed_dtypes, op, name)
    ok = t.dtype in (input.dtype, torch.float32)
    checks.expect(ok, op, name,
                  lambda: f"the dtype of input ({_name(input.dtype)}) or float32",
                  lambda: _name(t.dtype), TypeError)
    c = input.shape[1]
    checks.expect(t.dim() == 1 and t.shape[0] == c, op, name,
                  lambda: f"a 1-D tensor of C = {c} elements", lambda: f"shape {tuple(t.shape)}")


def group_view_shape(shape, groups: int) -> tuple[int, int, int]:
    n, c = shape[0], shape[1]
    return n, groups, (c // groups) * math.prod(shape[2:])


def group_norm_fp32(input: torch.Tensor, weight: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor], groups: int, eps: float):
    """``(y, mean, rstd)`` in the compute dtype; y has input's shape, mean/rstd (N, G)."""
    ct = compute_dtype(input.dtype)
    n, c = input.shape[0], input.shape[1]
    x = input.to(ct).reshape(group_view_shape(input.shape, groups))
    var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    hw = math.prod(input.shape[2:])
    y = ((x - mean) * rstd).reshape(n, c, hw)
    if weight is not None:
        y = y * weight.to(ct).reshape(1, c, 1)
    if bias is not None:
        y = y + bias.to(ct).reshape(1, c, 1)
    return y.reshape(input.shape), mean.reshape(n, groups), rstd.reshape(n, groups)
