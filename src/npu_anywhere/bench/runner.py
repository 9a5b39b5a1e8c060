"""Run benchmark cases: correctness first, then latency (median and spread), GB/s and ratios.

Ratios are measured side by side in one run: each contender against ``naive`` (the doc formula
in eager PyTorch, what users hand-write) and against the bandwidth floor, the time a plain copy
of ``bytes_moved`` bytes takes on this machine in this run (``copy_`` between two reused
buffers: the fastest any kernel could read and write that much).  A contender faster than the
floor is flagged: either the case overstates ``bytes_moved`` or the timing is wrong.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable, Iterable, Optional, TextIO

import torch

from ..kernels import compiled
from .registry import Case

BELOW_FLOOR = "below-floor"
"""The ``flags`` entry of a row whose median beats the measured copy floor."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_time(fn: Callable[[], object], device: torch.device, *, min_time: float = 0.2,
                max_iters: int = 200, warmup: int = 3) -> float:
    """Median seconds per call, over at least ``min_time`` seconds or ``max_iters`` calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    samples: list[float] = []
    start_all = time.perf_counter()
    while len(samples) < max_iters and (time.perf_counter() - start_all < min_time
                                        or len(samples) < 5):
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def interleaved_samples(fns: dict[str, Callable[[], object]], device: torch.device, *,
                        min_time: float = 0.2, rounds: int = 5, max_iters: int = 200,
                        warmup: int = 3) -> dict[str, list[float]]:
    """Seconds of every timed call of each function, timed in ``rounds`` interleaved rounds.

    Each round times every function in turn for ``min_time / rounds`` seconds (at least one
    call), so a slow drift of the machine -- another process, frequency changes -- lands on all
    contenders alike instead of on whichever ran during it.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            begin = time.perf_counter()
            taken = 0
            while taken < max(1, max_iters // rounds) and (
                    time.perf_counter() - begin < min_time / rounds or taken == 0):
                start = time.perf_counter()
                fn()
                _sync(device)
                samples[name].append(time.perf_counter() - start)
                taken += 1
    return samples


def interleaved_times(fns: dict[str, Callable[[], object]], device: torch.device, *,
                      min_time: float = 0.2, rounds: int = 5, max_iters: int = 200,
                      warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each function (see :func:`interleaved_samples`)."""
    samples = interleaved_samples(fns, device, min_time=min_time, rounds=rounds,
                                  max_iters=max_iters, warmup=warmup)
    return {name: statistics.median(values) for name, values in samples.items()}


def spread(samples: list[float]) -> dict[str, float]:
    """Median, quartiles, min and max of ``samples`` (seconds)."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median_s": statistics.median(ordered), "q1_s": q1, "q3_s": q3,
            "min_s": ordered[0], "max_s": ordered[-1], "samples": len(ordered)}


