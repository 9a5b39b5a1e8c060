"""Op database entries of the quantization family, continued: npu_dynamic_block_quant,
npu_quant_max, npu_kronecker_quant, npu_rotate_quant, npu_ifmr."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32
_DTYPES = (_F16, _BF16, _F32)


def _tag(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _block_quant() -> None:
    name = "npu_dynamic_block_quant"
    e = _entry(name)
    for dtype in _DTYPES:
        e.samples.append(Sample(f"int8_{_tag(dtype)}", lambda dtype=dtype: (
            (_g(3, 130, dtype=dtype),), {})))
    e.samples += [
        Sample("3d_blocks_e4m3fn", lambda: ((_g(2, 65, 70, dtype=_BF16),), {
            "dst_type": torch.float8_e4m3fn, "row_block_size": 64, "col_block_size": 64})),
        Sample("e5m2_npu_code", lambda: ((_g(5, 200),), {"dst_type": 291,
                                                         "col_block_size": 192})),
        Sample("min_scale", lambda: ((_g(4, 128),), {"min_scale": 50.0})),
        Sample("non_contiguous", lambda: ((_g(130, 3).t(),), {"col_block_size": 64})),
        Sample("hifloat8", lambda: ((_g(2, 65, 70, dtype=_BF16),), {
            "dst_type": 290, "round_mode": "round", "row_block_size": 64,
            "col_block_size": 64})),
        Sample("hifloat8_max_224", lambda: ((_g(3, 130, dtype=_F16),), {
            "dst_type": 290, "round_mode": "round", "dst_type_max": 224.0})),
    ]
    e.errors += [
        ErrorSample("one_dim", lambda: ((_g(8),), {}), ValueError, f"{name}: expected x 2 or 3"),
        ErrorSample("float64", lambda: ((_g(2, 8, dtype=torch.float64),), {}), TypeError,
                    f"{name}: expected x dtype in"),
        ErrorSample("hifloat8_rint", lambda: ((_g(2, 8),), {"dst_type": 290}), ValueError,
                    f"{name}: expected round_mode 'round' for hifloat8"),
        ErrorSample("dst_type_max_int8", lambda: ((_g(2, 8),), {"dst_type_max": 15.0}),
                    ValueError, f"{name}: expected dst_type_max 0 for int8"),
        ErrorSample("bad_dst", lambda: ((_g(2, 8),), {"dst_type": 3}), ValueError,
                    f"{name}: expected dst_type one of"),
        ErrorSample("round_int8", lambda: ((_g(2, 8),), {"round_mode": "round"}), ValueError,
                    f"{name}: expected round_mode 'rint'"),
        ErrorSample("col_block", lambda: ((_g(2, 8),), {"col_block_size": 100}), ValueError,
                    f"{name}: expected col_block_size one of"),
        ErrorSample("min_scale", lambda: ((_g(2, 8),), {"min_scale": -1.0}), ValueError,
                    f"{name}: expected min_scale a value >= 0"),
        ErrorSample("min_scale_tiny", lambda: ((_g(2, 8),), {"min_scale": 1e-300}), ValueError,
                    f"{name}: expected min_scale 0, or a value whose float32"),
    ]


def _quant_max() -> None:
    name = "npu_quant_max"
    e = _entry(name)
    for dtype in _DTYPES:
        e.samples.append(Sample(f"e5m2_{_tag(dtype)}", lambda dtype=dtype: (
            (_g(3, 17, dtype=dtype), torch.tensor([0.5])), {})))
    e.samples += [
        Sample("e4m3fn", lambda: ((_g(2, 3, 8), torch.tensor([2.0])),
                                  {"dst_dtype": torch.float8_e4m3fn})),
        Sample("groups", lambda: ((_g(6, 8, dtype=_BF16), torch.tensor([0.5, 1.0, 2.0])),
                                  {"group_list": torch.tensor([2, 2, 6])})),
        Sample("one_group", lambda: ((_g(4, 8), torch.tensor([3.0])),
                                     {"group_list": torch.tensor([4], dtype=torch.int32)})),
        Sample("non_contiguous", lambda: ((_g(8, 6).t(), torch.tensor([1.0])), {})),
        Sample("hifloat8_round", lambda: ((_g(3, 17, dtype=_F16) * 1000, torch.tensor([0.5])),
                                          {"dst_dtype": 290, "round_mode": "round"})),
        Sample("hifloat8_hybrid_groups", lambda: (
            (_g(6, 8, dtype=_BF16), torch.tensor([0.5, 4.0])),
            {"dst_dtype": 290, "round_mode": "hybrid", "group_list": torch.tensor([2, 6])})),
    ]
    e.errors += [
        ErrorSample("scale_dtype", lambda: ((_g(2, 8), torch.tensor([1.0], dtype=_F16)), {}),
                    TypeError, f"{name}: expected scale dtype in"),
        ErrorSample("scale_shape", lambda: ((_g(2, 8), torch.tensor([1.0, 2.0])), {}),
                    RuntimeError, f"{name}: expected scale shape"),
        ErrorSample("int8_dst", lambda: ((_g(2, 8), torch.tensor([1.0])), {"dst_dtype": 1}),
                    ValueError, f"{name}: expected dst_dtype one of"),
        ErrorSample("hifloat8_rint", lambda: ((_g(2, 8), torch.tensor([1.0])),
                                              {"dst_dtype": 290}),
                    ValueError, f"{name}: expected round_mode 'round' or 'hybrid'"),
        ErrorSample("round_fp8", lambda: ((_g(2, 8), torch.tensor([1.0])),
                                          {"round_mode": "round"}),
                    ValueError, f"{name}: expected round_mode 'rint'"),
        ErrorSample("group_scale", lambda: ((_g(6, 8), torch.tensor([1.0])),
                                            {"group_list": torch.tensor([2, 6])}),
                    RuntimeError, f"{name}: expected scale one entry per group"),
    ]


def _kron(k, m, n, dtype=_F16):
    return ((_g(k, m, n, dtype=dtype), _g(m, m, dtype=dtype), _g(n, n, dtype=dtype)), {})


def _kronecker_quant() -> None:
    name = "npu_kronecker_quant"
    e = _entry(name)
    for dtype in _DTYPES:
        e.samples.append(Sample(f"int4_{_tag(dtype)}", lambda dtype=dtype: _kron(3, 5, 16,
                                                                                 dtype)))
    e.samples += [
        Sample("clip_int32_code", lambda: (_kron(2, 3, 8)[0], {"clip_ratio": 0.75,
                                                               "dst_dtype": torch.int32})),
        Sample("int4_code", lambda: (_kron(1, 1, 8)[0], {"dst_dtype": 285,
                                                         "dst_type_max": 0.0})),
    ]
    for dtype in _DTYPES:
        e.samples.append(Sample(f"float4_{_tag(dtype)}", lambda dtype=dtype: (
            _kron(3, 5, 22, dtype)[0], {"dst_dtype": 296})))
    e.samples += [
        Sample("float4_max_6", lambda: (_kron(2, 4, 16, _BF16)[0], {"dst_dtype": 296,
                                                                    "dst_type_max": 6.0})),
        Sample("float4_max_9_5", lambda: (_kron(2, 3, 8)[0], {"dst_dtype": 296,
                                                              "dst_type_max": 9.5})),
        Sample("float4_no_p2", lambda: ((_g(2, 3, 10, dtype=_F16), _g(3, 3, dtype=_F16),
                                         torch.empty(0, 0, dtype=_F16)), {"dst_dtype": 296})),
    ]
    e.errors += [
        ErrorSample("n_not_8", lambda: _kron(2, 3, 12), ValueError,
                    f"{name}: expected x a last dim"),
        ErrorSample("two_dims", lambda: ((_g(3, 8, dtype=_F16), _g(3, 3, dtype=_F16),
                                          _g(8, 8, dtype=_F16)), {}), ValueError,
                    f"{name}: expected x a 3-D tensor"),
        ErrorSample("p1_dtype", lambda: ((_g(2, 3, 8, dtype=_F16), _g(3, 3, dtype=_BF16),
                                          _g(8, 8, dtype=_F16)), {}), TypeError,
                    f"{name}: expected kronecker_p1 the dtype of x"),
        ErrorSample("p2_shape", lambda: ((_g(2, 3, 8, dtype=_F16), _g(3, 3, dtype=_F16),
                                          _g(8, 4, dtype=_F16)), {}), RuntimeError,
                    f"{name}: expected kronecker_p2 shape"),
        ErrorSample("clip", lambda: (_kron(2, 3, 8)[0], {"clip_ratio": 1.5}), ValueError,
                    f"{name}: expected clip_ratio a value in"),
        ErrorSample("clip_tiny", lambda: (_kron(2, 3, 8)[0], {"clip_ratio": 1e-300}), ValueError,
                    f"{name}: expected clip_ratio a value whose float32"),
        ErrorSample("float4_odd_n", lambda: (_kron(2, 3, 7)[0], {"dst_dtype": 296}),
                    ValueError, f"{name}: expected x an even last dim"),
        ErrorSample("float4_dst_type_max", lambda: (_kron(2, 3, 8)[0], {
            "dst_dtype": 296, "dst_type_max": 13.0}), ValueError,
            f"{name}: expected dst_type_max 0 or a value in"),
        ErrorSample("int4_empty_p2", lambda: ((_g(2, 3, 8, dtype=_F16), _g(3, 3, dtype=_F16),
                                               torch.empty(0, 0, dtype=_F16)), {}),
                    RuntimeError, f"{name}: expected kronecker_p2 shape"),
        ErrorSample("dst_type_max", lambda: (_kron(2, 3, 8)[0], {"dst_type_max": 6.0}),
                    ValueError, f"{name}: expected dst_type_max 0"),
    ]


def _rot(m, n, k, dtype=_BF16):
    return (_g(m, n, dtype=dtype), _g(k, k, dtype=dtype))


def _rotate_quant() -> None:
    name = "npu_rotate_quant"
    e = _entry(name)
    for dtype in _DTYPES:
        e.samples.append(Sample(f"int8_{_tag(dtype)}", lambda dtype=dtype: (
            _rot(3, 128, 16, dtype), {})))
    e.samples += [
        Sample("int4", lambda: (_rot(2, 128, 32), {"dst_dtype": torch.quint4x2})),
        Sample("int4_code_floor", lambda: (_rot(2, 256, 64), {"dst_dtype": 285,
                                                              "round_mode": "floor"})),
        Sample("round_axis1", lambda: (_rot(5, 136, 17), {"round_mode": "round", "axis": 1})),
        Sample("non_contiguous", lambda: ((_g(128, 3, dtype=_F16).t(), _g(16, 16, dtype=_F16)),
                                          {})),
        # the Ascend 950's MX outputs
        Sample("mxfp4", lambda: (_rot(3, 128, 32), {"dst_dtype": 296})),
        Sample("mxfp4_1d_round", lambda: ((_g(64, dtype=_BF16), _g(32, 32, dtype=_BF16)),
                                          {"dst_dtype": 296, "round_mode": "round"})),
        Sample("mxfp4_alpha_floor_alg2", lambda: (_rot(2, 96, 32), {
            "dst_dtype": 296, "alpha": torch.tensor([0.5]), "round_mode": "floor",
            "scale_alg": 2, "dst_type_max": 9.0})),
        Sample("mxfp8_e4m3fn_3d_rotation", lambda: (
            (_g(2, 3, 256, dtype=_F16), _g(4, 64, 64, dtype=_F16)),
            {"dst_dtype": torch.float8_e4m3fn, "axis": 2})),
        Sample("mxfp8_e5m2_code_alg1", lambda: (_rot(4, 384, 128), {"dst_dtype": 291,
                                                                    "scale_alg": 1})),
        Sample("mxfp8_non_contiguous", lambda: (
            (_g(128, 3, dtype=_F16).t(), _g(32, 32, dtype=_F16).t()), {"dst_dtype": 23})),
    ]
    e.errors += [
        ErrorSample("mx_k16", lambda: (_rot(2, 128, 16), {"dst_dtype": 296}), ValueError,
                    f"{name}: expected rotation K in .32, 64, 128. for MX output"),
        ErrorSample("mx_fp8_round", lambda: (_rot(2, 128, 32), {
            "dst_dtype": torch.float8_e5m2, "round_mode": "round"}), ValueError,
            f"{name}: expected round_mode 'rint' for float8 output"),
        ErrorSample("mxfp4_scale_alg1", lambda: (_rot(2, 128, 32), {"dst_dtype": 296,
                                                                    "scale_alg": 1}),
                    ValueError, f"{name}: expected scale_alg one of .0, 2. for float4"),
        ErrorSample("mx_dst_type_max", lambda: (_rot(2, 128, 32), {
            "dst_dtype": torch.float8_e4m3fn, "dst_type_max": 6.0}), ValueError,
            f"{name}: expected dst_type_max 0.0 unless scale_alg is 2"),
        ErrorSample("mx_rotation_blocks", lambda: (
            (_g(2, 128, dtype=_BF16), _g(3, 32, 32, dtype=_BF16)), {"dst_dtype": 296}),
            RuntimeError, f"{name}: expected rotation N / K = 4 matrices"),
        ErrorSample("fp4_e1m2", lambda: (_rot(2, 128, 32), {"dst_dtype": 297}),
                    ValueError, f"{name}: expected dst_dtype one of"),
        ErrorSample("n_not_k", lambda: (_rot(2, 128, 48), {}), RuntimeError,
                    f"{name}: expected x a last dim in"),
        ErrorSample("k_small", lambda: (_rot(2, 128, 8), {}), ValueError,
                    f"{name}: expected rotation K in"),
        ErrorSample("rot_dtype", lambda: ((_g(2, 128, dtype=_BF16), _g(16, 16, dtype=_F16)),
                                          {}), TypeError,
                    f"{name}: expected rotation the dtype of x"),
        ErrorSample("axis", lambda: (_rot(2, 128, 16), {"axis": 0}), ValueError,
                    f"{name}: expected axis -1 or 1"),
        ErrorSample("round_mode", lambda: (_rot(2, 128, 16), {"round_mode": "ceil"}),
                    ValueError, f"{name}: expected round_mode one of"),
        ErrorSample("transpose_y", lambda: (_rot(2, 128, 16), {"transpose_y": True}),
                    ValueError, f"{name}: expected transpose_y False"),
    ]


def _ifmr_args(n=24, dtype=_F32, with_offset=False, bins=16):
    data = _g(n, dtype=dtype)
    lo, hi = data.min().reshape(1), data.max().reshape(1)
    hist = torch.histc(data.float(), bins=bins, min=float(lo), max=float(hi))
    cumsum = torch.cumsum(hist, 0).to(torch.int32)
    return (data, lo, hi, cumsum, 0.999999, 0.999999, 0.7, 1.3, 0.01, with_offset), {}


def _ifmr() -> None:
    name = "npu_ifmr"
    e = _entry(name)
    e.samples += [
        Sample("symmetric", lambda: _ifmr_args()),
        Sample("with_offset", lambda: _ifmr_args(with_offset=True)),
        Sample("float16", lambda: _ifmr_args(dtype=_F16, bins=8)),
    ]

    def _bad(i, value):
        def make():
            args, kw = _ifmr_args()
            args = list(args)
            args[i] = value
            return tuple(args), kw
        return make

    e.errors += [
        ErrorSample("cumsum_dtype", _bad(3, torch.ones(4)), TypeError,
                    f"{name}: expected cumsum dtype in"),
        ErrorSample("min_shape", _bad(1, torch.zeros(2)), RuntimeError,
                    f"{name}: expected data_min a single value"),
        ErrorSample("percentile", _bad(5, 1.5), ValueError,
                    f"{name}: expected max_percentile a value in"),
        ErrorSample("step", _bad(8, 0.0), ValueError,
                    f"{name}: expected search_step a positive value"),
        ErrorSample("range", _bad(6, 2.0), ValueError,
                    f"{name}: expected search_start a value in"),
    ]


_block_quant()
_quant_max()
_kronecker_quant()
_rotate_quant()
_ifmr()
