"""dtype groups used by the op checks."""

import torch

FLOATING = (torch.float16, torch.bfloat16, torch.float32)
"""The floating dtypes the NPU ops document (float64 is accepted too: see ``FLOATING_OR_DOUBLE``)."""

FLOATING_OR_DOUBLE = FLOATING + (torch.float64,)
"""Documented floats plus float64, which we accept so gradcheck and fp64 goldens can run
through the very same op (an NPU would reject float64; strict mode does)."""


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
