"""Shared helpers for the compat tests: run the ``npu-anywhere`` CLI in a fresh interpreter.

The CLI is called as ``python -m npu_anywhere.cli`` with ``PYTHONPATH`` pointing at this
checkout's ``src`` (computed from this file, so a fresh clone works without installing), on the
CPU (``NPU_ANYWHERE_DEVICE=cpu``) and without ``NPU_ANYWHERE_CLAIM_NPU``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
HERE = Path(__file__).resolve().parent


def cli_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    env["NPU_ANYWHERE_DEVICE"] = "cpu"
    env.pop("NPU_ANYWHERE_CLAIM_NPU", None)
    # Let the subprocesses cache bytecode: with PYTHONDONTWRITEBYTECODE every CLI run recompiles
    # the package (about a second of CPU each).  __pycache__/ is ignored by git.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(overrides)
    return env


def run_python(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """``python *args`` in a fresh interpreter; returns the completed process (text)."""
    return subprocess.run([sys.executable, *args], cwd=str(REPO), env=cli_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def run_cli(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """``npu-anywhere *args`` (as ``python -m npu_anywhere.cli``) in a fresh interpreter."""
    return run_python("-m", "npu_anywhere.cli", *args, timeout=timeout, **env)


def describe(proc: subprocess.CompletedProcess) -> str:
    return (f"command {proc.args!r} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")


# Slow CLI runs, started in the background as soon as collection is done so that they overlap
# with the other tests (``npu-anywhere demo`` alone takes ~10 s).
_BACKGROUND_JOBS = {"demo": ("test_shim.py::test_demo", ["demo"])}
_BACKGROUND: dict[str, tuple[list[str], subprocess.Popen]] = {}


def _start(key: str) -> None:
    cmd = [sys.executable, "-m", "npu_anywhere.cli", *_BACKGROUND_JOBS[key][1]]
    _BACKGROUND[key] = (cmd, subprocess.Popen(cmd, cwd=str(REPO), env=cli_env(),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))


def pytest_collection_modifyitems(session, config, items):
    for key, (nodeid_tail, _) in _BACKGROUND_JOBS.items():
        if key not in _BACKGROUND and any(item.nodeid.endswith(nodeid_tail) for item in items):
            _start(key)


def pytest_sessionfinish(session, exitstatus):
    for _, proc in _BACKGROUND.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def background_result(key: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The result of a background job (started now if collection did not start it)."""
    if key not in _BACKGROUND:
        _start(key)
    cmd, proc = _BACKGROUND[key]
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


class Cli:
    """The ``cli`` fixture: ``cli(*args)`` runs ``npu-anywhere *args``; ``cli.python(*args)``
    runs ``python *args``; ``cli.background(key)`` waits for a job started at collection;
    ``cli.describe(proc)`` formats a result for an assertion message."""

    repo = REPO
    src = SRC
    here = HERE

    def __call__(self, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
        return run_cli(*args, timeout=timeout, **env)

    @staticmethod
    def python(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
        return run_python(*args, timeout=timeout, **env)

    @staticmethod
    def background(key: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return background_result(key, timeout)

    @staticmethod
    def describe(proc: subprocess.CompletedProcess) -> str:
        return describe(proc)

    @staticmethod
    def env(**overrides: str) -> dict[str, str]:
        return cli_env(**overrides)


@pytest.fixture(scope="session")
def cli() -> Cli:
    return Cli()
