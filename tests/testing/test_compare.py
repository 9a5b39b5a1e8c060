"""Tests for npu_anywhere.testing.compare."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from npu_anywhere.testing import (
    Verdict,
    assert_rtol_equal,
    cann_mere_mare,
    cann_threshold,
    compare,
    judge_cann,
    judge_msprobe,
)

NAN, INF = math.nan, math.inf


def ones_plus(k: float, ulp: float, dtype: torch.dtype, n: int = 64) -> torch.Tensor:
    """``n`` copies of ``1 + k * ulp`` rounded to ``dtype``."""
    return torch.full((n,), 1.0 + k * ulp, dtype=torch.float64).to(dtype)


def golden_ones(n: int = 64) -> torch.Tensor:
    return torch.ones(n, dtype=torch.float64)


# --- Verdict -------------------------------------------------------------------


def test_verdict_str_and_bool():
    ok = Verdict(True, "cann-ecosystem", {"mere": 1.2e-4, "mare": 3.1e-3, "T": 2.0**-10})
    assert str(ok) == "cann-ecosystem PASS mere=1.2e-04 mare=3.1e-03 (T=9.8e-04)"
    assert ok
    bad = Verdict(False, "msprobe", {"cosine": 0.5}, ("careful",))
    assert not bad
    assert str(bad) == "msprobe FAIL cosine=0.5 [warnings: careful]"
    assert "\n" not in str(bad)


def test_verdict_is_frozen_and_copies_inputs():
    metrics = {"mere": 0.0}
    verdict = Verdict(True, "x", metrics, ["w"])
    metrics["mere"] = 1.0
    assert verdict.metrics == {"mere": 0.0}
    assert verdict.warnings == ("w",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.passed = False


# --- CANN ecosystem --------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (torch.float16, 2.0**-10),
        (torch.bfloat16, 2.0**-7),
        (torch.float32, 2.0**-13),
        (torch.float8_e4m3fn, 2.0**-3),
        (torch.float8_e5m2, 2.0**-2),
        (np.float16, 2.0**-10),
        ("bf16", 2.0**-7),
        ("float32", 2.0**-13),
    ],
)
def test_cann_threshold(dtype, expected):
    assert cann_threshold(dtype) == expected


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, "float64"])
def test_cann_threshold_rejects_other_dtypes(dtype):
    with pytest.raises(ValueError):
        cann_threshold(dtype)


def test_cann_mere_mare_values():
    golden = np.array([1.0, 2.0, 4.0, 0.0])
    actual = np.array([1.5, 2.0, 3.0, 1e-7])
    rel = np.array([0.5 / (1 + 1e-7), 0.0, 1 / (4 + 1e-7), 1e-7 / 1e-7])
    mere, mare = cann_mere_mare(actual, golden)
    assert mere == pytest.approx(rel.mean(), rel=1e-15)
    assert mare == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize(
    "dtype, T",
    [
        (torch.float16, 2.0**-10),
        (torch.bfloat16, 2.0**-7),
        (torch.float32, 2.0**-13),
        (torch.float8_e4m3fn, 2.0**-3),
        (torch.float8_e5m2, 2.0**-2),
    ],
)
def test_cann_mere_threshold(dtype, T):
    # An error of exactly T everywhere gives MERE = T / (1 + 1e-7), a hair
    # below T, so it passes; 2T everywhere fails on MERE (MARE is still ok).
    at = judge_cann(ones_plus(1, T, dtype), golden_ones())
    assert at and at.metrics["mere"] < T
    over = judge_cann(ones_plus(2, T, dtype), golden_ones())
    assert not over
    assert over.metrics["mere"] > T and over.metrics["mare"] < 10 * T


def test_cann_mere_mixed_fraction():
    T = 2.0**-10
    golden = golden_ones(100)
    actual = torch.ones(100, dtype=torch.float16)
    actual[:50] = 1 + 2 * T  # mean error = T / (1 + 1e-7): pass
    assert judge_cann(actual, golden)
    actual[50] = 1 + 2 * T  # mean error 1.02 T: fail
    assert not judge_cann(actual, golden)


@pytest.mark.parametrize(
    "dtype, T", [(torch.float16, 2.0**-10), (torch.bfloat16, 2.0**-7), (torch.float32, 2.0**-13)]
)
def test_cann_mare_threshold(dtype, T):
    golden = golden_ones(1000)
    actual = golden.to(dtype)
    actual[7] = 1 + 10 * T  # MARE = 10T / (1 + 1e-7) < 10T
    verdict = judge_cann(actual, golden)
    assert verdict and verdict.metrics["mere"] < T
    actual[7] = 1 + 11 * T
    verdict = judge_cann(actual, golden)
    assert not verdict and verdict.metrics["mere"] < T


def test_cann_metrics_and_str():
    verdict = judge_cann(ones_plus(1, 2.0**-10, torch.float16), golden_ones())
    assert set(verdict.metrics) == {"mere", "mare", "T"}
    assert verdict.standard == "cann-ecosystem"
    assert str(verdict) == "cann-ecosystem PASS mere=9.8e-04 mare=9.8e-04 (T=9.8e-04)"


def test_cann_dtype_default_and_override():
    # Half-precision error in a float32 tensor: fails float32's T, passes float16's.
    actual = ones_plus(1, 2.0**-10, torch.float32)
    assert not judge_cann(actual, golden_ones())
    assert judge_cann(actual, golden_ones(), dtype=torch.float16)
    assert judge_cann(actual, golden_ones(), dtype="fp16")


def test_cann_numpy_inputs():
    golden = np.ones(32)
    assert judge_cann(np.full(32, 1 + 2.0**-10, dtype=np.float16), golden)
    assert not judge_cann(np.full(32, 1 + 2.0**-9, dtype=np.float16), golden)
    with pytest.raises(ValueError):  # float64 has no CANN threshold
        judge_cann(golden, golden)
    assert judge_cann(golden, golden, dtype=np.float32)


def test_cann_bf16_and_non_contiguous():
    golden = torch.randn(8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    actual = golden.t().contiguous().bfloat16().t()
    assert not actual.is_contiguous()
    assert judge_cann(actual, golden)


def test_cann_non_finite():
    golden = torch.tensor([NAN, INF, -INF, 1.0], dtype=torch.float64)
    same = judge_cann(golden.half(), golden)
    assert same and same.metrics["mere"] == 0.0 and same.metrics["mare"] == 0.0
    for bad in ([1.0, INF, -INF, 1.0], [NAN, -INF, -INF, 1.0], [NAN, INF, -INF, NAN]):
        verdict = judge_cann(torch.tensor(bad, dtype=torch.float16), golden)
        assert not verdict and verdict.metrics["mare"] == INF


def test_cann_shape_mismatch():
    with pytest.raises(ValueError, match="shape mismatch"):
        judge_cann(torch.ones(4, dtype=torch.float16), torch.ones(2, 2, dtype=torch.float64))


def test_cann_empty():
    assert cann_mere_mare(torch.ones(0), torch.ones(0)) == (0.0, 0.0)


# --- msprobe ---------------------------------------------------------------------


def test_msprobe_all_zero_is_cosine_one():
    verdict = judge_msprobe(torch.zeros(8), torch.zeros(8, dtype=torch.float64))
    assert verdict and verdict.metrics["cosine"] == 1.0


def test_msprobe_one_side_zero_fails():
    verdict = judge_msprobe(torch.zeros(8), torch.full((8,), 1e-5, dtype=torch.float64))
    assert not verdict and verdict.metrics["cosine"] == 0.0


def test_msprobe_cosine_threshold():
    # Max abs error stays below 1e-3 in both cases, so only the cosine decides.
    golden = np.array([1e-4, 0.0])
    ok = judge_msprobe(np.array([1e-4, 1e-5], dtype=np.float32), golden)  # cos = 0.995
    assert ok and 0.99 < ok.metrics["cosine"] < 0.996
    bad = judge_msprobe(np.array([1e-4, 2e-5], dtype=np.float32), golden)  # cos = 0.981
    assert not bad and bad.metrics["cosine"] < 0.99
    assert bad.metrics["max_abs_err"] < 1e-3


def test_msprobe_small_abs_error_passes_despite_relative_error():
    golden = np.full(100, 0.5)
    # Relative error 1.8e-3 on every element would fail 双千 for float32 ...
    ok = judge_msprobe((golden + 9e-4).astype(np.float32), golden)
    assert ok and ok.metrics["share_1e-3"] == 1.0
    # ... and does once the max abs error reaches 1e-3.
    assert not judge_msprobe((golden + 1.1e-3).astype(np.float32), golden)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_msprobe_half_needs_shuang_bai(dtype):
    golden = golden_ones(1000)
    actual = golden.to(dtype)
    actual[:9] = 1.03  # 0.9% of elements have rel error > 1%: pass ...
    verdict = judge_msprobe(actual, golden)
    assert verdict
    # ... but 双千 (0.9% >= 0.1%) fails, which only warns.
    assert len(verdict.warnings) == 1 and "双千" in verdict.warnings[0]
    actual[9] = 1.03  # 1.0% is not below 1%: fail
    assert not judge_msprobe(actual, golden)


def test_msprobe_fp32_needs_shuang_qian():
    golden = golden_ones(10000)
    actual = golden.float()
    actual[:9] = 1.002  # 0.09% of elements with rel error > 0.1%: pass ...
    verdict = judge_msprobe(actual, golden)
    assert verdict
    assert len(verdict.warnings) == 1 and "双万" in verdict.warnings[0]
    actual[9] = 1.002  # 0.1% is not below 0.1%: fail
    assert not judge_msprobe(actual, golden)


def test_msprobe_fp32_clean_pass_has_no_warning():
    golden = torch.full((100,), 100.0, dtype=torch.float64)
    verdict = judge_msprobe((golden + 5e-3).float(), golden)  # abs 5e-3, rel 5e-5
    assert verdict and verdict.warnings == ()
    assert verdict.metrics["max_abs_err"] >= 1e-3


def _small_value_case(dtype, small_golden, small_error, n_small=20, n=1000):
    """One big-value outlier (to get past the max-abs shortcut) + ``n_small``
    elements in the small-value region with a given absolute error."""
    golden = golden_ones(n)
    golden[0] = 0.5
    golden[1 : 1 + n_small] = small_golden
    actual = golden.clone()
    actual[0] = 0.51  # rel 2% > every level, abs 1e-2 >= 1e-3
    actual[1 : 1 + n_small] = small_golden + small_error
    return actual.to(dtype), golden


def test_msprobe_small_value_region_half():
    # Relative error 5% on 2% of elements, but below the 1e-5 absolute
    # threshold of the small-value region: only the one big outlier counts.
    actual, golden = _small_value_case(torch.float16, 1e-4, 5e-6)
    verdict = judge_msprobe(actual, golden)
    assert verdict and verdict.metrics["share_1e-2"] == pytest.approx(0.001)
    # Above 1e-5 absolute error they count: 21 / 1000 > 1%.
    actual, golden = _small_value_case(torch.float16, 1e-4, 2e-5)
    verdict = judge_msprobe(actual, golden)
    assert not verdict and verdict.metrics["share_1e-2"] == pytest.approx(0.021)


def test_msprobe_small_value_region_fp32():
    # 5e-7 < 1e-6 is small for float32; the absolute threshold is 1e-9.
    # 20 small outliers in 10000 = 0.2% share would fail 双千 (< 0.1%).
    actual, golden = _small_value_case(torch.float32, 5e-7, 5e-10, n=10000)
    assert judge_msprobe(actual, golden)
    actual, golden = _small_value_case(torch.float32, 5e-7, 5e-9, n=10000)
    assert not judge_msprobe(actual, golden)
    # Under the float16 rule the same elements are judged against 1e-5.
    assert judge_msprobe(actual, golden, dtype=torch.float16)


def test_msprobe_non_finite():
    golden = torch.tensor([NAN, INF, 1.0, 2.0], dtype=torch.float64)
    assert judge_msprobe(golden.float(), golden)
    bad = judge_msprobe(torch.tensor([NAN, NAN, 1.0, 2.0]), golden)
    assert not bad and bad.metrics["nonfinite_mismatch"] == 1
    assert not judge_msprobe(torch.tensor([1.0, INF, 1.0, 2.0]), golden)


def test_msprobe_dtypes():
    golden = np.linspace(1, 2, 16)
    assert judge_msprobe(golden, golden)  # float64 uses the float32 rule
    with pytest.raises(ValueError, match="msprobe"):
        judge_msprobe(torch.ones(4).to(torch.float8_e4m3fn), torch.ones(4))
    with pytest.raises(ValueError, match="shape mismatch"):
        judge_msprobe(torch.ones(4), torch.ones(5))


# --- assert_rtol_equal -------------------------------------------------------------


def test_rtol_outlier_budget_float32():
    # size * prec = 10000 * 1e-4 = 1 element may be off.
    golden = np.ones(10000, dtype=np.float32)
    actual = golden.copy()
    actual[3] = 1.5
    assert_rtol_equal(actual, golden)
    actual[4] = 1.5
    with pytest.raises(AssertionError, match="2 of 10000 elements exceed the relative"):
        assert_rtol_equal(actual, golden)


def test_rtol_budget_applies_to_each_count_separately():
    # 100 huge elements are abs-only outliers (|diff| = 1, rel 1e-5); the
    # relative count alone then decides: 1 (= budget) passes, 2 fail.
    golden = np.ones(10000)
    golden[:100] = 1e5
    actual = golden.copy()
    actual[:100] += 1.0
    actual[500] = 1.5
    assert_rtol_equal(actual, golden)
    actual[501] = 1.5
    with pytest.raises(AssertionError, match="2 of 10000 elements exceed the relative"):
        assert_rtol_equal(actual, golden)
    # Mirror image: 100 tiny rel-only outliers, the absolute count decides.
    golden = np.ones(10000)
    golden[:100] = 1e-6
    actual = golden.copy()
    actual[:100] *= 2
    actual[500] = 1.5
    assert_rtol_equal(actual, golden)
    actual[501] = 1.5
    with pytest.raises(AssertionError, match="2 exceed the absolute"):
        assert_rtol_equal(actual, golden)


def test_rtol_outlier_budget_custom_prec():
    golden = torch.ones(1000)
    actual = golden.clone()
    actual[:10] = 1.02  # 10 = 1000 * 1e-2: allowed
    assert_rtol_equal(actual, golden, prec=1e-2)
    actual[10] = 1.02
    with pytest.raises(AssertionError):
        assert_rtol_equal(actual, golden, prec=1e-2)


def test_rtol_needs_both_rel_and_abs_outliers():
    # Tiny values: every element is 50% off relatively, but |diff| = 1e-6.
    assert_rtol_equal(np.full(100, 1e-6), np.full(100, 2e-6))
    # Huge values: |diff| = 1 everywhere, but the relative error is 1e-5.
    assert_rtol_equal(np.full(100, 1e5), np.full(100, 1e5 + 1))
    # Both large: fails.
    with pytest.raises(AssertionError):
        assert_rtol_equal(np.full(100, 1.0), np.full(100, 1.001))


def test_rtol_relative_error_is_symmetric():
    # |x - y| / max(|x|, |y|): 1.00005e-4 / 1.0001 < 1e-4 in either order,
    # though 1.00005e-4 / 1 would not be.
    x = np.ones(100)
    y = np.full(100, 1 + 1.00005e-4)
    assert_rtol_equal(x, y)
    assert_rtol_equal(y, x)
    y = np.full(100, 1 + 2e-4)
    for first, second in ((x, y), (y, x)):
        with pytest.raises(AssertionError):
            assert_rtol_equal(first, second)


def test_rtol_float16_uses_prec16():
    golden = torch.ones(1000, dtype=torch.float16)
    assert_rtol_equal(ones_plus(1, 2.0**-10, torch.float16, 1000), golden)  # rel 9.8e-4
    with pytest.raises(AssertionError):
        assert_rtol_equal(ones_plus(2, 2.0**-10, torch.float16, 1000), golden)  # rel 2e-3
    actual = golden.clone()
    actual[0] = 1.5  # budget 1000 * 1e-3 = 1
    assert_rtol_equal(actual, golden)
    actual[1] = 1.5
    with pytest.raises(AssertionError):
        assert_rtol_equal(actual, golden)
    # Either side being float16 selects prec16.
    assert_rtol_equal(ones_plus(1, 2.0**-10, torch.float16, 1000), golden_ones(1000))
    with pytest.raises(AssertionError):
        assert_rtol_equal(ones_plus(1, 2.0**-10, torch.float32, 1000), golden_ones(1000))


def test_rtol_bfloat16_is_allclose():
    actual = torch.ones(10000, dtype=torch.bfloat16)
    ok = torch.full((10000,), 1.0015)
    assert_rtol_equal(actual, ok)  # 1.5e-3 <= 1e-3 + 1e-3 * 1.0015
    bad = ok.clone()
    bad[0] = 1.0025  # one element is enough: no outlier budget for bf16
    with pytest.raises(AssertionError, match="bfloat16 allclose"):
        assert_rtol_equal(actual, bad)


def test_rtol_zero_everywhere():
    assert_rtol_equal(torch.zeros(5), torch.zeros(5))


def test_rtol_shape_mismatch():
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_rtol_equal(torch.ones(3), torch.ones(1, 3))


def test_rtol_non_finite():
    x = np.array([NAN, INF, -INF, 1.0])
    assert_rtol_equal(x, x.copy())
    for y in ([1.0, INF, -INF, 1.0], [NAN, -INF, -INF, 1.0], [NAN, INF, 5.0, 1.0]):
        with pytest.raises(AssertionError, match="NaN/inf"):
            assert_rtol_equal(x, np.array(y))


def test_rtol_bad_prec():
    with pytest.raises(ValueError):
        assert_rtol_equal(np.ones(2), np.ones(2), prec=-1.0)


# --- compare dispatch --------------------------------------------------------------


@pytest.mark.parametrize("standard", ["cann-ecosystem", "msprobe", "torch_npu"])
def test_compare_dispatch(standard):
    actual = ones_plus(1, 2.0**-10, torch.float16)
    verdict = compare(actual, golden_ones(), standard=standard)
    assert isinstance(verdict, Verdict)
    assert verdict.standard == standard
    assert verdict
    assert not compare(ones_plus(50, 2.0**-10, torch.float16), golden_ones(), standard=standard)


def test_compare_default_is_cann():
    verdict = compare(ones_plus(1, 2.0**-10, torch.float16), golden_ones())
    assert verdict.standard == "cann-ecosystem"


def test_compare_torch_npu_dtype_override():
    actual = ones_plus(1, 2.0**-10, torch.float32)
    assert not compare(actual, golden_ones(), standard="torch_npu")
    assert compare(actual, golden_ones(), standard="torch_npu", dtype=torch.float16)


def test_compare_unknown_standard():
    with pytest.raises(ValueError) as info:
        compare(torch.ones(2), torch.ones(2), standard="allclose")
    for name in ("cann-ecosystem", "msprobe", "torch_npu"):
        assert name in str(info.value)


def test_compare_shape_mismatch_every_standard():
    for standard in ("cann-ecosystem", "msprobe", "torch_npu"):
        with pytest.raises(ValueError, match="shape mismatch"):
            compare(torch.ones(2, dtype=torch.float16), torch.ones(3), standard=standard)


def test_compare_rejects_complex():
    with pytest.raises(TypeError):
        compare(torch.ones(2, dtype=torch.complex64), torch.ones(2))
