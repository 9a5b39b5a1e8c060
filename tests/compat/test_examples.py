"""The documentation's calling examples, run unmodified through ``npu-anywhere run``.

Each script in ``examples/`` is a doc example copied as literally as the seed text allows
(``import torch_npu``, ``.npu()``, ``device="npu"``, ``torch_npu.npu.set_device(0)`` kept), with
a marked block appended that checks the numbers against the documented formula in float64 and
prints ``EXAMPLE OK``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent / "examples"

# Every script under examples/ (one per doc example; the first lines of each name its source).
SCRIPTS = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py"))


def test_examples_exist():
    assert len(SCRIPTS) >= 6


@pytest.mark.parametrize("script", SCRIPTS, ids=[s[:-3] for s in SCRIPTS])
def test_doc_example_runs_and_matches_formula(cli, script):
    path = EXAMPLES / script
    text = path.read_text("utf-8")
    assert "# --- added by npu_anywhere tests: check the numbers ---" in text
    assert "import torch_npu" in text
    proc = cli("run", str(path))
    assert proc.returncode == 0, cli.describe(proc)
    assert "EXAMPLE OK" in proc.stdout, cli.describe(proc)
