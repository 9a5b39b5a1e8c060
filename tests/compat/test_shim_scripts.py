"""Multi-file Ascend-style scripts (tests/compat/scripts_multi/) run through the shim, each in
a fresh interpreter: ``npu_anywhere.install()``, the script's directory on ``sys.path`` (so its
sibling imports work), then the script as ``__main__`` -- one of them through ``npu-anywhere
run``, which does the same.  The three start together when the
first test needs them, so their torch imports and compilations overlap.

- compile_block: torch.compile(fullgraph) of a block of npu ops, autograd through it, the
  compiled providers, ``.npu()`` / ``is_npu`` in a compiled region, silent seeding;
- golden_inplace: copying transfers (an in-place CPU golden after the inputs went to the
  device), ``.cpu()`` snapshots, ``.to`` combinations, torch.load with npu locations, pinned
  memory, npu generators, autocast("npu"), GradScaler, honest feature detection;
- cuda_training: ``from torch_npu.contrib import transfer_to_npu`` then CUDA training code
  (``.cuda()``, ``device="cuda"``, torch.cuda.*, autocast("cuda"), GradScaler, checkpoints,
  an "nccl" process group).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPTS = {"compile_block": "COMPILE BLOCK OK", "golden_inplace": "GOLDEN INPLACE OK",
           "cuda_training": "CUDA TRAINING OK"}
# Run as users do, `npu-anywhere run main.py` (which puts the script's directory first on
# sys.path, as python does); the others through RUNNER.
THROUGH_CLI = {"cuda_training"}

RUNNER = r"""
import os, runpy, sys
script = sys.argv[1]
sys.path.insert(0, os.path.dirname(script))
sys.argv = sys.argv[1:]
import npu_anywhere
npu_anywhere.install()
runpy.run_path(script, run_name="__main__")
"""


@pytest.fixture(scope="module")
def runs(cli):
    """Start every script now; ``runs[name]()`` waits for one and returns its result."""
    procs = {}
    for name in SCRIPTS:
        script = cli.here / "scripts_multi" / name / "main.py"
        if name in THROUGH_CLI:
            cmd = [sys.executable, "-m", "npu_anywhere.cli", "run", str(script)]
        else:
            cmd = [sys.executable, "-c", RUNNER, str(script)]
        procs[name] = (cmd, subprocess.Popen(cmd, cwd=str(cli.repo), env=cli.env(),
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True))
    results = {}

    def wait(name):
        if name not in results:
            cmd, proc = procs[name]
            out, err = proc.communicate(timeout=300)
            results[name] = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        return results[name]
    yield wait
    for _, proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_runs_through_the_shim(runs, cli, name):
    proc = runs(name)
    assert proc.returncode == 0, cli.describe(proc)
    assert SCRIPTS[name] in proc.stdout, cli.describe(proc)
    # torch.manual_seed under the shim is silent (the device module answers torch's seeding).
    assert "does not take effect" not in proc.stderr, cli.describe(proc)
