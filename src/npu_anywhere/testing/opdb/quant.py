"""Op database entries of the quantization family."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g


def _x(*shape, dtype=torch.float16):
    return _g(*shape, dtype=dtype)


def _groups():
    # 2 * 3 = 6 rows in 3 experts: rows [0, 1), [1, 4), [4, 6)
    return torch.tensor([1, 4, 6], dtype=torch.int32)


def _dynamic_samples(name: str) -> None:
    e = _entry(name)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        tag = str(dtype).replace("torch.", "")
        e.samples.append(Sample(f"int8_{tag}", lambda dtype=dtype: ((_x(3, 5, dtype=dtype),), {})))
        e.samples.append(Sample(f"int4_{tag}", lambda dtype=dtype: (
            (_x(2, 3, 16, dtype=dtype),), {"dst_type": torch.quint4x2})))
    e.samples += [
        Sample("smooth", lambda: ((_x(2, 3, 8),), {"smooth_scales": _x(8)})),
        Sample("smooth_bf16_into_fp16", lambda: ((_x(4, 8),),
                                                 {"smooth_scales": _x(8, dtype=torch.bfloat16)})),
        Sample("moe_group_index", lambda: ((_x(2, 3, 8),), {"smooth_scales": _x(3, 8),
                                                            "group_index": _groups()})),
        Sample("moe_int4", lambda: ((_x(6, 16, dtype=torch.bfloat16),),
                                    {"smooth_scales": _x(3, 16, dtype=torch.bfloat16),
                                     "group_index": _groups(), "dst_type": 285})),
        Sample("pertensor", lambda: ((_x(2, 3, 8),), {"quant_mode": "pertensor"})),
        Sample("perchannel_smooth", lambda: ((_x(2, 3, 8),), {"quant_mode": "perchannel",
                                                              "smooth_scales": _x(3)})),
        Sample("float8_e4m3fn", lambda: ((_x(3, 8),), {"dst_type": torch.float8_e4m3fn})),
        Sample("float8_e5m2_npu_code", lambda: ((_x(3, 8),), {"dst_type": 291})),
        Sample("hifloat8", lambda: ((_x(3, 8),), {"dst_type": 290})),
        Sample("hifloat8_max_perchannel", lambda: ((_x(2, 3, 8, dtype=torch.bfloat16),), {
            "dst_type": 290, "dst_type_max": 15.0, "quant_mode": "perchannel"})),
        Sample("non_contiguous", lambda: ((_x(8, 6).t(),), {"smooth_scales": _x(8)})),
    ]
    e.errors += [
        ErrorSample("one_dim", lambda: ((_x(8),), {}), ValueError,
                    f"{name}: expected x more than 1 dim"),
        ErrorSample("float64", lambda: ((_x(2, 8, dtype=torch.float64),), {}), TypeError,
                    f"{name}: expected x dtype in"),
        ErrorSample("int4_last_dim", lambda: ((_x(2, 12),), {"dst_type": torch.quint4x2}),
                    ValueError, f"{name}: expected x a last dim divisible by 8"),
        ErrorSample("bad_dst_type", lambda: ((_x(2, 8),), {"dst_type": torch.float16}),
                    ValueError, f"{name}: expected dst_type one of"),
        ErrorSample("bad_mode", lambda: ((_x(2, 8),), {"quant_mode": "pergroup"}), ValueError,
                    f"{name}: expected quant_mode one of"),
        ErrorSample("smooth_size", lambda: ((_x(2, 8),), {"smooth_scales": _x(7)}),
                    RuntimeError, f"{name}: expected smooth_scales a 1-D tensor of size 8"),
        ErrorSample("group_without_smooth", lambda: ((_x(6, 8),), {"group_index": _groups()}),
                    ValueError, f"{name}: expected group_index to come with smooth_scales"),
        ErrorSample("group_int64", lambda: ((_x(6, 8),), {
            "smooth_scales": _x(3, 8), "group_index": _groups().long()}), TypeError,
            f"{name}: expected group_index dtype in"),
        ErrorSample("group_count", lambda: ((_x(6, 8),), {
            "smooth_scales": _x(2, 8), "group_index": _groups()}), RuntimeError,
            f"{name}: expected group_index one entry per row"),
        ErrorSample("dst_type_max", lambda: ((_x(2, 8),), {"dst_type_max": -1.0}), ValueError,
                    f"{name}: expected dst_type_max a value in"),
    ]


def _quantize_samples() -> None:
    e = _entry("npu_quantize")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        tag = str(dtype).replace("torch.", "")
        e.samples.append(Sample(f"div_qint8_axis1_{tag}", lambda dtype=dtype: (
            (_x(2, 3, 4, dtype=dtype), _g(3).abs() + 0.5,
             torch.tensor([1, -2, 3], dtype=torch.int8),
             torch.qint8, 1, True), {})))
        e.samples.append(Sample(f"mul_qint8_last_{tag}", lambda dtype=dtype: (
            (_x(2, 3, 12, dtype=dtype), _x(12, dtype=dtype), _x(12, dtype=dtype), torch.qint8,
             -1, False), {})))
    e.samples += [
        Sample("div_quint8_per_tensor", lambda: ((_x(3, 5, dtype=torch.float32) * 50,
                                                  torch.tensor([0.5]),
                                                  torch.tensor([128], dtype=torch.uint8),
                                                  torch.quint8, 1, True), {})),
        Sample("div_qint32_zp_int32", lambda: ((_x(4, 6, dtype=torch.float32),
                                                torch.full((6,), 0.01),
                                                torch.arange(6, dtype=torch.int32),
                                                torch.qint32, -1, True), {})),
        Sample("div_float8", lambda: ((_x(4, 6, dtype=torch.float32), torch.full((4,), 0.01),
                                       None, torch.float8_e4m3fn, 0, True), {})),
        Sample("div_hifloat8", lambda: ((_x(4, 6, dtype=torch.float32) * 100,
                                         torch.full((4,), 0.5), torch.randn(4), 290, 0, True),
                                        {})),
        Sample("mul_hifloat8", lambda: ((_x(3, 8, dtype=torch.bfloat16) * 100,
                                         _x(8, dtype=torch.bfloat16), None, 290, -1, False), {})),
        Sample("mul_quint4x2", lambda: ((_x(2, 16, dtype=torch.float32), torch.full((16,), 3.0),
                                         None, torch.quint4x2, -1, False), {})),
        Sample("mul_axis_minus2_multidim", lambda: ((_x(2, 5, 8, dtype=torch.float32),
                                                     torch.full((1, 5, 1), 4.0),
                                                     torch.full((1, 5, 1), 1.0), torch.qint8,
                                                     -2, False), {})),
        Sample("doc_example", lambda: ((_x(2, 3, 12, dtype=torch.float32),
                                        torch.tensor([3.0] * 12), None, torch.qint8, -1,
                                        False), {})),
        Sample("self_kw", lambda: ((), {"self": _x(3, 4, dtype=torch.float32),
                                        "scales": torch.tensor([0.1]), "zero_points": None,
                                        "dtype": 1})),
    ]
    e.errors += [
        ErrorSample("quint4x2_div", lambda: ((_x(2, 8, dtype=torch.float32), torch.tensor([1.0]),
                                              None, torch.quint4x2, 1, True), {}), ValueError,
                    "npu_quantize: expected dtype one of"),
        ErrorSample("scales_size", lambda: ((_x(2, 3, dtype=torch.float32), torch.ones(2), None,
                                             torch.qint8, 1, True), {}), RuntimeError,
                    "npu_quantize: expected scales size 1 or the size"),
        ErrorSample("zp_size", lambda: ((_x(2, 3, dtype=torch.float32), torch.ones(3),
                                         torch.zeros(1, dtype=torch.int8), torch.qint8, 1, True),
                                        {}), RuntimeError,
                    "npu_quantize: expected zero_points the size of scales"),
        ErrorSample("axis_out_of_range", lambda: ((_x(2, 3, dtype=torch.float32), torch.ones(3),
                                                   None, torch.qint8, 2, True), {}), IndexError,
                    "npu_quantize: expected axis a dim of input"),
        ErrorSample("mul_axis_minus3", lambda: ((_x(2, 3, 8, dtype=torch.float32), torch.ones(8),
                                                 None, torch.qint8, -3, False), {}), ValueError,
                    "npu_quantize: expected axis -2"),
        ErrorSample("mul_int4_last_dim", lambda: ((_x(2, 12, dtype=torch.float32),
                                                   torch.ones(12), None, torch.quint4x2, -1,
                                                   False), {}), ValueError,
                    "npu_quantize: expected input a last dim divisible by 8"),
        ErrorSample("mul_zp_dtype", lambda: ((_x(2, 8, dtype=torch.float32), torch.ones(8),
                                              torch.ones(8, dtype=torch.float16), torch.qint8, -1,
                                              False), {}), TypeError,
                    "npu_quantize: expected zero_points the dtype of scales"),
        ErrorSample("int_input", lambda: ((torch.ones(2, 8, dtype=torch.int32), torch.ones(1),
                                           None, torch.qint8, 1, True), {}), TypeError,
                    "npu_quantize: expected input dtype in"),
    ]


def _packed(*shape):
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=torch.int32)


def _hif8_codes(*shape):
    low = torch.randint(1, 0x6E, shape, dtype=torch.int32)
    return (low | (torch.randint(0, 2, shape, dtype=torch.int32) << 7)).to(torch.uint8)


def _anti_quant_samples() -> None:
    e = _entry("npu_anti_quant")
    i8 = lambda *s: torch.randint(-128, 128, s, dtype=torch.int8)  # noqa: E731
    e.samples += [
        Sample("int8_fp16", lambda: ((i8(3, 10), _g(10)), {})),
        Sample("int8_offset_bf16_out", lambda: ((i8(3, 10), _g(10)), {
            "offset": _g(10), "dst_dtype": torch.bfloat16, "src_dtype": torch.int8})),
        Sample("int8_bf16_scale", lambda: ((i8(2, 3, 4), _g(1, dtype=torch.bfloat16)),
                                           {"offset": _g(1, dtype=torch.bfloat16)})),
        Sample("int4_packed", lambda: ((_packed(3, 2), _g(16)), {"offset": _g(16),
                                                                 "src_dtype": torch.quint4x2})),
        Sample("int4_packed_npu_code", lambda: ((_packed(4, 1), _g(1)), {"src_dtype": 285,
                                                                         "dst_dtype": 15})),
        # float8 x (950) is tested in tests/ops/quant: opcheck cannot compare float8 inputs.
        # hifloat8 x: uint8 codes, finite ones (no 0x80 NaN, no 0x6F / 0xEF inf).
        Sample("hifloat8_x", lambda: ((_hif8_codes(3, 8), _g(8)), {
            "offset": _g(8), "src_dtype": 290, "dst_dtype": torch.bfloat16})),
        Sample("hifloat8_x_non_contiguous", lambda: ((_hif8_codes(8, 5).t(), _g(1)), {})),
        Sample("scalar_x", lambda: ((torch.tensor(5, dtype=torch.int8), _g(1)), {})),
        Sample("non_contiguous", lambda: ((i8(8, 6).t(), _g(8)), {})),
    ]
    e.errors += [
        ErrorSample("float_x", lambda: ((_g(3, 4), _g(4)), {}), TypeError,
                    "npu_anti_quant: expected x dtype in"),
        ErrorSample("scale_size", lambda: ((i8(3, 4), _g(3)), {}), RuntimeError,
                    "npu_anti_quant: expected scale size 1 or the .unpacked. last dim of x .4."),
        ErrorSample("packed_scale_size", lambda: ((_packed(3, 2), _g(2)), {}), RuntimeError,
                    "npu_anti_quant: expected scale size 1 or the .unpacked. last dim of x .16."),
        ErrorSample("src_mismatch", lambda: ((i8(3, 4), _g(4)), {"src_dtype": torch.quint4x2}),
                    TypeError, "npu_anti_quant: expected src_dtype the format of x"),
        ErrorSample("dst_float32", lambda: ((i8(3, 4), _g(4)), {"dst_dtype": torch.float32}),
                    ValueError, "npu_anti_quant: expected dst_dtype torch.float16 or"),
        ErrorSample("offset_dtype", lambda: ((i8(3, 4), _g(4)), {
            "offset": _g(4, dtype=torch.bfloat16)}), TypeError,
            "npu_anti_quant: expected offset the dtype of scale"),
        ErrorSample("scale_2d", lambda: ((i8(3, 4), _g(1, 4)), {}), ValueError,
                    "npu_anti_quant: expected scale a 1-D tensor"),
        ErrorSample("hifloat8_bf16_scale", lambda: ((torch.zeros(2, 4, dtype=torch.uint8),
                                                     _g(4, dtype=torch.bfloat16)), {}),
                    TypeError, "npu_anti_quant: expected scale dtype float32 when x is float8"),
    ]


def _trans_quant_param_samples() -> None:
    e = _entry("npu_trans_quant_param")
    e.samples += [
        Sample("scale_only", lambda: ((_g(16),), {})),
        Sample("scalar_scale_vector_offset", lambda: ((_g(1), _g(16) * 100), {})),
        Sample("2d_round_mode_1", lambda: ((_g(1, 8), _g(1, 8) * 10), {"round_mode": 1})),
        Sample("round_mode_none", lambda: ((_g(4), _g(1)), {"round_mode": None})),
    ]
    e.errors += [
        ErrorSample("fp16_scale", lambda: ((_g(4, dtype=torch.float16),), {}), TypeError,
                    "npu_trans_quant_param: expected scale dtype in"),
        ErrorSample("scale_2x4", lambda: ((_g(2, 4),), {}), ValueError,
                    "npu_trans_quant_param: expected scale shape"),
        ErrorSample("round_mode_2", lambda: ((_g(4),), {"round_mode": 2}), ValueError,
                    "npu_trans_quant_param: expected round_mode 0"),
        ErrorSample("offset_size", lambda: ((_g(4), _g(3)), {}), RuntimeError,
                    "npu_trans_quant_param: expected offset size 1 or the size of scale"),
        ErrorSample("offset_2d_shape", lambda: ((_g(1, 4), _g(1, 2)), {}), RuntimeError,
                    "npu_trans_quant_param: expected offset the shape of scale"),
        ErrorSample("empty", lambda: ((_g(0),), {}), ValueError,
                    "npu_trans_quant_param: expected scale a non-empty"),
    ]


def _convert_weight_samples() -> None:
    e = _entry("npu_convert_weight_to_int4pack")
    e.samples += [
        Sample("kn", lambda: ((torch.randint(-8, 8, (4, 16), dtype=torch.int32),), {})),
        Sample("nk_inner_k_tiles", lambda: ((torch.randint(-8, 8, (16, 8), dtype=torch.int32),
                                             2), {})),
        Sample("3d", lambda: ((torch.randint(-8, 8, (2, 3, 8), dtype=torch.int32),), {})),
        Sample("fp4_e2m1", lambda: (
            (torch.tensor([0.5, 1, 1.5, 2, 3, 4, 6, -6] * 2).reshape(2, 8),), {})),
    ]
    e.errors += [
        ErrorSample("int8_weight", lambda: ((torch.zeros(4, 8, dtype=torch.int8),), {}),
                    TypeError, "npu_convert_weight_to_int4pack: expected weight dtype in"),
        ErrorSample("last_dim", lambda: ((torch.zeros(4, 12, dtype=torch.int32),), {}),
                    ValueError, "npu_convert_weight_to_int4pack: expected weight a last dim"),
        ErrorSample("one_dim", lambda: ((torch.zeros(16, dtype=torch.int32),), {}), ValueError,
                    "npu_convert_weight_to_int4pack: expected weight a 2-D"),
        ErrorSample("non_contiguous", lambda: ((torch.zeros(16, 8, dtype=torch.int32).t(),), {}),
                    ValueError, "npu_convert_weight_to_int4pack: expected weight a contiguous"),
    ]


_dynamic_samples("npu_dynamic_quant")
_dynamic_samples("npu_dynamic_quant_asymmetric")
_quantize_samples()
_anti_quant_samples()
_trans_quant_param_samples()
_convert_weight_samples()
