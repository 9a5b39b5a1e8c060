"""The ``npu-anywhere`` command: ops, run, demo, bench.

Start-up cost matters for a command line tool: ``--version`` and ``--help`` import neither
torch nor the ops (the package defers loading them while this command starts, see
``npu_anywhere/__init__.py``); ``ops`` and ``run`` import torch and the ops but not the
``torch.compile`` machinery; only ``bench`` and ``demo`` load the benchmark cases.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

PROG = "npu-anywhere"

RUN_USAGE = f"""\
usage: {PROG} run [--claim-npu] script.py [args ...]
       {PROG} run [--claim-npu] -m module [args ...]

Run a Python script (or module) with the torch_npu shim installed, as `python script.py`
(or `python -m module`) would: the script's folder first on sys.path, __name__ == "__main__",
sys.argv = [script, args...], the script's exit status.  Everything after the script or module
name goes to it untouched; `--` before the script name ends npu-anywhere's own options.

options:
  --claim-npu   make torch.npu.is_available() return True
  -m module     run a library module as a script (e.g. -m pytest tests/)
  -h, --help    show this help and exit

Python processes the script starts (multiprocessing, torchrun workers, subprocesses of
sys.executable) get the shim as well, at their first `import torch_npu`: PYTHONPATH gains
npu_anywhere's child sitecustomize (the environment's own still runs) and
NPU_ANYWHERE_SHIM_CHILDREN=1 is set.

