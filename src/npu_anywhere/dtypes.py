"""dtype groups and torch_npu's integer dtype codes.

torch_npu schemas take output dtypes as ``int`` (``int? dst_type``): a ``torch.dtype`` passed there
arrives as its ScalarType enum value (torch.int8 -> 1, torch.quint4x2 -> 16, ...), and the
dtypes PyTorch lacks are extra codes exposed as ``torch_npu.hifloat8`` etc.
"""

from __future__ import annotations

import torch

FLOATING = (torch.float16, torch.bfloat16, torch.float32)
"""The floating dtypes the NPU ops document (float64 is accepted too: see ``FLOATING_OR_DOUBLE``)."""

FLOATING_OR_DOUBLE = FLOATING + (torch.float64,)
"""Documented floats plus float64, which we accept so gradcheck and fp64 goldens can run
through the very same op (an NPU would reject float64; strict mode does)."""

# ScalarType enum values (c10/core/ScalarType.h) of the dtypes the ops use.
SCALAR_TYPE_CODES: dict[int, torch.dtype] = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool,
    12: torch.qint8, 13: torch.quint8, 14: torch.qint32,
    15: torch.bfloat16, 16: torch.quint4x2, 23: torch.float8_e5m2, 24: torch.float8_e4m3fn,
}

# torch_npu's own dtype codes (op-plugin's meta registrations): the formats PyTorch lacks are
# carried in uint8 (or int32 for packed int4) tensors.
INT4 = 285
HIFLOAT8 = 290
FLOAT8_E5M2 = 291
FLOAT8_E4M3FN = 292
FLOAT8_E8M0FNU = 293
FLOAT4_E2M1FN_X2 = 296
FLOAT4_E1M2FN_X2 = 297

NPU_DTYPE_NAMES: dict[int, str] = {
    INT4: "int4", HIFLOAT8: "hifloat8", FLOAT8_E5M2: "float8_e5m2",
    FLOAT8_E4M3FN: "float8_e4m3fn", FLOAT8_E8M0FNU: "float8_e8m0fnu",
    FLOAT4_E2M1FN_X2: "float4_e2m1fn_x2", FLOAT4_E1M2FN_X2: "float4_e1m2fn_x2",
}

_NPU_CODE_TO_TORCH: dict[int, torch.dtype] = {
    FLOAT8_E5M2: torch.float8_e5m2,
    FLOAT8_E4M3FN: torch.float8_e4m3fn,
}


def name(dtype: torch.dtype | int | None) -> str:
    """A readable name for a torch dtype or a dtype code."""
    if dtype is None:
        return "None"
    if isinstance(dtype, int):
        if dtype in NPU_DTYPE_NAMES:
            return f"torch_npu.{NPU_DTYPE_NAMES[dtype]}"
        if dtype in SCALAR_TYPE_CODES:
            return name(SCALAR_TYPE_CODES[dtype])
        return f"dtype code {dtype}"
    return str(dtype).replace("torch.", "")


def code_to_dtype(code: int | torch.dtype) -> torch.dtype | int:
    """The torch dtype a dtype code stands for; NPU-only formats stay as their int code."""
    if isinstance(code, torch.dtype):
        return code
    if code in _NPU_CODE_TO_TORCH:
        return _NPU_CODE_TO_TORCH[code]
    if code in SCALAR_TYPE_CODES:
        return SCALAR_TYPE_CODES[code]
    return code


def is_int4(code: int | torch.dtype | None) -> bool:
    """torch.quint4x2 and torch_npu.int4 both request 4-bit integer output."""
    return code in (16, INT4, torch.quint4x2)


def with_float64(documented: tuple) -> tuple:
    """The documented dtypes, plus float64 outside strict mode (gradcheck, float64 goldens)."""
    from . import targets    # not at import time: targets is a leaf the ops import first

    return documented if targets.current() is not None else documented + (torch.float64,)


def float_compute(dtype: torch.dtype) -> torch.dtype:
    """The kernels' vector math dtype: float32 (16-bit inputs upcast); float64 stays float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32
