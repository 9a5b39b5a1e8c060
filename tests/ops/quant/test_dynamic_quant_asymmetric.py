"""Tests for npu_dynamic_quant_asymmetric against goldens written from the doc (seed 004)::

    scale  = (rowMax(x) - rowMin(x)) / (DST_MAX - DST_MIN)
    offset = DST_MAX - rowMax(x) / scale
    y      = round(x / scale + offset)

(int8: 127 / -128; int4: 7 / -8).  The "kernel order" golden reproduces the A2/A3 kernel's
float32 steps (hicann/ops-nn quant/dynamic_quant/op_kernel/dynamic_quant.h GetScaleAndOffset and
ComputAsymmetric: scale = max((mx - mn) / 255, 1e-12), offset = 127 - mx / scale,
y = rint(x * (1 / scale) + offset)) and must match bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import (assert_quantized, float8_golden, hifloat8_golden,  # noqa: E402
                           rand, same_bits, smooth_rows_golden, unpack_int4_bytes)

RANGES = {"int8": (127.0, -128.0), "int4": (7.0, -8.0)}


def doc_golden(x, smooth=None, group_index=None, fmt="int8", mode="pertoken"):
    """float64 (unrounded y, scale, offset), scale/offset keeping the reduced dim."""
    hi, lo = RANGES[fmt]
    v = smooth_rows_golden(x, smooth if mode != "perchannel" else None, group_index)
    if mode == "perchannel" and smooth is not None:
        v = v * smooth.to(torch.float64)[:, None]
    if mode == "pertensor":
        mx, mn = v.amax().reshape([1] * v.dim()), v.amin().reshape([1] * v.dim())
    else:
        dim = -2 if mode == "perchannel" else -1
        mx, mn = v.amax(dim, keepdim=True), v.amin(dim, keepdim=True)
    scale = (mx - mn) / (hi - lo)
    offset = hi - mx / scale
    return v / scale + offset, scale, offset


def kernel_order_golden(x, smooth=None):
    v = x.to(torch.float32)
    if smooth is not None:
        v = v * smooth.to(torch.float32)
    mx, mn = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
    scale = torch.maximum((mx - mn) / torch.tensor(255.0), torch.tensor(1e-12))
    offset = torch.tensor(127.0) - mx / scale
    back = torch.ones_like(scale) / scale
    y = torch.round(v * back + offset)
    return y, scale.squeeze(-1), offset.squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 9), (2, 5, 24), (50, 128)])
def test_int8_matches_doc_formula(dtype, shape):
    x = rand(shape, dtype, seed=shape[-1])
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x)
    assert y.dtype == torch.int8 and y.shape == x.shape
    assert scale.shape == offset.shape == x.shape[:-1]
    assert scale.dtype == offset.dtype == torch.float32
    exact, scale64, offset64 = doc_golden(x)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    torch.testing.assert_close(offset.double(), offset64.squeeze(-1), rtol=0, atol=1e-4)
    # offset carries the float32 error of mx / scale (~1e-5 absolute), so widen the tie window
    assert_quantized(y, exact, -128, 127, tie_window=1e-4)
    assert torch.equal(y.amax(-1), torch.full(x.shape[:-1], 127, dtype=torch.int8))
    assert torch.equal(y.amin(-1), torch.full(x.shape[:-1], -128, dtype=torch.int8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matches_kernel_order_bit_for_bit(dtype):
    x = rand((300, 64), dtype, seed=2)
    s = rand((64,), dtype, seed=3).abs() + 0.1
    for smooth in (None, s):
        y, scale, offset = na.npu_dynamic_quant_asymmetric(x, smooth_scales=smooth)
        y_k, scale_k, offset_k = kernel_order_golden(x, smooth)
        assert torch.equal(y.to(torch.float32), y_k)
        assert torch.equal(scale, scale_k) and torch.equal(offset, offset_k)


def test_exact_ties_round_half_to_even():
    # mx = 127, mn = -128: scale = 1, offset = 0, so y = rint(x)
    x = torch.tensor([[127.0, -128.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]],
                     dtype=torch.float16)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x)
    assert scale.tolist() == [1.0] and offset.tolist() == [0.0]
    assert y.tolist() == [[127, -128, 0, 2, 2, 0, -2, -2, 126]]


def test_int4_packed_ties():
    # mx = 7, mn = -8: scale 1, offset 0
    x = torch.tensor([[7.0, -8.0, 0.5, 1.5, 2.5, -2.5, -3.5, 6.5]], dtype=torch.bfloat16)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, dst_type=torch.quint4x2)
    assert y.dtype == torch.int32 and y.shape == (1, 1)
    assert scale.tolist() == [1.0] and offset.tolist() == [0.0]
    assert unpack_int4_bytes(y).tolist() == [[7, -8, 0, 2, 2, -2, -4, 6]]


def test_int4_matches_doc_formula():
    x = rand((3, 4, 32), torch.float16, seed=21)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, dst_type=285)
    exact, scale64, _ = doc_golden(x, fmt="int4")
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(unpack_int4_bytes(y), exact, -8, 7, tie_window=1e-4)


def test_constant_row_uses_the_epsilon_floor():
    x = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float16)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x)
    eps = torch.tensor(1e-12, dtype=torch.float32).item()
    assert scale.tolist() == [eps, eps]
    # float32 steps: offset = 127 - 2 / eps, y = 2 * (1 / eps) + offset (large numbers whose
    # float32 roundings cancel); the zero row gives offset 127 and y = 127.
    e32 = np.float32(1e-12)
    off = np.float32(127.0) - np.float32(2.0) / e32
    y_const = np.rint(np.float32(2.0) * (np.float32(1.0) / e32) + off)
    assert offset.tolist() == [float(off), 127.0]
    assert y.tolist() == [[int(np.clip(y_const, -128, 127))] * 4, [127] * 4]


def test_smooth_and_moe():
    x = rand((10, 16), torch.bfloat16, seed=22)
    s = rand((16,), torch.bfloat16, seed=23)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, smooth_scales=s)
    exact, scale64, _ = doc_golden(x, s)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127, tie_window=1e-4)
    s2 = rand((3, 16), torch.bfloat16, seed=24)
    gi = torch.tensor([4, 4, 10], dtype=torch.int32)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, smooth_scales=s2, group_index=gi)
    exact, scale64, _ = doc_golden(x, s2, gi)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127, tie_window=1e-4)


def test_other_modes_and_float8():
    x = rand((2, 6, 10), torch.float16, seed=25)
    for mode, shape in (("pertensor", (1,)), ("perchannel", (2, 10))):
        y, scale, offset = na.npu_dynamic_quant_asymmetric(x, quant_mode=mode)
        exact, scale64, offset64 = doc_golden(x, mode=mode)
        assert scale.shape == offset.shape == shape
        torch.testing.assert_close(scale.double().reshape(-1), scale64.reshape(-1), rtol=3e-7,
                                   atol=0)
        assert_quantized(y, exact, -128, 127, tie_window=1e-4)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, dst_type=torch.float8_e4m3fn)
    assert y.dtype == torch.float8_e4m3fn
    mx = x.double().amax(-1)
    mn = x.double().amin(-1)
    torch.testing.assert_close(scale.double(), (mx - mn) / 896.0, rtol=3e-7, atol=0)
    assert torch.all(y.float().amax(-1) == 448.0)


@pytest.mark.parametrize("dst_type_max", [0.0, 224.0])
def test_hifloat8_kernel_order(dst_type_max):
    # 950 order: scale = (mx - mn) * float32(1 / (2 * DTYPE_MAX)), offset = DTYPE_MAX - mx /
    # scale, y = cast(v / scale + offset) with the CANN golden's hifloat8 cast; DTYPE_MAX is
    # dst_type_max, 0 meaning 32768 (golden: scale_max_no_sym 65536).
    x = rand((4, 24), torch.bfloat16, seed=27, scale=30.0)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, dst_type=290,
                                                       dst_type_max=dst_type_max)
    m = dst_type_max or 32768.0
    v = x.float()
    mx, mn = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
    s = (mx - mn) * torch.tensor(1.0 / (2 * m), dtype=torch.float32)
    off = m - mx / s
    assert y.dtype == torch.uint8
    assert torch.equal(y, hifloat8_golden(v / s + off))
    assert torch.equal(scale, s.squeeze(-1)) and torch.equal(offset, off.squeeze(-1))


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_constant_and_nan_rows(dst):
    # 950 order for float8: scale = (mx - mn) * float32(1 / (2 * DTYPE_MAX)), offset =
    # DTYPE_MAX - mx / scale, y = cast(v / scale + offset), SatMode::SAT.  A constant row has
    # scale 0: v / 0 + offset is inf + (-inf) or 0 / 0 + NaN, i.e. NaN, which the saturating
    # float8 cast turns into +0 (no floor on the scale on this path); a NaN row is NaN
    # throughout, so +0 as well.
    top = 448.0 if dst == torch.float8_e4m3fn else 57344.0
    x = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0], [float("nan"), 1.0, 2.0, 3.0],
                      [-1.0, 0.0, 1.0, 3.0]], dtype=torch.float16)
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x, dst_type=dst)
    v = x.float()
    mx, mn = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
    s = (mx - mn) * torch.tensor(1.0 / (2 * top), dtype=torch.float32)
    off = top - mx / s
    assert same_bits(y, float8_golden(v / s + off, dst))
    assert y[:3].float().eq(0).all() and not y[:3].float().signbit().any()
    assert y[3, 0].float() == -top and y[3, 3].float() == top       # the row's min and max
    assert scale[:2].tolist() == [0.0, 0.0] and scale[2].isnan()


def test_inputs_untouched_and_errors():
    x = rand((4, 8), seed=26)[:, ::2]                   # non-contiguous (4, 4)
    before = x.clone()
    y, scale, offset = na.npu_dynamic_quant_asymmetric(x)
    y2, _, _ = na.npu_dynamic_quant_asymmetric(x.contiguous())
    assert torch.equal(y, y2) and torch.equal(x, before)
    with pytest.raises(ValueError, match="^npu_dynamic_quant_asymmetric: expected x a last dim "
                                         "divisible by 8"):
        na.npu_dynamic_quant_asymmetric(x, dst_type=torch.quint4x2)
    with pytest.raises(ValueError, match="^npu_dynamic_quant_asymmetric: expected x more than"):
        na.npu_dynamic_quant_asymmetric(x[0])
    with na.strict("A3"):
        with pytest.raises(ValueError, match="expected quant_mode 'pertoken' on A3"):
            na.npu_dynamic_quant_asymmetric(x, quant_mode="perchannel")
    assert torch.equal(x, before)
