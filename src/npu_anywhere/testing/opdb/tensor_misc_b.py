"""Op database entries of tensor_misc part B: npu_max / npu_min (+ backward), npu_sort_v2,
npu_sign_bits_pack / unpack, npu_gather_sparse_index (+ backward), _npu_dropout (+ backward),
npu_hans_encode / npu_hans_decode."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _t(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


# -- npu_max / npu_min and their backward ------------------------------------------------------

def _max_min() -> None:
    for name in ("npu_max", "npu_min"):
        e = _entry(f"{name}.dim")
        e.samples += [
            Sample("dim1_fp64", lambda: ((_t(3, 5, 4, dtype=torch.float64), 1), {}),
                   differentiable=True),
            Sample("keepdim_neg_fp16", lambda: ((_t(2, 7, dtype=torch.float16), -1, True), {})),
        ]
        e.errors += [
            ErrorSample("dim", lambda: ((_t(2, 3), 2), {}), IndexError,
                        rf"{name}: expected dim in the range \[-2, 1\]"),
            ErrorSample("bool", lambda: ((torch.ones(3, dtype=torch.bool), 0), {}), TypeError,
                        f"{name}: expected self dtype in"),
        ]
        b = _entry(f"{name}_backward")
        b.samples += [
            Sample("dim0", lambda: ((_t(5, 3), 0, torch.randint(
                0, 4, (5, 3), generator=torch.Generator().manual_seed(1), dtype=torch.int32),
                [4, 5, 3], False), {})),
            Sample("keepdim_int64", lambda: ((_t(2, 1), 1, torch.tensor([[2], [0]]), [2, 3],
                                              True), {})),
        ]
        b.errors += [
            ErrorSample("grad_shape", lambda: ((_t(2, 3), 1, torch.zeros(2, 3, dtype=torch.int32),
                                                [2, 3], False), {}), RuntimeError,
                        f"{name}_backward: expected grad the reduced shape"),
            ErrorSample("indices_dtype", lambda: ((_t(2), 1, torch.zeros(2, dtype=torch.int16),
                                                   [2, 3], False), {}), TypeError,
                        f"{name}_backward: expected indices dtype in"),
        ]


_max_min()


# -- npu_sort_v2 ------------------------------------------------------------------------------

def _sort_v2() -> None:
    e = _entry("npu_sort_v2")
    e.samples += [
        Sample("last_dim", lambda: ((_t(3, 7),), {})),
        Sample("dim0_descending_fp16", lambda: ((_t(5, 2, dtype=torch.float16), 0, True), {})),
    ]
    e.errors += [
        ErrorSample("dim", lambda: ((_t(3, 4), 2), {}), IndexError,
                    r"npu_sort_v2: expected dim in the range \[-2, 1\]"),
        ErrorSample("bool", lambda: ((torch.ones(4, dtype=torch.bool),), {}), TypeError,
                    "npu_sort_v2: expected self dtype in"),
    ]
    o = _entry("npu_sort_v2.out")
    o.samples += [
        Sample("out", lambda: ((_t(2, 5), -1, True), {"out": torch.empty(2, 5)})),
    ]
    o.errors += [
        ErrorSample("out_shape", lambda: ((_t(2, 5),), {"out": torch.empty(5, 2)}),
                    RuntimeError, r"npu_sort_v2: expected out shape \(2, 5\)"),
        ErrorSample("dim", lambda: ((_t(2, 5), 3), {"out": torch.empty(2, 5)}), IndexError,
                    r"npu_sort_v2: expected dim in the range"),
    ]


_sort_v2()


# -- npu_gather_sparse_index and its backward -------------------------------------------------

def _idx(high, *shape, dtype=torch.int64, seed=1):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=dtype)


def _gather_sparse_index() -> None:
    e = _entry("npu_gather_sparse_index")
    e.samples += [
        # index as a keyword: a differentiable sample's positional tensors all require grad
        Sample("index_2d_fp64", lambda: ((_t(6, 5, dtype=torch.float64),),
                                         {"index": _idx(6, 2, 3)}), differentiable=True),
        Sample("index_1d_int32_bf16", lambda: ((_t(7, 2, 3, dtype=torch.bfloat16),
                                                _idx(7, 5, dtype=torch.int32)), {})),
    ]
    e.errors += [
        ErrorSample("index_dtype", lambda: ((_t(4, 3), _idx(4, 2).to(torch.int16)), {}),
                    TypeError, "npu_gather_sparse_index: expected index dtype in"),
        ErrorSample("too_many_dims", lambda: ((_t(2, 1, 1, 1, 1), _idx(2, 1, 1, 1, 1, 1)), {}),
                    ValueError, r"npu_gather_sparse_index: expected index index.dim\(\) \+ "),
    ]
    b = _entry("npu_gather_sparse_index_backward")
    b.samples += [
        Sample("repeats", lambda: ((_t(4, 3, 5), [6, 5], _idx(6, 4, 3)), {})),
        Sample("fp16_int32", lambda: ((_t(7, 2, dtype=torch.float16), [3, 2],
                                       _idx(3, 7, dtype=torch.int32)), {})),
    ]
    b.errors += [
        ErrorSample("grad_shape", lambda: ((_t(4, 5), [6, 5], _idx(6, 2, 3)), {}), RuntimeError,
                    "npu_gather_sparse_index_backward: expected grad the shape index.shape"),
        ErrorSample("grad_dtype", lambda: ((torch.zeros(2, 5, dtype=torch.int32), [6, 5],
                                            _idx(6, 2)), {}), TypeError,
                    "npu_gather_sparse_index_backward: expected grad dtype in"),
    ]


_gather_sparse_index()


# -- _npu_dropout / npu_dropout_backward ------------------------------------------------------
# Samples use p = 0 or p = 1 (no random draw): opcheck and compile compare two calls' outputs.

def _dropout() -> None:
    e = _entry("_npu_dropout")
    e.samples += [
        Sample("keep_all_fp64", lambda: ((_t(3, 50, dtype=torch.float64), 0.0), {}),
               differentiable=True),
        Sample("drop_all_fp16", lambda: ((_t(2, 3, 5, dtype=torch.float16), 1.0), {})),
    ]
    e.errors += [
        ErrorSample("p", lambda: ((_t(4), 1.5), {}), ValueError,
                    r"_npu_dropout: expected p in \[0, 1\]"),
        ErrorSample("int", lambda: ((torch.ones(4, dtype=torch.int32), 0.5), {}), TypeError,
                    "_npu_dropout: expected self dtype in"),
    ]
    b = _entry("npu_dropout_backward")
    b.samples += [
        Sample("bf16", lambda: ((_t(5, 7, dtype=torch.bfloat16), torch.randint(
            0, 256, (48,), generator=torch.Generator().manual_seed(2), dtype=torch.uint8), 0.3),
            {})),
        Sample("fp32_short_mask", lambda: ((_t(9), torch.tensor([0b10110101, 1],
                                                                dtype=torch.uint8), 0.5), {})),
    ]
    b.errors += [
        ErrorSample("mask_dtype", lambda: ((_t(9), torch.zeros(16, dtype=torch.int32), 0.5), {}),
                    TypeError, "npu_dropout_backward: expected mask dtype in"),
        ErrorSample("mask_short", lambda: ((_t(9), torch.zeros(1, dtype=torch.uint8), 0.5), {}),
                    RuntimeError, "npu_dropout_backward: expected mask at least 2 bytes"),
    ]


_dropout()


# -- npu_sign_bits_pack / npu_sign_bits_unpack ------------------------------------------------

def _sign_bits() -> None:
    e = _entry("npu_sign_bits_pack")
    e.samples += [
        Sample("odd_fp16", lambda: ((_t(17, dtype=torch.float16), 3), {})),
        Sample("fp32_size2", lambda: ((_t(32), 2), {})),
    ]
    e.errors += [
        ErrorSample("size", lambda: ((_t(16), 3), {}), ValueError,
                    r"npu_sign_bits_pack: expected size a positive divisor"),
        ErrorSample("two_d", lambda: ((_t(2, 8), 1), {}), ValueError,
                    "npu_sign_bits_pack: expected self a 1-D tensor"),
    ]
    u = _entry("npu_sign_bits_unpack")
    u.samples += [
        Sample("fp32", lambda: ((torch.tensor([159, 15, 0, 255], dtype=torch.uint8), 2,
                                 torch.float32), {})),
        Sample("fp16_size8", lambda: ((torch.arange(3, dtype=torch.uint8) * 77, 8,
                                       torch.float16), {})),
    ]
    u.errors += [
        ErrorSample("dtype", lambda: ((torch.zeros(2, dtype=torch.uint8), 1, torch.bfloat16),
                                      {}), TypeError,
                    "npu_sign_bits_unpack: expected dtype torch.float16 or torch.float32"),
        ErrorSample("size", lambda: ((torch.zeros(2, dtype=torch.uint8), 3, torch.float32),
                                     {}), ValueError,
                    "npu_sign_bits_unpack: expected size a positive divisor"),
    ]


_sign_bits()


# -- npu_hans_encode.out / npu_hans_decode.out ------------------------------------------------
# The smallest documented input (32768 elements); the stream layout is this package's own.

_HANS_N = 32768


def _hans_buffers(x, fixed_elems=_HANS_N, var_elems=_HANS_N):
    esize = x.element_size()
    return dict(pdf=torch.zeros(1, 256, dtype=torch.int32),
                mantissa=torch.zeros(_HANS_N * (esize - 1) // esize, dtype=x.dtype),
                fixed=torch.zeros(fixed_elems, dtype=x.dtype),
                var=torch.zeros(var_elems, dtype=x.dtype))


def _hans_small_ints(dtype):
    # Values -3..3: the stream's bytes, read back as floats, hold no NaN (the generic tests
    # compare written tensors with torch.equal, which a NaN bit pattern never satisfies).
    return (torch.arange(_HANS_N) % 7 - 3).to(dtype)


_HANS_STREAMS: dict = {}


def _hans_encoded(dtype, reshuff=False):
    """(mantissa, fixed, var, pdf) of the small-int input: encoded once, fresh copies after."""
    key = (dtype, reshuff)
    if key not in _HANS_STREAMS:
        from npu_anywhere.ops.tensor_misc.hans import npu_hans_encode
        x = _hans_small_ints(dtype)
        bufs = _hans_buffers(x, fixed_elems=_HANS_N * (2 if reshuff else 1))
        pdf, mantissa, fixed, var = npu_hans_encode(x, True, reshuff, **bufs)
        _HANS_STREAMS[key] = (mantissa, fixed, var, pdf)
    return tuple(t.clone() for t in _HANS_STREAMS[key])


def _hans() -> None:
    e = _entry("npu_hans_encode.out")
    e.samples += [
        Sample("bf16_statistic", lambda: (lambda x: ((x, True, False), _hans_buffers(x)))(
            _hans_small_ints(torch.bfloat16).view(64, 512))),
    ]
    e.errors += [
        ErrorSample("numel", lambda: (lambda x: ((x, True), dict(_hans_buffers(x))))(
            _t(100, dtype=torch.float16)), ValueError,
            "npu_hans_encode: expected input a multiple of 64 elements, at least 32768"),
        ErrorSample("capacity", lambda: (lambda x: ((x, True), _hans_buffers(
            x, fixed_elems=1024, var_elems=1024)))(_t(64, 512, dtype=torch.float16)),
            RuntimeError, "npu_hans_encode: expected fixed and var at least"),
    ]
    d = _entry("npu_hans_decode.out")
    d.samples += [
        Sample("fp32_reshuff", lambda: (_hans_encoded(torch.float32, True) + (True,),
                                        {"out": torch.zeros(_HANS_N)})),
    ]
    d.errors += [
        ErrorSample("out_dtype", lambda: (_hans_encoded(torch.float16),
                                          {"out": torch.zeros(_HANS_N)}), TypeError,
                    "npu_hans_decode: expected mantissa the dtype of out"),
        ErrorSample("pdf_shape", lambda: ((*_hans_encoded(torch.float16)[:3],
                                           torch.zeros(128, dtype=torch.int32)),
                                          {"out": torch.zeros(_HANS_N, dtype=torch.float16)}),
                    RuntimeError, r"npu_hans_decode: expected pdf shape \[1, 256\]"),
    ]


_hans()
