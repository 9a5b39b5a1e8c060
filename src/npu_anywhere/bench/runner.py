"""Run benchmark cases: correctness first, then median latency, GB/s and ratios.

Ratios are measured side by side in one run: each contender against ``naive`` (the doc formula
in eager PyTorch, what users hand-write) and against the bandwidth floor, the time a plain copy
of ``bytes_moved`` bytes takes on this machine in this run (``copy_`` between two reused
buffers: the fastest any kernel could read and write that much).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable, Optional

import torch

from ..kernels import compiled
from .registry import Case


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


def interleaved_times(fns: dict[str, Callable[[], object]], device: torch.device, *,
                      min_time: float = 0.2, rounds: int = 5, max_iters: int = 200,
                      warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each function, timed in ``rounds`` interleaved rounds.

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
    return {name: statistics.median(values) for name, values in samples.items()}


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


def run(cases: Iterable[Case], device: Optional[torch.device] = None,
        min_time: float = 0.2, echo: Callable[[str], None] = print) -> list[dict]:
    device = device or torch.device("cpu")
    rows: list[dict] = []
    bandwidth: dict[int, float] = {}
    header = (f"{'case':<44} {'contender':<12} {'median':>10} {'GB/s':>7} "
              f"{'x naive':>8} {'x floor':>8}")
    echo(header)
    echo("-" * len(header))
    for case in cases:
        inputs = case.make_inputs(device)
        check_case(case, inputs)
        if case.bytes_moved not in bandwidth:
            bandwidth[case.bytes_moved] = copy_bandwidth(case.bytes_moved, device)
        floor = case.bytes_moved / bandwidth[case.bytes_moved]
        # Warm up past the compiled provider's tiering threshold, so hot paths are measured.
        warmup = (compiled.compile_after() or 0) + 3
        times = interleaved_times({name: (lambda fn=fn: fn(*inputs))
                                   for name, fn in case.contenders.items()},
                                  device, min_time=min_time, warmup=warmup)
        naive = times.get("naive")
        for name, seconds in times.items():
            row = {"case": case.name, "op": case.op, "preset": case.preset,
                   "dtype": str(case.dtype).replace("torch.", ""), "contender": name,
                   "median_s": seconds, "gbps": case.bytes_moved / seconds / 1e9,
                   "vs_naive": seconds / naive if naive else float("nan"),
                   "vs_floor": seconds / floor}
            rows.append(row)
            echo(f"{case.name:<44} {name:<12} {_fmt_time(seconds):>10} {row['gbps']:>7.2f} "
                 f"{row['vs_naive']:>8.2f} {row['vs_floor']:>8.2f}")
    echo("x naive < 1: faster than the eager doc formula; x floor: time / (bytes / copy "
         "bandwidth measured in this run)")
    return rows


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"
