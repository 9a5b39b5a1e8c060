"""The compatibility layer: ``import torch_npu`` / ``cann_ops_transformer``, ``torch.npu``,
``device="npu"`` and the ``npu-anywhere`` CLI (``run``, ``ops``, ``demo``).

``install()`` is process-global, and the part that maps ``"npu"`` device strings renames torch's
PrivateUse1 backend irreversibly, so the in-process tests install with
``device_strings_enabled=False`` around each test (and check that ``uninstall()`` restores
``sys.modules``), and everything touching device strings or ``is_available`` runs in a fresh
interpreter through the CLI.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

import npu_anywhere
from npu_anywhere import compat

SHIM_MODULES = ("torch_npu", "torch_npu.npu", "torch.npu", "cann_ops_transformer",
                "cann_ops_transformer.ops")


def _snapshot():
    return {name: sys.modules.get(name) for name in SHIM_MODULES}, compat.torch_npu_present()


@pytest.fixture
def shim(monkeypatch):
    """npu_anywhere.install() for one test, undone afterwards (local device: cpu)."""
    if npu_anywhere.library.REAL_TORCH_NPU or npu_anywhere.library.REAL_CANN_OPS_TRANSFORMER:
        pytest.skip("a real torch_npu / cann_ops_transformer is installed; the shim stands aside")
    if compat.installed():
        pytest.skip("npu_anywhere.install() was already called in this process")
    monkeypatch.setenv("NPU_ANYWHERE_DEVICE", "cpu")
    before = _snapshot()
    assert before == ({name: None for name in SHIM_MODULES}, False)
    npu_anywhere.install(device_strings_enabled=False)
    try:
        yield
    finally:
        npu_anywhere.uninstall()
    assert _snapshot() == before, "uninstall() did not restore sys.modules / torch.npu"
    assert not compat.installed()


# -- in process --------------------------------------------------------------------------------

def test_import_torch_npu_forwards_to_npu_anywhere(shim):
    import torch_npu
    import torch_npu.npu

    assert torch_npu.npu_rotary_mul is npu_anywhere.npu_rotary_mul
    assert torch_npu.npu_rotary_mul_backward is npu_anywhere.npu_rotary_mul_backward
    assert torch_npu.npu_apply_rotary_pos_emb is npu_anywhere.npu_apply_rotary_pos_emb
    assert torch_npu.npu is torch.npu is sys.modules["torch_npu.npu"]
    x = torch.rand(1, 2, 3, 4)
    r1, r2 = torch.rand(1, 2, 1, 4), torch.rand(1, 2, 1, 4)
    x1, x2 = torch.chunk(x.double(), 2, -1)
    expected = r1.double() * x.double() + r2.double() * torch.cat((-x2, x1), dim=-1)
    torch.testing.assert_close(torch_npu.npu_rotary_mul(x, r1, r2).double(), expected)


def test_shim_modules_can_be_probed_with_find_spec(shim):
    # transformers / accelerate probe for torch_npu with importlib.util.find_spec.
    import importlib.util

    for name in ("torch_npu", "torch_npu.npu", "torch.npu", "torch_npu.contrib",
                 "cann_ops_transformer", "cann_ops_transformer.ops"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.name == sys.modules[name].__name__, name
    assert importlib.util.find_spec("torch_npu").submodule_search_locations is not None


def test_cann_ops_transformer_import(shim):
    from cann_ops_transformer.ops import apply_rotary_pos_emb
    import cann_ops_transformer

    assert apply_rotary_pos_emb is npu_anywhere.apply_rotary_pos_emb
    assert cann_ops_transformer.apply_rotary_pos_emb is apply_rotary_pos_emb
    assert cann_ops_transformer.ops.apply_rotary_pos_emb_grad is npu_anywhere.apply_rotary_pos_emb_grad
    q, k = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 1, 8)
    cos, sin = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
    q_out, k_out = apply_rotary_pos_emb(q, k, cos, sin, layout="BSND", rotary_mode="half")

    def rot(t):
        return torch.cat((-t[..., 4:], t[..., :4]), dim=-1)
    for out, t in ((q_out, q), (k_out, k)):
        torch.testing.assert_close(out.double(), t.double() * cos.double() + rot(t.double()) * sin.double())


def _missing_documented(api):
    """A documented op of ``api`` that nothing implements (looked up now: ops keep landing)."""
    from npu_anywhere.compat.unimplemented import documented_ops
    for name, entry in sorted(documented_ops().items()):
        if (entry["api"] == api and not name.startswith("_")
                and name not in npu_anywhere.ops.TORCH_NPU_FUNCTIONS
                and not hasattr(torch.ops.npu, name)):
            return name
    pytest.skip(f"every documented {api} op is implemented")


def test_documented_but_unimplemented_op_is_absent_and_raises_not_implemented(shim):
    import torch_npu
    from npu_anywhere.compat.unimplemented import NotImplementedOpError

    name = _missing_documented("torch_npu")
    # Feature detection sees the truth...
    assert not hasattr(torch_npu, name)
    assert getattr(torch_npu, name, None) is None
    # ...and a direct call names the op as not implemented (before any argument is looked at).
    with pytest.raises(NotImplementedError, match=f"torch_npu.{name} is documented but not "
                       "implemented"):
        getattr(torch_npu, name)(torch.zeros(1), "BSND")
    with pytest.raises(NotImplementedOpError, match=f"torch.ops.npu.{name} is documented"):
        getattr(torch.ops.npu, name)
    assert not hasattr(torch.ops.npu, name)
    assert hasattr(torch.ops.npu, "npu_rotary_mul")
    # An op of the "custom" api is reachable through torch_npu too.
    custom = _missing_documented("custom")
    with pytest.raises(NotImplementedError, match=custom):
        getattr(torch_npu, custom)()
    # ...but a torch_npu op is not part of cann_ops_transformer.
    import cann_ops_transformer.ops
    with pytest.raises(AttributeError) as info:
        getattr(cann_ops_transformer.ops, name)
    assert not isinstance(info.value, NotImplementedError)


def test_implemented_set_is_read_at_lookup_time(shim, monkeypatch):
    import torch_npu

    name = _missing_documented("torch_npu")
    assert not hasattr(torch_npu, name)
    monkeypatch.setitem(npu_anywhere.ops.TORCH_NPU_FUNCTIONS, name, npu_anywhere.npu_rotary_mul)
    assert getattr(torch_npu, name) is npu_anywhere.npu_rotary_mul


def test_uninstall_restores_torch_ops_namespace(shim):
    assert type(torch.ops.npu).__name__.startswith("DocumentedOpNamespace")


def test_unknown_name_raises_attribute_error(shim):
    import torch_npu
    import cann_ops_transformer

    with pytest.raises(AttributeError, match="npu_definitely_not_an_op"):
        torch_npu.npu_definitely_not_an_op
    assert not hasattr(torch_npu, "npu_definitely_not_an_op")
    with pytest.raises(ImportError):
        from torch_npu import npu_definitely_not_an_op  # noqa: F401
    with pytest.raises(AttributeError):
        cann_ops_transformer.ops.definitely_not_an_op
    with pytest.raises(AttributeError):
        cann_ops_transformer.definitely_not_an_op


def test_device_api_on_cpu(shim):
    import torch_npu

    npu = torch.npu
    assert torch_npu.npu.set_device is npu.set_device
    assert npu.device_count() >= 1
    assert npu.current_device() == 0
    npu.set_device(0)
    npu.set_device("npu:0")
    npu.set_device(7)          # a rank's device in a multi-process script: the one CPU
    with pytest.raises(RuntimeError, match="expected a device index >= 0, but got -1"):
        npu.set_device(-1)
    assert npu.current_device() == 0
    npu.synchronize()
    stream = npu.current_stream()
    assert stream is not None and stream.query() is True
    stream.synchronize()
    start, end = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
    start.record()
    torch.ones(64, 64) @ torch.ones(64, 64)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float) and elapsed >= 0.0
    with pytest.raises(RuntimeError):
        npu.Event(enable_timing=True).elapsed_time(end)  # never recorded
    free, total = npu.mem_get_info()
    assert isinstance(free, int) and isinstance(total, int) and 0 < free <= total
    assert npu.local_device() == torch.device("cpu")


def test_uninstall_restores_sys_modules():
    if compat.installed():
        pytest.skip("npu_anywhere.install() was already called in this process")
    before = _snapshot()
    npu_anywhere.install(device_strings_enabled=False)
    assert sys.modules["torch_npu"].__npu_anywhere_shim__ is True
    assert "cann_ops_transformer.ops" in sys.modules and compat.torch_npu_present()
    npu_anywhere.install(device_strings_enabled=False)  # idempotent
    npu_anywhere.uninstall()
    assert _snapshot() == before
    if not npu_anywhere.library.REAL_TORCH_NPU:
        with pytest.raises(ModuleNotFoundError):
            import torch_npu  # noqa: F401
    if not npu_anywhere.library.REAL_CANN_OPS_TRANSFORMER:
        with pytest.raises(ModuleNotFoundError):
            import cann_ops_transformer  # noqa: F401
    assert type(torch.ops.npu) is torch._ops._OpNamespace
    npu_anywhere.uninstall()  # a second uninstall is harmless


# -- fresh interpreters ------------------------------------------------------------------------

NO_INSTALL = r"""
import sys
import torch
import npu_anywhere

