"""The ``torch.npu`` device API of the shim, in process (``install(device_strings_enabled=
False)``, undone after each test; stand-in device: cpu): seeding, device names per product,
typed tensors, device contexts, memory queries, streams, amp."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

import npu_anywhere
from npu_anywhere import compat


@pytest.fixture
def npu(monkeypatch):
    if npu_anywhere.library.REAL_TORCH_NPU:
        pytest.skip("a real torch_npu is installed; the shim stands aside")
    if compat.installed():
        pytest.skip("npu_anywhere.install() was already called in this process")
    monkeypatch.setenv("NPU_ANYWHERE_DEVICE", "cpu")
    npu_anywhere.install(device_strings_enabled=False)
    try:
        yield torch.npu
    finally:
        npu_anywhere.uninstall()
    assert "torch_npu.npu.utils" not in sys.modules and not compat.torch_npu_present()


def test_seeding_hooks_torch_asks_for(npu):
    # torch.manual_seed looks for these two on the device module (else it warns every time).
    assert npu._is_in_bad_fork() is False
    npu.manual_seed_all(5)
    a = torch.randn(4)
    npu.manual_seed(5)
    assert torch.equal(torch.randn(4), a)
    assert npu.initial_seed() == 5
    state = npu.get_rng_state()
    b = torch.randn(4)
    npu.set_rng_state(state)
    assert torch.equal(torch.randn(4), b)
    npu.set_rng_state_all([state])
    assert torch.equal(torch.randn(4), b)
    assert len(npu.get_rng_state_all()) == npu.device_count()


@pytest.mark.parametrize("product,name,bf16", [
    (None, "Ascend910B4", True), ("A2", "Ascend910B4", True), ("A3", "Ascend910_9391", True),
    ("910", "Ascend910A", False), ("310P", "Ascend310P3", False), ("950", "Ascend950PR", True)])
def test_device_name_is_the_strict_mode_product(npu, monkeypatch, product, name, bf16):
    monkeypatch.delenv("NPU_ANYWHERE_SOC", raising=False)
    with npu_anywhere.strict(product):
        assert npu.get_device_name() == npu.get_device_name(0) == name
        assert npu.is_bf16_supported() is bf16
        props = npu.get_device_properties(0)
        assert props.name == name and props.total_memory > 0
        assert props.cube_core_num > 0 and props.L2_cache_size > 0
        import torch_npu.npu.utils
        assert torch_npu.npu.utils.get_device_name() == name


def test_device_name_follows_npu_anywhere_soc(npu, monkeypatch):
    monkeypatch.setenv("NPU_ANYWHERE_SOC", "Ascend310P1")
    assert npu.get_device_name() == "Ascend310P1" and not npu.is_bf16_supported()
    monkeypatch.setenv("NPU_ANYWHERE_SOC", "Ascend910B2")
    assert npu.get_device_name() == "Ascend910B2" and npu.is_bf16_supported()


@pytest.mark.parametrize("product,soc,code", [
    ("A2", None, 224), ("A2", "Ascend910B1", 220), ("A3", None, 250), ("310P", None, 202),
    ("950", None, 260), ("910", None, 102), (None, "Ascend910_9392", 251), (None, "Ascend910_9382", 253)])
def test_soc_version_codes_fall_in_torch_npus_ranges(npu, monkeypatch, product, soc, code):
    # Code picks layouts by range: 220-225 A2, 250-255 A3, 200-205 310P, 260 the 950.
    if soc is None:
        monkeypatch.delenv("NPU_ANYWHERE_SOC", raising=False)
    else:
        monkeypatch.setenv("NPU_ANYWHERE_SOC", soc)
    import torch_npu
    with npu_anywhere.strict(product):
        assert npu.get_soc_version() == torch_npu._C._npu_get_soc_version() == code


def test_typed_tensor_constructors(npu):
    t = npu.FloatTensor(2, 3)
    assert t.shape == (2, 3) and t.dtype == torch.float32 and t.device.type == "cpu"
    assert torch.equal(npu.LongTensor([1, 2]), torch.tensor([1, 2]))
    assert npu.LongTensor([1, 2]).dtype == torch.int64
    h = npu.HalfTensor(torch.tensor([1.5, 2.0]))
    assert h.dtype == torch.float16 and torch.equal(h.float(), torch.tensor([1.5, 2.0]))
    assert npu.BFloat16Tensor(torch.Size([4])).dtype == torch.bfloat16
    assert npu.IntTensor().shape == (0,)
    for cls, dtype in ((npu.FloatTensor, torch.float32), (npu.HalfTensor, torch.float16),
                       (npu.BFloat16Tensor, torch.bfloat16), (npu.IntTensor, torch.int32),
                       (npu.LongTensor, torch.int64), (npu.BoolTensor, torch.bool),
                       (npu.ByteTensor, torch.uint8), (npu.CharTensor, torch.int8),
                       (npu.ShortTensor, torch.int16), (npu.DoubleTensor, torch.float64)):
        assert isinstance(torch.zeros(1, dtype=dtype), cls)
        assert not isinstance(torch.zeros(1, dtype=torch.complex64), cls)
        assert not isinstance("not a tensor", cls)


def test_device_context_and_set_device(npu):
    with npu.device(0) as ctx:
        assert npu.current_device() == 0 and ctx.idx == 0
    with npu.device("npu:0"):
        assert npu.current_device() == 0
    with npu.device(None):
        assert npu.current_device() == 0
    with pytest.raises(TypeError, match="torch.npu.device: expected an int, str or torch.device"):
        npu.device(1.5)
    with npu.device(3):                 # any index names the one CPU (a rank's device)
        assert npu.current_device() == 0


def test_memory_queries_on_the_cpu(npu):
    for query in (npu.memory_allocated, npu.max_memory_allocated, npu.memory_reserved,
                  npu.max_memory_reserved, npu.memory_cached, npu.max_memory_cached):
        assert query() == 0
    assert npu.empty_cache() is None and npu.reset_peak_memory_stats() is None
    assert npu.reset_max_memory_allocated() is None
    free, total = npu.mem_get_info()
    assert 0 < free <= total
    assert npu.memory_stats() == {} and "CPU" in npu.memory_summary()


def test_streams_and_stream_context(npu):
    s = npu.Stream()
    with npu.stream(s):
        torch.ones(2).add_(1)
    with s:
        pass
    npu.set_stream(s)
    s.wait_stream(npu.current_stream())
    event = s.record_event()
    assert event.query() and s.query()
    npu.synchronize()
    assert npu.default_stream() is npu.current_stream()


def test_amp_autocast_is_the_local_device_in_float16(npu):
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    with npu.amp.autocast():
        out = a @ b
        assert torch.is_autocast_enabled("cpu")
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), a.half().double() @ b.half().double(),
                               rtol=2e-3, atol=2e-3)
    with npu.amp.autocast(dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16
    with npu.amp.autocast(enabled=False):
        assert (a @ b).dtype == torch.float32
    assert importlib.import_module("torch.npu.amp").GradScaler is npu.amp.GradScaler


def test_grad_scaler_scales_and_unscales(npu):
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = npu.amp.GradScaler(init_scale=8.0)
    scaler.scale((w * w).sum()).backward()
    assert torch.equal(w.grad, torch.tensor([16.0, -32.0]))  # 8 * 2w
    scaler.step(opt)
    scaler.update()
    assert torch.equal(w.detach(), torch.tensor([-1.0, 2.0]))  # w - 2w
    assert scaler.get_scale() == 8.0  # no inf seen: the scale grows only after the interval


def test_transfer_to_npu_needs_the_device_strings(npu):
    with pytest.raises(ImportError, match="expected npu_anywhere.install\\(\\) with the device "
                       "strings enabled"):
        from torch_npu.contrib import transfer_to_npu  # noqa: F401
    import torch_npu.contrib
    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        torch_npu.contrib.not_a_module


def test_switches_scripts_set_are_accepted(npu):
    npu.matmul.allow_hf32 = False
    npu.conv.allow_hf32 = False
    npu.config.allow_internal_format = False
    npu.set_compile_mode(jit_compile=False)
    assert npu.is_initialized() and npu.init() is None


def test_switches_live_in_torch_npus_option_table(npu):
    """What op-plugin's tests do in setUp / tearDown: save an option as bytes, set the switch,
    restore it from the saved bytes (any truthy value enables, as in torch_npu)."""
    import torch_npu
    saved = torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT")
    try:
        npu.config.allow_internal_format = True
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"enable"
        assert npu.config.allow_internal_format is True
        npu.config.allow_internal_format = False
        assert torch_npu._C._npu_getOption("ALLOW_INTERNAL_FORMAT") == b"disable"
        assert npu.config.allow_internal_format is False
        torch_npu._C._npu_setOption({"ALLOW_MATMUL_HF32": "enable"})
        assert npu.matmul.allow_hf32 is True
        torch_npu._C._npu_setOption({"ALLOW_MATMUL_HF32": "disable"})
        assert npu.matmul.allow_hf32 is False
        npu.set_option({"ALLOW_MATMUL_HF32": "enable"})      # torch.npu.set_option: same table
        assert npu.matmul.allow_hf32 is True
        npu.set_option({"ALLOW_MATMUL_HF32": "disable"})
        assert torch_npu._C._npu_getOption("NO_SUCH_OPTION_EVER_SET") is None
        with pytest.raises(TypeError, match="_npu_setOption: expected options a dict"):
            torch_npu._C._npu_setOption("ALLOW_MATMUL_HF32")
    finally:
        npu.config.allow_internal_format = saved == b"enable"


def test_get_npu_format_answers_with_the_format_enum(npu):
    import torch_npu
    weight = torch.randn(64, 32)
    nz = torch_npu.npu_format_cast(weight, 29)
    assert torch_npu.get_npu_format(nz) == torch_npu.Format.FRACTAL_NZ
    assert isinstance(torch_npu.get_npu_format(nz), torch_npu.Format)
    assert str(torch_npu.get_npu_format(nz)) == "FRACTAL_NZ"
    assert torch_npu.get_npu_format(weight) == torch_npu.Format.ND == 2
    assert torch_npu.get_npu_format(torch.zeros(1, 2, 3, 4)) is torch_npu.Format.NCHW
    assert torch_npu.npu_format_cast(weight, torch_npu.Format.FRACTAL_NZ).shape == weight.shape
    # torch_npu's Tensor methods (op-plugin's tests call cpu_input.npu_format_cast(fmt))
    method_nz = weight.npu_format_cast(29)
    assert torch_npu.get_npu_format(method_nz) == torch_npu.Format.FRACTAL_NZ
    assert torch.equal(method_nz, weight) and torch_npu.get_npu_format(weight) == 2
    assert weight.npu_format_cast_(29) is weight
    assert torch_npu.get_npu_format(weight) == torch_npu.Format.FRACTAL_NZ


def test_tensor_methods_leave_with_the_shim():
    if npu_anywhere.library.REAL_TORCH_NPU or compat.installed():
        pytest.skip("a real torch_npu, or the shim already installed in this process")
    npu_anywhere.install(device_strings_enabled=False)
    try:
        assert hasattr(torch.Tensor, "npu_format_cast")
    finally:
        npu_anywhere.uninstall()
    assert not hasattr(torch.Tensor, "npu_format_cast")
    assert not hasattr(torch.Tensor, "npu_format_cast_")


def test_after_a_full_install_and_uninstall_torch_still_compiles_and_seeds_quietly():
    """The renamed backend stays torch's accelerator: uninstall leaves an inert torch.npu so
    that torch.accelerator (asked on every compile) and torch.manual_seed keep working."""
    import subprocess
    code = (
        "import warnings, torch, npu_anywhere\n"
        "warnings.simplefilter('error')\n"
        "npu_anywhere.install(); torch.zeros(1).npu(); npu_anywhere.uninstall()\n"
        "from npu_anywhere import compat\n"
        "assert not compat.torch_npu_present() and not torch.npu.is_available()\n"
        "torch.manual_seed(0)\n"
        "f = torch.compile(lambda t: t.sin(), backend='eager', fullgraph=True)\n"
        "assert torch.equal(f(torch.zeros(2)), torch.zeros(2))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ,
                                            "NPU_ANYWHERE_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
