"""Op database entries of the recurrent ops (npu_lstm, npu_gru, _lstm_npu and their
backward ops)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

T, B, I, H = 1, 2, 3, 2


def _rand(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.5).to(dtype)


_FLAGS = (True, 1, 0.0, True, False, False)   # has_biases .. batch_first


def _lstm_args(dtype=torch.float32, flag_seq=False, direction=False):
    # a float 0/1 mask (the second sequence ends after one step): it may require grad
    mask = torch.ones(T, B, H, dtype=dtype) if flag_seq else torch.empty(0, dtype=dtype)
    if flag_seq:
        mask[1:, 1] = 0
    return ((_rand(T, B, I, dtype=dtype), _rand(I + H, 4 * H, dtype=dtype, seed=1),
             _rand(4 * H, dtype=dtype, seed=2), mask, _rand(1, B, H, dtype=dtype, seed=3),
             _rand(1, B, H, dtype=dtype, seed=4), *_FLAGS, flag_seq, direction), {})


def _lstm() -> None:
    e = _entry("npu_lstm")
    # the masked / reversed modes are covered by tests/ops/conv_rnn (suite budget)
    e.samples += [Sample("fp64", lambda: _lstm_args(torch.float64), differentiable=True)]

    def bad_arg(index, value, flag_seq=False):
        args = list(_lstm_args(flag_seq=flag_seq)[0])
        args[index] = value
        return tuple(args), {}

    e.errors += [
        ErrorSample("weight_shape", lambda: bad_arg(1, torch.zeros(I + H, 3 * H)),
                    RuntimeError, "npu_lstm: expected weight the shape"),
        ErrorSample("bias_size", lambda: bad_arg(2, torch.zeros(10)), RuntimeError,
                    "npu_lstm: expected bias a positive size divisible by 4"),
        ErrorSample("h_shape", lambda: bad_arg(4, torch.zeros(1, 3, H)), RuntimeError,
                    "npu_lstm: expected h the shape"),
        ErrorSample("int_input", lambda: bad_arg(0, torch.zeros(T, B, I, dtype=torch.int32)),
                    TypeError, "npu_lstm: expected input dtype in"),
        ErrorSample("mask_shape", lambda: bad_arg(3, torch.ones(T, B, H + 1), flag_seq=True),
                    RuntimeError, "npu_lstm: expected seq_mask the shape"),
    ]

    def grads(dtype=torch.float32):
        (x, w, b, _, h, c, *_), _ = _lstm_args(dtype)
        with torch.no_grad():
            outs = torch.ops.npu.npu_lstm(*_lstm_args(dtype)[0])
        gy, gh, gc = (_rand(T, B, H, dtype=dtype, seed=s) for s in (5, 6, 7))
        return (gy, gh, gc, x, w, b, h, c, *outs), {}

    b = _entry("npu_lstm_backward")
    b.samples += [Sample("fp32", grads)]
    b.errors += [
        ErrorSample("grady_shape", lambda: ((torch.zeros(T, B, H + 1), *grads()[0][1:]), {}),
                    RuntimeError, "npu_lstm_backward: expected grady the shape"),
    ]


def _gru_args(dtype=torch.float32, bias_dtype=None):
    bias_dtype = bias_dtype or dtype
    return ((_rand(T, B, I, dtype=dtype), _rand(B, H, dtype=dtype, seed=1),
             _rand(I, 3 * H, dtype=dtype, seed=2), _rand(H, 3 * H, dtype=dtype, seed=3),
             _rand(3 * H, dtype=bias_dtype, seed=4), _rand(3 * H, dtype=bias_dtype, seed=5),
             torch.full((B,), T, dtype=torch.int32), *_FLAGS), {})


def _gru() -> None:
    def differentiable():
        args, _ = _gru_args(torch.float64)
        names = ("seq_length", "has_biases", "num_layers", "dropout", "train",
                 "bidirectional", "batch_first")
        return args[:6], dict(zip(names, args[6:]))

    e = _entry("npu_gru")
    e.samples += [Sample("fp64", differentiable, differentiable=True)]

    def bad_arg(index, value):
        args = list(_gru_args()[0])
        args[index] = value
        return tuple(args), {}

    e.errors += [
        ErrorSample("bias_size", lambda: bad_arg(4, torch.zeros(10)), RuntimeError,
                    "npu_gru: expected bias_input a positive size divisible by 3"),
        ErrorSample("weight_hidden_shape", lambda: bad_arg(3, torch.zeros(H, 4 * H)),
                    RuntimeError, "npu_gru: expected weight_hidden the shape"),
        ErrorSample("hx_shape", lambda: bad_arg(1, torch.zeros(B + 1, H)), RuntimeError,
                    "npu_gru: expected hx the shape"),
        ErrorSample("bias_dtypes", lambda: bad_arg(5, torch.zeros(3 * H).half()), TypeError,
                    "npu_gru: expected bias_hidden the same dtype"),
    ]

    def grads():
        args, _ = _gru_args()
        with torch.no_grad():
            outs = torch.ops.npu.npu_gru(*args)
        x, hx, wi, wh, bi, bh, sl = args[:7]
        return (_rand(T, B, H, seed=6), _rand(T, B, H, seed=7), x, wi, wh, bi, bh, sl, hx,
                *outs), {}

    b = _entry("npu_gru_backward")
    b.samples += [Sample("fp32", grads)]
    b.errors += [
        ErrorSample("gradh_shape", lambda: ((grads()[0][0], torch.zeros(T, B + 1, H),
                                             *grads()[0][2:]), {}), RuntimeError,
                    "npu_gru_backward: expected gradh the shape"),
    ]


def _params(layers, dirs, bias=True, dtype=torch.float32):
    out, seed = [], 10
    for layer in range(layers):
        feat = I if layer == 0 else dirs * H
        for _ in range(dirs):
            shapes = [(4 * H, feat), (4 * H, H)] + ([(4 * H,), (4 * H,)] if bias else [])
            for shape in shapes:
                out.append(_rand(*shape, dtype=dtype, seed=seed))
                seed += 1
    return out


def _lstm_npu_args(dtype=torch.float32, layers=1, bidirectional=True, packed=False,
                   batch_first=False, bias=True):
    dirs = 2 if bidirectional else 1
    x = _rand(*((B, T, I) if batch_first else (T, B, I)), dtype=dtype)
    kw = dict(batch_first=batch_first)
    if packed:
        x = x.reshape(T * B, I)
        kw["batch_sizes"] = torch.tensor([B] + [1] * (T - 1))
    hx = [_rand(dirs * layers, B, H, dtype=dtype, seed=s) for s in (1, 2)]
    return (x, hx, _params(layers, dirs, bias, dtype), bias, layers, 0.0, True,
            bidirectional), kw


def _lstm_npu() -> None:
    e = _entry("_lstm_npu")
    # bidirectional, packed and multi-layer calls are covered by tests/ops/conv_rnn
    e.samples += [Sample("fp64", lambda: _lstm_npu_args(torch.float64, bidirectional=False),
                         differentiable=True)]

    def with_params(params):
        args, kw = _lstm_npu_args()
        return (args[0], args[1], params, *args[3:]), kw

    e.errors += [
        ErrorSample("params_count", lambda: with_params(_params(1, 2)[:6]), ValueError,
                    "_lstm_npu: expected params 8 tensors"),
        ErrorSample("w_hh_shape", lambda: with_params(
            _params(1, 2)[:1] + [torch.zeros(4 * H, H + 1)] + _params(1, 2)[2:]),
            RuntimeError, "_lstm_npu: expected params\\[1\\] the shape"),
        ErrorSample("hx_shape", lambda: ((_lstm_npu_args()[0][0], [torch.zeros(1, B, H)] * 2,
                                          *_lstm_npu_args()[0][2:]), {}), RuntimeError,
                    "_lstm_npu: expected hx\\[0\\] the shape"),
        ErrorSample("num_layers", lambda: ((*_lstm_npu_args()[0][:4], 0,
                                            *_lstm_npu_args()[0][5:]), {}), ValueError,
                    "_lstm_npu: expected num_layers > 0"),
    ]

    def grads():
        args, kw = _lstm_npu_args(bidirectional=False, batch_first=True)
        with torch.no_grad():
            outs = torch.ops.npu._lstm_npu(*args, **kw)
        gy = _rand(*outs[0].shape, seed=20)
        gh, gc = _rand(*outs[1].shape, seed=21), _rand(*outs[2].shape, seed=22)
        return (gy, gh, gc, args[0], args[1], args[2], *outs[3:], *args[3:]), kw

    b = _entry("_lstm_npu_backward")
    b.samples += [Sample("batch_first_fp32", grads)]
    b.errors += [
        ErrorSample("gates_shape", lambda: ((*grads()[0][:6], torch.zeros(1, T + 1, B, H),
                                             *grads()[0][7:]), grads()[1]), RuntimeError,
                    "_lstm_npu_backward: expected i the shape"),
    ]


def _cell_args(dtype=torch.float32, bias=True):
    args = (_rand(B, I, dtype=dtype), _rand(I, 4 * H, dtype=dtype, seed=1),
            _rand(H, 4 * H, dtype=dtype, seed=2), _rand(B, H, dtype=dtype, seed=3),
            _rand(B, H, dtype=dtype, seed=4))
    if bias:
        args += (_rand(4 * H, dtype=dtype, seed=5), _rand(4 * H, dtype=dtype, seed=6))
    return args, {}


def _lstm_cell() -> None:
    e = _entry("npu_lstm_cell")
    e.samples += [Sample("fp64", lambda: _cell_args(torch.float64), differentiable=True)]
    e.errors += [
        ErrorSample("w_ih_shape", lambda: ((_cell_args()[0][0], torch.zeros(4 * H, I),
                                            *_cell_args()[0][2:]), {}), RuntimeError,
                    "npu_lstm_cell: expected w_ih the shape"),
        ErrorSample("one_bias", lambda: (_cell_args()[0][:6], {}), ValueError,
                    "npu_lstm_cell: expected b_ih and b_hh both given or both None"),
    ]

    def grads():
        args, _ = _cell_args(bias=False)
        with torch.no_grad():
            outs = torch.ops.npu.npu_lstm_cell(*args)
        return (_rand(1, B, H, seed=7), _rand(B, H, seed=8), _rand(B, H, seed=9), *args,
                *outs), {}

    b = _entry("npu_lstm_cell_backward")
    b.samples += [Sample("fp32", grads)]
    b.errors += [
        ErrorSample("gradh_shape", lambda: ((grads()[0][0], torch.zeros(1, B, H),
                                             *grads()[0][2:]), {}), RuntimeError,
                    "npu_lstm_cell_backward: expected gradh the shape"),
    ]


_lstm()
_gru()
_lstm_npu()
_lstm_cell()
