"""npu_rms_norm_quant against float64 goldens of the formula::

    quant_in = x / sqrt(mean(x^2) + eps) * gamma + beta
    y = rint(quant_in / scale + offset), saturated ([-128, 127] int8, [-8, 7] int4), NaN -> 0

(the doc writes ``* scale``; the kernel and op-plugin's golden divide).  Random inputs are
compared with op-plugin's tolerance (|diff| <= 1: the A2 kernel rounds to float16 before
the int8 cast) and with the kernel's own steps; exact
expectations use eps=0 and rows of +-1 (rms == 1) with power-of-two scales.
"""

from __future__ import annotations

import pytest
import sys
from pathlib import Path

import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from quant_goldens import (assert_hifloat8_near, float8_golden, hifloat8_golden,  # noqa: E402
                           same_bits)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I8 = torch.int8


def make(shape, dtype=F16, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def golden(x, gamma, beta, scale, offset, eps=1e-6, lo=-128, hi=127):
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps) * gamma.double().reshape(-1) \
        + beta.double().reshape(-1)
    t = torch.round(y / scale.double() + offset.double()).clamp(lo, hi)
    return torch.nan_to_num(t, nan=0.0)


def within_one(got, want, max_mismatch=0.25):
    diff = (got.double() - want).abs()
    assert diff.max().item() <= 1
    assert (diff != 0).double().mean().item() <= max_mismatch


def pack_nibbles(v):
    """Eight int4 values per int32, element 8k+j in bits 4j..4j+3 (written independently)."""
    v = v.to(torch.int64).reshape(*v.shape[:-1], -1, 8) & 0xF
    word = sum(v[..., j] << (4 * j) for j in range(8))
    word = torch.where(word >= 2 ** 31, word - 2 ** 32, word)
    return word.to(torch.int32)


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("gamma_2d", [False, True])
def test_random_matches_golden(dtype, gamma_2d):
    x = make((6, 64), dtype, 1)
    gshape = (1, 64) if gamma_2d else (64,)
    gamma, beta = make(gshape, dtype, 2), make(gshape, dtype, 3, 0.1)
    scale = torch.tensor([0.02], dtype=dtype)
    offset = torch.tensor([-3], dtype=I8)
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, offset, 1e-6)
    assert y.dtype == I8 and y.shape == x.shape
    within_one(y, golden(x, gamma, beta, scale, offset))


def golden_a2_kernel_order(x, gamma, beta, scale, offset, eps=1e-6):
    """The A2/A3 kernel's quantization steps (ops-nn rms_norm_quant.cpp, Compute): times the
    float32 scalar 1 / scale plus the offset (float32), rounded to float16, clamped, rint."""
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps) * gamma.double().reshape(-1) \
        + beta.double().reshape(-1)
    inv = (1.0 / scale.float()).double()
    t = (y * inv + offset.double()).float().half().double()
    return torch.round(t.clamp(-128, 127))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_a2_quantizes_in_float32_then_rounds_to_float16(dtype):
    # float16 arithmetic for the scale multiply and offset add would miss ~0.5% of these.
    x = make((16, 256), dtype, 1)
    gamma, beta = make((256,), dtype, 2), make((256,), dtype, 3, 0.1)
    scale = torch.tensor([0.0123], dtype=dtype)
    offset = torch.tensor([-3], dtype=I8)
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, offset, 1e-6)
    want = golden_a2_kernel_order(x, gamma, beta, scale, offset)
    assert (y.double() - want).abs().max().item() <= 1
    assert (y.double() != want).double().mean().item() <= 1e-3


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_exact_ties_and_saturation(dtype):
    gamma = torch.tensor([1.25, 1.75, -1.25, 0.25, 63.75, -64.25, 10.0, 0.0], dtype=dtype)
    x = torch.tensor([[1.0] * 8, [-1.0] * 8], dtype=dtype)
    beta = torch.zeros(8, dtype=dtype)
    scale = torch.tensor([0.5], dtype=dtype)
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, torch.tensor([0], dtype=I8), 0.0)
    zero = torch.tensor([0], dtype=I8)
    assert torch.equal(y.double(), golden(x, gamma, beta, scale, zero, eps=0.0))
    if dtype == BF16:
        return                    # -64.25 is not a bfloat16; the lists below are float16's
    # gamma / 0.5: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0, 127.5 -> 127 (sat), -128.5 -> -128
    assert y[0].tolist() == [2, 4, -2, 0, 127, -128, 20, 0]
    assert y[1].tolist() == [-2, -4, 2, 0, -128, 127, -20, 0]
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, torch.tensor([1], dtype=I8), 0.0)
    assert y[0].tolist() == [4, 4, -2, 2, 127, -128, 21, 1]   # -127.5 -> -128 (half to even)


