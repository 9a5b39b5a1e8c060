"""torch_npu.npu_alloc_float_status, npu_get_float_status and npu_clear_float_status.

On the NPU these read and reset the AI cores' floating-point overflow register (seed 004; op-plugin
``op_plugin_functions.yaml`` schemas): mixed-precision loss scaling asks it whether a step
overflowed.  Other devices have no such register, and overflow reaches the values themselves
(inf / NaN), which torch's GradScaler checks directly; so the status read here is always
"no overflow": eight float32 zeros, on the input's device.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

STATUS_SIZE = 8
_INFO = OpInfo(api="torch_npu", notes=["no overflow register off the NPU: always zeros"])


def _zeros(self: torch.Tensor) -> torch.Tensor:
    return torch.zeros(STATUS_SIZE, dtype=torch.float32, device=self.device)


def _check_any(op):
    def check(self, mode=0):
        checks.expect(isinstance(self, torch.Tensor), op, "self", "a Tensor",
                      type(self).__name__, TypeError)
        checks.expect(mode in (0, 1), op, "mode", "0 or 1", repr(mode), ValueError)
    return check


def _check_float32(op):
    any_check = _check_any(op)

    def check(self, mode=0):
        any_check(self, mode)
        checks.expect_dtype(self, (torch.float32,), op, "self")
    return check


alloc_op = NpuOp("npu_alloc_float_status(Tensor self) -> Tensor", namespace=TORCH_NPU_NS,
                 check=lambda self: _check_any("npu_alloc_float_status")(self),
                 reference=lambda self: _zeros(self), info=_INFO)
get_op = NpuOp("npu_get_float_status(Tensor self, int mode=0) -> Tensor",
               namespace=TORCH_NPU_NS, check=_check_float32("npu_get_float_status"),
               reference=lambda self, mode=0: _zeros(self), info=_INFO)
clear_op = NpuOp("npu_clear_float_status(Tensor self, int mode=0) -> Tensor",
                 namespace=TORCH_NPU_NS, check=_check_float32("npu_clear_float_status"),
                 reference=lambda self, mode=0: _zeros(self), info=_INFO)
for _op in (alloc_op, get_op, clear_op):
    _op.forbid_autograd("the float status has no gradient")


def npu_alloc_float_status(self):
    """A one-dimensional float32 tensor of 8 zeros on ``self``'s device (seed 004): the buffer
    the status is read into."""
    return alloc_op(self)


def npu_get_float_status(self, mode=0):
    """The overflow status, 8 float32 values (seed 004; ``self`` float32): all zeros here, as
    nothing overflows unseen off the NPU (inf / NaN stay in the values)."""
    return get_op(self, mode)


def npu_clear_float_status(self, mode=0):
    """Clear the overflow status; returns 8 float32 zeros (seed 004; ``self`` float32)."""
    return clear_op(self, mode)


TORCH_NPU_FUNCTIONS = {
    "npu_alloc_float_status": npu_alloc_float_status,
    "npu_get_float_status": npu_get_float_status,
    "npu_clear_float_status": npu_clear_float_status,
}
