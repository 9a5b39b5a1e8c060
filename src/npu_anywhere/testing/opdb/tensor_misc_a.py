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
    ]
    e.errors += [
        ErrorSample("grad_dtype_size", lambda: ((_r(3), torch.float16), dict(grad_dtype=1)),
                    ValueError, "npu_dtype_cast_backward: expected input_dtype a dtype of"),
    ]
    e = _entry("npu_dtype_cast_")
    e.samples += [
        Sample("bf16_into_fp32_noncontiguous", lambda: (
            (torch.zeros(4, 3).t(), _r(3, 4, dtype=torch.bfloat16)), {})),
    ]
    e.errors += [
        ErrorSample("shape", lambda: ((torch.zeros(3, 4), _r(4, 3, dtype=torch.float16)), {}),
                    RuntimeError, "npu_dtype_cast_: expected src self's shape"),
    ]


_dtype_cast()


def _layout() -> None:
    e = _entry("npu_confusion_transpose")
    e.samples += [
        Sample("transpose_first_fp64", lambda: ((_r(2, 3, 4, 5, dtype=torch.float64),
                                                 [0, 2, 1, 3], [2, 4, 15], True), {}),
               differentiable=True),
        Sample("reshape_first_int32_noncontiguous", lambda: (
            (torch.arange(30, dtype=torch.int32).reshape(5, 6).t(), [1, 0, 2], [3, 5, 2], False),
            {})),
    ]
    e.errors += [
        ErrorSample("perm_length", lambda: ((_r(2, 3, 4), [0, 1], [6, 4], True), {}),
                    ValueError, "npu_confusion_transpose: expected perm a permutation of 0..2"),
        ErrorSample("numel", lambda: ((_r(2, 3, 4), [0, 2, 1], [2, 3, 5], False), {}),
                    ValueError, "npu_confusion_transpose: expected shape 24 elements in all"),
    ]
    e = _entry("npu_confusion_transpose_backward")
    e.samples += [
        Sample("reshape_first_fp16", lambda: ((_r(2, 4, 15, dtype=torch.float16), [0, 2, 1, 3],
                                               [2, 3, 4, 5], False), {})),
    ]
    e.errors += [
        ErrorSample("perm_repeat", lambda: ((_r(2, 4, 3), [0, 1, 1], [2, 3, 4], False), {}),
                    ValueError, "npu_confusion_transpose_backward: expected perm a permutation"),
    ]
    e = _entry("npu_transpose")
    e.samples += [
        Sample("int8_noncontiguous", lambda: ((torch.arange(24, dtype=torch.int8).reshape(4, 6)
                                               [:, ::2], [1, 0], False), {})),
    ]
    e.errors += [
        ErrorSample("perm_repeat", lambda: ((_r(2, 3), [0, 0]), {}), ValueError,
                    "npu_transpose: expected perm a permutation of 0..1"),
    ]
    e = _entry("npu_transpose.out")
    e.samples += [Sample("bf16", lambda: ((_r(3, 4, dtype=torch.bfloat16), [1, 0]),
                                          dict(out=torch.zeros(4, 3, dtype=torch.bfloat16))))]
    e.errors += [
        ErrorSample("out_shape", lambda: ((_r(3, 4), [1, 0]), dict(out=torch.zeros(3, 4))),
                    RuntimeError, "npu_transpose: expected out shape .4, 3."),
    ]
    e = _entry("npu_broadcast")
    e.samples += [
        Sample("bool_keep_dim", lambda: ((torch.tensor([True, False]).reshape(1, 2), [3, -1]),
                                         {})),
    ]
    e.errors += [
        ErrorSample("not_one", lambda: ((_r(3, 2), [3, 4]), {}), ValueError,
                    "npu_broadcast: expected size to keep or expand each dim"),
        ErrorSample("too_short", lambda: ((_r(3, 2), [2]), {}), ValueError,
                    "npu_broadcast: expected size at least self.dim.. = 2 entries"),
    ]
    e = _entry("npu_broadcast.out")
    e.samples += [Sample("fp32", lambda: ((_r(1, 3), [2, 3]), dict(out=torch.zeros(2, 3))))]
    e.errors += [
        ErrorSample("out_dtype", lambda: ((_r(1, 3), [2, 3]),
                                          dict(out=torch.zeros(2, 3, dtype=torch.float16))),
                    RuntimeError, "npu_broadcast: expected out shape .2, 3. and dtype float32"),
    ]
    e = _entry("npu_reshape")
    e.samples += [
        Sample("int64_noncontiguous_refresh", lambda: ((torch.arange(12).reshape(3, 4).t(),
                                                        [6, 2], True), {})),
    ]
    e.errors += [
        ErrorSample("numel", lambda: ((_r(2, 8), [4, 5]), {}), ValueError,
                    "npu_reshape: expected shape 16 elements in all"),
        ErrorSample("minus_one", lambda: ((_r(2, 8), [-1, 4]), {}), ValueError,
                    "npu_reshape: expected shape values >= 0"),
    ]
    e = _entry("npu_reshape.out")
    e.samples += [
        Sample("copy", lambda: ((_r(2, 8), [4, 4]), dict(out=torch.zeros(4, 4)))),
    ]
    e.errors += [
        ErrorSample("out_shape", lambda: ((_r(2, 8), [4, 4]), dict(out=torch.zeros(16))),
                    RuntimeError, "npu_reshape: expected out shape .4, 4."),
    ]


_layout()
