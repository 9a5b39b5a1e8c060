"""``torch_npu.testing``: registration in the shim, input makers, skip decorators, run_tests.

The torch_npu-side facts the expectations come from (torch_npu ``testing/common_utils.py``,
``testing/testcase.py``): ``SupportedDevices`` cuts the SoC name to 10 characters, 12 for
``Ascend910_*``, 9 for ``Ascend950*``; ``get_npu_device`` is ``npu:$SET_NPU_DEVICE`` (``npu:0``
when unset); ``create_common_tensor`` draws ``np.random.uniform(min, max, shape)`` cast to the
numpy dtype; ``TestCase.setUp`` seeds torch and ``random`` with ``$SEED`` (666).
"""

from __future__ import annotations

import random
import sys
import textwrap
import unittest

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import compat, targets
from npu_anywhere.compat import device as npu_device
from npu_anywhere.compat.npu_testing import common_distributed, common_utils, decorator, soc
from npu_anywhere.compat.npu_testing.testcase import TestCase

TESTING_MODULES = ("torch_npu.testing", "torch_npu.testing.testcase",
                   "torch_npu.testing.common_utils", "torch_npu.testing.common_distributed",
                   "torch_npu.testing.decorator")


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("NPU_ANYWHERE_SOC", "NPU_ANYWHERE_CANN_VERSION", "SET_NPU_DEVICE", "SEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NPU_ANYWHERE_DEVICE", "cpu")
    with targets.strict(None):
        yield monkeypatch


def _outcome(decorator, **env) -> str:
    """Run one decorated test method; "ran", "skipped: <reason>" or "failed"."""
    class Case(TestCase):
        @decorator
        def test_it(self):
            pass

    result = unittest.TestResult()
    Case("test_it").run(result)
    if result.skipped:
        return f"skipped: {result.skipped[0][1]}"
    return "ran" if result.wasSuccessful() else "failed"


# -- registration ---------------------------------------------------------------------------

def test_install_registers_and_uninstall_removes_the_testing_modules(clean_env):
    if npu_anywhere.library.REAL_TORCH_NPU or compat.installed():
        pytest.skip("the shim is not ours to install in this process")
    assert not any(name in sys.modules for name in TESTING_MODULES)
    npu_anywhere.install(device_strings_enabled=False)
    try:
        from torch_npu.testing.common_distributed import skipIfUnsupportMultiNPU
        from torch_npu.testing.common_utils import (SkipIfNotGteCANNVersion, SupportedDevices,
                                                    create_common_tensor, create_dtype_tensor,
                                                    get_npu_device)
        from torch_npu.testing.testcase import TestCase as ShimTestCase, run_tests
        from torch_npu.testing.decorator import Dtypes, instantiate_tests
        import torch_npu

        assert ShimTestCase is TestCase and callable(run_tests)
        assert SupportedDevices is common_utils.SupportedDevices
        assert torch_npu.testing.testcase.TestCase is TestCase
        assert skipIfUnsupportMultiNPU is common_distributed.skipIfUnsupportMultiNPU
        assert Dtypes is decorator.Dtypes and instantiate_tests is decorator.instantiate_tests
        assert all(callable(f) for f in (SkipIfNotGteCANNVersion, create_common_tensor,
                                         create_dtype_tensor, get_npu_device))
    finally:
        npu_anywhere.uninstall()
    assert not any(name in sys.modules for name in TESTING_MODULES)


# -- Dtypes / Formats / instantiate_tests ------------------------------------------------------

def test_instantiate_tests_makes_one_method_per_dtype_and_format():
    seen = []

    @decorator.instantiate_tests
    class Case(TestCase):
        @decorator.Formats(0, 29)
        @decorator.Dtypes(torch.float, torch.half)
        def test_op(self, device, dtype, npu_format):
            seen.append((device, dtype, npu_format))

        def test_plain(self):
            seen.append("plain")

    names = sorted(n for n in vars(Case) if n.startswith("test_"))
    assert names == ["test_op_float16_0", "test_op_float16_29", "test_op_float32_0",
                     "test_op_float32_29", "test_plain"]
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert result.wasSuccessful() and result.testsRun == 5
    assert {s for s in seen if s != "plain"} == {
        ("npu", d, f) for d in (torch.float, torch.half) for f in (0, 29)}
    assert Case.test_op_float32_0.__wrapped__.dtypes == (torch.float, torch.half)


def test_dtypes_refuses_what_is_not_a_dtype():
    with pytest.raises(TypeError, match="Dtypes: expected torch dtypes, but got \\['float'\\]"):
        decorator.Dtypes(torch.float, "float")
    with pytest.raises(ValueError, match="Dtypes: expected at least one dtype"):
        decorator.Dtypes()

    @decorator.Dtypes(torch.float)
    def test_two(self, dtype, src_dtype):
        pass

    class Holder(TestCase):
        pass
    Holder.test_two = test_two
    with pytest.raises(TypeError, match="expected one parameter naming 'dtype'"):
        decorator.instantiate_tests(Holder)
    assert decorator.graph_mode(lambda a: a + 1)(1) == 2


