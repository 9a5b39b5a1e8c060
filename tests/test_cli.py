"""The ``npu-anywhere`` command as a user meets it: start-up, ``--version``, ``ops``.

Start-up is checked by what gets imported, never by timing: ``--version`` and the help texts
must not import torch, ``ops`` must not import the torch.compile machinery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_anywhere import __version__, cli, coverage

SRC = Path(__file__).resolve().parents[1] / "src"


def _cli(*args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
               NPU_ANYWHERE_DEVICE="cpu")
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "npu_anywhere.cli", *args], env=env,
                          capture_output=True, text=True, timeout=180)


def _imported(proc: subprocess.CompletedProcess) -> set[str]:
    """Module names from ``-X importtime``'s report on stderr."""
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"],
                                  ["bench", "--help"]])
def test_version_and_help_do_not_import_torch(args):
    proc = _cli(*args, importtime=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = _imported(proc)
    assert "npu_anywhere.cli" in imported or "npu_anywhere" in imported   # the report works
    assert "torch" not in imported, sorted(m for m in imported if m.startswith("torch"))[:5]
    if args == ["--version"]:
        assert proc.stdout.startswith(f"npu-anywhere {__version__} (torch ")


def test_ops_and_bench_cases_do_not_import_the_compiler():
    """``ops``, then loading every benchmark case (``bench --list``), in one interpreter."""
    code = ("import sys; from npu_anywhere import cli; from npu_anywhere.bench import load_cases; "
            "status = cli.main(['ops']); print('CASES', len(load_cases())); sys.exit(status)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = _imported(proc)
    assert "torch" in imported
    # torch.compile in a case module is deferred to its first call (bench.registry)
    assert not {"torch._dynamo", "torch._inductor"} & imported
    lines = proc.stdout.splitlines()
    assert int(lines[-1].split()[1]) > 10
    table = lines[:-1]
    assert max(map(len, table)) <= coverage.TABLE_WIDTH
    assert "grad " in proc.stdout and "providers  tried in this order" in proc.stdout  # legend


def test_bench_list_from_the_deferred_start():
    """``bench`` imports the case modules (and through them the ops) before anything touches
    the package, so the deferred start must hand out submodules without re-entering a
    half-imported one (a circular import once broke every ``npu-anywhere bench``)."""
    proc = _cli("bench", "--list")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "npu_moe_gating_top_k_softmax" in proc.stdout


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "ops" in capsys.readouterr().out


@pytest.fixture(scope="module")
def table():
    return coverage.rows()


def test_every_implemented_op_has_a_family(table):
    family = {r["name"]: r["family"] for r in table}
    # op-plugin-only ops the docs do not list take their package's documented family
    assert family["npu_add_rms_norm"] == family["npu_rms_norm"] == "norm"
    assert family["npu_interleave_rope"] == family["npu_rotary_mul"] == "posembedding"
    assert family["npu_rotary_mul_backward"] == "posembedding"
    assert all(r["family"] != "-" for r in table if r["implemented"]), \
        [r["name"] for r in table if r["implemented"] and r["family"] == "-"]


def test_a_documented_overload_is_implemented_by_its_overload_op(table):
    """The docs give ``npu_fused_infer_attention_score.out`` a page of its own; the row follows
    the registered ``.out`` overload, not the base op's name."""
    row = {r["name"]: r for r in table}["npu_fused_infer_attention_score.out"]
    assert row["implemented"] and row["documented"] and row["family"] == "attention"
    assert row["fake"] == "yes"


def test_table_layout(table):
    text = coverage.format_table(table)
    lines = text.splitlines()
    assert max(map(len, lines)) <= coverage.TABLE_WIDTH
    header = lines[0].split()
    assert header[:4] == ["name", "api", "family", "implemented"]
    name_width = len(lines[1].split()[0])
    assert name_width >= 24, "the other columns leave too little room for names"
    rows = [l.split() for l in lines[2:lines.index("")]]
    by_name = {cells[0]: cells for cells in rows if len(cells) == len(header)}
    assert by_name["npu_rotary_mul"][:4] == ["npu_rotary_mul", "torch_npu", "posembedding", "yes"]
    assert by_name["apply_rotary_pos_emb"][1] == "cann"            # shortened, legend says so
    missing = next(r["name"] for r in table if not r["implemented"] and r["name"] in by_name)
    assert by_name[missing][3] == "no"
    # a name longer than its column stands on its own line, its cells on the next one
    long = [r["name"] for r in table if len(r["name"]) > name_width]
    assert long, "no long name to exercise the wrapping"
    position = lines.index(long[0])
    assert lines[position + 1].startswith(" " * name_width)
    for word in ("api ", "providers ", "grad ", "cann:", "ref:", "raises:"):
        assert word in text, word


def test_empty_selection_is_said(capsys):
    assert coverage.format_table([]) == "no ops match"


def test_ops_family_filter(capsys):
    assert cli.main(["ops", "--family", "norm", "--implemented", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in rows}
    assert {"npu_rms_norm", "npu_add_rms_norm"} <= names
    assert all(r["family"] == "norm" and r["implemented"] for r in rows)


def test_ops_unknown_family_lists_the_known_ones(capsys):
    assert cli.main(["ops", "--family", "posembeding"]) == 2
    err = capsys.readouterr().err
    assert "unknown family 'posembeding'" in err
    assert "posembedding" in err and "norm" in err
