"""``torch_npu.testing.testcase.TestCase``: assertRtolEqual and assertEqual.

The golden for assertRtolEqual is torch_npu's rule written out here in float64 numpy
(torch_npu ``testing/testcase.py``): with ``e = |y - x|`` and ``r = e / (max(|x|, |y|) + m)``
(``m`` = 6e-8 for float16, 1e-9 otherwise) the check fails iff more than ``size * p`` elements
have ``r > p`` and more than ``size * p`` have ``e > p``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_anywhere.compat.npu_testing.testcase import TestCase


class _Probe(TestCase):
    def runTest(self):  # unittest needs a method to bind an instance to
        pass


@pytest.fixture
def tc():
    return _Probe()


def torch_npu_rtol_passes(x: np.ndarray, y: np.ndarray, prec: float, prec16: float) -> bool:
    """torch_npu's numeric rule, independently of the implementation under test."""
    p, m = (prec16, 6e-8) if x.dtype == np.float16 else (prec, 1e-9)
    a, b = x.astype(np.float64), y.astype(np.float64)
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b)), "the golden handles matched NaN only"
    err = np.abs(np.where(nan, 0.0, b - a))
    rel = err / (np.maximum(np.abs(a), np.abs(b)) + m)
    return not (np.sum(rel > p) > a.size * p and np.sum(err > p) > a.size * p)


def _passes(tc, x, y, **kwargs) -> bool:
    try:
        tc.assertRtolEqual(x, y, **kwargs)
    except AssertionError:
        return False
    return True


# -- assertRtolEqual: the numeric rule ------------------------------------------------------

@pytest.mark.parametrize("n_outliers, passes", [(0, True), (1, True), (2, False)])
def test_rtol_outlier_budget_is_size_times_prec(tc, n_outliers, passes):
    # 10000 float32 elements, prec 1e-4: exactly one element may be off.
    x = np.linspace(1.0, 2.0, 10000, dtype=np.float32)
    y = x.copy()
    y[[7, 5003][:n_outliers]] += 0.5
    assert _passes(tc, x, y) is passes
    assert torch_npu_rtol_passes(x, y, 1e-4, 1e-3) is passes


def test_rtol_small_values_pass_on_absolute_error(tc):
    # Every element is 50% off relatively but only 1e-6 absolutely (< prec).
    x = np.full(64, 1e-6, np.float32)
    y = np.full(64, 2e-6, np.float32)
    tc.assertRtolEqual(x, y)


def test_rtol_large_values_pass_on_relative_error(tc):
    x = np.full(64, 1e6, np.float64)
    tc.assertRtolEqual(x, x + 1.0)  # abs error 1, rel error 1e-6


def test_rtol_float16_uses_prec16(tc):
    x = np.linspace(1, 2, 256).astype(np.float16)
    y = (x.astype(np.float64) * (1 + 5e-4)).astype(np.float16)
    tc.assertRtolEqual(x, y)  # rel error ~5e-4 < prec16 = 1e-3
    with pytest.raises(AssertionError):
        tc.assertRtolEqual(x, y, prec16=1e-4)
    # float32 holds the same values to prec = 1e-4.
    with pytest.raises(AssertionError, match="result error"):
        tc.assertRtolEqual(x.astype(np.float32), y.astype(np.float32))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int8])
def test_rtol_matches_torch_npu_rule_on_random_inputs(tc, seed, dtype):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 3000))
    if np.issubdtype(dtype, np.integer):
        x = rng.integers(-100, 100, size).astype(dtype)
        y = x.copy()
        hits = rng.choice(size, int(rng.integers(0, 4)), replace=False)
        y[hits] = (y[hits] + 1).astype(dtype)
    else:
        x = (rng.uniform(0.01, 10, size) * rng.choice([-1, 1], size)).astype(dtype)
        noise = rng.choice([0, 1e-5, 3e-4, 5e-3], size, p=[0.9, 0.05, 0.04, 0.01])
        y = (x.astype(np.float64) * (1 + noise)).astype(dtype)
    for prec, prec16 in [(1e-4, 1e-3), (1e-3, 1e-2)]:
        want = torch_npu_rtol_passes(x, y, prec, prec16)
        assert _passes(tc, x, y, prec=prec, prec16=prec16) is want
        assert _passes(tc, torch.from_numpy(x), torch.from_numpy(y), prec=prec,
                       prec16=prec16) is want


