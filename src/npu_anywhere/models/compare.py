"""Engine against transformers: per-step logit differences, greedy agreement, throughput."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import torch

from .config import ModelConfig
from .engine import Engine
from .op_timer import OpTimer
from .reference import greedy
from .scheduler import GenerationResult, Request, generate


def logit_tolerance(dtype: torch.dtype, logit_scale: float) -> float:
    """Allowed max |logit difference|, in units of the model dtype's eps times the largest
    logit.  The engine and transformers sum the same products in different orders (fused QKV
    and gate/up GEMMs, paged attention, grouped expert GEMMs), so agreement is to rounding, not
    to the bit: in float32 those order differences add up over every dot product and layer
    (256 units); in 16-bit dtypes the rounding of each intermediate to the dtype dominates and
    both sides round at nearly the same places (8 units).  A broken op is off by far more."""
    units = 256 if dtype == torch.float32 else 8
    return units * torch.finfo(dtype).eps * max(1.0, logit_scale)


@dataclass
class Comparison:
    model_type: str
    results: List[GenerationResult]
    step_max_diff: List[float]            # per generated-token index, max over sequences
    greedy_identical: List[bool]          # per sequence
    tolerance: float
    engine_seconds: float
    reference_seconds: float
    op_rows: List[Tuple[str, int, float]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def max_diff(self) -> float:
        return max(self.step_max_diff)

    @property
    def passed(self) -> bool:
        return all(self.greedy_identical) and self.max_diff <= self.tolerance


def compare(hf_model, requests: Sequence[Request], *, dtype: torch.dtype = torch.float32,
            block_size: int = 16, max_batch: int = 4, progress: bool = False,
            time_ops: bool = True) -> Comparison:
    """Serve ``requests`` greedily with the engine (continuous batching, paged cache) and with
    transformers' eager model one sequence at a time, from the same weights."""
    cfg = ModelConfig.from_hf(hf_model.config)
    total = sum(len(r.prompt) + r.max_new_tokens for r in requests)
    engine = Engine(cfg, hf_model.state_dict(), dtype=dtype, block_size=block_size,
                    num_blocks=max(8, 2 * -(-total // block_size)))
    timer = OpTimer()
    with torch.no_grad():
        if time_ops:
            with timer:
                start = time.perf_counter()
                results = generate(engine, requests, max_batch=max_batch, progress=progress)
                engine_s = time.perf_counter() - start
        else:
            start = time.perf_counter()
            results = generate(engine, requests, max_batch=max_batch, progress=progress)
            engine_s = time.perf_counter() - start
    steps = max(r.max_new_tokens for r in requests)
    step_diff = [0.0] * steps
    identical, ref_s, scale = [], 0.0, 0.0
    for req, res in zip(requests, results):
        tokens, logits, seconds = greedy(hf_model, req.prompt, req.max_new_tokens)
        ref_s += seconds
        identical.append(tokens == res.tokens)
        for k, (ref, ours) in enumerate(zip(logits, res.logits)):
            step_diff[k] = max(step_diff[k], float((ref - ours.to(ref.device)).abs().max()))
            scale = max(scale, float(ref.abs().max()))
    return Comparison(cfg.model_type, results, step_diff, identical,
                      logit_tolerance(dtype, scale), engine_s, ref_s, timer.rows())
