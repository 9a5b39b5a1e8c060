"""Op database entries of npu_batch_gather_matmul(_) and npu_matmul_compress_dequant."""

from __future__ import annotations

import re

import torch

from . import ErrorSample, Sample, entry as _entry

_F16, _F64, _I32, _I8 = torch.float16, torch.float64, torch.int32, torch.int8


# -- npu_batch_gather_matmul / npu_batch_gather_matmul_ ------------------------------------

def _bgmv(dtype=_F16, *, batch=5, y_column=48, h1=32, h2=32, r=16, adapters=3, layers=2,
          with_a=True, noncontig=False, **kwargs):
    y = torch.randn(batch, y_column, dtype=dtype)
    x = torch.randn(batch, h1, dtype=dtype)
    wb = torch.randn(adapters, layers, h2, r if with_a else h1, dtype=dtype) * 0.5
    wa = torch.randn(adapters, layers, r, h1, dtype=dtype) * 0.5 if with_a else None
    indices = torch.randint(-1, adapters, (batch,), dtype=_I32)
    if noncontig:
        y = torch.randn(y_column, batch, dtype=dtype).t()          # column-major rows
        x = torch.randn(batch, 2 * h1, dtype=dtype)[:, ::2]
    return (y, x, wb, indices, wa), kwargs


def _err(name, make, error, match):
    return ErrorSample(name, make, error, re.escape(match))


def _bgmv_errors(op):
    def bad(**changes):
        def make():
            (y, x, wb, idx, wa), kw = _bgmv()
            args = {"y": y, "x": x, "wb": wb, "idx": idx, "wa": wa}
            args.update({k: v for k, v in changes.items() if k in args})
            kw.update({k: v for k, v in changes.items() if k not in args})
            return (args["y"], args["x"], args["wb"], args["idx"], args["wa"]), kw
        return make

    return [
        _err("float32_input", bad(y=torch.zeros(5, 48), x=torch.zeros(5, 32),
                                         wb=torch.zeros(3, 2, 32, 16),
                                         wa=torch.zeros(3, 2, 16, 32)), TypeError,
                    f"{op}: expected input dtype in"),
        _err("int64_indices", bad(idx=torch.zeros(5, dtype=torch.int64)), TypeError,
                    f"{op}: expected indices dtype in"),
        _err("batch_mismatch", bad(idx=torch.zeros(4, dtype=_I32)), RuntimeError,
                    f"{op}: expected indices dim 0 equal to input's dim 0"),
        _err("h1_not_16", bad(x=torch.zeros(5, 24, dtype=_F16)), ValueError,
                    f"{op}: expected x a second dim (H1) that is a multiple of 16"),
        _err("rank_too_big", bad(wb=torch.zeros(3, 2, 32, 144, dtype=_F16),
                                        wa=torch.zeros(3, 2, 144, 32, dtype=_F16)),
                    ValueError, f"{op}: expected weight_b a fourth dim (R)"),
        _err("weight_a_shape", bad(wa=torch.zeros(3, 2, 16, 16, dtype=_F16)),
                    RuntimeError, f"{op}: expected weight_a shape [W, L, R, H1]"),
        _err("layer_idx", bad(layer_idx=2), ValueError,
                    f"{op}: expected layer_idx in [0, 2)"),
        _err("window_past_row", bad(y_offset=32), ValueError,
                    f"{op}: expected y_offset y_offset + H2"),
        _err("slice_size", bad(y_slice_size=0), ValueError,
                    f"{op}: expected y_slice_size -1 or in [1, 48]"),
    ]


def _batch_gather_matmul() -> None:
    for name in ("npu_batch_gather_matmul", "npu_batch_gather_matmul_"):
        e = _entry(name)
        e.samples += [
            Sample("lora_fp16", lambda: _bgmv(layer_idx=1, scale=0.25, y_offset=16)),
            Sample("bgmv_no_weight_a", lambda: _bgmv(with_a=False, h2=16, y_slice_size=16)),
            Sample("odd_batch_noncontiguous", lambda: _bgmv(batch=7, noncontig=True)),
        ]
        e.errors += _bgmv_errors(name)
    # Both ops share one kernel: the float64 mode needs only one of them here.
    _entry("npu_batch_gather_matmul").samples.append(
        Sample("fp64", lambda: _bgmv(_F64, scale=2.0)))


_batch_gather_matmul()


# -- npu_matmul_compress_dequant -----------------------------------------------------------

def _i8(*shape):
    return torch.randint(-128, 128, shape, dtype=_I8)


def _scale_words(n: int, dtype=torch.uint64) -> torch.Tensor:
    """npu_trans_quant_param-style words (float32 scale bits, fp19-rounded) as ``(1, n)``."""
    from ...ops.quant.trans_quant_param import trans_quant_param_reference
    return trans_quant_param_reference(torch.rand(1, n) * 0.01).to(dtype)


def _cd(m=5, k=32, n=7, scale=None, x2=None, **kwargs):
    bias = torch.randint(-999, 999, (1, n), dtype=_I32)
    scale = torch.rand(1, n) * 0.01 if scale is None else scale
    x2 = _i8(k, n) if x2 is None else x2
    return (_i8(m, k), x2, torch.zeros(8, dtype=_I8), bias, scale), kwargs


def _matmul_compress_dequant() -> None:
    e = _entry("npu_matmul_compress_dequant")
    e.samples += [
        Sample("float32_scale", lambda: _cd()),
        Sample("uint64_words_odd", lambda: _cd(m=3, k=17, n=9, scale=_scale_words(9))),
        Sample("int64_word_per_tensor_offsets", lambda: _cd(
            scale=_scale_words(1, torch.int64), offsetX=0)),
        Sample("transposed_x2", lambda: _cd(x2=_i8(7, 32).t())),
    ]
    op = "npu_matmul_compress_dequant"
    e.errors += [
        _err("compressed_x2", lambda: _cd(x2=torch.zeros(100, dtype=_I8)), NotImplementedError,
             f"{op}: expected x2 a 2-D [K, N] uncompressed weight"),
        _err("offset_w", lambda: _cd(offsetW=torch.zeros(32, 7, dtype=_I8)), ValueError,
             f"{op}: expected offsetW None"),
        _err("offset_x", lambda: _cd(offsetX=1), ValueError, f"{op}: expected offsetX 0"),
        _err("x2_shape", lambda: _cd(x2=_i8(31, 7)), RuntimeError,
             f"{op}: expected x2 shape (K, N) = (32, 7)"),
        _err("scale_shape", lambda: _cd(scale=torch.rand(1, 3)), ValueError,
             f"{op}: expected scale shape (1, 7) or (1, 1)"),
        _err("bias_dtype", lambda: ((_i8(5, 32), _i8(32, 7), torch.zeros(8, dtype=_I8),
                                     torch.zeros(1, 7), torch.rand(1, 7)), {}), TypeError,
             f"{op}: expected bias dtype in"),
    ]


_matmul_compress_dequant()
