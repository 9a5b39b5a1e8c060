"""Op database entries of the tensor_misc layout and shape ops (part A): npu_dtype_cast (+ its
backward and in-place form), npu_confusion_transpose (+ backward), npu_transpose, npu_broadcast,
npu_reshape, npu_pad, npu_slice, npu_indexing, npu_one_hot, one_, npu_masked_fill_range,
npu_stride_add."""

from __future__ import annotations

import torch

from ... import dtypes
from . import ErrorSample, Sample, entry as _entry


def _r(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def _dtype_cast() -> None:
    e = _entry("npu_dtype_cast")
    e.samples += [
        Sample("fp64_same_dtype", lambda: ((_r(3, 5, dtype=torch.float64), 7), {}),
               differentiable=True),
        Sample("fp32_to_hifloat8", lambda: ((_r(4, 6) * 50, dtypes.HIFLOAT8), {})),
        Sample("fp4_codes_to_bf16", lambda: ((torch.arange(12, dtype=torch.uint8).reshape(2, 6)
                                              * 21, 15),
                                             dict(input_dtype=dtypes.FLOAT4_E2M1FN_X2))),
    ]
    e.errors += [
        ErrorSample("unknown_code", lambda: ((_r(3), 999), {}), ValueError,
                    "npu_dtype_cast: expected dtype a torch dtype or one of"),
        ErrorSample("odd_fp4", lambda: ((_r(2, 3), dtypes.FLOAT4_E2M1FN_X2), {}), ValueError,
                    "npu_dtype_cast: expected self an even last dim"),
        ErrorSample("reinterpret_size", lambda: ((_r(2, 3), 5), dict(input_dtype=4)),
                    ValueError, "npu_dtype_cast: expected input_dtype a dtype of self's element"),
    ]
    e = _entry("npu_dtype_cast_backward")
    e.samples += [
        Sample("fp16_grad_to_fp32", lambda: ((_r(3, 4, dtype=torch.float16), torch.float32),
                                             dict(grad_dtype=5))),
        Sample("fp64", lambda: ((_r(5, dtype=torch.float64), torch.float64), {})),
    ]
    e.errors += [
        ErrorSample("grad_dtype_size", lambda: ((_r(3), torch.float16), dict(grad_dtype=1)),
                    ValueError, "npu_dtype_cast_backward: expected input_dtype a dtype of"),
    ]
    e = _entry("npu_dtype_cast_")
    e.samples += [
        Sample("fp32_into_int32", lambda: ((torch.zeros(3, 4, dtype=torch.int32), _r(3, 4) * 9),
                                           {})),
        Sample("bf16_into_fp32_noncontiguous", lambda: (
            (torch.zeros(4, 3).t(), _r(3, 4, dtype=torch.bfloat16)), {})),
    ]
    e.errors += [
        ErrorSample("shape", lambda: ((torch.zeros(3, 4), _r(4, 3, dtype=torch.float16)), {}),
                    RuntimeError, "npu_dtype_cast_: expected src self's shape"),
    ]


_dtype_cast()
