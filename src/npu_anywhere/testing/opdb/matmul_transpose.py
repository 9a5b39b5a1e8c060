"""Op database entries of the permuted and fused matmuls: npu_transpose_batchmatmul,
npu_transpose_quant_batchmatmul and npu_quant_matmul_gelu."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_I8, _I32, _F32, _BF16, _F16 = torch.int8, torch.int32, torch.float32, torch.bfloat16, torch.float16


def _x(*shape, dtype=_F16):
    return torch.randn(*shape).to(dtype)


def _words(n: int) -> torch.Tensor:
    from ...ops.quant.trans_quant_param import trans_quant_param_reference
    return trans_quant_param_reference(torch.rand(n) * 0.2 + 0.01, None, 1)


# -- npu_transpose_batchmatmul -------------------------------------------------------------------

def _transpose_batchmatmul() -> None:
    e = _entry("npu_transpose_batchmatmul")
    s = e.samples
    s.append(Sample("fp16_mbk", lambda: ((_x(3, 2, 16), _x(2, 16, 32)), {"perm_x1": [1, 0, 2],
                                                                         "perm_y": [1, 0, 2]})))
    s.append(Sample("bf16_bmk_defaults", lambda: ((_x(2, 5, 32, dtype=_BF16),
                                                   _x(2, 32, 16, dtype=_BF16)), {})))
    s.append(Sample("fp32_weight_bnk", lambda: ((_x(3, 2, 16, dtype=_F32),
                                                 _x(2, 16, 16, dtype=_F32)),
                                                {"perm_x1": [1, 0, 2], "perm_x2": [0, 2, 1]})))
    s.append(Sample("int8_scale", lambda: ((_x(3, 2, 16), _x(2, 16, 16)),
                                           {"perm_x1": [1, 0, 2], "scale": _words(32)})))
    s.append(Sample("batch_split_factor", lambda: ((_x(3, 4, 16), _x(4, 16, 16)),
                                                   {"perm_x1": [1, 0, 2],
                                                    "batch_split_factor": 2})))
    err = e.errors
    err.append(ErrorSample("perm_x1", lambda: ((_x(3, 2, 16), _x(2, 16, 16)),
                                               {"perm_x1": [2, 0, 1]}), ValueError,
                           "npu_transpose_batchmatmul: expected perm_x1 "))
    err.append(ErrorSample("k_alignment", lambda: ((_x(2, 3, 8), _x(2, 8, 16)), {}), ValueError,
                           "npu_transpose_batchmatmul: expected input a k dim divisible by 16"))
    err.append(ErrorSample("k_mismatch", lambda: ((_x(2, 3, 32), _x(2, 16, 16)), {}),
                           RuntimeError, "npu_transpose_batchmatmul: expected weight a reduce"))
    err.append(ErrorSample("scale_size", lambda: (
        (_x(3, 2, 16), _x(2, 16, 16)), {"perm_x1": [1, 0, 2], "scale": _words(16)}),
        ValueError, "npu_transpose_batchmatmul: expected scale a 1-D tensor of size B "))
    err.append(ErrorSample("bias", lambda: ((_x(3, 2, 16), _x(2, 16, 16)), {"bias": _x(16)}),
                           ValueError, "npu_transpose_batchmatmul: expected bias None"))


_transpose_batchmatmul()


# -- npu_quant_matmul_gelu -----------------------------------------------------------------------

def _i8(*shape):
    return torch.randint(-128, 128, shape, dtype=_I8)


def _i4_words(*shape):
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=_I32)


def _quant_matmul_gelu() -> None:
    e = _entry("npu_quant_matmul_gelu")
    s = e.samples
    s.append(Sample("erf_f32_scales", lambda: ((_i8(5, 24), _i8(24, 7), torch.rand(5) * 0.01,
                                                torch.rand(7) * 0.01), {})))
    s.append(Sample("tanh_bf16_scale_int32_bias", lambda: (
        (_i8(3, 16), _i8(16, 6), torch.rand(3) * 0.01, (torch.rand(6) * 0.01).to(_BF16)),
        {"bias": torch.randint(-99, 99, (6,), dtype=_I32), "approximate": "gelu_tanh"})))
    s.append(Sample("bf16_bias_x2_transposed", lambda: (
        (_i8(4, 32), _i8(6, 32).t(), torch.rand(4) * 0.01, torch.rand(1) * 0.01),
        {"bias": torch.randn(6).to(_BF16)})))
    s.append(Sample("batched_3d_bias", lambda: (
        (_i8(2, 3, 8), _i8(8, 5), torch.rand(3) * 0.1, torch.rand(5) * 0.1),
        {"bias": torch.randn(2, 1, 5).to(_F16)})))
    s.append(Sample("int4_words", lambda: (
        (_i4_words(3, 2), _i4_words(16, 1), torch.rand(3) * 0.1, torch.rand(8) * 0.1),
        {"approximate": "gelu_tanh"})))
    err = e.errors
    err.append(ErrorSample("approximate", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(3), torch.rand(4)), {"approximate": "none"}),
        ValueError, "npu_quant_matmul_gelu: expected approximate 'gelu_tanh' or 'gelu_erf'"))
    err.append(ErrorSample("x1_scale_size", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4), torch.rand(4)), {}), ValueError,
        "npu_quant_matmul_gelu: expected x1_scale a 1-D tensor of size m"))
    err.append(ErrorSample("k_mismatch", lambda: (
        (_i8(3, 8), _i8(9, 4), torch.rand(3), torch.rand(4)), {}), RuntimeError,
        "npu_quant_matmul_gelu: expected x2 a k dim equal"))
    err.append(ErrorSample("int4_float_bias", lambda: (
        (_i4_words(3, 1), _i4_words(8, 1), torch.rand(3), torch.rand(8)),
        {"bias": torch.randn(8)}), TypeError, "npu_quant_matmul_gelu: expected bias int32"))


_quant_matmul_gelu()


# -- npu_transpose_quant_batchmatmul -------------------------------------------------------------

def _f8(*shape, dtype=torch.float8_e4m3fn):
    return (torch.randn(*shape) * 2).to(dtype)


def _e8m0(*shape):
    return torch.randint(120, 134, shape, dtype=torch.uint8).view(torch.float8_e8m0fnu)


def _hif8(*shape):
    # Codes 0x00-0x5F and 0x81-0xDF: finite hifloat8 values (0x80 is NaN, 0x6F / 0xEF inf).
    codes = torch.randint(0, 0x60, shape, dtype=torch.uint8)
    return codes | (torch.randint(0, 2, shape, dtype=torch.uint8) << 7) | (codes == 0)


def _transpose_quant_batchmatmul() -> None:
    # float8 inputs (the K-C and mx modes) cannot be samples: opcheck's schema check multiplies
    # the inputs, which PyTorch does not implement for float8 on CPU.  Their FakeTensor and
    # compile checks are in tests/ops/matmul/test_transpose_quant_batchmatmul.py.
    e = _entry("npu_transpose_quant_batchmatmul")
    s = e.samples
    s.append(Sample("t_c_hifloat8", lambda: (
        (_hif8(3, 2, 16), _hif8(2, 16, 4), _F16),
        {"x1_scale": torch.rand(1), "x2_scale": torch.rand(4), "x1_dtype": 290,
         "x2_dtype": 290})))
    s.append(Sample("t_c_hifloat8_no_x1_scale_x2_nk", lambda: (
        (_hif8(2, 3, 32), _hif8(3, 5, 32), _BF16),
        {"x2_scale": torch.rand(5), "perm_x2": [0, 2, 1]})))
    err = e.errors
    err.append(ErrorSample("k_c_k", lambda: (
        (_f8(2, 2, 256), _f8(2, 256, 128), _F16),
        {"x1_scale": torch.rand(2), "x2_scale": torch.rand(128)}), ValueError,
        "npu_transpose_quant_batchmatmul: expected x1 a k dim of 512"))
    err.append(ErrorSample("mx_group_sizes", lambda: (
        (_f8(3, 2, 64), _f8(2, 64, 5), _BF16),
        {"x1_scale": _e8m0(3, 2, 1, 2), "x2_scale": _e8m0(2, 1, 5, 2)}), ValueError,
        "npu_transpose_quant_batchmatmul: expected group_sizes one of"))
    err.append(ErrorSample("hifloat8_output", lambda: (
        (_f8(2, 2, 512), _f8(2, 512, 128), 290),
        {"x1_scale": torch.rand(2), "x2_scale": torch.rand(128)}), NotImplementedError,
        "npu_transpose_quant_batchmatmul: expected dtype torch.float16 or"))


_transpose_quant_batchmatmul()
