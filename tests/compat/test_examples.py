"""The documentation's calling examples, run unmodified through ``npu-anywhere run``.

Each script in ``examples/`` is a doc example copied as literally as the seed text allows
(``import torch_npu``, ``.npu()``, ``device="npu"``, ``torch_npu.npu.set_device(0)`` kept), with
a marked block appended that checks the numbers against the documented formula in float64 and
prints ``EXAMPLE OK``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent / "examples"
RUNNER = Path(__file__).resolve().parent / "run_examples.py"

# Every script under examples/ (one per doc example; the first lines of each name its source).
SCRIPTS = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py"))


def test_examples_exist():
    assert len(SCRIPTS) >= 6


# These run alone through ``npu-anywhere run`` (a fresh interpreter each); the rest run in two
# shared interpreters (see run_examples.py), which keeps the suite's time down.
ALONE = {"cann_apply_rotary_pos_emb_single_op.py", "npu_apply_rotary_pos_emb_example.py"}
SHARDS = 2


@pytest.fixture(scope="module")
def batch_results(tmp_path_factory, cli):
    """Results of every example not in ALONE, run in SHARDS parallel interpreters."""
    scripts = [s for s in SCRIPTS if s not in ALONE]
    out_dir = tmp_path_factory.mktemp("examples")
    jobs = []
    for shard in range(SHARDS):
        out = out_dir / f"shard{shard}.json"
        paths = [str(EXAMPLES / s) for s in scripts[shard::SHARDS]]
        cmd = [sys.executable, "-m", "npu_anywhere.cli", "run", str(RUNNER), str(out), *paths]
        jobs.append((out, subprocess.Popen(cmd, cwd=str(cli.repo), env=cli.env(),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)))
    results = {}
    for out, proc in jobs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"example runner failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
        for path, result in json.loads(out.read_text("utf-8")).items():
            results[Path(path).relative_to(EXAMPLES).as_posix()] = result
    return results


def _check_source(script):
    text = (EXAMPLES / script).read_text("utf-8")
    assert "# --- added by npu_anywhere tests: check the numbers ---" in text
    assert "import torch_npu" in text


@pytest.mark.parametrize("script", sorted(ALONE))
def test_doc_example_runs_alone_through_the_cli(cli, script):
    _check_source(script)
    proc = cli("run", str(EXAMPLES / script))
    assert proc.returncode == 0, cli.describe(proc)
    assert "EXAMPLE OK" in proc.stdout, cli.describe(proc)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in ALONE],
                         ids=[s[:-3] for s in SCRIPTS if s not in ALONE])
def test_doc_example_runs_and_matches_formula(batch_results, script):
    _check_source(script)
    result = batch_results[script]
    assert result["ok"], f"{script} failed:\n{result['error']}\n--- stdout ---\n{result['stdout']}"
    assert "EXAMPLE OK" in result["stdout"], result["stdout"]
