"""The ``npu-anywhere`` command: ops, run, demo, bench."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from typing import Optional, Sequence


def _cmd_ops(args: argparse.Namespace) -> int:
    from . import coverage
    table = coverage.rows()
    if args.implemented:
        table = [r for r in table if r["implemented"]]
    if args.family:
        table = [r for r in table if r["family"] == args.family]
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print(coverage.format_table(table))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    # Transparent huge pages for CPU tensors: fresh large tensors get about 3x cheaper.  PyTorch
    # reads this once, at the process's first CPU allocation, which has not happened yet here.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    import npu_anywhere
    npu_anywhere.install(claim_npu=args.claim_npu or None)
    sys.argv = [args.script, *args.args]
    runpy.run_path(args.script, run_name="__main__")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main
    return main()


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":       # the bench runner owns its own options
        from .bench import main as bench_main
        return bench_main(argv[1:])
    parser = argparse.ArgumentParser(prog="npu-anywhere", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_ops = sub.add_parser("ops", help="coverage table of every documented op")
    p_ops.add_argument("--implemented", action="store_true", help="only implemented ops")
    p_ops.add_argument("--family", default=None, help="only this family (e.g. posembedding)")
    p_ops.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_ops.set_defaults(fn=_cmd_ops)
    p_run = sub.add_parser("run", help="run a Python script with the torch_npu shim installed")
    p_run.add_argument("--claim-npu", action="store_true",
                       help="make torch.npu.is_available() return True")
    p_run.add_argument("script")
    p_run.add_argument("args", nargs=argparse.REMAINDER)
    p_run.set_defaults(fn=_cmd_run)
    p_demo = sub.add_parser("demo", help="RoPE walkthrough against the naive formula")
    p_demo.set_defaults(fn=_cmd_demo)
    sub.add_parser("bench", help="benchmarks (see npu-anywhere bench --help)")
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