def test_rtol_nan_must_sit_at_the_same_places(tc):
    x = np.array([1.0, np.nan, 3.0], np.float32)
    tc.assertRtolEqual(x, x.copy())
    with pytest.raises(AssertionError):
        tc.assertRtolEqual(x, np.array([1.0, 2.0, np.nan], np.float32))


def test_rtol_non_contiguous_tensors_on_any_device(tc):
    base = torch.randn(6, 8)
    x = base.t()
    assert not x.is_contiguous()
    tc.assertRtolEqual(x, x.contiguous().clone())
    with pytest.raises(AssertionError):
        tc.assertRtolEqual(x, x.contiguous() + 1)


# -- assertRtolEqual: dtypes, shapes, containers --------------------------------------------

def test_rtol_bool_must_match_exactly(tc):
    x = np.array([True, False, True])
    tc.assertRtolEqual(x, x.copy())
    with pytest.raises(AssertionError, match="1 of 3 bool"):
        tc.assertRtolEqual(x, np.array([True, True, True]))


def test_rtol_bfloat16_pair_is_allclose_with_prec16(tc):
    x = torch.linspace(1, 2, 64, dtype=torch.bfloat16)
    y = (x.double() * 1.005).to(torch.bfloat16)  # ~0.5% apart: beyond 1e-3, within 1e-2
    with pytest.raises(AssertionError, match="allclose"):
        tc.assertRtolEqual(x, y)
    tc.assertRtolEqual(x, y, prec16=1e-2)
    with pytest.raises(AssertionError, match="shape"):
        tc.assertRtolEqual(x, y[:3], prec16=1e-2)


def test_rtol_bfloat16_next_to_another_dtype_is_an_error(tc):
    # torch_npu hands such a pair to numpy, which has no bfloat16.
    x = torch.ones(4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16"):
        tc.assertRtolEqual(x, torch.ones(4))


def test_rtol_dtype_and_shape_must_agree(tc):
    x = np.ones(4, np.float32)
    with pytest.raises(AssertionError, match="dtype error"):
        tc.assertRtolEqual(x, np.ones(4, np.float64))
    with pytest.raises(AssertionError, match="shape error"):
        tc.assertRtolEqual(x, np.ones((2, 2), np.float32))
    with pytest.raises(AssertionError, match="dtype error"):
        tc.assertRtolEqual(torch.ones(4), x)  # a tensor next to an array


def test_rtol_auto_trans_dtype_casts_x_to_y(tc):
    x = torch.linspace(1, 2, 16, dtype=torch.float16)
    with pytest.raises(AssertionError, match="dtype error"):
        tc.assertRtolEqual(x, x.float())
    tc.assertRtolEqual(x, x.float(), auto_trans_dtype=True)


def test_rtol_unsupported_dtype_fails(tc):
    x = np.ones(3, np.complex64)
    with pytest.raises(AssertionError, match="required dtype"):
        tc.assertRtolEqual(x, x)
    with pytest.raises(TypeError, match="expected tensors"):
        tc.assertRtolEqual("abc", "abc")
    with pytest.raises(TypeError, match="expected tensors"):
        tc.assertRtolEqual({1: 2}, {1: 2})


def test_rtol_sequences_numbers_and_message(tc):
    tc.assertRtolEqual([torch.ones(3), np.zeros(2, np.float32)],
                       (torch.ones(3), np.zeros(2, np.float32)))
    with pytest.raises(AssertionError, match="item 1"):
        tc.assertRtolEqual([torch.ones(3), torch.ones(2)], [torch.ones(3), torch.zeros(2)])
    tc.assertRtolEqual(torch.tensor([1.0, 2.0]), [1.0, 2.0])  # the list takes x's dtype
    tc.assertRtolEqual(2.0, 2.0 + 1e-6)
    with pytest.raises(AssertionError, match="dtype error"):
        tc.assertRtolEqual(1, 1.0)  # int64 vs float64, as in torch_npu
    with pytest.raises(AssertionError, match="^my context: result error"):
        tc.assertRtolEqual(np.ones(2, np.float32), np.zeros(2, np.float32), message="my context")


# -- assertEqual ----------------------------------------------------------------------------

def test_equal_tensors_use_max_abs_error_against_prec(tc):
    x = torch.tensor([1.0, 2.0, 3.0])
    tc.assertEqual(x, x + 5e-6)  # default precision 1e-5
    with pytest.raises(AssertionError):
        tc.assertEqual(x, x + 2e-5)
    tc.assertEqual(x, x + 2e-5, prec=1e-4)
    tc.precision = 1e-3
    tc.assertEqual(x, x + 2e-4)
    with pytest.raises(AssertionError, match="ctx"):
        tc.assertEqual(x, x + 1, "ctx")  # a str prec is the message


def test_equal_converts_y_to_x_dtype_and_checks_size(tc):
    # torch_npu compares after b.to(a): 1.4 -> 1 against an int tensor.
    tc.assertEqual(torch.tensor([1, 2]), torch.tensor([1.4, 2.4]))
    with pytest.raises(AssertionError):
        tc.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.4, 2.4]))
    with pytest.raises(AssertionError):
        tc.assertEqual(torch.ones(2), torch.ones(3))
    with pytest.raises(AssertionError):
        tc.assertEqual(torch.ones(2), torch.ones(2, dtype=torch.float64), exact_dtype=True)
    with pytest.raises(TypeError, match="bool"):
        tc.assertEqual(torch.ones(2, dtype=torch.bool), torch.ones(2))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_equal_small_integers_do_not_wrap_around(tc, dtype):
    low, high = torch.tensor([0], dtype=dtype), torch.tensor([5], dtype=dtype)
    with pytest.raises(AssertionError):
        tc.assertEqual(low, high)
    with pytest.raises(AssertionError):
        tc.assertEqual(high, low)
    tc.assertEqual(high, high.clone())


