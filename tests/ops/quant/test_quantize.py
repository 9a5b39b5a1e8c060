"""Tests for npu_quantize against goldens written from the doc (seed 004)::

    div_mode=True:   result = (input / scales) + zero_points
    div_mode=False:  result = (input * scales) + zero_points

rounded half to even and saturated to the output range (CANN goldens quant/quantize and
quant/ascend_quant_v2 tests/assets/golden.py: np.round then clip) on every product: the 950's
AscendQuantV3 "round" is CAST_RINT too (quant/quantize/op_kernel/arch35/quantize.h).  float8
outputs saturate and map NaN to +0 (SatMode::SAT).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import (assert_quantized, float8_golden, half_even,  # noqa: E402
                           hifloat8_golden, rand, same_bits, unpack_int4_bytes)

INF, NAN = float("inf"), float("nan")
RANGE = {torch.int8: (-128, 127), torch.uint8: (0, 255), torch.int32: (-2 ** 31, 2 ** 31 - 1)}


def golden(x, scales, zero_points, axis, div_mode):
    """float64 unrounded result; 1-D scales broadcast along ``axis`` (div_mode=False: -2 means
    the second-to-last dim, anything else the last)."""
    v = x.to(torch.float64)
    s = scales.to(torch.float64)
    zp = None if zero_points is None else zero_points.to(torch.float64)
    if s.dim() == 1 and s.numel() != 1:
        ax = (axis % x.dim()) if div_mode else (x.dim() - 2 if axis == -2 else x.dim() - 1)
        shape = [1] * x.dim()
        shape[ax] = s.numel()
        s = s.reshape(shape)
        zp = None if zp is None else zp.reshape(shape)
    r = v / s if div_mode else v * s
    return r if zp is None else r + zp


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("out,code", [(torch.int8, torch.qint8), (torch.int8, 1),
                                      (torch.uint8, torch.quint8), (torch.int32, torch.qint32),
                                      (torch.int32, 3)])
def test_div_mode_per_channel(dtype, out, code):
    x = rand((3, 5, 7), dtype, seed=1, scale=40.0)
    scales = torch.rand(5, generator=torch.Generator().manual_seed(2)) + 0.25
    zp = torch.tensor([1, -2, 3, 0, 5], dtype=torch.int32)
    if out == torch.uint8:
        zp = torch.tensor([128, 100, 0, 255, 7], dtype=torch.uint8)
    y = na.npu_quantize(x, scales, zp, code, 1, True)
    assert y.dtype == out and y.shape == x.shape
    lo, hi = RANGE[out]
    assert_quantized(y, golden(x, scales, zp, 1, True), lo, hi)


@pytest.mark.parametrize("axis", [0, 2, -1, -3])
def test_div_mode_axes_and_per_tensor(axis):
    x = rand((4, 3, 6), torch.float32, seed=axis + 10, scale=10.0)
    n = x.shape[axis]
    scales = torch.linspace(0.3, 1.7, n)
    y = na.npu_quantize(x, scales, None, torch.qint8, axis, True)
    assert_quantized(y, golden(x, scales, None, axis, True), -128, 127)
    # size-1 scales ignore axis (even an invalid one)
    y1 = na.npu_quantize(x, torch.tensor([0.5]), torch.tensor([3], dtype=torch.int8),
                         torch.qint8, 7, True)
    assert_quantized(y1, x.double() / 0.5 + 3, -128, 127)


def test_div_mode_bf16_zero_points():
    x = rand((2, 8), torch.bfloat16, seed=3, scale=20.0)
    scales = torch.full((8,), 0.5, dtype=torch.bfloat16)
    zp = torch.linspace(-3, 3, 8).to(torch.bfloat16)
    y = na.npu_quantize(x, scales, zp, torch.qint8, -1, True)
    assert_quantized(y, golden(x, scales, zp, -1, True), -128, 127)


@pytest.mark.parametrize("div_mode", [True, False])
def test_exact_ties_and_saturation(div_mode):
    x = torch.tensor([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, -128.5, 126.5, -127.5, 1e6, INF,
                       -INF, NAN, 0.0, 3.0]])
    y = na.npu_quantize(x, torch.tensor([1.0]), None, torch.qint8, -1, div_mode)
    # half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2; rint(127.5) = 128 saturates to 127;
    # rint(-128.5) = -128; inf saturates; NaN -> 0
    assert y.tolist() == [[0, 2, 2, 0, -2, -2, 127, -128, 126, -128, 127, 127, -128, 0, 0, 3]]


def test_uint8_and_int32_saturation():
    x = torch.tensor([-3.0, 255.5, 254.5, 300.0, NAN, -INF])
    assert na.npu_quantize(x, torch.tensor([1.0]), None, torch.quint8, 0, True).tolist() == \
        [0, 255, 254, 255, 0, 0]
    x = torch.tensor([3e9, -3e9, 2.5, NAN, INF])
    assert na.npu_quantize(x, torch.tensor([1.0]), None, torch.qint32, 0, True).tolist() == \
        [2 ** 31 - 1, -2 ** 31, 2, 0, 2 ** 31 - 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_mul_mode_doc_example(dtype):
    x = rand((2, 3, 12), dtype, seed=4)
    scale = torch.tensor([3.0] * 12, dtype=dtype)
    out = na.npu_quantize(x, scale, None, torch.qint8, -1, False)
    assert out.dtype == torch.int8 and out.shape == x.shape
    assert_quantized(out, golden(x, scale, None, -1, False), -128, 127)
    # axis 1 (the default) also means "the last dim" when div_mode is False
    assert torch.equal(na.npu_quantize(x, scale, None, torch.qint8, 1, False), out)


def test_mul_mode_axis_minus2_and_multidim_scales():
    x = rand((2, 5, 8), torch.float32, seed=5, scale=30.0)
    s = torch.linspace(0.5, 2.5, 5)
    zp = torch.linspace(-2.0, 2.0, 5)
    y = na.npu_quantize(x, s, zp, torch.qint8, -2, False)
    assert_quantized(y, golden(x, s, zp, -2, False), -128, 127)
    y2 = na.npu_quantize(x, s.reshape(1, 5, 1), zp.reshape(1, 5, 1), torch.qint8, -2, False)
    assert torch.equal(y, y2)


def test_mul_mode_quint4x2_packed():
    x = torch.tensor([[0.5, 1.5, 2.5, -3.5, 7.5, -8.5, 100.0, -0.5],
                      [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, -8.0]])
    y = na.npu_quantize(x, torch.tensor([1.0]), None, torch.quint4x2, -1, False)
    assert y.dtype == torch.int32 and y.shape == (2, 1)
    assert unpack_int4_bytes(y).tolist() == [[0, 2, 2, -4, 7, -8, 7, 0],
                                             [1, 2, 3, 4, 5, 6, 7, -8]]
    assert y[1].item() & 0xFFFFFFFF == 0x87654321
    x = rand((3, 4, 32), torch.float16, seed=6, scale=3.0)
    s = torch.full((32,), 1.7, dtype=torch.float16)
    y = na.npu_quantize(x, s, None, torch.quint4x2, -1, False)
    assert y.shape == (3, 4, 4)
    assert_quantized(unpack_int4_bytes(y), golden(x, s, None, -1, False), -8, 7)


@pytest.mark.parametrize("div_mode", [True, False])
def test_float8_outputs_saturate(div_mode):
    x = torch.tensor([[1000.0, -1e9, 1.0625, 3.0, INF, 100000.0, NAN, -NAN]])
    y = na.npu_quantize(x, torch.tensor([1.0]), None, torch.float8_e4m3fn, -1, div_mode)
    assert y.dtype == torch.float8_e4m3fn
    # SatMode::SAT: overflow -> the largest finite value, NaN of either sign -> +0
    assert y.float().tolist() == [[448.0, -448.0, 1.0, 3.0, 448.0, 448.0, 0.0, 0.0]]
    assert not y.float()[0, 6:].signbit().any()
    y = na.npu_quantize(x, torch.tensor([1.0]), None, 291, -1, div_mode)
    assert y.dtype == torch.float8_e5m2
    assert y.float().tolist() == [[1024.0, -57344.0, 1.0, 3.0, 57344.0, 57344.0, 0.0, 0.0]]


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("div_mode", [True, False])
def test_float8_nan_inputs_match_cann_golden(dst, div_mode):
    # float32 kernel order, then the CANN goldens' float8 cast (clip, NaN -> +0, half to even)
    x = rand((4, 9), torch.bfloat16, seed=31, scale=200.0)
    x[0, 2], x[3, 8], x[2, 0] = NAN, -NAN, -INF
    g = torch.Generator().manual_seed(32)
    s = (torch.rand(9, generator=g) * 300 + 0.5).to(torch.bfloat16)
    zp = (torch.randn(9, generator=g) * 8).to(torch.bfloat16)
    y = na.npu_quantize(x, s, zp, dst, -1, div_mode)
    t = (x.float() / s.float() if div_mode else x.float() * s.float()) + zp.float()
    assert same_bits(y, float8_golden(t, dst))
    assert y.float()[0, 2] == 0 and y.float()[3, 8] == 0 and not y.float().isnan().any()


TIE_ROW = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 4.5, -4.5, 5.5, -6.5, 0.25, 6.0, 7.5, -7.5]


@pytest.mark.parametrize("product", [None, "A2", "A3", "950"])
def test_exact_ties_half_to_even_on_every_product(product):
    """x * 1 (div_mode=False, aclnnAscendQuantV3 "round") and x / 1 (div_mode=True,
    aclnnQuantize) land exactly on .5: half to even on A2/A3 (ascend_quant_v2.h CastOut:
    CAST_RINT) and on the 950 (quantize.h: TPL_ROUND_MODE_ROUND casts with CAST_RINT), as the
    CANN and op-plugin goldens' np.round."""
    x = torch.tensor([TIE_ROW])
    exact = x.to(torch.float64)
    want8 = half_even(exact).clamp(-128, 127)
    want4 = half_even(exact).clamp(-8, 7)
    assert want8.tolist()[0][:4] == [0, 2, 2, 4]               # not half away (1, 2, 3, 4)
    one = torch.ones(1)
    with na.strict(product) if product else contextlib.nullcontext():
        y_mul = na.npu_quantize(x, one, None, torch.qint8, -1, False)
        y_div = na.npu_quantize(x, one, None, torch.qint8, -1, True)
        y_int4 = na.npu_quantize(x, one, None, torch.quint4x2, -1, False)
    assert torch.equal(y_mul.double(), want8) and torch.equal(y_div.double(), want8)
    assert torch.equal(unpack_int4_bytes(y_int4).double(), want4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("div_mode", [True, False])
def test_hifloat8_matches_golden(dtype, div_mode):
    # float32 kernel order: x / s (or x * s), + zero point, then the CANN golden's cast
    # (clip to 2^15, NaN -> 0, en_dtypes: round half away from zero).
    x = rand((3, 5, 8), dtype, seed=11, scale=300.0)
    g = torch.Generator().manual_seed(12)
    if div_mode:
        s = torch.rand(5, generator=g) + 0.05
        zp = torch.randn(5, generator=g) * 4
        y = na.npu_quantize(x, s, zp, 290, 1, True)
        t = x.float() / s.reshape(1, 5, 1) + zp.reshape(1, 5, 1)
    else:
        s = (torch.rand(8, generator=g) * 8).to(dtype)
        zp = (torch.randn(8, generator=g) * 4).to(dtype)
        y = na.npu_quantize(x, s, zp, 290, -1, False)
        t = x.float() * s.float() + zp.float()
    assert y.dtype == torch.uint8 and y.shape == x.shape
    assert torch.equal(y, hifloat8_golden(t))


@pytest.mark.parametrize("div_mode", [True, False])
def test_hifloat8_ties_and_saturation(div_mode):
    x = torch.tensor([[1.0625, -14.5, 40960.0, NAN, -INF, 2.0 ** -23, 7.75]])
    y = na.npu_quantize(x, torch.tensor([1.0]), None, 290, -1, div_mode)
    assert y.tolist() == [[0x09, 0xAF, 0x6E, 0x00, 0xEE, 0x01, 0x28]]   # 7.75 -> 8


def test_non_contiguous_inputs_untouched_alias():
    base = rand((6, 10), torch.float32, seed=7, scale=20.0)
    x = base.t()                                          # (10, 6)
    s = (torch.rand(12, generator=torch.Generator().manual_seed(8)) + 0.5)[::2]
    before = (x.clone(), s.clone())
    y = na.npu_quantize(x, s, None, torch.qint8, 1, True)
    assert y.is_contiguous()
    assert torch.equal(y, na.npu_quantize(x.contiguous(), s.contiguous(), None, torch.qint8, 1,
                                          True))
    assert torch.equal(x, before[0]) and torch.equal(s, before[1])
    assert torch.equal(na.npu_quantize(self=x, scales=s, zero_points=None, dtype=1), y)


def test_empty_input():
    y = na.npu_quantize(torch.empty(0, 4), torch.ones(4), None, torch.qint8, 1, True)
    assert y.shape == (0, 4) and y.dtype == torch.int8


@pytest.mark.parametrize("args,error,match", [
    ((torch.ones(1), None, torch.quint4x2, 1, True), ValueError, "expected dtype one of"),
    ((torch.ones(1), None, torch.qint32, -1, False), ValueError, "expected dtype one of"),
    ((torch.ones(1), None, torch.quint8, -1, False), ValueError, "expected dtype one of"),
    ((torch.ones(1), None, torch.float16, 1, True), ValueError, "expected dtype one of"),
    ((torch.ones(2, 8), None, torch.qint8, 1, True), ValueError, "expected scales a 1-D tensor"),
    ((torch.ones(8), torch.zeros(8, dtype=torch.int16), torch.qint8, 1, True), TypeError,
     "expected zero_points dtype in"),
    ((torch.ones(4), None, torch.qint8, 1, False), RuntimeError, r"expected scales shape \(1,\)"),
    ((torch.ones(1, 8, 1), None, torch.qint8, -1, False), RuntimeError, "expected scales shape"),
    ((torch.ones(8), None, torch.qint8, 3, False), ValueError, "expected axis less than"),
])
def test_bad_inputs(args, error, match):
    x = rand((3, 8), torch.float32, seed=9)
    before = x.clone()
    with pytest.raises(error, match=f"^npu_quantize: {match}"):
        na.npu_quantize(x, *args)
    assert torch.equal(x, before)


def test_strict_mode_rules():
    x = rand((3, 8), torch.float16, seed=10)
    with na.strict("310P"):
        na.npu_quantize(x.float(), torch.ones(8), None, torch.qint8, 1, True)
        with pytest.raises(TypeError, match="npu_quantize: expected input float32 or float16"):
            na.npu_quantize(x.bfloat16(), torch.ones(8), None, torch.qint8, 1, True)
        with pytest.raises(ValueError, match="expected div_mode True on 310P"):
            na.npu_quantize(x, torch.ones(8, dtype=torch.float16), None, torch.qint8, -1, False)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected dtype an integer format on A2"):
            na.npu_quantize(x, torch.ones(8), None, torch.float8_e4m3fn, 1, True)
        with pytest.raises(TypeError, match="expected scales the dtype of input"):
            na.npu_quantize(x, torch.ones(8), None, torch.qint8, -1, False)
        with pytest.raises(TypeError, match="expected input bfloat16 when scales is bfloat16"):
            na.npu_quantize(x, torch.ones(8, dtype=torch.bfloat16), None, torch.qint8, 1, True)
    with na.strict("A3"):
        with pytest.raises(ValueError, match="expected dtype an integer format on A3"):
            na.npu_quantize(x, torch.ones(8), None, 290, 1, True)
    with na.strict("950"):
        na.npu_quantize(x, torch.ones(8), None, torch.float8_e4m3fn, 1, True)
        na.npu_quantize(x, torch.ones(8), None, 290, 1, True)
