"""Op database entries of the fused softmax family.

Dropout samples use ``prob=0`` (nothing dropped, no random numbers drawn): the generic tests
compare eager, fake and compiled runs value for value.
"""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F64 = torch.float64
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _name(*parts) -> str:
    return "_".join(str(p).replace("torch.", "") for p in parts)


def _mask(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) < 0.3


# -- npu_scaled_masked_softmax / npu_scaled_masked_softmax_backward --------------------------

def _scaled_masked_softmax() -> None:
    e = _entry("npu_scaled_masked_softmax")
    for dtype in _DTYPES:
        e.samples.append(Sample(_name(dtype, "full_mask"), lambda dtype=dtype: (
            (_g(1, 2, 32, 64, dtype=dtype), _mask(1, 2, 32, 64), 0.5), {})))
    e.samples.append(Sample("broadcast_mask_kw", lambda: (
        (_g(2, 1, 32, 32),), {"mask": _mask(1, 32, 32), "scale": 2})))
    e.samples.append(Sample("fixed_triu", lambda: ((_g(1, 1, 32, 32), _mask(32, 32), 1.0, True),
                                                   {})))
    # the bool mask goes by keyword: the generic test asks every positional tensor for grads
    e.samples.append(Sample("grad_fp64", lambda: (
        (_g(1, 1, 32, 32, dtype=_F64),), {"mask": _mask(1, 1, 1, 32), "scale": 0.7}),
        differentiable=True))
    e.errors += [
        ErrorSample("three_d", lambda: ((_g(2, 32, 32), _mask(2, 32, 32)), {}), ValueError,
                    "npu_scaled_masked_softmax: expected x a 4-D tensor"),
        ErrorSample("w_not_aligned", lambda: ((_g(1, 1, 32, 40), _mask(1, 1, 32, 40)), {}),
                    ValueError, "npu_scaled_masked_softmax: expected x W"),
        ErrorSample("h_too_small", lambda: ((_g(1, 1, 16, 32), _mask(1, 1, 16, 32)), {}),
                    ValueError, "npu_scaled_masked_softmax: expected x H"),
        ErrorSample("mask_not_bool", lambda: ((_g(1, 1, 32, 32), torch.zeros(1, 1, 32, 32)), {}),
                    TypeError, "npu_scaled_masked_softmax: expected mask dtype in"),
        ErrorSample("mask_no_broadcast", lambda: ((_g(1, 2, 32, 32), _mask(3, 32, 32)), {}),
                    RuntimeError, "npu_scaled_masked_softmax: expected mask a shape that"),
        ErrorSample("int_x", lambda: ((torch.ones(1, 1, 32, 32, dtype=torch.int32),
                                       _mask(1, 1, 32, 32)), {}), TypeError,
                    "npu_scaled_masked_softmax: expected x dtype in"),
    ]
    b = _entry("npu_scaled_masked_softmax_backward")
    for dtype in _DTYPES:
        b.samples.append(Sample(_name(dtype), lambda dtype=dtype: (
            (_g(1, 2, 32, 32, dtype=dtype), torch.rand(1, 2, 32, 32).to(dtype),
             _mask(1, 1, 32, 32), 0.5, False), {})))
    b.samples.append(Sample("fixed_triu", lambda: (
        (_g(1, 1, 32, 32), torch.rand(1, 1, 32, 32), _mask(1, 1, 32, 32), 1, True), {})))
    b.errors += [
        ErrorSample("y_shape", lambda: ((_g(1, 1, 32, 32), _g(1, 1, 32, 64),
                                         _mask(1, 1, 32, 32), 1.0, False), {}), RuntimeError,
                    "npu_scaled_masked_softmax_backward: expected y the shape of y_grad"),
        ErrorSample("y_dtype", lambda: ((_g(1, 1, 32, 32), _g(1, 1, 32, 32, dtype=torch.float16),
                                         _mask(1, 1, 32, 32), 1.0, False), {}), TypeError,
                    "npu_scaled_masked_softmax_backward: expected y the same dtype"),
    ]


# -- npu_dropout_with_add_softmax / npu_dropout_with_add_softmax_backward ---------------------

_DROP_SHAPE = (32, 1, 128, 128)


