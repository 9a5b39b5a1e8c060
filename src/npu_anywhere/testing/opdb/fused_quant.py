"""Op database entries of the fused-quant family (no autograd: no differentiable samples)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32
_I8, _I32 = torch.int8, torch.int32


def _n(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _scales(*shape, dtype=_F32):
    return (torch.rand(*shape) * 0.05 + 0.01).to(dtype)


def _add_rms_norm_quant() -> None:
    e = _entry("npu_add_rms_norm_quant")
    for dtype in (_F16, _BF16, _F32):
        e.samples.append(Sample(f"basic_{_n(dtype)}", lambda dtype=dtype: (
            (_g(3, 16, dtype=dtype), _g(3, 16, dtype=dtype), _g(16, dtype=dtype), _scales(16),
             torch.randint(-4, 5, (16,), dtype=_I32)), {})))
    e.samples += [
        Sample("beta_scales2_mul", lambda: (
            (_g(2, 3, 8, dtype=_F16), _g(2, 3, 8, dtype=_F16), _g(8, dtype=_F16), _scales(8),
             None, _g(8, dtype=_F16), _scales(8), torch.zeros(8, dtype=_I32)),
            {"div_mode": False, "epsilon": 1e-5})),
        Sample("bf16_scales_zp_gamma_2d", lambda: (
            (_g(2, 4, 8, dtype=_BF16), _g(2, 4, 8, dtype=_BF16), _g(4, 8, dtype=_BF16),
             _scales(4, 8, dtype=_BF16), _g(4, 8, dtype=_BF16)), {})),
        Sample("float8_e4m3fn", lambda: (
            (_g(3, 8), _g(3, 8), _g(8), _scales(8), None), {"dst_type": 292})),
        Sample("hifloat8_two_outputs", lambda: (
            (_g(3, 8, dtype=_BF16), _g(3, 8, dtype=_BF16), _g(8, dtype=_BF16), _scales(8),
             None, None, _scales(8)), {"dst_type": 290})),
        Sample("one_dim", lambda: ((_g(9), _g(9), _g(9), _scales(9), None), {})),
        # 950 rows of aclnnAddRmsNormQuant.md: float16 scales / zero points, float32 ones.
        Sample("f16_scales_zp", lambda: (
            (_g(3, 8, dtype=_F16), _g(3, 8, dtype=_F16), _g(8, dtype=_F16),
             _scales(8, dtype=_F16), _g(8, dtype=_F16)), {})),
        Sample("bf16_f32_zp", lambda: (
            (_g(3, 8, dtype=_BF16), _g(3, 8, dtype=_BF16), _g(8, dtype=_BF16), _scales(8),
             _g(8)), {})),
    ]
    e.errors += [
        ErrorSample("axis", lambda: ((_g(2, 8), _g(2, 8), _g(8), _scales(8), None),
                                     {"axis": 0}), ValueError,
                    "npu_add_rms_norm_quant: expected axis -1"),
        ErrorSample("scales_shape", lambda: ((_g(2, 8), _g(2, 8), _g(8), _scales(4), None), {}),
                    RuntimeError, "npu_add_rms_norm_quant: expected scales1 the shape of gamma"),
        ErrorSample("scales_int8", lambda: ((_g(2, 8), _g(2, 8), _g(8),
                                             torch.ones(8, dtype=_I8), None), {}),
                    TypeError, "npu_add_rms_norm_quant: expected scales1 dtype in"),
        ErrorSample("x2_shape", lambda: ((_g(2, 8), _g(3, 8), _g(8), _scales(8), None), {}),
                    RuntimeError, "npu_add_rms_norm_quant: expected x2 the shape of x1"),
    ]


def _rms_norm_quant() -> None:
    e = _entry("npu_rms_norm_quant")
    for dtype in (_F16, _BF16, _F32):
        e.samples.append(Sample(f"int8_{_n(dtype)}", lambda dtype=dtype: (
            (_g(3, 16, dtype=dtype), _g(16, dtype=dtype), _g(16, dtype=dtype),
             _scales(1, dtype=dtype), torch.tensor([2], dtype=_I8)), {})))
    e.samples += [
        Sample("int4_gamma_2d", lambda: (
            (_g(2, 3, 16, dtype=_F16), _g(1, 16, dtype=_F16), _g(1, 16, dtype=_F16),
             torch.tensor([0.2], dtype=_F16), torch.tensor([0], dtype=_I8)),
            {"dst_dtype": torch.quint4x2})),
        Sample("float8_e5m2", lambda: (
            (_g(3, 8), _g(8), _g(8), torch.tensor([0.5]), torch.tensor([1.0])),
            {"dst_dtype": 291})),
        Sample("hifloat8", lambda: (
            (_g(3, 8, dtype=_BF16), _g(8, dtype=_BF16), _g(8, dtype=_BF16),
             torch.tensor([0.01]), torch.tensor([1.0])), {"dst_dtype": 290})),
        Sample("one_dim", lambda: ((_g(16, dtype=_F16), _g(16, dtype=_F16), _g(16, dtype=_F16),
                                    torch.ones(1, dtype=_F16), torch.zeros(1, dtype=_I8)),
                                   {"epsilon": 1e-5})),
    ]
    e.errors += [
        ErrorSample("gamma_shape", lambda: ((_g(2, 16), _g(2, 16), _g(16), torch.ones(1),
                                             torch.zeros(1, dtype=_I8)), {}),
                    RuntimeError, "npu_rms_norm_quant: expected gamma shape"),
        ErrorSample("scale_shape", lambda: ((_g(2, 16), _g(16), _g(16), torch.ones(2),
                                             torch.zeros(2, dtype=_I8)), {}),
                    RuntimeError, "npu_rms_norm_quant: expected scale shape"),
        ErrorSample("int4_last_dim", lambda: ((_g(2, 12), _g(12), _g(12), torch.ones(1),
                                               torch.zeros(1, dtype=_I8)),
                                              {"dst_dtype": torch.quint4x2}),
                    RuntimeError, "npu_rms_norm_quant: expected x a last dim divisible by 8"),
        ErrorSample("offset_int16", lambda: ((_g(2, 16), _g(16), _g(16), torch.ones(1),
                                              torch.zeros(1, dtype=torch.int16)), {}),
                    TypeError, "npu_rms_norm_quant: expected offset dtype in"),
    ]


_add_rms_norm_quant()
_rms_norm_quant()


def _add_rms_norm_dynamic_quant() -> None:
    e = _entry("npu_add_rms_norm_dynamic_quant")
    for dtype in (_F16, _BF16, _F32):
        e.samples.append(Sample(f"y1_only_{_n(dtype)}", lambda dtype=dtype: (
            (_g(3, 16, dtype=dtype), _g(3, 16, dtype=dtype), _g(16, dtype=dtype)), {})))
    e.samples += [
        Sample("two_outputs_beta", lambda: (
            (_g(2, 3, 8, dtype=_F16), _g(2, 3, 8, dtype=_F16), _g(8, dtype=_F16)),
            {"smooth_scale1": _g(8, dtype=_F16), "smooth_scale2": _g(8, dtype=_F16),
             "beta": _g(8, dtype=_F16), "output_mask": [True, True]})),
        Sample("second_only", lambda: (
            (_g(4, 8, dtype=_BF16), _g(4, 8, dtype=_BF16), _g(8, dtype=_BF16)),
            {"smooth_scale2": _g(8, dtype=_BF16), "output_mask": [False, True]})),
        Sample("int4", lambda: ((_g(3, 16), _g(3, 16), _g(16)),
                                {"y_dtype": torch.quint4x2, "epsilon": 1e-5})),
        Sample("hifloat8_two_outputs", lambda: (
            (_g(2, 8, dtype=_BF16), _g(2, 8, dtype=_BF16), _g(8, dtype=_BF16)),
            {"smooth_scale1": _g(8, dtype=_BF16), "smooth_scale2": _g(8, dtype=_BF16),
             "y_dtype": 290})),
    ]
    e.errors += [
        ErrorSample("one_dim", lambda: ((_g(16), _g(16), _g(16)), {}), ValueError,
                    "npu_add_rms_norm_dynamic_quant: expected x1 a 2-D to 8-D"),
        ErrorSample("mask_all_false", lambda: ((_g(2, 16), _g(2, 16), _g(16)),
                                               {"output_mask": [False, False]}), ValueError,
                    "npu_add_rms_norm_dynamic_quant: expected output_mask at least one"),
        ErrorSample("smooth2_alone", lambda: ((_g(2, 16), _g(2, 16), _g(16)),
                                              {"smooth_scale2": _g(16)}), ValueError,
                    "npu_add_rms_norm_dynamic_quant: expected smooth_scale1 a tensor"),
        ErrorSample("gamma_shape", lambda: ((_g(2, 16), _g(2, 16), _g(8)), {}), RuntimeError,
                    "npu_add_rms_norm_dynamic_quant: expected gamma a 1-D tensor"),
    ]


_add_rms_norm_dynamic_quant()
