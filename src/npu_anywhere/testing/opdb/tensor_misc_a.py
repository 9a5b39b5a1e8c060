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


def _slicing() -> None:
    e = _entry("npu_indexing")
    e.samples += [
        Sample("masks_negative_stride_fp16", lambda: (
            (_r(3, 4, 5, dtype=torch.float16), [0, -1, 1, 0], [0, 0, 4, 0], [1, -2, 1, 1]),
            dict(begin_mask=1, end_mask=2, new_axis_mask=8, shrink_axis_mask=4))),
    ]
    e.errors += [
        ErrorSample("zero_stride", lambda: ((_r(2, 3), [0, 0], [2, 2], [1, 0]), {}), ValueError,
                    "npu_indexing: expected strides non-zero entries"),
        ErrorSample("two_ellipses", lambda: ((_r(2, 3), [0, 0], [2, 2], [1, 1]),
                                             dict(ellipsis_mask=3)), ValueError,
                    "npu_indexing: expected ellipsis_mask at most one bit set"),
        ErrorSample("shrink_out_of_range", lambda: ((_r(2, 3), [0, 5], [2, 6], [1, 1]),
                                                    dict(shrink_axis_mask=2)), IndexError,
                    "npu_indexing: expected begin an index in"),
    ]
    e = _entry("npu_indexing.out")
    e.samples += [Sample("strided", lambda: ((_r(4, 6), [1, 0], [4, 6], [2, 3]),
                                             dict(out=torch.zeros(2, 2))))]
    e.errors += [
        ErrorSample("out_shape", lambda: ((_r(4, 6), [1, 0], [4, 6], [2, 3]),
                                          dict(out=torch.zeros(2, 3))), RuntimeError,
                    "npu_indexing: expected out shape"),
    ]
    e = _entry("npu_slice")
    e.samples += [Sample("fp16_noncontiguous", lambda: ((_r(5, 6, dtype=torch.float16).t(),
                                                         [1, 2], [3, 2]), {}))]
    e.errors += [
        ErrorSample("beyond", lambda: ((_r(2, 5), [0, 4], [2, 2]), {}), ValueError,
                    "npu_slice: expected size offsets \\+ size within"),
        ErrorSample("length", lambda: ((_r(2, 5), [0], [2, 2]), {}), ValueError,
                    "npu_slice: expected offsets 2 entries"),
    ]
    e = _entry("npu_slice.out")
    e.samples += [Sample("int32", lambda: ((torch.arange(10, dtype=torch.int32).reshape(2, 5),
                                            [0, 1], [2, 3]),
                                           dict(out=torch.zeros(2, 3, dtype=torch.int32))))]
    e.errors += [
        ErrorSample("out_dtype", lambda: ((_r(2, 5), [0, 1], [2, 3]),
                                          dict(out=torch.zeros(2, 3, dtype=torch.int32))),
                    RuntimeError, "npu_slice: expected out shape"),
    ]
    e = _entry("npu_pad")
    e.samples += [
        Sample("int8_partial_list", lambda: ((torch.ones(2, 3, 2, dtype=torch.int8), [0, 2, 1]),
                                             {})),
    ]
    e.errors += [
        ErrorSample("negative", lambda: ((_r(2, 2), [1, -1]), {}), ValueError,
                    "npu_pad: expected paddings values >= 0"),
        ErrorSample("too_long", lambda: ((_r(2, 2), [1, 1, 1, 1, 1]), {}), ValueError,
                    "npu_pad: expected paddings at most 2 \\* input.dim"),
    ]


def _fill() -> None:
    e = _entry("npu_one_hot")
    e.samples += [
        Sample("axis0_values", lambda: ((torch.tensor([[0, 2], [1, -1]]), 0, 3, 2.5, -1), {})),
    ]
    e.errors += [
        ErrorSample("depth_auto", lambda: ((torch.tensor([1, 2]),), dict(depth=-1)),
                    NotImplementedError, "npu_one_hot: expected depth a given depth"),
        ErrorSample("axis", lambda: ((torch.tensor([1, 2]), 3, 4), {}), ValueError,
                    "npu_one_hot: expected num_classes the position of the class dim"),
    ]
    e = _entry("one_")
    e.samples += [Sample("bf16_noncontiguous", lambda: ((_r(3, 4, dtype=torch.bfloat16).t(),),
                                                        {}))]
    e.errors += [
        ErrorSample("expanded_target", lambda: ((torch.zeros(1).expand(3),), {}), RuntimeError,
                    "one_: expected self a tensor whose elements do not share memory"),
    ]

    def mfr(dtype=torch.float32, shape=(4, 5), axis=-1, starts=((0, 1, 2),), ends=((2, 4, 3),)):
        x = (_r(*shape) * 10).to(dtype)
        start = torch.tensor(starts, dtype=torch.int32)
        end = torch.tensor(ends, dtype=torch.int32)
        value = (torch.arange(len(starts)) + 7).to(dtype)
        return (x, start, end, value, axis), {}

    e = _entry("npu_masked_fill_range")
    e.samples += [
        Sample("int8_3d_axis1_two_groups", lambda: mfr(torch.int8, (2, 6, 3), 1,
                                                       ((0, 4), (3, 1)), ((2, 6), (5, 2)))),
    ]
    e.errors += [
        ErrorSample("value_dtype", lambda: ((_r(4, 5), torch.zeros(1, 2, dtype=torch.int32),
                                             torch.ones(1, 2, dtype=torch.int32),
                                             torch.ones(1, dtype=torch.float16)), {}),
                    TypeError, "npu_masked_fill_range: expected value self's dtype"),
        ErrorSample("axis", lambda: ((_r(4, 5), torch.zeros(1, 2, dtype=torch.int32),
                                      torch.ones(1, 2, dtype=torch.int32), torch.ones(1), 2), {}),
                    IndexError, "npu_masked_fill_range: expected axis in"),
        ErrorSample("groups", lambda: ((_r(4, 5), torch.zeros(2, 2, dtype=torch.int32),
                                        torch.ones(2, 2, dtype=torch.int32), torch.ones(1)), {}),
                    RuntimeError, "npu_masked_fill_range: expected value one value per range"),
    ]
    e = _entry("npu_stride_add")
    e.samples += [
        Sample("fp16_offsets", lambda: ((_r(2, 40, 3, dtype=torch.float16),
                                         _r(2, 20, 3, dtype=torch.float16, seed=1), 1, 0, 2), {})),
    ]
    e.errors += [
        ErrorSample("c1_len", lambda: ((_r(1, 20, 2), _r(1, 20, 2), 1, 0, 2), {}), ValueError,
                    "npu_stride_add: expected c1_len <= C1 - offset of self"),
        ErrorSample("shape", lambda: ((_r(1, 20, 2), _r(1, 20, 3), 0, 0, 1), {}), RuntimeError,
                    "npu_stride_add: expected other self's shape"),
    ]


_slicing()
_fill()
