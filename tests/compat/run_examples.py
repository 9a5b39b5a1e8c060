"""Run several doc-example scripts in one interpreter (under ``npu-anywhere run``).

Usage: ``npu-anywhere run run_examples.py OUT.json SCRIPT [SCRIPT ...]``.  Each script runs as
``__main__`` with its own stdout captured; the result of each (ok, stdout, traceback) goes to
OUT.json.  One interpreter for many examples saves the few seconds each fresh ``import torch``
costs; test_examples.py still runs a few examples on their own through the CLI.
"""

import contextlib
import io
import json
import runpy
import sys
import traceback


def run_one(path: str) -> dict:
    out = io.StringIO()
    ok, error = True, ""
    argv = sys.argv
    try:
        sys.argv = [path]
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        ok = exc.code in (None, 0)
        error = "" if ok else f"SystemExit({exc.code!r})"
    except BaseException:  # report every failure of the example, whatever it is
        ok, error = False, traceback.format_exc()
    finally:
        sys.argv = argv
    return {"ok": ok, "stdout": out.getvalue()[-6000:], "error": error[-6000:]}


def main() -> None:
    out_path, scripts = sys.argv[1], sys.argv[2:]
    results = {script: run_one(script) for script in scripts}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
