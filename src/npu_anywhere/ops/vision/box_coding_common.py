"""Pieces shared by the box coders and the YOLO helpers: dtype rules, the ``(N, 4)`` box check
and the registration of an op torch_npu gives no backward."""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

# The kernels take float16 and float32 boxes (no bfloat16, no float64).
FLOATS = (torch.float16, torch.float32)


def expect_n4(op: str, name: str, t: torch.Tensor) -> None:
    checks.expect_dtype(t, FLOATS, op, name)
    checks.expect(t.dim() == 2 and t.shape[1] == 4, op, name, "a 2-D tensor of shape (N, 4)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_shape(op: str, name: str, t: torch.Tensor, shape, what: str) -> None:
    checks.expect(tuple(t.shape) == tuple(shape), op, name,
                  lambda: f"shape {tuple(shape)} ({what})", lambda: f"shape {tuple(t.shape)}",
                  RuntimeError)


def define_op(schema: str, check, reference) -> NpuOp:
    """A torch_npu op with no backward (derivatives.yaml lists none for these)."""
    op = NpuOp(schema, namespace=TORCH_NPU_NS, check=check, reference=reference,
               metadata_check=True, info=OpInfo(api="torch_npu"))
    op.forbid_autograd("torch_npu defines no backward for it")
    return op