def _dropout_with_add_softmax() -> None:
    e = _entry("npu_dropout_with_add_softmax")
    for dtype in (torch.float32, torch.float16):
        e.samples.append(Sample(_name(dtype, "no_drop"), lambda dtype=dtype: (
            (_g(*_DROP_SHAPE, dtype=dtype), _g(*_DROP_SHAPE, dtype=dtype), 0.125, 0.0, -1), {})))
    # Not marked differentiable: opcheck's autograd test sums every output into one int
    # (the uint8 mask comes first) and fails on the float ones; tests/ops/fused_softmax runs
    # gradcheck instead.
    e.samples.append(Sample("fp64_int_alpha", lambda: (
        (_g(*_DROP_SHAPE, dtype=_F64), _g(*_DROP_SHAPE, dtype=_F64), 2, 0.0, -1), {})))
    e.errors += [
        ErrorSample("hw", lambda: ((_g(32, 1, 128, 64), _g(32, 1, 128, 64), 1.0, 0.0, -1), {}),
                    ValueError, "npu_dropout_with_add_softmax: expected self H and W"),
        ErrorSample("nc", lambda: ((_g(3, 1, 128, 128), _g(3, 1, 128, 128), 1.0, 0.0, -1), {}),
                    ValueError, "npu_dropout_with_add_softmax: expected self N [*] C"),
        ErrorSample("dim", lambda: ((_g(*_DROP_SHAPE), _g(*_DROP_SHAPE), 1.0, 0.0, 2), {}),
                    ValueError, "npu_dropout_with_add_softmax: expected dim -1"),
        ErrorSample("prob_range", lambda: ((_g(*_DROP_SHAPE), _g(*_DROP_SHAPE), 1.0, 1.5, -1),
                                           {}), ValueError,
                    "npu_dropout_with_add_softmax: expected prob a drop rate"),
        ErrorSample("prob_one", lambda: ((_g(*_DROP_SHAPE), _g(*_DROP_SHAPE), 1.0, 1.0, -1), {}),
                    NotImplementedError, "npu_dropout_with_add_softmax: expected prob below 1"),
        ErrorSample("dtype_mismatch", lambda: ((_g(*_DROP_SHAPE),
                                                _g(*_DROP_SHAPE, dtype=torch.float16), 1.0, 0.0,
                                                -1), {}), TypeError,
                    "npu_dropout_with_add_softmax: expected x1 the same dtype"),
        ErrorSample("bf16", lambda: ((_g(*_DROP_SHAPE, dtype=torch.bfloat16),
                                      _g(*_DROP_SHAPE, dtype=torch.bfloat16), 1.0, 0.0, -1), {}),
                    TypeError, "npu_dropout_with_add_softmax: expected self dtype in"),
    ]
    n = 32 * 128 * 128
    b = _entry("npu_dropout_with_add_softmax_backward")
    for dtype in (torch.float32, torch.float16):
        b.samples.append(Sample(_name(dtype), lambda dtype=dtype: (
            (_g(*_DROP_SHAPE, dtype=dtype), (torch.rand(n) < 0.8).to(torch.uint8),
             torch.rand(*_DROP_SHAPE).to(dtype), 0.5, 0.2, -1), {})))
    b.errors += [
        ErrorSample("mask_length", lambda: ((_g(*_DROP_SHAPE), torch.ones(n - 128,
                                                                          dtype=torch.uint8),
                                             _g(*_DROP_SHAPE), 1.0, 0.1, -1), {}), RuntimeError,
                    "npu_dropout_with_add_softmax_backward: expected mask a 1-D tensor"),
        ErrorSample("mask_dtype", lambda: ((_g(*_DROP_SHAPE), torch.ones(n, dtype=torch.bool),
                                            _g(*_DROP_SHAPE), 1.0, 0.1, -1), {}), TypeError,
                    "npu_dropout_with_add_softmax_backward: expected mask dtype in"),
    ]


# -- npu_fused_attention_score / _fwd / _backward ---------------------------------------------

_H16 = torch.float16


def _qkv(dtype=_H16, shape=(2, 3, 8, 4)):
    return tuple(_g(*shape, dtype=dtype) for _ in range(3))


