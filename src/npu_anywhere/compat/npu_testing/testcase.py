"""``torch_npu.testing.testcase``: torch_npu's ``TestCase`` and ``run_tests``.

Semantics followed: torch_npu ``torch_npu/testing/testcase.py``.  The class is an
``expecttest.TestCase`` (a ``unittest.TestCase``) whose

* ``setUpClass`` makes ``get_npu_device()`` current and stores it as ``cls.npu_device``;
* ``setUp`` seeds torch and :mod:`random` (not numpy) with ``SEED`` (default 666);
* ``assertRtolEqual`` is torch_npu's relative-error check (rule: :mod:`.rtol`);
* ``assertEqual(x, y, prec=None, message='', allow_inf=False, exact_dtype=None)`` takes the
  largest absolute difference against ``prec`` (default ``self.precision`` = 1e-5) for tensors
  and numbers, walks sequences and dicts, and leaves everything else to ``unittest``;
* with ``NPU_ANYWHERE_SOC`` set and no strict target active, each test runs under
  ``npu_anywhere.strict(<the product of that SoC>)``, so the SoC the skips see is also the one
  whose rules the ops enforce.
"""

from __future__ import annotations

import os
import random
import sys
import unittest
from collections import OrderedDict
from numbers import Number

import numpy as np
import torch

from ... import targets
from . import soc
from .common_utils import is_iterable, iter_indices, set_npu_device
from .rtol import rtol_failure

try:  # torch_npu builds on expecttest (assertExpectedInline); plain unittest when absent
    from expecttest import TestCase as _Base
except ImportError:  # pragma: no cover - expecttest ships with torch's test dependencies
    _Base = unittest.TestCase

__all__ = ["TestCase", "run_tests"]


