"""Op database entries of the matmul family (quantized and weight-quantized matmuls)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_I8, _I32, _F32, _BF16, _F16 = torch.int8, torch.int32, torch.float32, torch.bfloat16, torch.float16


def _i8(*shape):
    return torch.randint(-128, 128, shape, dtype=_I8)


def _i4_packed(*shape):
    """int32 words of eight random int4 values each."""
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=_I32)


def _word(n: int) -> torch.Tensor:
    """npu_trans_quant_param-style words for scales in [0.001, 0.01) and offsets in [-3, 3]."""
    from ...ops.quant.trans_quant_param import trans_quant_param_reference
    return trans_quant_param_reference(torch.rand(n) * 0.009 + 0.001,
                                       torch.randint(-3, 4, (n,)).to(_F32))


# -- npu_quant_matmul ----------------------------------------------------------------------------

def _quant_matmul() -> None:
    e = _entry("npu_quant_matmul")
    s = e.samples
    s.append(Sample("int8_out_f32_scale_offset", lambda: (
        (_i8(5, 24), _i8(24, 7), torch.rand(7) * 0.01),
        {"offset": torch.randn(7), "bias": torch.randint(-99, 99, (7,), dtype=_I32)})))
    s.append(Sample("int8_out_word_scale", lambda: ((_i8(3, 16), _i8(16, 6), _word(6)), {})))
    s.append(Sample("fp16_out_word_per_tensor", lambda: (
        (_i8(2, 4, 16), _i8(16, 5), _word(1)), {"output_dtype": _F16})))
    s.append(Sample("bf16_pertoken_bf16_bias_x2_t", lambda: (
        (_i8(4, 32), _i8(6, 32).t(), torch.rand(6).to(_BF16)),
        {"pertoken_scale": torch.rand(4), "bias": torch.randn(6).to(_BF16),
         "output_dtype": _BF16})))
    s.append(Sample("fp16_pertoken_f32_bias", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(1)),
        {"pertoken_scale": torch.rand(3), "bias": torch.randn(4), "output_dtype": _F16})))
    s.append(Sample("int32_out_batch_broadcast", lambda: (
        (_i8(2, 1, 3, 8), _i8(3, 8, 5), torch.rand(5)),
        {"bias": torch.randint(-9, 9, (5,), dtype=_I32), "output_dtype": _I32})))
    s.append(Sample("bias_3d", lambda: (
        (_i8(1, 3, 8), _i8(2, 8, 4), torch.rand(4)),
        {"bias": torch.randint(-9, 9, (2, 1, 4), dtype=_I32), "output_dtype": _BF16})))
    s.append(Sample("int4_fp16_word", lambda: (
        (_i4_packed(3, 2), _i4_packed(16, 1), _word(8)), {"output_dtype": _F16})))
    s.append(Sample("int4_x2_transposed_bf16_pertoken", lambda: (
        (_i4_packed(3, 2), _i4_packed(8, 2).t(), torch.rand(8)),
        {"pertoken_scale": torch.rand(3), "output_dtype": _BF16})))
    s.append(Sample("a8w4_per_group_fp16", lambda: (
        (_i8(3, 512), _i4_packed(512, 1), _word(16).reshape(2, 8)),
        {"offset": torch.randn(8), "pertoken_scale": torch.rand(3, 1), "output_dtype": _F16,
         "group_sizes": [0, 0, 256]})))
    s.append(Sample("a8w4_per_channel_bf16", lambda: (
        (_i8(2, 16), _i4_packed(16, 1), _word(8)),
        {"offset": torch.randn(8), "pertoken_scale": torch.rand(2), "output_dtype": _BF16})))
    err = e.errors
    err.append(ErrorSample("k_mismatch", lambda: ((_i8(3, 8), _i8(9, 4), torch.rand(4)), {}),
                           RuntimeError, "npu_quant_matmul: expected x2 a k dim equal"))
    err.append(ErrorSample("scale_size", lambda: ((_i8(3, 8), _i8(8, 4), torch.rand(3)), {}),
                           ValueError, "npu_quant_matmul: expected scale a 1-D tensor of size"))
    err.append(ErrorSample("dtype_mismatch", lambda: (
        (_i8(3, 8), torch.zeros(8, 4, dtype=torch.int16), torch.rand(4)), {}), TypeError,
        "npu_quant_matmul: expected x2 the dtype of x1"))
    err.append(ErrorSample("word_scale_bf16_out", lambda: (
        (_i8(3, 8), _i8(8, 4), _word(4)), {"output_dtype": _BF16}), ValueError,
        "npu_quant_matmul: expected output_dtype torch.int8 or torch.float16 when scale"))
    err.append(ErrorSample("pertoken_int8_out", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4)), {"pertoken_scale": torch.rand(3)}), ValueError,
        "npu_quant_matmul: expected pertoken_scale None unless"))
    err.append(ErrorSample("offset_fp16_out", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4)), {"offset": torch.rand(4),
                                                 "output_dtype": _F16}), ValueError,
        "npu_quant_matmul: expected offset None unless"))
    err.append(ErrorSample("bias_shape", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4)), {"bias": torch.zeros(3, 4, dtype=_I32)}),
        ValueError, "npu_quant_matmul: expected bias one of the shapes"))
    err.append(ErrorSample("group_sizes", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4)), {"group_sizes": [1, 1, 4]}),
        ValueError, "npu_quant_matmul: expected group_sizes None"))
    err.append(ErrorSample("output_float32", lambda: (
        (_i8(3, 8), _i8(8, 4), torch.rand(4)), {"output_dtype": _F32}), ValueError,
        "npu_quant_matmul: expected output_dtype torch.int8, torch.float16"))


_quant_matmul()


# -- npu_weight_quant_batchmatmul ----------------------------------------------------------------

def _weight_quant_batchmatmul() -> None:
    e = _entry("npu_weight_quant_batchmatmul")
    s = e.samples

    def _x(*shape, dtype=_F16):
        return torch.randn(*shape).to(dtype)

    def _w(*shape):
        return torch.randint(-8, 8, shape, dtype=_I8)

    s.append(Sample("fp16_per_channel_offset", lambda: (
        (_x(5, 16), _w(16, 6), _x(1, 6), _x(1, 6)), {})))
    s.append(Sample("bf16_per_tensor_bias", lambda: (
        (_x(3, 8, dtype=_BF16), _w(8, 4), _x(1, dtype=_BF16)),
        {"bias": torch.randn(4)})))
    s.append(Sample("fp16_weight_transposed_scale_transposed", lambda: (
        (_x(4, 24), _w(7, 24).t(), _x(7, 1).t(), _x(7, 1).t()), {})))
    s.append(Sample("bf16_per_group", lambda: (
        (_x(3, 64, dtype=_BF16), _w(64, 5), _x(2, 5, dtype=_BF16), _x(2, 5, dtype=_BF16)),
        {"antiquant_group_size": 32})))
    s.append(Sample("int4_packed_per_group", lambda: (
        (_x(2, 96), _i4_packed(96, 2), _x(3, 16)), {"antiquant_group_size": 32})))
    s.append(Sample("int4_packed_transposed", lambda: (
        (_x(2, 16), _i4_packed(5, 2).t(), _x(5)), {})))
    s.append(Sample("int8_out_quant_scale", lambda: (
        (_x(3, 16), _w(16, 4), _x(1, 4) * 0.1),
        {"quant_scale": torch.rand(1, 4) * 0.2, "quant_offset": torch.randn(1, 4)})))
    s.append(Sample("int8_out_word", lambda: (
        (_x(3, 16), _w(16, 4), _x(4) * 0.1), {"quant_scale": _word(4)})))
    s.append(Sample("batched", lambda: ((_x(2, 3, 16), _w(2, 16, 4), _x(4)), {})))
    # Ascend 950 MX A16W4: float32 words of eight float4_e2m1 codes, e8m0 scales per 32 of k.
    s.append(Sample("float4_packed_e8m0_scales", lambda: (
        (_x(3, 64), torch.randint(-2**31, 2**31 - 1, (64, 2), dtype=_I32).view(torch.float32),
         torch.randint(120, 134, (2, 16), dtype=torch.uint8)), {"antiquant_group_size": 32})))
    s.append(Sample("int64_antiquant_scale", lambda: (
        (_x(2, 64), _w(64, 64).t().contiguous().t(),
         trans_word(64), torch.randint(-3, 3, (64,), dtype=_I32)), {})))
    err = e.errors
    err.append(ErrorSample("k_mismatch", lambda: ((_x(3, 8), _w(9, 4), _x(4)), {}),
                           RuntimeError, "npu_weight_quant_batchmatmul: expected weight a k dim"))
    err.append(ErrorSample("scale_dtype", lambda: ((_x(3, 8), _w(8, 4), torch.rand(4)), {}),
                           TypeError,
                           "npu_weight_quant_batchmatmul: expected antiquant_scale the dtype"))
    err.append(ErrorSample("group_size", lambda: (
        (_x(3, 64), _w(64, 4), _x(2, 4)), {"antiquant_group_size": 48}), ValueError,
        "npu_weight_quant_batchmatmul: expected antiquant_group_size 0 or a multiple of 32"))
    err.append(ErrorSample("group_scale_shape", lambda: (
        (_x(3, 64), _w(64, 4), _x(1, 4)), {"antiquant_group_size": 32}), ValueError,
        "npu_weight_quant_batchmatmul: expected antiquant_scale one of the shapes"))
    err.append(ErrorSample("quant_offset_alone", lambda: (
        (_x(3, 8), _w(8, 4), _x(4)), {"quant_offset": torch.rand(4)}), ValueError,
        "npu_weight_quant_batchmatmul: expected quant_offset None when quant_scale is None"))
    err.append(ErrorSample("bias_dtype_bf16", lambda: (
        (_x(3, 8, dtype=_BF16), _w(8, 4), _x(4, dtype=_BF16)),
        {"bias": torch.randn(4).to(_BF16)}), TypeError,
        "npu_weight_quant_batchmatmul: expected bias dtype torch.float32"))
    err.append(ErrorSample("x_float32", lambda: ((torch.randn(3, 8), _w(8, 4), torch.rand(4)),
                                                 {}), TypeError,
                           "npu_weight_quant_batchmatmul: expected x dtype in"))
    err.append(ErrorSample("batch_mismatch", lambda: (
        (_x(2, 3, 8), _w(3, 8, 4), _x(4)), {}), RuntimeError,
        "npu_weight_quant_batchmatmul: expected weight batch dims equal"))


def trans_word(n: int) -> torch.Tensor:
    from ...ops.quant.trans_quant_param import trans_quant_param_reference
    return trans_quant_param_reference(torch.rand(n) * 0.01 + 0.001)


_weight_quant_batchmatmul()


# -- npu_quant_matmul_reduce_sum -----------------------------------------------------------------

def _quant_matmul_reduce_sum() -> None:
    e = _entry("npu_quant_matmul_reduce_sum")
    e.samples.append(Sample("basic", lambda: (
        (_i8(2, 3, 8), _i8(2, 8, 5)),
        {"x1_scale": torch.rand(2, 3), "x2_scale": torch.rand(5).to(_BF16)})))
    e.samples.append(Sample("batch1_odd", lambda: (
        (_i8(1, 7, 9), _i8(1, 9, 3)),
        {"x1_scale": torch.rand(1, 7), "x2_scale": torch.rand(3).to(_BF16)})))
    e.errors += [
        ErrorSample("missing_scale", lambda: ((_i8(2, 3, 8), _i8(2, 8, 5)),
                                              {"x1_scale": torch.rand(2, 3)}), ValueError,
                    "npu_quant_matmul_reduce_sum: expected x2_scale a tensor"),
        ErrorSample("batch_mismatch", lambda: (
            (_i8(2, 3, 8), _i8(3, 8, 5)),
            {"x1_scale": torch.rand(2, 3), "x2_scale": torch.rand(5).to(_BF16)}), RuntimeError,
            "npu_quant_matmul_reduce_sum: expected x2 shape"),
        ErrorSample("x2_scale_dtype", lambda: (
            (_i8(2, 3, 8), _i8(2, 8, 5)),
            {"x1_scale": torch.rand(2, 3), "x2_scale": torch.rand(5)}), TypeError,
            "npu_quant_matmul_reduce_sum: expected x2_scale dtype in"),
    ]


_quant_matmul_reduce_sum()


# -- npu_linear / npu_linear_backward ------------------------------------------------------------

def _linear() -> None:
    e = _entry("npu_linear")
    for dtype in (_F32, _F16, _BF16):
        e.samples.append(Sample(f"bias_{str(dtype)[6:]}", lambda dtype=dtype: (
            (torch.randn(3, 16).to(dtype), torch.randn(5, 16).to(dtype),
             torch.randn(5).to(dtype)), {})))
    e.samples.append(Sample("no_bias", lambda: ((torch.randn(2, 7), torch.randn(4, 7)), {})))
    e.samples.append(Sample("grad_fp64_bias", lambda: (
        (torch.randn(3, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64),
         torch.randn(4, dtype=torch.float64)), {}), differentiable=True))
    e.samples.append(Sample("grad_fp64_no_bias", lambda: (
        (torch.randn(2, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)), {}),
        differentiable=True))
    e.errors += [
        ErrorSample("k_mismatch", lambda: ((torch.randn(2, 7), torch.randn(4, 6)), {}),
                    RuntimeError, "npu_linear: expected weight shape"),
        ErrorSample("bias_shape", lambda: ((torch.randn(2, 7), torch.randn(4, 7),
                                            torch.randn(3)), {}), ValueError,
                    "npu_linear: expected bias shape"),
        ErrorSample("int8", lambda: ((_i8(2, 7), _i8(4, 7)), {}), NotImplementedError,
                    "npu_linear: expected input a floating tensor"),
        ErrorSample("three_d", lambda: ((torch.randn(2, 2, 7), torch.randn(4, 7)), {}),
                    ValueError, "npu_linear: expected input a 2-D tensor"),
    ]
    g = _entry("npu_linear_backward")
    g.samples.append(Sample("basic", lambda: (
        (torch.randn(3, 5), torch.randn(3, 16), torch.randn(5, 16)), {})))
    g.samples.append(Sample("bf16", lambda: (
        (torch.randn(2, 4).to(_BF16), torch.randn(2, 8).to(_BF16), torch.randn(4, 8).to(_BF16)),
        {})))
    g.errors.append(ErrorSample("grad_shape", lambda: (
        (torch.randn(3, 4), torch.randn(3, 16), torch.randn(5, 16)), {}), RuntimeError,
        "npu_linear_backward: expected grad shape"))


_linear()


# -- npu_bmmV2 and its backward ops --------------------------------------------------------------

def _bmm_v2() -> None:
    f64 = torch.float64
    e = _entry("npu_bmmV2")
    e.samples += [
        Sample("seed_example", lambda: ((torch.randn(10, 3, 4), torch.randn(10, 4, 5), []), {})),
        Sample("broadcast_fp16", lambda: ((torch.randn(2, 1, 3, 4).to(_F16),
                                           torch.randn(5, 4, 6).to(_F16), []), {})),
        Sample("reduce_batch", lambda: ((torch.randn(4, 3, 5), torch.randn(5, 2), [1, 3, 2]),
                                        {})),
        Sample("int32", lambda: ((torch.randint(-9, 9, (2, 3, 4), dtype=_I32),
                                  torch.randint(-9, 9, (2, 4, 2), dtype=_I32), []), {})),
        Sample("grad_fp64_broadcast", lambda: ((torch.randn(2, 3, 4, dtype=f64),
                                                torch.randn(4, 5, dtype=f64), []), {}),
               differentiable=True),
    ]
    e.errors += [
        ErrorSample("k_mismatch", lambda: ((torch.randn(2, 3, 4), torch.randn(2, 5, 6), []), {}),
                    RuntimeError, "npu_bmmV2: expected mat2 a k dim"),
        ErrorSample("one_d", lambda: ((torch.randn(4), torch.randn(4, 5), []), {}), ValueError,
                    "npu_bmmV2: expected self a tensor with at least 2 dims"),
        ErrorSample("bad_output_sizes", lambda: ((torch.randn(2, 3, 4), torch.randn(4, 5),
                                                  [2, 3, 4]), {}), ValueError,
                    "npu_bmmV2: expected output_sizes"),
    ]
    for name in ("npu_bmm_v2_mat1_backward", "npu_bmm_v2_mat2_backward"):
        g = _entry(name)
        g.samples.append(Sample("broadcast", lambda name=name: (
            (torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(4, 5),
             [2, 3, 4] if name.endswith("mat1_backward") else [4, 5]), {})))
        g.errors += [
            ErrorSample("k_mismatch", lambda name=name: (
                (torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(6, 5),
                 [2, 3, 4] if name.endswith("mat1_backward") else [6, 5]), {}),
                RuntimeError, f"{name}: expected mat2 a k dim"),
            ErrorSample("mixed_dtypes", lambda name=name: (
                (torch.randn(2, 3, 5), torch.randn(2, 3, 4).half(), torch.randn(4, 5),
                 [2, 3, 4] if name.endswith("mat1_backward") else [4, 5]), {}),
                TypeError, f"{name}: expected mat2 the same dtype as mat1"),
        ]


_bmm_v2()
