"""Tests for npu_anywhere.testing.tolerances."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from npu_anywhere.testing import TOLERANCES, Tolerance, assert_close_to_golden, tolerance_for


def ones_plus(k: int, ulp: float, dtype: torch.dtype, n: int = 16) -> torch.Tensor:
    """``n`` copies of ``1 + k * ulp``, exactly representable in ``dtype``."""
    return torch.full((n,), 1.0 + k * ulp, dtype=torch.float64).to(dtype)


GOLDEN_ONES = torch.ones(16, dtype=torch.float64)


# --- table and Tolerance -------------------------------------------------------


def test_table_values():
    assert TOLERANCES == {
        torch.float64: Tolerance(1e-12, 1e-12),
        torch.float32: Tolerance(1.3e-6, 1e-5),
        torch.float16: Tolerance(1e-3, 1e-5),
        torch.bfloat16: Tolerance(1.6e-2, 1e-5),
    }


def test_tolerance_is_frozen():
    tol = Tolerance(1e-3, 1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tol.rtol = 1.0


@pytest.mark.parametrize("rtol, atol", [(-1e-3, 0.0), (0.0, -1.0), (math.nan, 0.0), (0.0, math.inf)])
def test_tolerance_rejects_bad_values(rtol, atol):
    with pytest.raises(ValueError):
        Tolerance(rtol, atol)


def test_tolerance_rejects_non_numbers():
    with pytest.raises(TypeError):
        Tolerance("1e-3", 0.0)


# --- tolerance_for -------------------------------------------------------------


def test_tolerance_for_defaults():
    assert tolerance_for(torch.float16) == Tolerance(1e-3, 1e-5)


def test_tolerance_for_overrides_win():
    assert tolerance_for(torch.float16, rtol=0.5) == Tolerance(0.5, 1e-5)
    assert tolerance_for(torch.float16, atol=0.25) == Tolerance(1e-3, 0.25)
    assert tolerance_for(torch.bfloat16, rtol=0.0, atol=0.0) == Tolerance(0.0, 0.0)


def test_tolerance_for_unknown_dtype():
    with pytest.raises(ValueError, match="no default tolerance"):
        tolerance_for(torch.int32)
    with pytest.raises(ValueError):
        tolerance_for(torch.int32, rtol=0.1)
    # Both overrides make the table entry unnecessary.
    assert tolerance_for(torch.int32, rtol=0.0, atol=1.0) == Tolerance(0.0, 1.0)


def test_tolerance_for_rejects_non_dtype():
    with pytest.raises(TypeError):
        tolerance_for("float16")


# --- assert_close_to_golden: thresholds ----------------------------------------


@pytest.mark.parametrize(
    "dtype, ulp, k_pass, k_fail",
    [
        # allowed = atol + rtol * 1 ; error = k * ulp
        (torch.float16, 2.0**-10, 1, 2),  # 9.8e-4 <= 1.01e-3 < 1.95e-3
        (torch.bfloat16, 2.0**-7, 2, 3),  # 1.56e-2 <= 1.601e-2 < 2.34e-2
        (torch.float32, 2.0**-23, 94, 96),  # 1.121e-5 <= 1.13e-5 < 1.144e-5
    ],
)
def test_threshold_pass_and_fail(dtype, ulp, k_pass, k_fail):
    assert_close_to_golden(ones_plus(k_pass, ulp, dtype), GOLDEN_ONES)
    assert_close_to_golden(ones_plus(-k_pass, ulp, dtype), GOLDEN_ONES)
    with pytest.raises(AssertionError):
        assert_close_to_golden(ones_plus(k_fail, ulp, dtype), GOLDEN_ONES)


def test_float64_threshold():
    assert_close_to_golden(GOLDEN_ONES + 1e-12, GOLDEN_ONES)
    with pytest.raises(AssertionError):
        assert_close_to_golden(GOLDEN_ONES + 3e-12, GOLDEN_ONES)


def test_rounded_once_float32_passes():
    golden = torch.randn(256, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert_close_to_golden(golden.float(), golden)
    assert_close_to_golden(golden.half(), golden)
    assert_close_to_golden(golden.bfloat16(), golden)


def test_atol_covers_values_near_zero():
    golden = torch.zeros(4, dtype=torch.float64)
    assert_close_to_golden(torch.full((4,), 9e-6), golden)
    with pytest.raises(AssertionError):
        assert_close_to_golden(torch.full((4,), 2e-5), golden)


def test_overrides_and_dtype():
    actual = ones_plus(2, 2.0**-10, torch.float16)
    with pytest.raises(AssertionError):
        assert_close_to_golden(actual, GOLDEN_ONES)
    assert_close_to_golden(actual, GOLDEN_ONES, rtol=3e-3)
    # A float32 tensor with half-precision error: judged by the fp16 entry.
    as_fp32 = actual.float()
    with pytest.raises(AssertionError):
        assert_close_to_golden(as_fp32, GOLDEN_ONES)
    assert_close_to_golden(as_fp32, GOLDEN_ONES, dtype=torch.bfloat16)


# --- assert_close_to_golden: message, layout, shapes ---------------------------


def test_failure_message_contents():
    golden = torch.ones(3, 4, dtype=torch.float64)
    actual = golden.half()
    actual[2, 1] = 1.5
    actual[0, 3] = 1.0 + 2**-8  # also bad, but less so
    with pytest.raises(AssertionError) as info:
        assert_close_to_golden(actual, golden, msg="matmul")
    text = str(info.value)
    assert text.startswith("matmul: ")
    assert "2 of 12 elements mismatch" in text
    assert "max abs error: 0.5" in text
    assert "max rel error: 0.5" in text
    assert "index (2, 1)" in text
    assert "rtol=0.001" in text and "atol=1e-05" in text
    assert "torch.float16" in text


def test_non_contiguous_input_reports_logical_index():
    golden = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    base = golden.t().float().contiguous()  # (4, 3) row-major storage
    actual = base.t()  # (3, 4) view, not contiguous
    assert not actual.is_contiguous()
    assert_close_to_golden(actual, golden)
    base[2, 1] += 1.0  # logical position (1, 2) of ``actual``
    with pytest.raises(AssertionError, match=r"index \(1, 2\)"):
        assert_close_to_golden(actual, golden)


def test_strided_slice():
    golden = torch.linspace(-3, 3, 40, dtype=torch.float64)
    assert_close_to_golden(golden.float()[::2], golden[::2])


def test_shape_mismatch():
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close_to_golden(torch.ones(4), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close_to_golden(torch.ones(1), torch.tensor(1.0, dtype=torch.float64))


def test_empty_and_scalar():
    assert_close_to_golden(torch.ones(0, 3), torch.ones(0, 3, dtype=torch.float64))
    assert_close_to_golden(torch.tensor(2.0), torch.tensor(2.0, dtype=torch.float64))
    with pytest.raises(AssertionError, match=r"index \(\)"):
        assert_close_to_golden(torch.tensor(2.5), torch.tensor(2.0, dtype=torch.float64))


def test_numpy_inputs():
    golden = np.linspace(0, 1, 10)
    assert_close_to_golden(golden.astype(np.float16), golden)
    with pytest.raises(AssertionError, match="float16"):
        assert_close_to_golden((golden + 0.01).astype(np.float16), golden)


def test_rejects_other_types():
    with pytest.raises(TypeError):
        assert_close_to_golden([1.0], torch.ones(1, dtype=torch.float64))


# --- non-finite values ---------------------------------------------------------

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    "actual, golden",
    [
        ([NAN, 1.0], [NAN, 1.0]),
        ([INF, -INF, 1.0], [INF, -INF, 1.0]),
        ([NAN, INF, 0.0], [NAN, INF, 0.0]),
    ],
)
def test_matching_non_finite_is_equal(actual, golden):
    assert_close_to_golden(torch.tensor(actual), torch.tensor(golden, dtype=torch.float64))


@pytest.mark.parametrize(
    "actual, golden",
    [
        ([NAN, 1.0], [1.0, 1.0]),
        ([1.0, 1.0], [1.0, NAN]),
        ([INF, 1.0], [-INF, 1.0]),
        ([INF, 1.0], [3e38, 1.0]),
        ([NAN, 1.0], [INF, 1.0]),
        ([1.0, NAN], [NAN, 1.0]),
    ],
)
def test_mismatched_non_finite_fails(actual, golden):
    with pytest.raises(AssertionError, match="mismatched NaN/inf"):
        assert_close_to_golden(torch.tensor(actual), torch.tensor(golden, dtype=torch.float64))