def copy_bandwidth(nbytes: int, device: torch.device) -> float:
    """Bytes per second of reading + writing ``nbytes`` in total with a plain copy."""
    half = max(nbytes // 2, 1 << 12)
    src = torch.empty(half, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = median_time(lambda: dst.copy_(src), device)
    return 2 * half / seconds


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs difference relative to the largest magnitude (robust to cancellation)."""
    a, b = a.double(), b.double()
    if not a.numel():
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _flatten(out) -> list[torch.Tensor]:
    if out is None:          # an in-place contender that returns nothing
        return []
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def check_case(case: Case, inputs: tuple) -> dict[str, float]:
    """Max relative error of every contender against ``case.check``; raises if too large."""
    expected = [t.clone() for t in _flatten(case.contenders[case.check](*_fresh(inputs)))]
    errors = {}
    limit = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(case.dtype, 1e-5)
    for name, fn in case.contenders.items():
        got = _flatten(fn(*_fresh(inputs)))
        err = max((_max_rel(g, e) for g, e in zip(got, expected)), default=0.0)
        errors[name] = err
        allowed = case.tolerance.get(name, limit)
        if err > allowed:
            raise AssertionError(f"{case.name}: contender {name} differs from {case.check} "
                                 f"(max rel err {err:.3g} > {allowed:.3g})")
    return errors


def _fresh(inputs: tuple) -> tuple:
    # In-place contenders must not see each other's writes.
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)


def describe_inputs(inputs: tuple) -> list[str]:
    """One short description per input: ``"(64, 4096) bfloat16"`` for a tensor, else repr."""
    out = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            out.append(f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}")
        else:
            out.append(repr(value))
    return out


def _progress_to(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        print(text, file=stream, flush=True)
    return write


def _fmt_eta(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def run(cases: Iterable[Case], device: Optional[torch.device] = None,
        min_time: float = 0.2, echo: Callable[[str], None] = print,
        progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Check, then time every case; print a table through ``echo``; return one row per contender.

    ``progress`` (default: standard error) gets one line per case as it starts, with an
    estimate of the time left, so that the table on standard output stays clean.
    """
    device = device or torch.device("cpu")
    progress = progress or _progress_to(sys.stderr)
    cases = list(cases)
    rows: list[dict] = []
    bandwidth: dict[int, float] = {}
    started = time.perf_counter()
    flagged = False
    for index, case in enumerate(cases):
        elapsed = time.perf_counter() - started
        eta = (f", about {_fmt_eta(elapsed / index * (len(cases) - index))} left" if index
               else "")
        progress(f"[{index + 1}/{len(cases)}] {case.name}{eta}")
        inputs = case.make_inputs(device)
        check_case(case, inputs)
        if case.bytes_moved not in bandwidth:
            bandwidth[case.bytes_moved] = copy_bandwidth(case.bytes_moved, device)
        floor = case.bytes_moved / bandwidth[case.bytes_moved]
        # Warm up past the compiled provider's tiering threshold, so hot paths are measured.
        warmup = (compiled.compile_after() or 0) + 3
        samples = interleaved_samples({name: (lambda fn=fn: fn(*inputs))
                                       for name, fn in case.contenders.items()},
                                      device, min_time=min_time, warmup=warmup)
        shapes = describe_inputs(inputs)
        echo("")
        echo(f"{case.name}   ({case.bytes_moved / 1e6:.3g} MB moved, copy floor "
             f"{_fmt_time(floor)})")
        echo(f"  inputs: {', '.join(shapes)}")
        echo(f"  {'contender':<13} {'median':>10} {'IQR':>21} {'GB/s':>7} {'x naive':>8} "
             f"{'x floor':>8}")
        naive = statistics.median(samples["naive"]) if "naive" in samples else None
        for name, values in samples.items():
            stats = spread(values)
            seconds = stats["median_s"]
            row = {"case": case.name, "op": case.op, "preset": case.preset,
                   "dtype": str(case.dtype).replace("torch.", ""), "contender": name,
                   **stats, "gbps": case.bytes_moved / seconds / 1e9,
                   "vs_naive": seconds / naive if naive else float("nan"),
                   "vs_floor": seconds / floor, "floor_s": floor,
                   "bytes_moved": case.bytes_moved, "inputs": shapes, "flags": []}
            if row["vs_floor"] < 1.0:
                row["flags"].append(BELOW_FLOOR)
                flagged = True
            rows.append(row)
            iqr = f"{_fmt_time(stats['q1_s'])} - {_fmt_time(stats['q3_s'])}"
            mark = "  !" if row["flags"] else ""
            echo(f"  {name:<13} {_fmt_time(seconds):>10} {iqr:>21} {row['gbps']:>7.2f} "
                 f"{row['vs_naive']:>8.2f} {row['vs_floor']:>8.2f}{mark}")
    echo("")
    echo("median and IQR (25th-75th percentile) of the timed calls")
    echo("x naive < 1: faster than the eager doc formula")
    echo("x floor: time / (bytes moved / copy bandwidth measured in this run); 1 = bandwidth bound")
    if flagged:
        echo("! faster than a plain copy of the bytes moved: the case overstates bytes_moved,")
        echo("  the contender skips work, or the machine was busy while the floor was measured")
    progress(f"done: {len(cases)} case{'s' if len(cases) != 1 else ''} in "
             f"{_fmt_eta(time.perf_counter() - started)}")
    return rows


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def _thp_setting() -> dict[str, Optional[str]]:
    """PyTorch's THP_MEM_ALLOC_ENABLE and the kernel's transparent-huge-page mode."""
    import os
    system = None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            text = fh.read().strip()
        # "always [madvise] never": the bracketed word is the mode in force.
        system = text[text.index("[") + 1:text.index("]")] if "[" in text else text
    except OSError:
        pass
    return {"THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
            "kernel": system}


def _device_name(device: torch.device) -> str:
    import platform
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def metadata(device: torch.device, **settings: object) -> dict:
    """What a benchmark figure depends on, for ``--json``: versions, device, threads, THP."""
    import os
    import platform

    from .. import __version__
    return {
        "npu_anywhere": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "device_name": _device_name(device),
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "thp": _thp_setting(),
        "compile_after": compiled.compile_after(),
        "providers_env": os.environ.get("NPU_ANYWHERE_PROVIDERS"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **settings,
    }


def plot(rows: list[dict], path: str, title: str = "") -> None:
    """Draw each contender's ratios (x naive, x floor) per case into ``path`` (PNG, SVG...).

    Needs matplotlib (``pip install npu-anywhere[plot]``); :func:`require_matplotlib` says so
    before a run starts.
    """
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")          # files only: never open a window
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    by_key = {(r["case"], r["contender"]): r for r in rows}
    height = max(3.0, 0.35 * len(cases) * max(1, len(contenders)) / 2 + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(13, height), sharey=True)
    bar = 0.8 / max(1, len(contenders))
    for ax, key, label in ((axes[0], "vs_naive", "time / naive (lower is faster)"),
                           (axes[1], "vs_floor", "time / copy floor (1 = bandwidth bound)")):
        for j, name in enumerate(contenders):
            ys = [i + j * bar for i in range(len(cases))]
            values = [by_key.get((c, name), {}).get(key, float("nan")) for c in cases]
            ax.barh(ys, values, height=bar, label=name)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(label)
    axes[0].set_yticks([i + 0.4 - bar / 2 for i in range(len(cases))])
    axes[0].set_yticklabels(cases, fontsize=8)
    axes[0].invert_yaxis()
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class MissingExtra(RuntimeError):
    """An optional dependency is missing; the message says how to install it."""


def require_matplotlib() -> None:
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtra("--plot needs matplotlib, which is not installed: "
                           "pip install 'npu-anywhere[plot]' (or pip install matplotlib)")