def test_int4_packed():
    gamma = torch.tensor([0.5, 1.0, 1.5, 2.0, -3.0, -5.0, 4.0, 0.25] * 2, dtype=F16)
    x = torch.ones(3, 16, dtype=F16)
    beta = torch.zeros(16, dtype=F16)
    y = na.npu_rms_norm_quant(x, gamma, beta, torch.tensor([0.5], dtype=F16),
                              torch.tensor([0], dtype=I8), 0.0, dst_dtype=torch.quint4x2)
    assert y.dtype == torch.int32 and y.shape == (3, 2)
    vals = torch.round(gamma.double() / 0.5).clamp(-8, 7)     # 1, 2, 3, 4, -6, -8(sat), 7(sat), 0
    assert vals[:8].tolist() == [1, 2, 3, 4, -6, -8, 7, 0]
    assert torch.equal(y, pack_nibbles(vals.expand(3, 16)))


def test_int4_needs_last_dim_divisible_by_8():
    with pytest.raises(RuntimeError, match="^npu_rms_norm_quant: expected x a last dim divisible"):
        na.npu_rms_norm_quant(make((2, 12)), make((12,)), make((12,)),
                              torch.ones(1, dtype=F16), torch.zeros(1, dtype=I8),
                              dst_dtype=torch.quint4x2)


@pytest.mark.parametrize("code,dtype,top", [(292, torch.float8_e4m3fn, 448.0),
                                            (torch.float8_e5m2, torch.float8_e5m2, 57344.0)])
def test_float8_divides_and_saturates(code, dtype, top):
    # Row 0: ones with eps 0, so quant_in = gamma exactly (and / 0.5 + 1 is exact); row 1
    # holds a NaN, which makes the whole row NaN.  SatMode::SAT: overflow -> +-top, NaN -> +0.
    nan = float("nan")
    x = torch.ones(2, 6)
    x[1, 0] = -nan
    gamma = torch.tensor([1.0, 3.0, 1000.0, -1e5, nan, -nan])
    y = na.npu_rms_norm_quant(x, gamma, torch.zeros(6), torch.tensor([0.5]), torch.tensor([1.0]),
                              0.0, dst_dtype=code)
    assert y.dtype == dtype
    want = torch.stack([gamma / 0.5 + 1, torch.full((6,), nan)])
    assert same_bits(y, float8_golden(want, dtype))
    assert y.float()[0, :4].tolist() == [3.0, 7.0, 2048.0 if top > 2048 else top, -top]
    assert y.float()[:, 4:].eq(0).all() and y.float()[1].eq(0).all()
    assert not y.float().signbit()[1].any()


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_hifloat8_exact_rows(dtype):
    # rows of ones with eps 0: rms 1, quant_in = gamma + beta exactly as the kernel's float32
    # steps; then / scale + offset and the CANN golden's cast (en_dtypes, clip to 2^15).
    x = torch.ones(3, 64, dtype=dtype)
    gamma, beta = make((64,), dtype, 11, 300.0), make((64,), dtype, 12, 30.0)
    scale, offset = torch.tensor([0.37], dtype=dtype), torch.tensor([1.5], dtype=F32)
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, offset, 0.0, dst_dtype=290)
    assert y.dtype == torch.uint8 and y.shape == x.shape
    t = (gamma.float() + beta.float()) / scale.float() + offset
    assert torch.equal(y, hifloat8_golden(t).expand(3, 64))


def test_hifloat8_random_rows():
    x = make((5, 48), BF16, 13)
    g, b = make((48,), BF16, 14), make((48,), BF16, 15, 0.1)
    s, o = torch.tensor([0.002], dtype=BF16), torch.tensor([3.0], dtype=F32)
    y = na.npu_rms_norm_quant(x, g, b, s, o, dst_dtype=290)
    xd = x.double()
    exact = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * g.double() + b.double()
    assert_hifloat8_near(y, exact / s.double() + o.double())


