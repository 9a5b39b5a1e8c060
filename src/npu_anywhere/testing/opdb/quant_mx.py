"""Op database entries of the MX / low-bit quantization ops: npu_dynamic_mx_quant and the
float8 / hifloat8 / MX modes of npu_quant_matmul."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32


def _dynamic_mx_quant() -> None:
    name = "npu_dynamic_mx_quant"
    e = _entry(name)
    e.samples += [
        Sample("float4_e2m1_default", lambda: ((_g(3, 70, dtype=_BF16),), {})),
        Sample("float4_e1m2_floor", lambda: ((_g(2, 64, dtype=_F16),), {
            "dst_type": 297, "round_mode": "floor"})),
        Sample("e4m3fn_axis0", lambda: ((_g(70, 6, dtype=_BF16),), {
            "axis": 0, "dst_type": torch.float8_e4m3fn})),
        Sample("e5m2_cublas_low_bound", lambda: ((_g(2, 3, 96, dtype=_F16),), {
            "dst_type": 291, "scale_alg": 1, "max_low_bound": 0.5})),
        Sample("e2m1_scale_alg2_axis1_f32", lambda: ((_g(2, 40, 4, dtype=_F32),), {
            "axis": 1, "scale_alg": 2, "dst_type_max": 7.0})),
        Sample("block_64_non_contiguous", lambda: ((_g(130, 4, dtype=_BF16).t(),), {
            "dst_type": 292, "block_size": 64})),
    ]
    e.errors += [
        ErrorSample("bad_dst", lambda: ((_g(2, 64, dtype=_BF16),), {"dst_type": 1}),
                    ValueError, f"{name}: expected dst_type one of"),
        ErrorSample("fp8_floor", lambda: ((_g(2, 64, dtype=_BF16),), {
            "dst_type": 292, "round_mode": "floor"}), ValueError,
            f"{name}: expected round_mode 'rint' for float8_e4m3fn"),
        ErrorSample("block_size", lambda: ((_g(2, 64, dtype=_BF16),), {"block_size": 40}),
                    ValueError, f"{name}: expected block_size a positive multiple of 32"),
        ErrorSample("fp4_odd_last", lambda: ((_g(64, 3, dtype=_BF16),), {"axis": 0}),
                    ValueError, f"{name}: expected input an even last dim"),
        ErrorSample("axis", lambda: ((_g(2, 64, dtype=_BF16),), {"axis": 2}), IndexError,
                    f"{name}: expected axis in"),
        ErrorSample("low_bound_alg0", lambda: ((_g(2, 64, dtype=_BF16),), {
            "max_low_bound": 1.0}), ValueError, f"{name}: expected max_low_bound 0.0"),
    ]


_dynamic_mx_quant()
