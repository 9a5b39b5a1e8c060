"""``npu-anywhere run`` turns on transparent huge pages for CPU tensors, unless told otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = "import os, torch_npu; print('THP=' + repr(os.environ.get('THP_MEM_ALLOC_ENABLE')))\n"


@pytest.mark.parametrize("given,seen", [(None, "'1'"), ("0", "'0'")])
def test_run_sets_thp_unless_the_environment_says_otherwise(cli, tmp_path, given, seen):
    script = tmp_path / "show_env.py"
    script.write_text(SCRIPT, "utf-8")
    env = cli.env()
    env.pop("THP_MEM_ALLOC_ENABLE", None)
    if given is not None:
        env["THP_MEM_ALLOC_ENABLE"] = given
    proc = subprocess.run([sys.executable, "-m", "npu_anywhere.cli", "run", str(script)],
                          cwd=str(cli.repo), env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, cli.describe(proc)
    assert f"THP={seen}" in proc.stdout, cli.describe(proc)