assert "torch_npu" not in sys.modules and not hasattr(torch, "npu")
assert torch._C._get_privateuse1_backend_name() == "privateuseone"
x = torch.rand(2, 2, 5, 8)
r1, r2 = torch.rand(1, 2, 1, 8), torch.rand(1, 2, 1, 8)
x1, x2 = torch.chunk(x.double(), 2, -1)
expected = r1.double() * x.double() + r2.double() * torch.cat((-x2, x1), dim=-1)
torch.testing.assert_close(torch.ops.npu.npu_rotary_mul(x, r1, r2).double(), expected)
torch.testing.assert_close(torch.ops.npu.npu_rotary_mul.default(x, r1, r2, "half", None).double(),
                           expected)
q, k, c, s = (torch.randn(1, 3, n, 8) for n in (2, 2, 1, 1))
q_new, k_new = torch.ops.cann_ops_transformer.apply_rotary_pos_emb(q, k, c, s, "BSND", "half")
assert q_new.shape == q.shape and k_new.shape == k.shape
try:
    import torch_npu
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("torch_npu importable without install()")
assert "torch_npu" not in sys.modules and not hasattr(torch, "npu")
print("NO INSTALL OK")
"""


def test_torch_ops_npu_works_without_install(cli):
    proc = cli.python("-c", NO_INSTALL)
    assert proc.returncode == 0, cli.describe(proc)
    assert "NO INSTALL OK" in proc.stdout, cli.describe(proc)


def _run_checks(cli, *run_options, mode):
    script = str(cli.here / "scripts" / "run_checks.py")
    args = [mode, "--lr", "0.1", "positional", "-v", "--local_rank=0"]
    proc = cli("run", *run_options, script, *args)
    assert proc.returncode == 0, cli.describe(proc)
    assert "RUN CHECKS OK" in proc.stdout, cli.describe(proc)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["argv"] == [script, *args]
    return result


def test_run_default_is_not_available_and_maps_npu_devices(cli):
    result = _run_checks(cli, mode="default")
    assert result["is_available"] is False
    assert result["torch_npu_is_shim"] is True
    assert result["devices"] and all(d == "cpu" for d in result["devices"].values()), result


def test_run_claim_npu_makes_is_available_true(cli):
    result = _run_checks(cli, "--claim-npu", mode="claim")
    assert result["is_available"] is True
    assert all(d == "cpu" for d in result["devices"].values()), result


def test_ops_table(cli):
    proc = cli("ops")
    assert proc.returncode == 0, cli.describe(proc)
    lines = proc.stdout.splitlines()
    header = lines[0].split()
    assert header[:4] == ["name", "api", "family", "implemented"], lines[0]
    rows = {cells[0]: cells for cells in (l.split() for l in lines[2:]) if len(cells) >= 4}
    implemented = header.index("implemented")
    assert rows["npu_rotary_mul"][implemented] == "yes"
    assert rows["npu_apply_rotary_pos_emb"][implemented] == "yes"
    assert rows["apply_rotary_pos_emb"][implemented] == "yes"
    assert rows["npu_fusion_attention"][implemented] == "yes"
    assert rows["npu_fusion_attention"][1] == "torch_npu"
    assert any(r[implemented] == "no" for r in rows.values()), "no missing op listed as such"
    assert "documented ops implemented" in proc.stdout


def test_ops_json(cli):
    proc = cli("ops", "--json")
    assert proc.returncode == 0, cli.describe(proc)
    table = json.loads(proc.stdout)
    assert isinstance(table, list) and len(table) >= 208
    by_name = {row["name"]: row for row in table}
    assert len(by_name) == len(table), "duplicate names"
    assert sum(row["documented"] for row in table) == 208
    assert by_name["npu_rotary_mul"]["implemented"] is True
    assert by_name["npu_rotary_mul"]["api"] == "torch_npu"
    assert by_name["apply_rotary_pos_emb"]["implemented"] is True
    assert by_name["apply_rotary_pos_emb"]["api"] == "cann_ops_transformer"
    assert by_name["npu_fusion_attention"]["implemented"] is True
    assert by_name["npu_fusion_attention"]["api"] == "torch_npu"
    missing = [r for r in table if r["documented"] and not r["implemented"]]
    assert missing and all(r["api"] in ("torch_npu", "cann_ops_transformer", "custom")
                           for r in missing), missing[:3]


def test_demo(cli):
    proc = cli.background("demo")  # `npu-anywhere demo`, started when collection finished
    assert proc.returncode == 0, cli.describe(proc)
    assert proc.stdout.strip(), cli.describe(proc)
