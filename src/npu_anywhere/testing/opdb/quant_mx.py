"""Op database entries of the MX / low-bit quantization ops: npu_dynamic_mx_quant and the
float8 / hifloat8 / MX modes of npu_quant_matmul (its int8 / int4 samples are in matmul.py)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32


def _dynamic_mx_quant() -> None:
    name = "npu_dynamic_mx_quant"
    e = _entry(name)
    # Few samples: opcheck of this op takes seconds each; tests/ops/quant/
    # test_dynamic_mx_quant.py covers the formats, modes and layouts (scale_alg 2 is also
    # traced through npu_kronecker_quant's and npu_rotate_quant's entries).
    e.samples += [
        Sample("float4_e2m1_axis0", lambda: ((_g(70, 3, 4, dtype=_BF16),), {"axis": 0})),
        Sample("e4m3fn_cublas_low_bound_block64", lambda: ((_g(130, 4, dtype=_F16).t(),), {
            "dst_type": torch.float8_e4m3fn, "scale_alg": 1, "block_size": 64,
            "max_low_bound": 0.5})),
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


def _fp8(*shape, dtype=torch.float8_e4m3fn):
    """float8 values carried as their uint8 bit patterns: opcheck's schema test compares
    inputs with allclose, which has no CPU kernel for the float8 dtypes (the torch float8
    inputs are covered by tests/ops/matmul/test_quant_matmul_lowbit.py)."""
    return (torch.randn(*shape) * 4).to(dtype).view(torch.uint8)


def _codes(*shape, lo=0, hi=256):
    return torch.randint(lo, hi, shape, dtype=torch.uint8)


def _quant_matmul_lowbit() -> None:
    name = "npu_quant_matmul"
    e = _entry(name)
    # Few samples (opcheck takes seconds each); hifloat8 and B-B are traced under FakeTensor in
    # tests/ops/matmul/test_quant_matmul_lowbit.py.
    e4m3 = {"x1_dtype": 292, "x2_dtype": 292}
    mx = {"scale_dtype": 293, "pertoken_scale_dtype": 293}
    e.samples += [
        Sample("fp8_per_token_bf16", lambda: ((_fp8(5, 40), _fp8(40, 7, dtype=torch.float8_e5m2),
                                               torch.rand(7)), {
            "x1_dtype": 292, "x2_dtype": 291, "pertoken_scale": torch.rand(5),
            "bias": torch.rand(7), "output_dtype": _BF16})),
        Sample("mx_fp8", lambda: ((_fp8(3, 80), _fp8(5, 80).t(),
                                   _codes(5, 2, 2, lo=120, hi=134).transpose(0, 1)), {
            **mx, **e4m3, "pertoken_scale": _codes(3, 2, 2, lo=120, hi=134), "bias": torch.rand(5),
            "output_dtype": _BF16, "group_sizes": [1, 1, 32]})),
        Sample("int8_g_b_bias", lambda: ((torch.randint(-9, 9, (3, 200), dtype=torch.int8),
                                          torch.randint(-9, 9, (200, 5), dtype=torch.int8),
                                          torch.rand(2, 1)), {
            "pertoken_scale": torch.rand(3, 2), "bias": torch.rand(5), "output_dtype": _BF16})),
        Sample("int4_k_g", lambda: ((torch.randint(-2 ** 31, 2 ** 31 - 1, (2, 128),
                                                   dtype=torch.int32),
                                     torch.randint(-2 ** 31, 2 ** 31 - 1, (256, 128),
                                                   dtype=torch.int32).t(),
                                     torch.rand(4, 256) * 0.01), {
            "offset": torch.randn(4, 256).half(), "pertoken_scale": torch.rand(2, 1),
            "output_dtype": _BF16, "group_sizes": [1, 1, 256]})),
        Sample("mx_fp4", lambda: ((_codes(3, 32), _codes(4, 32).t(),
                                   _codes(4, 1, 2, lo=124, hi=130).transpose(0, 1)), {
            **mx, "x1_dtype": 296, "x2_dtype": 296,
            "pertoken_scale": _codes(3, 1, 2, lo=124, hi=130), "output_dtype": _F32})),
    ]
    e.errors += [
        ErrorSample("fp8_int8_out", lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)), e4m3),
                    ValueError, f"{name}: expected output_dtype torch.float16, torch.bfloat16 "
                    "or torch.float32 for float8"),
        ErrorSample("mx_scale_shape", lambda: ((_fp8(3, 64), _fp8(64, 4), _codes(2, 4, 2)), {
            **mx, **e4m3, "pertoken_scale": _codes(3, 1, 2), "output_dtype": _BF16}), ValueError,
            f"{name}: expected scale \\(1, 4, 2\\)"),
        ErrorSample("per_block_bias", lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 1)), {
            **e4m3, "pertoken_scale": torch.rand(3, 2), "bias": torch.rand(4),
            "output_dtype": _BF16}), ValueError, f"{name}: expected bias None in the G-B"),
    ]


_dynamic_mx_quant()
_quant_matmul_lowbit()