def test_nan_row_gives_zero_and_inputs_unchanged_noncontiguous():
    base = make((8, 6), F16, 1)
    x = base.t()                                     # (6, 8), non-contiguous
    x[2, 3] = float("nan")
    gamma, beta = make((8,), F16, 2), make((1, 8), F16, 3)
    scale, offset = torch.tensor([0.03], dtype=F16), torch.tensor([2], dtype=I8)
    before = [t.clone() for t in (x, gamma, beta, scale, offset)]
    y = na.npu_rms_norm_quant(x, gamma, beta, scale, offset)
    assert y[2].tolist() == [0] * 8
    keep = torch.tensor([i != 2 for i in range(6)])
    within_one(y[keep], golden(x[keep], gamma, beta, scale, offset))
    for a, b in zip(before, (x, gamma, beta, scale, offset)):
        assert torch.equal(a, b, ) or (torch.isnan(a) == torch.isnan(b)).all()


def test_one_dim_and_odd_size():
    x = make((37,), F16, 4)
    g, b = make((37,), F16, 5), make((37,), F16, 6, 0.1)
    s, o = torch.tensor([0.05], dtype=F16), torch.tensor([0], dtype=I8)
    y = na.npu_rms_norm_quant(x, g, b, s, o)
    within_one(y, golden(x, g, b, s, o))


def test_strict_950_divides_in_float32():
    x = make((4, 32), BF16, 7)
    g, b = make((32,), BF16, 8), make((32,), BF16, 9, 0.1)
    s, o = torch.tensor([0.015], dtype=F32), torch.tensor([3], dtype=torch.int32)
    with na.strict("950"):
        y = na.npu_rms_norm_quant(x, g, b, s, o)
    within_one(y, golden(x, g, b, s, o), max_mismatch=0.02)


def test_no_autograd():
    x = make((2, 16), F32).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_rms_norm_quant: expected inputs that do"):
        na.npu_rms_norm_quant(x, make((16,), F32), make((16,), F32), torch.ones(1),
                              torch.zeros(1, dtype=I8))


def _args(**over):
    a = dict(x=make((2, 16)), gamma=make((16,)), beta=make((16,)),
             scale=torch.ones(1, dtype=F16), offset=torch.zeros(1, dtype=I8))
    a.update(over)
    return a


@pytest.mark.parametrize("over,error,match", [
    (dict(gamma=make((2, 16))), RuntimeError, "expected gamma shape (16,) or (1, 16)"),
    (dict(gamma=make((1, 1, 16))), ValueError, "expected gamma a 1-D or 2-D"),
    (dict(beta=make((8,))), RuntimeError, "expected beta shape"),
    (dict(beta=make((16,), BF16)), TypeError, "expected beta the same dtype as x"),
    (dict(scale=torch.ones(2, dtype=F16)), RuntimeError, "expected scale shape"),
    (dict(offset=torch.zeros(1, 1, dtype=I8)), RuntimeError, "expected offset the shape"),
    (dict(offset=torch.zeros(1, dtype=torch.int16)), TypeError, "expected offset dtype in"),
    (dict(x=torch.ones(2, 16, dtype=torch.int32)), TypeError, "expected x dtype in"),
    (dict(dst_dtype=torch.int32), ValueError, "expected dst_dtype one of"),
])
def test_bad_inputs(over, error, match):
    with pytest.raises(error, match="^npu_rms_norm_quant: " + match.replace("(", r"\(")
                       .replace(")", r"\)")):
        na.npu_rms_norm_quant(**_args(**over))


def test_strict_rules():
    with na.strict("A2"):
        na.npu_rms_norm_quant(**_args())
        with pytest.raises(ValueError, match="expected dst_dtype torch.int8 or torch.quint4x2"):
            na.npu_rms_norm_quant(**_args(dst_dtype=292))
        with pytest.raises(ValueError, match="expected dst_dtype torch.int8 or torch.quint4x2"):
            na.npu_rms_norm_quant(**_args(dst_dtype=290))
        with pytest.raises(TypeError, match="expected scale dtype in"):
            na.npu_rms_norm_quant(**_args(scale=torch.ones(1)))
        with pytest.raises(TypeError, match="expected offset dtype in"):
            na.npu_rms_norm_quant(**_args(offset=torch.zeros(1, dtype=torch.int32)))
        with pytest.raises(ValueError, match="expected x a non-empty tensor"):
            na.npu_rms_norm_quant(**_args(x=make((0, 16))))
    with na.strict("310P"):
        with pytest.raises(TypeError, match="expected x dtype in"):
            na.npu_rms_norm_quant(**_args(x=make((2, 16), BF16), gamma=make((16,), BF16),
                                          beta=make((16,), BF16)))
        with pytest.raises(ValueError, match="at least 32 bytes on 310P"):
            na.npu_rms_norm_quant(**_args(x=make((2, 8)), gamma=make((8,)), beta=make((8,))))
    with na.strict("910"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_rms_norm_quant(**_args())
