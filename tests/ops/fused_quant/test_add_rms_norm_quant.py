"""npu_add_rms_norm_quant against float64 goldens of the doc formula::

    x = x1 + x2;  y = x / sqrt(mean(x^2) + eps) * gamma + beta
    y1 = rint(y / scales1 + zero_points1)  (div_mode=False: y * scales1), saturated to int8

Rounding half to even (CAST_RINT), saturation at the int8 range, NaN -> 0.  The precision
order of the A2 kernel (float16 intermediates) moves values by a fraction of an lsb, so random
inputs are compared with op-plugin's tolerance (|diff| <= 1); exact expectations use inputs whose
intermediates are exact (eps=0 and rows of +-1: rstd == 1, y == +-gamma).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from quant_goldens import (assert_hifloat8_near, float8_golden, hifloat8_golden,  # noqa: E402
                           same_bits)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def golden(x1, x2, gamma, scales, zp=None, beta=None, eps=1e-6, div_mode=True):
    """float64, from the doc formula; rint then clamp, NaN -> 0."""
    x = x1.double() + x2.double()
    k = gamma.dim()
    dims = tuple(range(x.dim() - k, x.dim()))
    y = x / torch.sqrt((x * x).mean(dims, keepdim=True) + eps) * gamma.double()
    if beta is not None:
        y = y + beta.double()
    t = y / scales.double() if div_mode else y * scales.double()
    if zp is not None:
        t = t + zp.double()
    t = torch.round(t).clamp(-128, 127)
    return torch.nan_to_num(t, nan=0.0).to(torch.int8), x.to(x1.dtype)


def within_one(got, want, max_mismatch=0.25):
    diff = (got.to(torch.int32) - want.to(torch.int32)).abs()
    assert diff.max().item() <= 1
    assert (diff != 0).double().mean().item() <= max_mismatch


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("with_beta", [False, True])
def test_random_matches_golden(dtype, with_beta):
    x1, x2 = make((5, 48), dtype, 1), make((5, 48), dtype, 2)
    gamma = make((48,), dtype, 3)
    beta = make((48,), dtype, 4) if with_beta else None
    scales1 = (torch.rand(48, generator=torch.Generator().manual_seed(5)) * 0.02 + 0.01)
    zp1 = torch.randint(-5, 6, (48,), dtype=torch.int32)
    y1, y2, x = na.npu_add_rms_norm_quant(x1, x2, gamma, scales1, zp1, beta)
    want, want_x = golden(x1, x2, gamma, scales1, zp1, beta)
    assert y1.dtype == y2.dtype == torch.int8 and x.dtype == dtype
    assert y1.shape == y2.shape == x.shape == (5, 48)
    within_one(y1, want)
    assert torch.equal(x, want_x)
    assert torch.equal(y2, torch.zeros_like(y2))   # no scales2: y2 not computed


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_exact_ties_and_saturation(dtype):
    # eps = 0 and rows of +-1 give rstd == 1 and y == +-gamma exactly (x2 = 0).
    gamma = torch.tensor([2.5, 3.5, -2.5, 0.5, 1.5, 127.5, -128.5, 126.0], dtype=dtype)
    x1 = torch.tensor([[1.0] * 8, [-1.0] * 8], dtype=dtype)
    x2 = torch.zeros_like(x1)
    scales1 = torch.ones(8)
    y1, _, _ = na.npu_add_rms_norm_quant(x1, x2, gamma, scales1, None, epsilon=0.0)
    # bfloat16 cannot hold 127.5 / -128.5 / 126 the same way; use their bf16 values.
    g = gamma.double()
    want = torch.round(torch.stack([g, -g])).clamp(-128, 127).to(torch.int8)
    assert torch.equal(y1, want)
    if dtype != BF16:
        assert y1[0].tolist() == [2, 4, -2, 0, 2, 127, -128, 126]
        assert y1[1].tolist() == [-2, -4, 2, 0, -2, -128, 127, -126]


def test_zero_points_and_mul_mode_and_second_output():
    gamma = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F16)
    x1 = torch.ones(3, 4, dtype=F16)
    x2 = torch.zeros(3, 4, dtype=F16)
    s1 = torch.tensor([0.5, 4.0, 2.0, 0.125])
    zp1 = torch.tensor([1, -1, 0, 3], dtype=torch.int32)
    s2 = torch.tensor([1.0, 0.25, 2.0, 8.0])
    zp2 = torch.tensor([0, 0, 1, -2], dtype=torch.int32)
    y1, y2, _ = na.npu_add_rms_norm_quant(x1, x2, gamma, s1, zp1, None, s2, zp2, epsilon=0.0,
                                          div_mode=False)
    assert y1[0].tolist() == [2, 7, 6, 4]          # 0.5+1, 8-1, 6, 0.5+3 -> 1.5->2, 3.5->4
    assert y2[0].tolist() == [1, 0, 7, 30]         # 1, 0.5->0, 6+1, 32-2
    y1d, y2d, _ = na.npu_add_rms_norm_quant(x1, x2, gamma, s1, zp1, None, s2, zp2,
                                            epsilon=0.0)
    assert y1d[0].tolist() == [3, 0, 2, 35]        # 2+1, 0.5-1 = -0.5 -> 0, 1.5 -> 2, 32+3
    assert y2d[0].tolist() == [1, 8, 2, -2]        # 1, 8, 1.5+1 = 2.5 -> 2, 0.5-2 -> -2


def test_bfloat16_zero_points_and_scales():
    gamma = torch.tensor([1.0, -3.0], dtype=BF16)
    x1 = torch.ones(1, 2, dtype=BF16)
    s1 = torch.tensor([0.5, 2.0], dtype=BF16)
    zp1 = torch.tensor([0.5, 0.0], dtype=BF16)
    y1, _, _ = na.npu_add_rms_norm_quant(x1, torch.zeros_like(x1), gamma, s1, zp1, epsilon=0.0)
    assert y1.tolist() == [[2, -2]]                # 2 + 0.5 = 2.5 -> 2; -1.5 -> -2


def test_nan_inf_and_zero_scale():
    x1 = torch.tensor([[1.0, float("nan"), 1.0, 1.0], [1.0, -1.0, 1.0, -1.0]])
    gamma = torch.ones(4)
    s = torch.tensor([1.0, 1.0, 0.0, 0.0])
    y1, _, x = na.npu_add_rms_norm_quant(x1, torch.zeros_like(x1), gamma, s, None, epsilon=0.0)
    assert y1[0].tolist() == [0, 0, 0, 0]          # NaN row -> NaN -> 0
    assert y1[1].tolist() == [1, -1, 127, -128]    # +-1 / 0 = +-inf saturates
    assert torch.isnan(x[0, 1])


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_odd_sizes_one_row_gamma_2d_noncontiguous(dtype):
    base1 = make((3, 7, 10), dtype, 1)
    x1 = base1.transpose(1, 2)[:, :, :5]               # (3, 10, 5), non-contiguous
    x2 = make((3, 5, 10), dtype, 2).transpose(1, 2)
    gamma = make((10, 5), dtype, 3)
    scales1 = torch.rand(10, 5, generator=torch.Generator().manual_seed(4)) * 0.02 + 0.01
    before = [t.clone() for t in (x1, x2, gamma, scales1)]
    y1, _, x = na.npu_add_rms_norm_quant(x1, x2, gamma, scales1, None)
    want, want_x = golden(x1, x2, gamma, scales1)
    within_one(y1, want)
    assert torch.equal(x, want_x)
    for a, b in zip(before, (x1, x2, gamma, scales1)):
        assert torch.equal(a, b)
    one = make((1, 33), dtype, 5)
    g = make((33,), dtype, 6)
    s = torch.full((33,), 0.02)
    y1, _, _ = na.npu_add_rms_norm_quant(one, one, g, s, None)
    within_one(y1, golden(one, one, g, s)[0])


def test_strict_950_single_rounding():
    x1, x2 = make((4, 64), F16, 1), make((4, 64), F16, 2)
    gamma = make((64,), F16, 3)
    s = torch.full((64,), 0.01)
    with na.strict("950"):
        y1, _, _ = na.npu_add_rms_norm_quant(x1, x2, gamma, s, None)
    within_one(y1, golden(x1, x2, gamma, s)[0], max_mismatch=0.02)


@pytest.mark.parametrize("code,dtype,top", [(292, torch.float8_e4m3fn, 448.0),
                                            (291, torch.float8_e5m2, 57344.0)])
def test_float8_outputs_saturate(code, dtype, top):
    # Row 0: ones with eps 0 (rms 1), so y = gamma exactly; row 1 holds a NaN, which makes the
    # whole row NaN.  castTraitFp322Fp8 is SatMode::SAT: overflow -> +-top, NaN -> +0.
    nan = float("nan")
    gamma = torch.tensor([1.0, 3.0, 1000.0, -1e5, nan, -nan])
    x1 = torch.ones(2, 6)
    x1[1, 2] = nan
    y1, y2, x = na.npu_add_rms_norm_quant(x1, torch.zeros_like(x1), gamma, torch.ones(6), None,
                                          epsilon=0.0, dst_type=code)
    assert y1.dtype == dtype
    want = torch.stack([gamma, torch.full((6,), nan)])
    assert same_bits(y1, float8_golden(want, dtype))
    assert y1.float()[0, :4].tolist() == [1.0, 3.0, 1024.0 if top > 1024 else top, -top]
    assert y1.float()[:, 4:].eq(0).all() and y1.float()[1].eq(0).all()
    assert not y1.float().signbit()[1].any() and x[1, 2].isnan()


@pytest.mark.parametrize("div_mode", [True, False])
def test_hifloat8_exact_rows(div_mode):
    # x1 + x2 = 1 everywhere and eps 0: rms 1, y = gamma + beta exactly as the kernel's float32
    # steps; then / (or *) scales + zero points and the CANN golden's cast (en_dtypes).
    x1 = torch.ones(2, 32)
    gamma, beta = make((32,), F32, 21, 200.0), make((32,), F32, 22, 20.0)
    s1, s2 = torch.rand(32) + 0.05, torch.rand(32) * 4
    zp1 = torch.randint(-8, 8, (32,), dtype=torch.int32)
    y1, y2, x = na.npu_add_rms_norm_quant(x1, torch.zeros_like(x1), gamma, s1, zp1, beta, s2,
                                          epsilon=0.0, div_mode=div_mode, dst_type=290)
    assert y1.dtype == y2.dtype == torch.uint8 and torch.equal(x, x1)
    y = gamma + beta
    t1 = (y / s1 if div_mode else y * s1) + zp1.float()
    t2 = y / s2 if div_mode else y * s2
    assert torch.equal(y1, hifloat8_golden(t1).expand(2, 32))
    assert torch.equal(y2, hifloat8_golden(t2).expand(2, 32))


def test_hifloat8_random_950():
    x1, x2 = make((4, 64), BF16, 23), make((4, 64), BF16, 24)
    gamma = make((64,), BF16, 25)
    s = torch.full((64,), 0.003)
    with na.strict("950"):
        y1, _, _ = na.npu_add_rms_norm_quant(x1, x2, gamma, s, None, dst_type=290)
    x = x1.double() + x2.double()
    exact = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * gamma.double() / 0.003
    assert_hifloat8_near(y1, exact)


def test_no_autograd():
    x1 = make((2, 8), F32, 1).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_add_rms_norm_quant: expected inputs that do"):
        na.npu_add_rms_norm_quant(x1, make((2, 8)), make((8,)), torch.ones(8), None)


def _args(**over):
    a = dict(x1=make((2, 8), F16), x2=make((2, 8), F16), gamma=make((8,), F16),
             scales1=torch.ones(8), zero_points1=None)
    a.update(over)
    return a


@pytest.mark.parametrize("over,error,match", [
    (dict(axis=0), ValueError, "expected axis -1"),
    (dict(scales1=torch.ones(4)), RuntimeError, "expected scales1 the shape of gamma"),
    (dict(scales1=torch.ones(8, dtype=torch.int8)), TypeError, "expected scales1 dtype in"),
    (dict(zero_points1=torch.ones(8, dtype=torch.int8)), TypeError,
     "expected zero_points1 dtype in"),
    (dict(x2=make((3, 8), F16)), RuntimeError, "expected x2 the shape of x1"),
    (dict(gamma=make((8,), BF16)), TypeError, "expected gamma the same dtype as x1"),
    (dict(gamma=make((4,), F16)), RuntimeError, "expected gamma the trailing dims"),
    (dict(beta=make((8,), F32)), TypeError, "expected beta the same dtype as x1"),
    (dict(scales2=torch.ones(8, dtype=BF16)), TypeError, "expected scales2 the same dtype"),
    (dict(x1=torch.ones(2, 8, dtype=torch.int32)), TypeError, "expected x1 dtype in"),
    (dict(dst_type=3), ValueError, "expected dst_type one of"),
])
def test_bad_inputs(over, error, match):
    a = _args(**over)
    with pytest.raises(error, match="^npu_add_rms_norm_quant: " + match):
        na.npu_add_rms_norm_quant(**a)


def test_strict_rules():
    with na.strict("A2"):
        na.npu_add_rms_norm_quant(**_args())
        with pytest.raises(ValueError, match="expected dst_type torch.int8 on A2"):
            na.npu_add_rms_norm_quant(**_args(dst_type=292))
        with pytest.raises(ValueError, match="expected dst_type torch.int8 on A2"):
            na.npu_add_rms_norm_quant(**_args(dst_type=290))
        with pytest.raises(ValueError, match="expected x1 a non-empty tensor"):
            na.npu_add_rms_norm_quant(**_args(x1=make((0, 8), F16), x2=make((0, 8), F16)))
        with pytest.raises(TypeError, match="expected x1 dtype in"):
            na.npu_add_rms_norm_quant(**_args(x1=make((2, 8)), x2=make((2, 8)),
                                              gamma=make((8,))))
    with na.strict("310P"), pytest.raises(TypeError, match="other than bfloat16 on 310P"):
        na.npu_add_rms_norm_quant(**_args(x1=make((2, 8), BF16), x2=make((2, 8), BF16),
                                          gamma=make((8,), BF16)))
    with na.strict("910"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_add_rms_norm_quant(**_args())
    with na.strict("950"):
        y1, _, _ = na.npu_add_rms_norm_quant(**_args(dst_type=292))
        assert y1.dtype == torch.float8_e4m3fn


# (x1, scales1, zero_points1) dtypes.  The aclnn layer checks each against a per-product list
# (aclnn_add_rms_norm_quant(_v2).cpp); op-plugin's tests call these combinations.
I32 = torch.int32
A2_ROWS = [(F16, F32, I32), (BF16, BF16, BF16), (BF16, F32, I32), (BF16, BF16, I32)]
ROWS_950_ONLY = [(F16, F16, I32), (F32, F32, I32), (F32, F32, F32), (F16, F16, F16),
                 (F16, F32, F32), (BF16, F32, F32)]


def _typed(x_dtype, s_dtype, z_dtype):
    return _args(x1=make((2, 8), x_dtype, 1), x2=make((2, 8), x_dtype, 2),
                 gamma=make((8,), x_dtype, 3), scales1=(torch.rand(8) + 0.5).to(s_dtype),
                 zero_points1=torch.randint(-3, 4, (8,)).to(z_dtype))


@pytest.mark.parametrize("row", A2_ROWS + ROWS_950_ONLY, ids=str)
def test_scale_and_zero_point_dtypes_per_product(row):
    """Default mode and strict("950") accept float16 scales and float32/float16 zero points
    (op-plugin's 950 tests); A2/A3 only their lists; the outputs follow the formula."""
    a = _typed(*row)
    for ctx in (contextlib.nullcontext(), na.strict("950")):
        with ctx:
            y1, _, _ = na.npu_add_rms_norm_quant(**a)
        want = golden(a["x1"], a["x2"], a["gamma"], a["scales1"], a["zero_points1"])[0]
        within_one(y1, want, max_mismatch=0.05)
    for product in ("A2", "A3"):
        with na.strict(product):
            if row in A2_ROWS:
                na.npu_add_rms_norm_quant(**a)
            else:
                with pytest.raises(TypeError, match="^npu_add_rms_norm_quant: expected "
                                   "(x1|scales1|zero_points1) dtype in"):
                    na.npu_add_rms_norm_quant(**a)


@pytest.mark.parametrize("over,name", [(dict(scales1=torch.ones(8, dtype=torch.int32)), "scales1"),
                                       (dict(zero_points1=torch.ones(8, dtype=torch.int8)),
                                        "zero_points1"),
                                       (dict(scales1=torch.ones(8, dtype=F64)), "scales1")])
def test_strict_950_dtype_lists(over, name):
    with na.strict("950"), pytest.raises(TypeError, match=f"^npu_add_rms_norm_quant: expected "
                                         f"{name} dtype in"):
        na.npu_add_rms_norm_quant(**_args(**over))
