"""Tests for npu_quant_max against the seed-004 formula::

    y    = cast(x * scale, dst_dtype)       # float8, round half to even, saturating, NaN -> +0
    amax = max(|x|)

(the 950 kernel multiplies, hicann/ops-nn quant/quant_max/op_kernel/arch35/
quant_max_per_tensor_regbase.h).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import float8_golden, hifloat8_golden, rand, same_bits  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
FP8 = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def golden(x, scale, dst):
    """float64 product (exact for these inputs), rounded once to float32 as the kernel's
    multiply does, saturated (NaN -> +0), then round-half-even to float8."""
    prod = (x.to(torch.float64) * scale.to(torch.float64)).to(torch.float32)
    return float8_golden(prod, dst), x.to(torch.float64).abs().max()



@pytest.mark.parametrize("dst", [torch.float8_e5m2, torch.float8_e4m3fn])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 17), (2, 3, 5, 33)])
def test_matches_formula(dst, dtype, shape):
    x = rand(shape, dtype, seed=len(shape), scale=40.0)
    scale = torch.tensor([3.7], dtype=torch.float32)
    y, amax = na.npu_quant_max(x, scale, dst_dtype=dst)
    assert y.dtype == dst and y.shape == x.shape
    assert amax.dtype == dtype and amax.shape == (1,)
    want, amax64 = golden(x, scale, dst)
    assert same_bits(y, want)
    assert amax.item() == amax64.item()


def test_default_dst_is_e5m2_and_codes():
    x = rand((4, 8), torch.float16, seed=2)
    s = torch.tensor([1.0])
    assert na.npu_quant_max(x, s)[0].dtype == torch.float8_e5m2
    for code, dst in ((291, torch.float8_e5m2), (23, torch.float8_e5m2),
                      (292, torch.float8_e4m3fn), (24, torch.float8_e4m3fn)):
        assert na.npu_quant_max(x, s, dst_dtype=code)[0].dtype == dst


def test_ties_round_half_even():
    s = torch.tensor([1.0])
    x = torch.tensor([1.0625, 1.1875, -1.0625, 1.125 + 0.0625])
    y, _ = na.npu_quant_max(x, s, dst_dtype=torch.float8_e4m3fn)   # step 1/8 in [1, 2)
    assert y.float().tolist() == [1.0, 1.25, -1.0, 1.25]
    x = torch.tensor([1.125, 1.375, -1.125])
    y, _ = na.npu_quant_max(x, s, dst_dtype=torch.float8_e5m2)     # step 1/4 in [1, 2)
    assert y.float().tolist() == [1.0, 1.5, -1.0]


def test_saturation_nan_inf():
    nan = float("nan")
    x = torch.tensor([1000.0, -1e6, float("inf"), float("-inf"), nan, -nan, 2.0])
    y, amax = na.npu_quant_max(x, torch.tensor([1.0]), dst_dtype=torch.float8_e4m3fn)
    # SatMode::SAT: overflow -> +-448, NaN of either sign -> +0 (the CANN golden's nan_to_num)
    assert y.float().tolist() == [448.0, -448.0, 448.0, -448.0, 0.0, 0.0, 2.0]
    assert not y.float()[4:6].signbit().any()
    y5, _ = na.npu_quant_max(x, torch.tensor([1.0]), dst_dtype=torch.float8_e5m2)
    assert y5.float().tolist() == [1024.0, -57344.0, 57344.0, -57344.0, 0.0, 0.0, 2.0]
    assert math.isnan(amax.item())


@pytest.mark.parametrize("dst", [torch.float8_e5m2, torch.float8_e4m3fn])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inputs_match_cann_golden(dst, dtype):
    x = rand((5, 19), dtype, seed=7, scale=300.0)
    x[1, 3] = float("nan")
    x[4, 0] = -float("nan")
    x[2, 7] = float("inf")
    scale = torch.tensor([9.5], dtype=torch.float32)
    y, amax = na.npu_quant_max(x, scale, dst_dtype=dst)
    prod = (x.to(torch.float64) * scale.to(torch.float64)).to(torch.float32)
    assert same_bits(y, float8_golden(prod, dst))
    assert y.float()[1, 3] == 0 and y.float()[4, 0] == 0 and y.float()[2, 7] == FP8[dst]
    assert math.isnan(amax.item())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 17), (2, 3, 5, 33)])
def test_hifloat8_matches_golden(dtype, shape):
    # float32(x) * scale is exact in float64 and rounded once to float32, as the kernel's
    # multiply; then the CANN golden's cast (clip to 2^15, en_dtypes' round half away).
    x = rand(shape, dtype, seed=len(shape) + 10, scale=3000.0)
    scale = torch.tensor([3.7], dtype=torch.float32)
    y, amax = na.npu_quant_max(x, scale, round_mode="round", dst_dtype=290)
    assert y.dtype == torch.uint8 and y.shape == x.shape
    prod = (x.to(torch.float64) * scale.to(torch.float64)).to(torch.float32)
    assert torch.equal(y, hifloat8_golden(prod))
    assert amax.item() == x.to(torch.float64).abs().max().item()


def test_hifloat8_by_hand():
    s = torch.tensor([1.0])
    x = torch.tensor([1.0625, -14.5, 18.0, 16.0, 40960.0, float("-inf"), float("nan"), 3e-8])
    y, _ = na.npu_quant_max(x, s, round_mode="round", dst_dtype=290)
    # ties away from zero (1.125, -15, 20), saturation to +-2^15, NaN -> 0, underflow -> 0
    assert y.tolist() == [0x09, 0xAF, 0x41, 0x40, 0x6E, 0xEE, 0x00, 0x00]
    yh, _ = na.npu_quant_max(x, s, round_mode="hybrid", dst_dtype=290)
    # hybrid: |e| <= 3 as "round"; 18 (e = 4) has frac 0x2000 >= its low bits 0 -> 20, and
    # so does the exact 16 (frac 0 >= 0, CAST_HYBRID's rule)
    assert yh.tolist() == [0x09, 0xAF, 0x41, 0x41, 0x6E, 0xEE, 0x00, 0x00]


def test_hifloat8_groups_hybrid():
    x = rand((7, 9), torch.bfloat16, seed=31, scale=500.0)
    scales = torch.tensor([0.5, 2.0])
    groups = torch.tensor([3, 7])
    y, amax = na.npu_quant_max(x, scales, group_list=groups, round_mode="hybrid",
                               dst_dtype=290)
    assert amax.shape == (2,)
    for rows, sc in ((slice(0, 3), 0.5), (slice(3, 7), 2.0)):
        single, _ = na.npu_quant_max(x[rows], torch.tensor([sc]), round_mode="hybrid",
                                     dst_dtype=290)
        assert torch.equal(y[rows], single)


def test_amax_in_input_dtype():
    x = torch.tensor([[-3.25, 1.0], [2.0, 0.5]], dtype=torch.bfloat16)
    _, amax = na.npu_quant_max(x, torch.tensor([0.5]))
    assert amax.dtype == torch.bfloat16 and amax.tolist() == [3.25]


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_list(dtype):
    x = rand((7, 3, 8), dtype, seed=5, scale=10.0)
    scales = torch.tensor([0.5, 2.0, 4.0, 1.5])
    groups = torch.tensor([2, 2, 5, 7])                     # group 1 is empty
    y, amax = na.npu_quant_max(x, scales, group_list=groups, dst_dtype=torch.float8_e4m3fn)
    assert y.shape == x.shape and amax.shape == (4,) and amax.dtype == dtype
    start = 0
    for g, end in enumerate(groups.tolist()):
        part = x[start:end]
        if end > start:
            want, a = golden(part, scales[g], torch.float8_e4m3fn)
            assert same_bits(y[start:end], want)
            assert amax[g].item() == a.item()
        else:
            assert amax[g].item() == 0.0
        start = end


def test_single_group_int32_list():
    x = rand((4, 8), torch.float32, seed=6)
    y, amax = na.npu_quant_max(x, torch.tensor([3.0]),
                               group_list=torch.tensor([4], dtype=torch.int32))
    want, a = golden(x, torch.tensor([3.0]), torch.float8_e5m2)
    assert amax.shape == (1,) and same_bits(y, want) and amax.item() == a.item()


def test_non_contiguous_and_inputs_unchanged():
    x = rand((9, 6), torch.float16, seed=8).t()
    s = torch.tensor([2.0])
    xb, sb = x.clone(), s.clone()
    y, amax = na.npu_quant_max(x, s)
    assert torch.equal(x, xb) and torch.equal(s, sb)
    y2, amax2 = na.npu_quant_max(x.contiguous(), s)
    assert same_bits(y, y2) and torch.equal(amax, amax2)


@pytest.mark.parametrize("args,kwargs,exc,msg", [
    (((2, 8), [1.0, 2.0]), {}, RuntimeError, "expected scale shape"),
    (((2, 8), [1.0]), {"dst_dtype": 1}, ValueError, "expected dst_dtype one of"),
    (((2, 8), [1.0]), {"dst_dtype": 290}, ValueError, "expected round_mode 'round' or "
     "'hybrid' for hifloat8 output"),
    (((2, 8), [1.0]), {"round_mode": "hybrid"}, ValueError, "expected round_mode 'rint'"),
    (((2, 8), [1.0]), {"round_mode": "floor"}, ValueError, "expected round_mode one of"),
    (((2, 8), [1.0]), {"group_list": torch.tensor([1, 2])}, RuntimeError,
     "expected scale one entry per group"),
    (((2, 8), [1.0]), {"group_list": torch.tensor([2.0])}, TypeError,
     "expected group_list dtype"),
    (((8,), [1.0]), {"group_list": torch.tensor([8])}, ValueError, "expected x 2 or more dims"),
    (((1,) * 9, [1.0]), {}, ValueError, "expected x 1 to 8 dims"),
])
def test_bad_inputs(args, kwargs, exc, msg):
    shape, s = args
    with pytest.raises(exc, match="npu_quant_max: " + msg):
        na.npu_quant_max(torch.ones(shape), torch.tensor(s), **kwargs)


def test_bad_dtypes():
    with pytest.raises(TypeError, match="npu_quant_max: expected x dtype"):
        na.npu_quant_max(torch.ones(2, dtype=torch.float64), torch.tensor([1.0]))
    with pytest.raises(TypeError, match="npu_quant_max: expected scale dtype"):
        na.npu_quant_max(torch.ones(2), torch.tensor([1.0], dtype=torch.float16))


def test_strict_products():
    x, s = torch.ones(2, 8), torch.tensor([1.0])
    with targets.strict("950"):
        na.npu_quant_max(x, s)
    with targets.strict("A2"):
        with pytest.raises(Exception, match="npu_quant_max"):
            na.npu_quant_max(x, s)


def test_no_autograd():
    with pytest.raises(RuntimeError, match="npu_quant_max: expected inputs"):
        na.npu_quant_max(torch.ones(2, 8, requires_grad=True), torch.tensor([1.0]))


def test_compiled_provider_matches_reference(grouped=True):
    from npu_anywhere import use_providers
    from npu_anywhere.kernels import compiled
    x = rand((6, 33), torch.float16, seed=22, scale=100.0)
    kw = {"group_list": torch.tensor([2, 6])} if grouped else {}
    s = torch.tensor([3.0, 2.0]) if grouped else torch.tensor([3.0])
    with use_providers("reference"):
        ref = na.npu_quant_max(x, s, dst_dtype=torch.float8_e4m3fn, **kw)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = na.npu_quant_max(x, s, dst_dtype=torch.float8_e4m3fn, **kw)
    assert same_bits(ref[0], got[0]) and torch.equal(ref[1], got[1])