def test_equal_nan_and_inf(tc):
    x = torch.tensor([1.0, float("nan"), float("inf")])
    with pytest.raises(AssertionError):
        tc.assertEqual(x, x.clone())  # infinities need allow_inf
    tc.assertEqual(x, x.clone(), allow_inf=True)
    with pytest.raises(AssertionError):
        tc.assertEqual(x, torch.tensor([1.0, float("nan"), -float("inf")]), allow_inf=True)
    with pytest.raises(AssertionError):
        tc.assertEqual(x[:2], torch.tensor([1.0, 2.0]))
    # numpy arrays follow the number rule: NaN is never equal.
    with pytest.raises(AssertionError):
        tc.assertEqual(np.array([np.nan]), np.array([np.nan]))


def test_equal_numbers_and_containers(tc):
    tc.assertEqual(torch.tensor(2.0), 2.000001)
    tc.assertEqual(3, torch.tensor(3))
    with pytest.raises(AssertionError):
        tc.assertEqual(1.0, 1.1)
    with pytest.raises(AssertionError):
        tc.assertEqual(float("inf"), float("inf"))
    tc.assertEqual(float("inf"), float("inf"), allow_inf=True)
    tc.assertEqual(torch.Size([2, 3]), (2, 3))
    tc.assertEqual([torch.ones(2), 1.0], (torch.ones(2), 1.0))
    with pytest.raises(AssertionError):
        tc.assertEqual([1, 2], [1, 2, 3])
    tc.assertEqual({"a": torch.ones(2)}, {"a": torch.ones(2)})
    with pytest.raises(AssertionError):
        tc.assertEqual({"a": 1}, {"b": 1})
    tc.assertEqual("abc", "abc")
    tc.assertEqual(torch.float16, torch.float16)
    with pytest.raises(AssertionError):
        tc.assertEqual(torch.float16, torch.bfloat16)
    tc.assertEqual(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-6]))
    tc.assertEqual(np.bool_(True), torch.tensor(True))


def test_not_equal_and_almost_equal(tc):
    x = torch.tensor([1.0, 2.0])
    tc.assertNotEqual(x, x + 1)
    with pytest.raises(AssertionError):
        tc.assertNotEqual(x, x.clone())
    tc.assertNotEqual(1.0, 2.0)
    with pytest.raises(AssertionError):
        tc.assertNotEqual(1.0, 1.0)
    tc.assertAlmostEqual(1.0, 1.004, places=2)
    with pytest.raises(AssertionError):
        tc.assertAlmostEqual(1.0, 1.004, places=3)