def run_tests() -> None:
    """Run the calling module's tests with ``unittest.main`` (exits like it)."""
    unittest.main(argv=sys.argv)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a dtype where differences neither round nor wrap around."""
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype.is_floating_point:
        return t.to(torch.float64)
    return t.to(torch.int64)


class TestCase(_Base):
    """torch_npu's test base class (see the module docstring)."""

    _precision = 1e-5
    maxDiff = None
    exact_dtype = False

    def __init__(self, method_name: str = "runTest") -> None:
        super().__init__(method_name)

    @property
    def precision(self) -> float:
        return self._precision

    @precision.setter
    def precision(self, prec: float) -> None:
        self._precision = prec

    @classmethod
    def setUpClass(cls) -> None:
        cls.npu_device = set_npu_device()

    def setUp(self) -> None:
        seed = int(os.getenv("SEED", "666"))
        torch.manual_seed(seed)
        random.seed(seed)

    def run(self, result=None):
        product = soc.env_product() if targets.current() is None else None
        if product is None:
            return super().run(result)
        with targets.strict(product):
            return super().run(result)

    # -- torch_npu's relative check --------------------------------------------------------

    def assertRtolEqual(self, x, y, prec=1.e-4, prec16=1.e-3, auto_trans_dtype=False,
                        message=None):
        """Fail unless ``x`` and ``y`` agree by torch_npu's rule (:mod:`.rtol`)."""
        failure = rtol_failure(x, y, prec, prec16, auto_trans_dtype)
        if failure is not None:
            self.fail(failure if message is None else f"{message}: {failure}")

    # -- torch_npu's equality --------------------------------------------------------------

    def _assert_tensors_close(self, a, b, message, exact_dtype, allow_inf, prec):
        # torch_npu: sizes equal; b is converted to a's dtype; NaN at the same places; with
        # allow_inf the infinities too; then max |a - b| <= prec.  The difference is taken in
        # float64 / int64 here, where torch_npu's int8 and uint8 subtraction wraps around.
        unittest.TestCase.assertEqual(self, a.size(), b.size(), message)
        if exact_dtype:
            self.assertEqual(a.dtype, b.dtype)
        if a.numel() == 0:
            return
        if (a.dtype == torch.bool) != (b.dtype == torch.bool):
            raise TypeError("Was expecting both tensors to be bool type.")
        a = a.detach().cpu()
        b = b.detach().cpu().to(a.dtype)
        a, b = _wide(a), _wide(b)
        diff = a - b
        if a.dtype.is_floating_point or a.dtype.is_complex:
            nan_a = torch.isnan(a)
            self.assertTrue(torch.equal(nan_a, torch.isnan(b)),
                            message or "NaN at different positions")
            diff[nan_a] = 0
            if allow_inf:
                inf_a = torch.isinf(a)
                same_inf = torch.equal(inf_a, torch.isinf(b)) and torch.equal(a[inf_a], b[inf_a])
                self.assertTrue(same_inf, message or "infinities at different positions")
                diff[inf_a] = 0
        max_err = diff.abs().max().item()
        self.assertLessEqual(max_err, prec, message)

    def _assert_numbers_close(self, x, y, prec, message, allow_inf):
        if isinstance(x, torch.Tensor):
            x = x.item()
        if isinstance(y, torch.Tensor):
            y = y.item()
        if abs(x) == float("inf") or abs(y) == float("inf"):
            if not allow_inf:
                self.fail(f"Expected finite numeric values - x={x}, y={y}")
            unittest.TestCase.assertEqual(self, x, y, message)
            return
        unittest.TestCase.assertLessEqual(self, abs(x - y), prec, message)

    def _assert_arrays_close(self, x, y, prec, message, allow_inf):
        # torch_npu walks numpy arrays item by item with the number rule (so NaN never
        # equals NaN); this is the same rule, vectorised.
        unittest.TestCase.assertEqual(self, x.shape, y.shape, message)
        a, b = x.astype(np.float64), y.astype(np.float64)
        inf = np.isinf(a) | np.isinf(b)
        if inf.any():
            if not allow_inf:
                self.fail(f"Expected finite numeric values in both arrays {message}")
            self.assertTrue(np.array_equal(a[inf], b[inf]), message or "infinities differ")
        err = np.abs(a[~inf] - b[~inf])
        worst = float(err.max(initial=0.0)) if not np.isnan(err).any() else float("nan")
        unittest.TestCase.assertLessEqual(self, worst, prec, message)

    def assertEqual(self, x, y, prec=None, message="", allow_inf=False, exact_dtype=None):
        if exact_dtype is None:
            exact_dtype = self.exact_dtype
        if isinstance(prec, str) and message == "":
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        self._assert_equal(x, y, prec, message, allow_inf, exact_dtype)

    def _assert_equal(self, x, y, prec, message, allow_inf, exact_dtype):
        recurse = lambda a, b: self._assert_equal(a, b, prec, message, allow_inf, exact_dtype)
        if isinstance(x, np.bool_) or isinstance(y, np.bool_):
            x = x.item() if isinstance(x, (torch.Tensor, np.generic)) else x
            y = y.item() if isinstance(y, (torch.Tensor, np.generic)) else y
            unittest.TestCase.assertEqual(self, x, y, message)
        elif isinstance(x, Number) or isinstance(y, Number):
            self._assert_numbers_close(x, y, prec, message, allow_inf)
        elif isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            unittest.TestCase.assertEqual(self, x.is_sparse, y.is_sparse, message)
            if x.is_sparse:
                x, y = x.coalesce(), y.coalesce()
                self._assert_tensors_close(x.indices(), y.indices(), message, exact_dtype,
                                           allow_inf, prec)
                self._assert_tensors_close(x.values(), y.values(), message, exact_dtype,
                                           allow_inf, prec)
            else:
                self._assert_tensors_close(x, y, message, exact_dtype, allow_inf, prec)
        elif isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype != object:
            self._assert_arrays_close(x, y, prec, message, allow_inf)
        elif isinstance(x, (str, bytes)) and isinstance(y, (str, bytes)):
            unittest.TestCase.assertEqual(self, x, y, message)
        elif type(x) is set and type(y) is set:
            unittest.TestCase.assertEqual(self, x, y, message)
        elif isinstance(x, dict) and isinstance(y, dict):
            if isinstance(x, OrderedDict) and isinstance(y, OrderedDict):
                recurse(list(x.items()), list(y.items()))
            else:
                recurse(set(x.keys()), set(y.keys()))
                keys = list(x.keys())
                recurse([x[k] for k in keys], [y[k] for k in keys])
        elif is_iterable(x) and is_iterable(y):
            unittest.TestCase.assertEqual(self, len(x), len(y), message)
            for x_item, y_item in zip(x, y):
                recurse(x_item, y_item)
        else:
            unittest.TestCase.assertEqual(self, x, y, message)

    def assertAlmostEqual(self, x, y, places=None, msg=None, delta=None, allow_inf=None):
        prec = 10 ** (-places) if places else delta
        self.assertEqual(x, y, prec, msg or "", bool(allow_inf))

    def assertNotEqual(self, x, y, prec=None, message=""):
        """torch_npu: tensors differ when their largest difference is at least ``prec``."""
        if isinstance(prec, str) and message == "":
            message, prec = prec, None
        if prec is None:
            prec = self.precision
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.size() != y.size():
                return
            self.assertGreater(x.numel(), 0)
            a = _wide(x.detach().cpu())
            b = _wide(y.detach().cpu().to(x.dtype))
            nan_a = torch.isnan(a) if a.dtype.is_floating_point else torch.zeros_like(a, dtype=torch.bool)
            nan_b = torch.isnan(b) if b.dtype.is_floating_point else torch.zeros_like(b, dtype=torch.bool)
            if torch.equal(nan_a, nan_b):
                diff = (a - b).abs()
                diff[nan_a] = 0
                self.assertGreaterEqual(diff.max().item(), prec, message)
        elif isinstance(x, str) and isinstance(y, str):
            unittest.TestCase.assertNotEqual(self, x, y)
        elif is_iterable(x) and is_iterable(y):
            unittest.TestCase.assertNotEqual(self, x, y)
        else:
            try:
                self.assertGreaterEqual(abs(x - y), prec, message)
                return
            except (TypeError, AssertionError):
                pass
            unittest.TestCase.assertNotEqual(self, x, y, message)

    def assertTensorsSlowEqual(self, x, y, prec=None, message=""):
        """Element by element: equal sizes and dtypes, max |x - y| <= prec."""
        self.assertEqual(x.size(), y.size())
        self.assertEqual(x.dtype, y.dtype)
        if x.dtype == torch.bool:
            self.assertEqual(x, y)
            return
        worst = max((abs(x[i].item() - y[i].item()) for i in iter_indices(x)), default=0)
        self.assertLessEqual(worst, self.precision if prec is None else prec, message)

    def assertObjectIn(self, obj, iterable):
        if not any(obj is item for item in iterable):
            raise AssertionError("object not found in iterable")