Sets THP_MEM_ALLOC_ENABLE=1 (transparent huge pages for CPU tensors) unless the environment
already sets it."""


def _version() -> str:
    from . import __version__
    try:
        from importlib import metadata
        torch_version = metadata.version("torch")
    except Exception:      # torch installed without metadata, or not at all
        torch_version = "unknown"
    return f"{PROG} {__version__} (torch {torch_version}, Python {sys.version.split()[0]})"


def _cmd_ops(args: argparse.Namespace) -> int:
    from . import coverage
    table = coverage.rows()
    if args.family:
        known = coverage.families(table)
        if args.family not in known:
            print(f"{PROG} ops: unknown family {args.family!r}; known families: "
                  f"{', '.join(known)}", file=sys.stderr)
            return 2
        table = [r for r in table if r["family"] == args.family]
    if args.implemented:
        table = [r for r in table if r["implemented"]]
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print(coverage.format_table(table))
    return 0


def _parse_run(argv: list[str]) -> tuple[dict, list[str]]:
    """Split ``run``'s arguments into its options and the target's ``sys.argv``.

    Parsed by hand, like the interpreter does: options end at the first word that is not one
    (or at ``--``), and everything after the script or module name is the target's, including
    its own ``--`` and options that happen to share a name with ours.
    """
    options = {"claim_npu": False, "module": None, "script": None, "help": False}
    words = list(argv)
    while words:
        word = words.pop(0)
        if word == "--claim-npu":
            options["claim_npu"] = True
        elif word in ("-h", "--help"):
            options["help"] = True
            return options, []
        elif word == "-m" or (word.startswith("-m") and len(word) > 2):
            module = word[2:] or (words.pop(0) if words else "")
            if not module:
                raise _UsageError("expected a module name after -m")
            options["module"] = module
            return options, words
        elif word == "--":
            if not words:
                raise _UsageError("expected a script after --")
            options["script"] = words.pop(0)
            return options, words
        elif word.startswith("-") and word != "-":
            raise _UsageError(f"unknown option {word!r} (options go before the script)")
        else:
            options["script"] = word
            return options, words
    raise _UsageError("expected a script or -m module")


class _UsageError(Exception):
    pass


def _cmd_run(argv: list[str]) -> int:
    try:
        options, target_args = _parse_run(argv)
    except _UsageError as error:
        print(f"{RUN_USAGE.splitlines()[0]}\n{PROG} run: error: {error}", file=sys.stderr)
        return 2
    if options["help"]:
        print(RUN_USAGE)
        return 0
    script = options["script"]
    if script is not None and script != "-" and not os.path.exists(script):
        # Before importing torch, with the interpreter's wording and exit status.
        print(f"{PROG} run: can't open file {os.path.abspath(script)!r}: "
              "[Errno 2] No such file or directory", file=sys.stderr)
        return 2
    if options["module"] is not None and not _module_exists(options["module"]):
        print(f"{PROG} run: No module named {options['module']}", file=sys.stderr)
        return 1
    # Transparent huge pages for CPU tensors: fresh large tensors get about 3x cheaper.  PyTorch
    # reads this once, at the process's first CPU allocation, which has not happened yet here.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    import npu_anywhere
    npu_anywhere.install(claim_npu=options["claim_npu"] or None)
    # Python processes the script starts (multiprocessing spawn, torchrun workers, subprocess)
    # install the shim at their first `import torch_npu` too.
    from .compat import child_processes
    child_processes.enable(claim_npu=bool(options["claim_npu"]))
    if options["module"] is not None:
        return _run_module(options["module"], target_args)
    return _run_script(script, target_args)


def _set_path0(folder: str) -> None:
    """Put ``folder`` where the interpreter puts the script's folder (``sys.path[0]``).

    ``sys.path[0]`` is this command's own entry (the console script's bin folder, or the
    current folder under ``python -m``); ``python script.py`` would have put the script's folder
    there instead.  With ``-P`` / ``PYTHONSAFEPATH`` the interpreter adds nothing, nor do we.
    """
    if getattr(sys.flags, "safe_path", False):
        return
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)


def _run_script(script: str, args: list[str]) -> int:
    """Run ``script`` as ``python script args...`` would, in a fresh ``__main__`` module."""
    import builtins
    import runpy
    import types
    from importlib.machinery import SourceFileLoader
    if script != "-" and (os.path.isdir(script) or _is_zip(script)):
        # A folder or zip archive with a __main__.py: runpy implements the interpreter's rules.
        # (runpy also puts `script` itself first on sys.path while it runs; sys.argv[0] stays
        # as typed, as the interpreter leaves it.)
        _set_path0(os.path.abspath(script))
        sys.argv = [script, *args]
        return _guarded(lambda: runpy.run_path(script, run_name="__main__"))
    if script == "-":
        source, filename = sys.stdin.read(), "<stdin>"
        _set_path0("")
    else:
        filename = os.path.abspath(script)       # __file__ is absolute, as since Python 3.9
        with open(script, "rb") as fh:
            source = fh.read()
        _set_path0(os.path.dirname(os.path.realpath(script)))
    sys.argv = [script, *args]
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__builtins__=builtins, __annotations__={}, __file__=filename)
    if script != "-":
        main_module.__dict__.update(__cached__=None,
                                    __loader__=SourceFileLoader("__main__", filename))

    def execute() -> None:
        code = compile(source, filename, "exec", dont_inherit=True)
        sys.modules["__main__"] = main_module
        exec(code, main_module.__dict__)

    return _guarded(execute)


def _module_exists(name: str) -> bool:
    """Whether ``python -m name`` would find ``name`` (with the current folder on sys.path)."""
    import importlib.util
    _set_path0(os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _run_module(name: str, args: list[str]) -> int:
    """Run module ``name`` as ``python -m name args...`` would."""
    import runpy
    _set_path0(os.getcwd())
    sys.argv = ["-m", *args]         # runpy puts the module's file name in sys.argv[0]
    return _guarded(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def _is_zip(path: str) -> bool:
    import zipfile
    return os.path.isfile(path) and zipfile.is_zipfile(path)


def _guarded(run) -> int:
    """Run the user's code; an uncaught exception is reported as the interpreter would.

    ``SystemExit`` passes through untouched (``sys.exit(3)`` exits 3).  Any other exception
    goes to ``sys.excepthook`` (so a hook the script installed still runs) with the frames of
    this command and of runpy cut from the front of its traceback, and exits 1 (130 for
    KeyboardInterrupt).
    """
    try:
        run()
    except SystemExit:
        raise
    except BaseException as error:      # noqa: B902 -- reported, then a non-zero exit status
        error = error.with_traceback(_user_frames(error.__traceback__))
        sys.excepthook(type(error), error, error.__traceback__)
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    return 0


def _user_frames(tb):
    """``tb`` without its leading frames from this module, runpy and importlib's bootstrap."""
    import runpy
    ours = {os.path.normcase(os.path.abspath(f)) for f in (__file__, runpy.__file__)}
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith("<frozen ")
                or os.path.normcase(os.path.abspath(filename)) in ours):
            break
        tb = tb.tb_next
    return tb


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main
    return main(args=args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Ascend torch_npu / CANN ops on any PyTorch device.",
        epilog=f"`{PROG} <command> --help` describes each command.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="command")
    p_ops = sub.add_parser("ops", help="coverage table of every documented op")
    p_ops.add_argument("--implemented", action="store_true", help="only implemented ops")
    p_ops.add_argument("--family", default=None, help="only this family (e.g. posembedding)")
    p_ops.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_ops.set_defaults(fn=_cmd_ops)
    # `run` and `bench` parse their own arguments (see main); listed here for --help.
    sub.add_parser("run", help="run a Python script or module with the torch_npu shim installed",
                   add_help=False)
    p_demo = sub.add_parser("demo", help="an LLM on torch_npu ops vs transformers (--model PATH)")
    from .demo import add_arguments as add_demo_arguments
    add_demo_arguments(p_demo)
    p_demo.set_defaults(fn=_cmd_demo)
    sub.add_parser("bench", help="benchmarks (see npu-anywhere bench --help)", add_help=False)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":         # everything after the script belongs to the script
        return _cmd_run(argv[1:])
    try:
        return _main(argv)
    except BrokenPipeError:
        # `npu-anywhere ops | head`: the reader left; say nothing more, as `cat` would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":       # the bench runner owns its own options
        from .bench import main as bench_main
        return bench_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version())
        return 0
    if not args.command:
        parser.print_help()
        return 2
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