# -- devices and inputs ---------------------------------------------------------------------

def test_get_npu_device_reads_set_npu_device(clean_env):
    assert common_utils.get_npu_device() == "npu:0"
    clean_env.setenv("SET_NPU_DEVICE", "3")
    assert common_utils.get_npu_device() == "npu:3"


@pytest.mark.parametrize("np_dtype, low, high", [(np.float16, -2, 2), (np.float32, 0.5, 1.5),
                                                  (np.int32, -10, 10)])
def test_create_common_tensor_returns_the_same_values_twice(clean_env, np_dtype, low, high):
    np.random.seed(0)
    cpu, npu = common_utils.create_common_tensor([np_dtype, -1, (3, 5)], low, high)
    assert cpu.device.type == "cpu" and npu.device == npu_device.local_device()
    assert cpu.dtype == torch.from_numpy(np.zeros(1, np_dtype)).dtype
    assert cpu.shape == npu.shape == (3, 5)
    assert torch.equal(cpu, npu.cpu())
    assert (cpu.double() >= low).all() and (cpu.double() <= high).all()
    # The values are np.random.uniform's, cast to the dtype (ints truncated toward zero).
    np.random.seed(0)
    want = np.random.uniform(low, high, (3, 5)).astype(np_dtype)
    assert np.array_equal(cpu.numpy(), want)


def test_create_common_tensor_format_cast_and_device_argument(clean_env):
    _, npu = common_utils.create_common_tensor([np.float16, 29, (32, 32)], -1, 1, device="npu:0")
    assert npu_anywhere.get_npu_format(npu) == 29
    cpu, other = common_utils.create_common_tensor([np.float32, -1, (4,)], 0, 1, device="cpu")
    assert other.device.type == "cpu" and torch.equal(cpu, other)


@pytest.mark.parametrize("dtype, want", [(torch.bool, torch.bool), (torch.half, torch.float16),
                                         (torch.float, torch.float32), (torch.int64, torch.int32)])
def test_create_dtype_tensor_dtypes_and_no_zero(clean_env, dtype, want):
    cpu, npu = common_utils.create_dtype_tensor((64,), dtype, min_value=-1, max_value=1,
                                                no_zero=True)
    assert cpu.dtype == npu.dtype == want and torch.equal(cpu, npu.cpu())
    if dtype is not torch.bool:
        assert (cpu != 0).all() and (cpu >= -1).all() and (cpu <= 1).all()


# -- SupportedDevices -----------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [("Ascend910B4", "Ascend910B"), ("Ascend910B1", "Ascend910B"),
                                       ("Ascend910_9391", "Ascend910_93"),
                                       ("Ascend950PR", "Ascend950"), ("Ascend950DT", "Ascend950"),
                                       ("Ascend310P3", "Ascend310P"),
                                       ("Ascend910PremiumA", "Ascend910P")])
def test_device_key_cuts_soc_names_like_torch_npu(name, key):
    assert soc.device_key(name) == key


def test_supported_devices_runs_everything_without_a_target(clean_env):
    assert _outcome(common_utils.SupportedDevices(["Ascend950"])) == "ran"
    assert _outcome(common_utils.SupportedDevices(["Ascend310P"])) == "ran"


def test_without_a_target_a_one_product_test_runs_as_that_product(clean_env):
    seen = []

    class Case(TestCase):
        @common_utils.SupportedDevices(["Ascend950"])
        def test_950(self):
            seen.append(targets.current())

        @common_utils.SupportedDevices(["Ascend910B"])
        def test_a2(self):
            seen.append(targets.current())

        @common_utils.SupportedDevices(["Ascend910B", "Ascend950"])
        def test_two(self):
            seen.append(targets.current())

    for name in ("test_950", "test_a2", "test_two"):
        result = unittest.TestResult()
        Case(name).run(result)
        assert result.wasSuccessful(), result.errors
    assert seen == [targets.Product.ASCEND_950, None, None]
    assert targets.current() is None                  # the target ends with the test


@pytest.mark.parametrize("product, key", [("A2", "Ascend910B"), ("A3", "Ascend910_93"),
                                          ("950", "Ascend950"), ("310P", "Ascend310P")])
def test_supported_devices_follows_the_strict_target(clean_env, product, key):
    others = [k for k in ("Ascend910B", "Ascend910_93", "Ascend950", "Ascend310P") if k != key]
    with npu_anywhere.strict(product):
        assert _outcome(common_utils.SupportedDevices([key])) == "ran"
        assert _outcome(common_utils.SupportedDevices(["Ascend910_95", key])) == "ran"
        outcome = _outcome(common_utils.SupportedDevices(others))
    assert outcome.startswith("skipped") and f"current device is {key}" in outcome


def test_supported_devices_follows_npu_anywhere_soc(clean_env):
    clean_env.setenv("NPU_ANYWHERE_SOC", "Ascend910B2")
    assert _outcome(common_utils.SupportedDevices(["Ascend910B"])) == "ran"
    assert _outcome(common_utils.SupportedDevices(["Ascend950"])).startswith("skipped")
    clean_env.setenv("NPU_ANYWHERE_SOC", "Ascend950PR")
    assert _outcome(common_utils.SupportedDevices(["Ascend910_93", "Ascend950"])) == "ran"


