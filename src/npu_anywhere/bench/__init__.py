"""Benchmarks: ``npu-anywhere bench`` or ``python -m benchmarks``."""

from __future__ import annotations

import argparse
import json
from typing import Optional, Sequence

import torch

import importlib
import os
import pkgutil

# One compile worker: Inductor's worker pool otherwise starts right after the first compile and
# competes with the timed calls on small machines.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

from .registry import CASES, Case
from .runner import run

# Every other module of this package registers the cases of one op family.
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("registry", "runner"):
        importlib.import_module(f"{__name__}.{_module.name}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="npu-anywhere bench",
                                     description="Benchmark npu_anywhere ops side by side.")
    parser.add_argument("-k", "--filter", default="",
                        help="only cases whose name contains this text (e.g. 'prefill')")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--min-time", type=float, default=0.3,
                        help="seconds of timing per contender (default 0.3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice); 1 gives steadier "
                             "numbers on a loaded machine")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    cases: list[Case] = [c for c in CASES if args.filter in c.name]
    if args.list:
        for case in cases:
            print(case.name)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = run(cases, device, min_time=args.min_time)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0
