"""``npu-anywhere run`` behaves like ``python script.py`` / ``python -m module``.

The expected values come from the interpreter itself: the same probe script runs under plain
``python`` (cheap: it imports no torch) and under ``npu-anywhere run``, and the reports must
agree.  Every ``npu-anywhere run`` costs a torch import, so each one checks several things.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from npu_anywhere import cli as cli_module

# Reports what `python main.py` makes of its world, then exits with the status it is told.
PROBE = textwrap.dedent("""\
    import json, os, sys
    import helper                       # next to this script, found through sys.path[0]
    main = sys.modules["__main__"]
    report = {
        "path0": sys.path[0], "file": __file__, "argv": sys.argv, "name": __name__,
        "helper": helper.VALUE, "main_is_this_module": main.__dict__ is globals(),
        "main_attrs": sorted(k for k in vars(main) if k.startswith("__")),
        "thp": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "shim": getattr(sys.modules.get("torch_npu"), "__npu_anywhere_shim__", False),
    }
    print("REPORT " + json.dumps(report))
    if "--raise" in sys.argv:
        def inner():
            raise ValueError("raised by the script")
        inner()
    sys.exit(int(sys.argv[-1]))
    """)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "app").mkdir()
    (root / "app" / "main.py").write_text(PROBE, "utf-8")
    (root / "app" / "helper.py").write_text("VALUE = 42\n", "utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "test_uses_shim.py").write_text(textwrap.dedent("""\
        import sys
        import torch, torch_npu

        def test_shim_and_rootdir():
            assert getattr(torch_npu, "__npu_anywhere_shim__", False)
            x = torch.randn(2, 3, 4, 8)
            assert torch_npu.npu_rotary_mul(x, x.cos(), x.sin()).shape == x.shape
            print("ARGV0", sys.argv[0])
        """), "utf-8")
    return root


def _report(proc: subprocess.CompletedProcess) -> dict:
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def _python(cli, project, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=str(project), env=cli.env(**env),
                          capture_output=True, text=True, timeout=180)


def _run(cli, project, *args, env_drop=("THP_MEM_ALLOC_ENABLE",), **env):
    environ = cli.env(**env)
    for name in env_drop:
        if name not in env:
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-m", "npu_anywhere.cli", "run", *args],
                          cwd=str(project), env=environ, capture_output=True, text=True,
                          timeout=180)


def test_script_sees_what_python_gives_it(cli, project):
    """sys.path[0], __file__, sys.argv (with a `--` and our own option names), exit status."""
    script_args = ["a", "--", "--claim-npu", "-m", "3"]
    expected = _python(cli, project, "app/main.py", *script_args)
    assert expected.returncode == 3, cli.describe(expected)
    proc = _run(cli, project, "--", "app/main.py", *script_args)
    assert proc.returncode == 3, cli.describe(proc)
    want, got = _report(expected), _report(proc)
    assert want["helper"] == got["helper"] == 42
    for key in ("path0", "file", "argv", "name", "main_is_this_module", "main_attrs"):
        assert got[key] == want[key], (key, got[key], want[key])
    assert got["argv"] == ["app/main.py", *script_args]
    assert got["thp"] == "1"                 # set by `run` unless the environment says otherwise
    assert got["shim"] is True and want["shim"] is False    # installed before the script ran


def test_uncaught_exception_reports_like_python(cli, project):
    """Exit status 1 and the interpreter's traceback, without our own frames; THP=0 kept."""
    expected = _python(cli, project, "app/main.py", "--raise", "0")
    assert expected.returncode == 1, cli.describe(expected)
    proc = _run(cli, project, "--claim-npu", "app/main.py", "--raise", "0",
                THP_MEM_ALLOC_ENABLE="0")
    assert proc.returncode == 1, cli.describe(proc)
    assert _report(proc)["thp"] == "0"
    assert "ValueError: raised by the script" in proc.stderr
    assert proc.stderr.strip() == expected.stderr.strip(), cli.describe(proc)
    assert "cli.py" not in proc.stderr and "runpy" not in proc.stderr


