"""``npu-anywhere bench``: progress, spread, shapes, metadata, errors, deferred compilation.

The runner is driven in-process on two tiny hand-made cases (microseconds each), never on the
registered ones (tests/test_cli.py checks that loading those compiles nothing).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import npu_anywhere.bench as bench
from npu_anywhere.bench import registry, runner


def _case(name: str, rows: int) -> registry.Case:
    def make(device):
        return (torch.arange(rows * 8, dtype=torch.float32, device=device).reshape(rows, 8), 3)

    def double(x, k):
        return x * 2

    return registry.Case(name=name, op="double", preset="tiny", dtype=torch.float32,
                         make_inputs=make, bytes_moved=2 * 4 * rows * 8,
                         contenders={"naive": double, "reference": lambda x, k: x + x},
                         check="naive")


CASES = [_case("double tiny-a float32", 3), _case("double tiny-b float32", 5)]


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    status = bench.main(["--min-time", "0.002", *argv], cases=CASES)
    out, err = capsys.readouterr()
    return status, out, err


def test_run_reports_progress_spread_shapes_and_metadata(capsys, tmp_path):
    path = tmp_path / "rows.json"
    status, out, err = _main(capsys, "--json", str(path))
    assert status == 0, err
    progress = [l for l in err.splitlines() if l.startswith("[")]
    assert progress[0] == "[1/2] double tiny-a float32"
    assert progress[1].startswith("[2/2] double tiny-b float32, about ") and "left" in progress[1]
    assert "done: 2 cases" in err
    # stdout: the table only (progress went to stderr), with shapes and spread per case
    assert "[1/2]" not in out
    assert "inputs: (3, 8) float32, 3" in out and "inputs: (5, 8) float32, 3" in out
    assert "IQR" in out and "median" in out
    data = json.loads(path.read_text())
    meta = data["metadata"]
    assert meta["torch"] == torch.__version__ and meta["device"] == "cpu"
    assert meta["threads"] == torch.get_num_threads()
    assert set(meta["thp"]) == {"THP_MEM_ALLOC_ENABLE", "kernel"}
    assert meta["min_time"] == 0.002
    rows = data["rows"]
    assert [(r["case"], r["contender"]) for r in rows] == [
        (c.name, n) for c in CASES for n in ("naive", "reference")]
    for r in rows:
        assert r["min_s"] <= r["q1_s"] <= r["median_s"] <= r["q3_s"] <= r["max_s"]
        assert r["samples"] >= 5
        assert r["inputs"][0] in ("(3, 8) float32", "(5, 8) float32")
        assert r["vs_floor"] == pytest.approx(r["median_s"] / r["floor_s"])
    naive = [r for r in rows if r["contender"] == "naive"]
    assert all(r["vs_naive"] == 1.0 for r in naive)


def test_figure_below_the_copy_floor_is_flagged(capsys, monkeypatch):
    # A copy bandwidth of 1 kB/s puts the floor far above any real timing.
    monkeypatch.setattr(runner, "copy_bandwidth", lambda nbytes, device: 1e3)
    rows = runner.run(CASES[:1], torch.device("cpu"), min_time=0.002,
                      progress=lambda text: None)
    out = capsys.readouterr().out
    assert all(runner.BELOW_FLOOR in r["flags"] for r in rows)
    assert "faster than a plain copy" in out


def test_spread_statistics():
    stats = runner.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats == {"median_s": 3.0, "q1_s": 2.0, "q3_s": 4.0, "min_s": 1.0, "max_s": 5.0,
                     "samples": 5}
    assert runner.spread([7.0])["q1_s"] == runner.spread([7.0])["q3_s"] == 7.0


def test_filter_matching_nothing_fails(capsys):
    status, out, err = _main(capsys, "-k", "no-such-case")
    assert status != 0
    assert "no case name contains 'no-such-case' (2 cases; --list shows them)" in err


def test_list(capsys):
    status, out, err = _main(capsys, "--list", "-k", "tiny-b")
    assert status == 0 and out.split("\n")[0] == "double tiny-b float32"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_cuda_is_a_clear_error(capsys):
    status, out, err = _main(capsys, "--device", "cuda")
    assert status == 2
    assert "expected --device cpu (CUDA is not available" in err
    status, out, err = _main(capsys, "--device", "npu0")
    assert status == 2 and "expected --device cpu or cuda[:N], but got 'npu0'" in err


def test_plot_without_matplotlib_fails_before_running(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    status, out, err = _main(capsys, "--plot", "ratios.png")
    assert status == 2
    assert "pip install 'npu-anywhere[plot]'" in err
    assert "[1/2]" not in err                 # nothing ran


def test_plot_draws_the_ratios(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "ratios.png"
    status, out, err = _main(capsys, "--plot", str(path))
    assert status == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compile_on_first_call_compiles_once():
    calls = []

    def fake_compile(fn, **options):
        calls.append(options)
        return lambda *args: ("compiled", fn(*args))

    def square(x):
        return x * x

    lazy = registry.CompileOnFirstCall(fake_compile, square, {"dynamic": False})
    assert calls == [] and lazy.__name__ == "square"
    assert lazy(3) == ("compiled", 9) and lazy(4) == ("compiled", 16)
    assert calls == [{"dynamic": False}]


def test_deferred_compile_restores_torch_compile():
    before = torch.compile
    with registry.deferred_compile():
        lazy = torch.compile(lambda x: x, dynamic=False)
        decorated = torch.compile(dynamic=False)(lambda x: x)
    assert torch.compile is before
    assert isinstance(lazy, registry.CompileOnFirstCall)
    assert isinstance(decorated, registry.CompileOnFirstCall)
