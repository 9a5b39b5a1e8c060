"""Tests for npu_anywhere.ops.quant.mx (MX block quantization) against the float64 golden of
mx_goldens.py and the examples of the CANN docs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from npu_anywhere.ops.quant import mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mx_goldens import (E2M1, FP8_DTYPE, grid, mx_golden, round_to_grid,  # noqa: E402
                        shared_exponents, unpack_nibbles)

FMTS = ["float4_e2m1", "float8_e4m3fn", "float8_e5m2"]


def _codes(y, fmt):
    return unpack_nibbles(y) if fmt == "float4_e2m1" else y.view(torch.uint8).to(torch.int64)


def test_doc_example_aclnn_dynamic_mx_quant():
    # aclnnDynamicMxQuant.md: bf16 (0, 8, 64, 512), float8_e4m3fn, scale_alg 0 ->
    # y codes (0, 72, 96, 120) (0, 4, 32, 256), mxscale (128, 0) (2^1, padding)
    x = torch.tensor([[0.0, 8.0, 64.0, 512.0]], dtype=torch.bfloat16)
    for alg in (0, 1):
        y, scale = mx.quantize(x, mx.FORMATS["float8_e4m3fn"], scale_alg=alg)
        assert y.view(torch.uint8).tolist() == [[0, 72, 96, 120]]
        assert scale.dtype == torch.uint8 and scale.tolist() == [[[128, 0]]]


def _bits_of_all(dtype):
    """Every non-negative value of a 16-bit float dtype (inf and NaN included), as float32."""
    top = 0x7FFF
    return torch.arange(0, top + 1, dtype=torch.int32).to(torch.int16).view(dtype).float()


@pytest.mark.parametrize("src", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt,alg,dmax", [
    ("float8_e4m3fn", 0, 0.0), ("float8_e5m2", 0, 0.0), ("float4_e2m1", 0, 0.0),
    ("float8_e4m3fn", 1, 0.0), ("float8_e5m2", 1, 0.0),
    ("float4_e2m1", 2, 0.0), ("float4_e2m1", 2, 6.0), ("float4_e2m1", 2, 7.0),
    ("float4_e2m1", 2, 6.5), ("float4_e2m1", 2, 9.0), ("float4_e2m1", 2, 12.0)])
def test_scale_codes_every_16_bit_maximum(src, fmt, alg, dmax):
    amax = _bits_of_all(src)
    code, recip = mx.scale_codes(amax, mx.FORMATS[fmt], alg, dmax)
    want_code, want_factor = shared_exponents(amax.double().numpy(), fmt, alg, dmax)
    assert code.tolist() == want_code.tolist()
    torch.testing.assert_close(recip.double(), torch.from_numpy(want_factor), rtol=0, atol=0,
                               equal_nan=True)


def test_scale_code_edges():
    f = mx.FORMATS["float8_e4m3fn"]
    nan = float("nan")
    # 1.3125 * 2^-118 / 448 = 0.75 * 2^-126 and 1.75 * 2^-120 / 448 = 0.25 * 2^-126: subnormal
    # quotients above and below one half of the smallest normal
    amax = torch.tensor([0.0, float("inf"), nan, 2.0 ** -130, 1.5 * 2.0 ** 127, 448.0, 449.0,
                         1.3125 * 2.0 ** -118, 1.75 * 2.0 ** -120])
    code, recip = mx.scale_codes(amax, f, 0)
    assert code.tolist() == [0, 255, 255, 0, 246, 127, 127, 1, 0]
    torch.testing.assert_close(recip, torch.tensor(
        [0.0, nan, nan, 0.0, 2.0 ** -119, 1.0, 1.0, 2.0 ** 126, 0.0]), rtol=0, atol=0,
        equal_nan=True)
    code, recip = mx.scale_codes(amax, f, 1)
    assert code.tolist() == [0, 255, 255, 0, 246, 127, 128, 1, 0]
    # code 0 from a nonzero block keeps the reciprocal 2^127 (doc formula, 950 kernel)
    torch.testing.assert_close(recip, torch.tensor(
        [0.0, nan, nan, 2.0 ** 127, 2.0 ** -119, 1.0, 0.5, 2.0 ** 126, 2.0 ** 127]), rtol=0,
        atol=0, equal_nan=True)


ROUNDINGS = [("float4_e2m1", "rint"), ("float4_e2m1", "round"), ("float4_e2m1", "floor"),
             ("float8_e4m3fn", "rint"), ("float8_e5m2", "rint")]


@pytest.mark.parametrize("fmt,mode", ROUNDINGS)
def test_round_to_format_matches_table(fmt, mode):
    f = mx.FORMATS[fmt]
    values = torch.tensor(grid(fmt), dtype=torch.float64)
    mids = (values[1:] + values[:-1]) / 2
    near = torch.cat([mids, torch.nextafter(mids.float(), torch.tensor(0.0)).double(),
                      torch.nextafter(mids.float(), torch.tensor(1e9)).double()])
    g = torch.Generator().manual_seed(1)
    rnd = torch.exp2(torch.rand(3000, generator=g, dtype=torch.float64) * 40 - 25)
    beyond = torch.tensor([f.max_value * 1.0625, f.max_value * 1.1, f.max_value * 4, 1e30])
    v = torch.cat([values, near, rnd, beyond]).to(torch.float32)
    v = torch.cat([v, -v, torch.tensor([float("nan"), -0.0, 2.0 ** -140, -(2.0 ** -140)])])
    got = mx.round_to_format(v, f, mode)
    want = torch.tensor([round_to_grid(a, fmt, mode) for a in v.double().tolist()],
                        dtype=torch.float64)
    assert torch.equal(got.double(), want)
    assert torch.equal(torch.signbit(got), torch.signbit(want))        # -0 kept, NaN -> +0


def test_e2m1_codes_and_packing():
    vals = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float32)
    codes = mx.encode_e2m1(vals)
    assert codes.tolist() == list(range(16))
    assert torch.equal(mx.decode_e2m1(codes), vals)
    packed = mx.pack_fp4(codes.reshape(2, 8))
    assert packed.shape == (2, 4)
    assert packed[0, 0].item() == 0x10 and packed[1, 3].item() == 0xFE   # low nibble first
    assert torch.equal(mx.unpack_fp4(packed), codes.reshape(2, 8))


def test_e8m0_to_float():
    codes = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8)
    vals = mx.e8m0_to_float(codes)
    assert vals[:5].tolist() == [2.0 ** -127, 2.0 ** -126, 1.0, 2.0, 2.0 ** 127]
    assert math.isnan(vals[5])
    assert torch.equal(mx.e8m0_to_float(codes.view(torch.float8_e8m0fnu))[:5], vals[:5])


def _special_input(dtype, n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=g) * torch.logspace(-3, 3, n, base=2.0)
    x[0, :32] = 0                                     # all-zero block
    x[0, 32:40] = -0.0
    x[1, :32] *= 2.0 ** -126                          # tiny block: scale code 0
    x[2, 5] = float("nan")                            # NaN block
    x[3, 40 % n] = float("inf")                       # inf block
    x[4, :32] = torch.tensor([6.0, -6.0, 2.5, -2.5, 0.75, -0.25, 3.5, 5.0] * 4) * 2.0 ** 5
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fmt,mode,alg,dmax", [
    ("float8_e4m3fn", "rint", 0, 0.0), ("float8_e5m2", "rint", 0, 0.0),
    ("float8_e4m3fn", "rint", 1, 0.0), ("float8_e5m2", "rint", 1, 0.0),
    ("float4_e2m1", "rint", 0, 0.0), ("float4_e2m1", "round", 0, 0.0),
    ("float4_e2m1", "floor", 0, 0.0), ("float4_e2m1", "rint", 2, 0.0),
    ("float4_e2m1", "round", 2, 7.0), ("float4_e2m1", "floor", 2, 10.0)])
@pytest.mark.parametrize("n", [96, 70])
def test_quantize_matches_golden(dtype, fmt, mode, alg, dmax, n):
    x = _special_input(dtype, n)
    y, scale = mx.quantize(x, mx.FORMATS[fmt], round_mode=mode, scale_alg=alg,
                           dst_type_max=dmax)
    _, codes, want_scale = mx_golden(x, fmt, mode, alg, dmax)
    if fmt == "float4_e2m1":
        assert y.dtype == torch.uint8 and y.shape == (6, n // 2)
    else:
        assert y.dtype == FP8_DTYPE[fmt] and y.shape == (6, n)
    assert scale.dtype == torch.uint8 and scale.shape == (6, -(-n // 64), 2)
    assert torch.equal(scale.to(torch.int64), want_scale)
    assert torch.equal(_codes(y, fmt), codes)


def test_quantize_special_blocks_explicitly():
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    x[0, :32] = -0.0
    x[0, 32:64] = 2.0 ** -125                         # e4m3: code 0 -> zeros
    x[0, 64] = float("nan")
    x[0, 65] = 3.0
    x[0, 96:] = -1.0
    x[0, 97] = float("inf")
    y, scale = mx.quantize(x, mx.FORMATS["float8_e4m3fn"])
    assert scale.tolist() == [[[0, 0], [255, 255]]]
    bits = y.view(torch.uint8)[0]
    assert bits[:32].eq(0x80).all()                   # -0 kept
    assert bits[32:].eq(0).all()                      # zeros; NaN/inf blocks -> +0