def test_run_module_like_python_dash_m(cli, project):
    """``run -m pytest tests/``: the module runs as __main__ with the shim installed."""
    proc = _run(cli, project, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/")
    assert proc.returncode == 0, cli.describe(proc)
    assert "1 passed" in proc.stdout, cli.describe(proc)
    argv0 = next(l for l in proc.stdout.splitlines() if l.startswith("ARGV0 "))
    assert argv0.split()[1].endswith(os.path.join("pytest", "__main__.py")), argv0


@pytest.mark.parametrize("args,status,message", [
    (["missing.py"], 2, "can't open file"),
    (["-m", "no_such_module_here"], 1, "No module named no_such_module_here"),
    (["--no-such-option", "app/main.py"], 2, "unknown option '--no-such-option'"),
    ([], 2, "expected a script or -m module"),
])
def test_run_usage_errors(cli, project, args, status, message):
    # These fail before torch is imported: cheap.
    proc = _run(cli, project, *args)
    assert proc.returncode == status, cli.describe(proc)
    assert message in proc.stderr, cli.describe(proc)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv,options,rest", [
    (["s.py", "--claim-npu", "--", "x"], {"script": "s.py", "claim_npu": False},
     ["--claim-npu", "--", "x"]),
    (["--claim-npu", "s.py"], {"script": "s.py", "claim_npu": True}, []),
    (["--", "--odd-name.py", "-v"], {"script": "--odd-name.py"}, ["-v"]),
    (["-m", "pytest", "tests/", "-x"], {"module": "pytest", "script": None}, ["tests/", "-x"]),
    (["-mpytest", "-q"], {"module": "pytest"}, ["-q"]),
    (["--claim-npu", "-m", "pkg.mod", "--claim-npu"], {"module": "pkg.mod", "claim_npu": True},
     ["--claim-npu"]),
])
def test_run_argument_split(argv, options, rest):
    parsed, target = cli_module._parse_run(argv)
    for key, value in options.items():
        assert parsed[key] == value, (key, parsed)
    assert target == rest


def test_run_help_mentions_module_and_dashdash(capsys):
    assert cli_module.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "-m module" in out and "`--`" in out


# Starts a spawn child (a fresh interpreter: what torch.multiprocessing.spawn and torchrun
# workers are) that imports torch_npu and computes on an "npu" tensor; reports what it saw.
SPAWNER = textwrap.dedent("""\
    import builtins, json, multiprocessing as mp, sys

    def child(queue):
        import torch, torch_npu
        x = torch.arange(8.0).view(1, 1, 2, 4).npu()
        out = torch_npu.npu_rotary_mul(x, torch.ones_like(x), torch.zeros_like(x))
        queue.put({"shim": getattr(torch_npu, "__npu_anywhere_shim__", False),
                   "npu_device": str(x.device), "same": bool(torch.equal(out.cpu(), x.cpu())),
                   "user_site": getattr(builtins, "USER_SITE_RAN", False)})

    if __name__ == "__main__":
        context = mp.get_context("spawn")
        queue = context.Queue()
        worker = context.Process(target=child, args=(queue,))
        worker.start()
        worker.join(200)                 # a failing child prints its traceback and exits 1
        if worker.exitcode == 0:
            print("REPORT " + json.dumps(queue.get(timeout=10)))
        sys.exit(worker.exitcode)
    """)


def test_processes_the_script_starts_get_the_shim(cli, project):
    """A spawn child installs the shim at its first `import torch_npu`, and the environment's
    own sitecustomize (here one on the caller's PYTHONPATH) still runs in it."""
    (project / "spawner.py").write_text(SPAWNER, "utf-8")
    user_site = project / "user_site"
    user_site.mkdir(exist_ok=True)
    (user_site / "sitecustomize.py").write_text(
        "import builtins\nbuiltins.USER_SITE_RAN = True\n", "utf-8")
    env = cli.env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(user_site)])
    proc = subprocess.run([sys.executable, "-m", "npu_anywhere.cli", "run", "spawner.py"],
                          cwd=str(project), env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, cli.describe(proc)
    # NPU_ANYWHERE_DEVICE=cpu (the cli fixture): "npu" tensors live on the CPU, as in the parent.
    assert _report(proc) == {"shim": True, "npu_device": "cpu", "same": True,
                             "user_site": True}
