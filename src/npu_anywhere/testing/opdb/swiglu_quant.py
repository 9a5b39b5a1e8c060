"""Op database entries of npu_swiglu_quant and npu_dequant_swiglu_quant (no autograd)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32
_I32, _I64 = torch.int32, torch.int64


def _n(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _pos(*shape):
    return torch.rand(*shape) + 0.5


def _swiglu_quant() -> None:
    e = _entry("npu_swiglu_quant")
    for dtype in (_F16, _BF16, _F32):
        for mode in (0, 1):
            e.samples.append(Sample(f"{_n(dtype)}_mode{mode}", lambda dtype=dtype, mode=mode: (
                (_g(3, 16, dtype=dtype),),
                {"smooth_scales": _pos(1, 8), "offsets": _g(1, 8), "quant_mode": mode,
                 "activate_left": mode == 1})))
    e.samples += [
        Sample("no_smooth_3d", lambda: ((_g(2, 3, 10),), {"quant_mode": 1})),
        Sample("zero_rows_dynamic", lambda: ((_g(0, 3, 10),), {"quant_mode": 1})),
        Sample("int4_static_per_tensor", lambda: (
            (_g(4, 16),), {"smooth_scales": _pos(1), "offsets": _g(1),
                           "dst_type": torch.quint4x2})),
        Sample("moe_cumsum_dynamic", lambda: (
            (_g(7, 12),), {"smooth_scales": _pos(3, 6),
                           "group_index": torch.tensor([2, 2, 6], dtype=_I32),
                           "quant_mode": 1})),
        Sample("moe_count_static", lambda: (
            (_g(6, 8, dtype=_BF16),), {"smooth_scales": _pos(2, 4), "offsets": _g(2, 4),
                                       "group_index": torch.tensor([0, 6], dtype=_I32),
                                       "group_list_type": 1})),
    ]
    e.errors += [
        ErrorSample("one_dim", lambda: ((_g(8),), {}), ValueError,
                    "npu_swiglu_quant: expected x a tensor with more than 1 dim"),
        ErrorSample("odd_last", lambda: ((_g(2, 7),), {}), ValueError,
                    "npu_swiglu_quant: expected x an even last dim"),
        ErrorSample("empty_last", lambda: ((_g(3, 0),), {"quant_mode": 1}), ValueError,
                    "npu_swiglu_quant: expected x a non-empty last dim"),
        ErrorSample("quant_mode", lambda: ((_g(2, 8),), {"quant_mode": 3}), ValueError,
                    "npu_swiglu_quant: expected quant_mode one of"),
        ErrorSample("smooth_shape", lambda: ((_g(2, 8),), {"smooth_scales": _pos(1, 3)}),
                    RuntimeError, "npu_swiglu_quant: expected smooth_scales shape"),
        ErrorSample("offsets_shape", lambda: ((_g(2, 8),), {"smooth_scales": _pos(1, 4),
                                                            "offsets": _g(4)}),
                    RuntimeError, "npu_swiglu_quant: expected offsets the shape"),
        ErrorSample("group_index_dtype", lambda: (
            (_g(2, 8),), {"smooth_scales": _pos(1, 4), "group_index": torch.ones(1)}),
            TypeError, "npu_swiglu_quant: expected group_index dtype in"),
    ]


def _ints(*shape):
    return torch.randint(-10, 10, shape, dtype=_I32)


def _dequant_swiglu_quant() -> None:
    e = _entry("npu_dequant_swiglu_quant")
    for mode in (0, 1):
        for sw in (0, 1, 2):
            e.samples.append(Sample(f"int32_mode{mode}_swiglu{sw}", lambda mode=mode, sw=sw: (
                (_ints(4, 16),),
                {"weight_scale": torch.rand(1, 16), "activation_scale": torch.rand(4, 1),
                 "bias": torch.randint(-2, 2, (16,), dtype=_I32), "quant_scale": _pos(1, 8),
                 "quant_offset": _g(1, 8) if mode == 0 else None, "quant_mode": mode,
                 "swiglu_mode": sw, "activate_left": sw == 2})))
    for dtype in (_F16, _BF16):
        e.samples.append(Sample(f"{_n(dtype)}_dynamic", lambda dtype=dtype: (
            (_g(3, 2, 12, dtype=dtype),), {"quant_mode": 1})))
    e.samples += [
        Sample("moe_groups", lambda: (
            (_ints(7, 16),), {"weight_scale": torch.rand(3, 16), "activation_scale": torch.rand(7),
                              "quant_scale": _pos(3, 8),
                              "group_index": torch.tensor([2, 0, 4], dtype=_I64),
                              "quant_mode": 1, "activate_left": True})),
        Sample("static_per_tensor_round_rint", lambda: (
            (_ints(3, 8),), {"weight_scale": torch.rand(8), "quant_scale": _pos(1),
                             "quant_offset": _g(1), "round_mode": 0})),
        Sample("float8_e4m3fn", lambda: (
            (_g(3, 8, dtype=_BF16),), {"quant_mode": 1, "dst_type": 292})),
        Sample("float8_e5m2_static", lambda: (
            (_ints(3, 8),), {"weight_scale": torch.rand(8), "quant_scale": _pos(1),
                             "quant_offset": _g(1), "dst_type": 291, "round_mode": 0})),
        Sample("hifloat8_dynamic", lambda: (
            (_g(3, 8, dtype=_BF16),), {"quant_mode": 1, "dst_type": 290, "round_mode": 1})),
        Sample("hifloat8_static", lambda: (
            (_ints(3, 8),), {"weight_scale": torch.rand(8), "quant_scale": _pos(1),
                             "dst_type": 290, "round_mode": 1})),
        Sample("float4_e2m1_dynamic", lambda: (
            (_g(3, 16, dtype=_BF16),), {"quant_mode": 1, "dst_type": 296})),
        Sample("float4_e1m2_static_floor", lambda: (
            (_ints(2, 3, 8),), {"weight_scale": torch.rand(1, 8),
                                "activation_scale": _pos(2, 3), "quant_scale": _pos(1, 4) * 8,
                                "quant_offset": _g(1, 4), "dst_type": 297, "round_mode": 2})),
        Sample("float4_e2m1_groups_trunc", lambda: (
            (_ints(5, 16),), {"weight_scale": torch.rand(2, 16), "quant_scale": _pos(2, 8),
                              "group_index": torch.tensor([2, 2], dtype=_I64),
                              "quant_mode": 1, "dst_type": 296, "round_mode": 4})),
        Sample("activate_dim0_int8", lambda: (
            (_ints(4, 3, 10),), {"weight_scale": torch.rand(10), "activation_scale": _pos(4, 3),
                                 "bias": torch.randint(-2, 2, (10,), dtype=_I32),
                                 "quant_scale": _pos(10), "quant_mode": 1,
                                 "activate_dim": 0})),
        Sample("activate_dim1_float4_e1m2_ceil", lambda: (
            (_g(2, 6, 8, dtype=_BF16),), {"quant_mode": 1, "activate_dim": 1, "dst_type": 297,
                                          "round_mode": 3, "activate_left": True})),
    ]
    e.errors += [
        ErrorSample("odd_last", lambda: ((_ints(2, 7),), {}), ValueError,
                    "npu_dequant_swiglu_quant: expected x an even last dim"),
        ErrorSample("swiglu_mode", lambda: ((_ints(2, 8),), {"swiglu_mode": 3}), ValueError,
                    "npu_dequant_swiglu_quant: expected swiglu_mode one of"),
        ErrorSample("weight_scale_shape", lambda: ((_ints(2, 8),),
                                                   {"weight_scale": torch.ones(1, 6)}),
                    RuntimeError, "npu_dequant_swiglu_quant: expected weight_scale shape"),
        ErrorSample("float_x_bias", lambda: ((_g(2, 8, dtype=_F16),),
                                             {"bias": torch.ones(8, dtype=_I32)}),
                    ValueError, "npu_dequant_swiglu_quant: expected bias None"),
        ErrorSample("hifloat8_rint", lambda: ((_ints(2, 8),), {"dst_type": 290}),
                    ValueError, "npu_dequant_swiglu_quant: expected round_mode 1"),
        ErrorSample("int8_round_floor", lambda: ((_ints(2, 8),), {"round_mode": 2}),
                    ValueError, "npu_dequant_swiglu_quant: expected round_mode None or 0"),
        ErrorSample("float8_round", lambda: ((_ints(2, 8),), {"dst_type": 292, "round_mode": 1}),
                    ValueError, "npu_dequant_swiglu_quant: expected round_mode None or 0"),
        ErrorSample("clamp_limit", lambda: ((_ints(2, 8),), {"clamp_limit": -1.0}),
                    ValueError, "npu_dequant_swiglu_quant: expected clamp_limit"),
        ErrorSample("float4_odd_y", lambda: ((_ints(2, 6),), {"dst_type": 296}), ValueError,
                    "npu_dequant_swiglu_quant: expected x a y last dim that is even"),
        ErrorSample("other_dim_group_index", lambda: (
            (_ints(4, 8),), {"activate_dim": 0, "quant_mode": 1,
                             "group_index": torch.tensor([2], dtype=_I64)}),
            ValueError, "npu_dequant_swiglu_quant: expected group_index None when"),
        ErrorSample("other_dim_static", lambda: ((_ints(4, 8),), {"activate_dim": 0}),
                    NotImplementedError, "npu_dequant_swiglu_quant: expected quant_mode 1"),
        ErrorSample("other_dim_swiglu_mode", lambda: (
            (_ints(4, 8),), {"activate_dim": -2, "quant_mode": 1, "swiglu_mode": 1}),
            NotImplementedError, "npu_dequant_swiglu_quant: expected swiglu_mode 0"),
    ]


_swiglu_quant()
_dequant_swiglu_quant()
