"""Benchmarks: ``npu-anywhere bench`` or ``python -m benchmarks``.

Every module of this package other than ``registry`` and ``runner`` registers the cases of one
op family (``registry.register``); :func:`load_cases` imports them, on demand, so that
``bench --help`` costs nothing and ``--list`` / ``-k`` never compile anything.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
from typing import Any, Optional, Sequence

_NOT_CASE_MODULES = ("registry", "runner")


def load_cases() -> list:
    """Import every case module (once) and return the registry's list of cases."""
    from . import registry
    with registry.deferred_compile():
        for module in pkgutil.iter_modules(__path__):
            if module.name not in _NOT_CASE_MODULES:
                importlib.import_module(f"{__name__}.{module.name}")
    return registry.CASES


def __getattr__(name: str) -> Any:
    # The names this package exported before its cases loaded lazily.
    if name == "CASES":
        return load_cases()
    if name == "Case":
        from .registry import Case
        return Case
    if name == "run":
        from .runner import run
        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the rows and the run's metadata (versions, device, "
                             "threads, THP) to this JSON file")
    parser.add_argument("--plot", default=None, metavar="FILE",
                        help="also draw the ratios into this image (needs matplotlib: "
                             "pip install 'npu-anywhere[plot]')")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    return parser


def _fail(message: str) -> int:
    print(f"npu-anywhere bench: {message}", file=sys.stderr)
    return 2


def _device(requested: Optional[str]):
    """The torch.device to run on, or an error message."""
    import torch
    if requested is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        return f"expected --device cpu or cuda[:N], but got {requested!r}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return (f"expected --device cpu (CUDA is not available to this torch, "
                f"{torch.__version__}), but got {requested!r}")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        return (f"expected --device cuda:0 to cuda:{torch.cuda.device_count() - 1}, "
                f"but got {requested!r}")
    if device.type not in ("cpu", "cuda"):
        return f"expected --device cpu or cuda[:N], but got {requested!r}"
    return device


def main(argv: Optional[Sequence[str]] = None, cases: Optional[list] = None) -> int:
    """``npu-anywhere bench``; ``cases`` replaces the registered ones (for tests)."""
    # One compile worker: Inductor's worker pool otherwise starts right after the first compile
    # and competes with the timed calls on small machines.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    args = _parser().parse_args(argv)
    from . import runner
    if args.plot:
        try:
            runner.require_matplotlib()          # before the run, not after minutes of it
        except runner.MissingExtra as error:
            return _fail(str(error))
    every = load_cases() if cases is None else cases
    selected = [c for c in every if args.filter in c.name]
    if not selected:
        return _fail(f"no case name contains {args.filter!r} ({len(every)} cases; "
                     "--list shows them)")
    if args.list:
        for case in selected:
            print(case.name)
        return 0
    import torch
    device = _device(args.device)
    if isinstance(device, str):
        return _fail(device)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = runner.metadata(device, filter=args.filter, min_time=args.min_time)
    thp = info["thp"]
    print(f"device {device} ({info['device_name']}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, THP_MEM_ALLOC_ENABLE="
          f"{thp['THP_MEM_ALLOC_ENABLE'] or 'unset'} (kernel THP: {thp['kernel'] or '?'})")
    rows = runner.run(selected, device, min_time=args.min_time)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"metadata": info, "rows": rows}, fh, indent=1)
    if args.plot:
        runner.plot(rows, args.plot, title=f"{device} {info['device_name']}, torch "
                                            f"{torch.__version__}, {info['threads']} threads")
    return 0