def test_npu_anywhere_soc_runs_the_test_in_strict_mode(clean_env):
    seen = []

    class Case(TestCase):
        def test_product(self):
            seen.append(targets.current())

    clean_env.setenv("NPU_ANYWHERE_SOC", "Ascend910_9392")
    assert Case("test_product").run().wasSuccessful()
    clean_env.delenv("NPU_ANYWHERE_SOC")
    assert Case("test_product").run().wasSuccessful()
    assert seen == [targets.Product.A3, None]


def test_npu_anywhere_soc_must_be_known_and_agree_with_strict(clean_env):
    clean_env.setenv("NPU_ANYWHERE_SOC", "Ascend999")
    with pytest.raises(ValueError, match="NPU_ANYWHERE_SOC: expected a SoC name"):
        soc.emulated_soc()
    clean_env.setenv("NPU_ANYWHERE_SOC", "Ascend950PR")
    with npu_anywhere.strict("A2"), pytest.raises(ValueError, match="strict target A2"):
        soc.emulated_soc()


# -- SkipIfNotGteCANNVersion and skipIfUnsupportMultiNPU ------------------------------------

@pytest.mark.parametrize("current, base, outcome", [
    (None, "9.0.0", "ran"), ("8.5.0", "8.5.0", "ran"), ("9.0.0", "8.5.0", "ran"),
    ("8.3.RC1", "8.3.0", "skipped"), ("8.3.0", "8.3.RC1", "ran"), ("8.2.0", "8.10.0", "skipped"),
])
def test_skip_if_not_gte_cann_version(clean_env, current, base, outcome):
    if current is not None:
        clean_env.setenv("NPU_ANYWHERE_CANN_VERSION", current)
    got = _outcome(common_utils.SkipIfNotGteCANNVersion(base))
    assert got.split(":")[0] == outcome
    if outcome == "skipped":
        assert f"Only run on {base} or greater, current cann version is {current}." in got


def test_skip_if_not_gte_cann_version_rejects_bad_versions():
    with pytest.raises(ValueError, match="expected a version"):
        common_utils.SkipIfNotGteCANNVersion("nine")


def test_skip_if_unsupport_multi_npu(clean_env):
    deco = common_distributed.skipIfUnsupportMultiNPU
    assert _outcome(deco(2)).startswith("skipped: Multi-NPU 2")
    clean_env.setattr(npu_device, "is_available", lambda: True)
    assert _outcome(deco(1)) == "ran"
    clean_env.setattr(npu_device, "device_count", lambda: 8)
    assert _outcome(deco(8)) == "ran"
    assert _outcome(deco(16)).startswith("skipped")


# -- TestCase lifecycle and run_tests -------------------------------------------------------

def test_setup_seeds_torch_and_random_from_seed(clean_env):
    draws = []

    class Case(TestCase):
        def test_draw(self):
            draws.append((torch.rand(3), random.random()))

    for seed in (None, None, "7"):
        if seed is not None:
            clean_env.setenv("SEED", seed)
        assert Case("test_draw").run().wasSuccessful()
    (t0, r0), (t1, r1), (t2, r2) = draws
    assert torch.equal(t0, t1) and r0 == r1
    torch.manual_seed(666)
    assert torch.equal(t0, torch.rand(3))
    assert not torch.equal(t0, t2) and r0 != r2


def test_setup_class_makes_the_npu_device_current(clean_env):
    class Case(TestCase):
        pass

    Case.setUpClass()
    assert Case.npu_device == "npu:0"
    clean_env.setenv("SET_NPU_DEVICE", "5")  # a rank's device: the CPU stand-in takes any index
    Case.setUpClass()
    assert Case.npu_device == "npu:5"


def test_run_tests_runs_the_module_and_exits_like_unittest(cli, tmp_path):
    script = tmp_path / "test_some_op.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import torch
        from npu_anywhere.compat.npu_testing.testcase import TestCase, run_tests
        from npu_anywhere.compat.npu_testing.common_utils import SupportedDevices

        class TestSomeOp(TestCase):
            def test_close(self):
                self.assertRtolEqual(np.ones(4, np.float32), np.ones(4, np.float32))

            @SupportedDevices(["Ascend950"])
            def test_950_only(self):
                self.assertEqual(torch.ones(2), torch.ones(2))

            def test_far(self):
                self.assertRtolEqual(torch.ones(4), torch.zeros(4))

        if __name__ == "__main__":
            run_tests()
    """))
    # One interpreter (each costs an `import torch`): strict A2 skips the 950-only test.
    proc = cli.python(str(script), "-v", NPU_ANYWHERE_STRICT="A2")
    assert proc.returncode == 1, cli.describe(proc)
    assert "test_close (__main__.TestSomeOp.test_close) ... ok" in proc.stderr, cli.describe(proc)
    assert "test_950_only (__main__.TestSomeOp.test_950_only) ... skipped" in proc.stderr
    assert "FAILED (failures=1, skipped=1)" in proc.stderr, cli.describe(proc)