def _fused_attention_score() -> None:
    for name in ("npu_fused_attention_score", "npu_fused_attention_score_fwd"):
        e = _entry(name)
        e.samples.append(Sample("fp16_full_mask", lambda: (
            (*_qkv(), _g(2, 3, 8, 8, dtype=_H16), 0.125, 1.0), {})))
        e.samples.append(Sample("fp16_padding_mask_kw", lambda: (
            _qkv(), {"attention_mask": _g(2, 1, 1, 8, dtype=_H16), "scale": 0.5,
                     "keep_prob": 1.0})))
        # the additive mask goes by keyword so that only q, k, v ask for gradients
        e.samples.append(Sample("grad_fp64", lambda: (
            (*_qkv(_F64),), {"attention_mask": _g(2, 1, 8, 8, dtype=_F64), "scale": 0.3,
                             "keep_prob": 1.0}), differentiable=name.endswith("score")))
        e.errors += [
            ErrorSample("fp32", lambda name=name: (
                (*_qkv(torch.float32), _g(2, 3, 8, 8), 0.1, 1.0), {}), TypeError,
                f"{name}: expected query_layer dtype in"),
            ErrorSample("key_shape", lambda: (
                (_g(2, 3, 8, 4, dtype=_H16), _g(2, 3, 9, 4, dtype=_H16),
                 _g(2, 3, 8, 4, dtype=_H16), _g(2, 3, 8, 8, dtype=_H16), 0.1, 1.0), {}),
                RuntimeError, f"{name}: expected key_layer the shape of query_layer"),
            ErrorSample("mask_shape", lambda: (
                (*_qkv(), _g(2, 3, 8, 7, dtype=_H16), 0.1, 1.0), {}), RuntimeError,
                f"{name}: expected attention_mask a shape that broadcasts"),
            ErrorSample("keep_prob_zero", lambda: (
                (*_qkv(), _g(2, 3, 8, 8, dtype=_H16), 0.1, 0.0), {}), NotImplementedError,
                f"{name}: expected keep_prob above 0"),
            ErrorSample("transpose_flag", lambda: (
                (*_qkv(), _g(2, 3, 8, 8, dtype=_H16), 0.1, 1.0), {"key_transpose": True}),
                NotImplementedError, f"{name}: expected key_transpose False"),
        ]
    b = _entry("npu_fused_attention_score_backward")
    b.samples.append(Sample("fp16", lambda: (
        (_g(16, 12, dtype=_H16), torch.rand(2, 3, 8, 8).to(_H16), *_qkv(),
         (torch.rand(2 * 3 * 8 * 8) < 0.9).to(torch.uint8), 0.125, 0.9), {})))
    b.samples.append(Sample("fp64", lambda: (
        (_g(16, 12, dtype=_F64), torch.rand(2, 3, 8, 8, dtype=_F64), *_qkv(_F64),
         torch.ones(2 * 3 * 8 * 8, dtype=torch.uint8), 1.0, 1.0), {})))
    b.errors += [
        ErrorSample("grad_shape", lambda: (
            (_g(2, 3, 8, 4, dtype=_H16), torch.rand(2, 3, 8, 8).to(_H16), *_qkv(),
             torch.ones(384, dtype=torch.uint8), 0.1, 1.0), {}), RuntimeError,
            "npu_fused_attention_score_backward: expected grad_output the shape"),
        ErrorSample("mask_len", lambda: (
            (_g(16, 12, dtype=_H16), torch.rand(2, 3, 8, 8).to(_H16), *_qkv(),
             torch.ones(383, dtype=torch.uint8), 0.1, 1.0), {}), RuntimeError,
            "npu_fused_attention_score_backward: expected mask a 1-D tensor"),
    ]


# -- npu_multi_head_attention / npu_multi_head_attention_backward ---------------------------

_MHA = dict(b=1, n=16, d=16, s=16, t=32)


def _mha_args(dtype=_H16, bias=True, prob=0.0, use_float=True):
    b, n, d, s, t = (_MHA[k] for k in "bndst")
    e = n * d

    def r(*shape):
        return _g(*shape, dtype=dtype) * 0.1

    biases = [r(e) if bias else None for _ in range(4)]
    return (r(b * t, e), r(b * s, e), r(b * s, e), r(e, e), r(e, e), r(e, e), r(b, 1, t, s),
            r(e, e), *biases, None, n, d, s, t, prob, use_float)


def _multi_head_attention() -> None:
    e = _entry("npu_multi_head_attention")
    e.samples.append(Sample("fp16_float_softmax", lambda: (_mha_args(), {})))
    e.samples.append(Sample("fp16_half_softmax_no_bias", lambda: (
        _mha_args(bias=False, use_float=False), {})))
    e.samples.append(Sample("fp64", lambda: (_mha_args(_F64), {})))
    e.errors += [
        ErrorSample("heads_align", lambda: (_mha_args()[:13] + (8, 32, 16, 32, 0.0, True), {}),
                    ValueError, "npu_multi_head_attention: expected attn_head_num a positive"),
        ErrorSample("fp32", lambda: (_mha_args(torch.float32), {}), TypeError,
                    "npu_multi_head_attention: expected query dtype in"),
        ErrorSample("prob", lambda: (_mha_args(prob=1.0), {}), ValueError,
                    "npu_multi_head_attention: expected dropout_prob a drop rate"),
    ]
    b = _entry("npu_multi_head_attention_backward")

    def grad_args(dtype=_H16):
        a = _mha_args(dtype)
        fwd = torch.ops.npu.npu_multi_head_attention(*a)
        y = fwd[0]
        return (a[:6] + (a[7],) + a[8:12] + tuple(fwd[2:]) + (torch.randn_like(y), fwd[1])
                + a[13:])

    b.samples.append(Sample("fp16", lambda: (grad_args(), {})))
    b.samples.append(Sample("fp64", lambda: (grad_args(_F64), {})))
    b.errors += [
        ErrorSample("mask_len", lambda: (grad_args()[:18] + (torch.ones(3, dtype=torch.uint8),)
                                         + grad_args()[19:], {}), RuntimeError,
                    "npu_multi_head_attention_backward: expected dropout_mask the shape"),
    ]


_scaled_masked_softmax()
_dropout_with_add_softmax()
_fused_attention_score()
_multi_head_attention()
