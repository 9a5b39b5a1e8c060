"""Continuous batching over the engine, and greedy / top-k / top-p sampling.

Each step first admits waiting requests while the running batch has room (their prompts are
prefilled together in one TND call, which also yields their first token), then decodes one
token for every running sequence in one BSND call.  A sequence leaves the batch as soon as it
has its ``max_new_tokens``; its blocks go back to the pool, and a waiting request takes its
place at the next step.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

import torch

if TYPE_CHECKING:      # the engine imports torch_npu; sampling and scheduling do not need it
    from .engine import Engine

Tensor = torch.Tensor


@dataclass
class Request:
    prompt: List[int]
    max_new_tokens: int


@dataclass
class GenerationResult:
    prompt: List[int]
    tokens: List[int] = field(default_factory=list)
    logits: List[Tensor] = field(default_factory=list)   # float32 [vocab] per generated token


def sample_next(logits: Tensor, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                generator: Optional[torch.Generator] = None) -> Tensor:
    """Next token per row of ``logits [B, V]``: argmax when ``temperature`` is 0, otherwise a
    draw from the softmax of ``logits / temperature`` restricted to the ``top_k`` largest and
    to the smallest set whose probability reaches ``top_p`` (the first token always kept)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    scores = logits.float() / temperature
    if top_k > 0:
        kth = scores.topk(min(top_k, scores.shape[-1]), dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p.
        drop = probs.cumsum(dim=-1) - probs >= top_p
        sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class _Progress:
    """A one-line progress bar on stderr (only when it is a terminal, or when forced)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled = total, 0, enabled
        self.start = time.perf_counter()

    def update(self, n: int, running: int) -> None:
        self.done += n
        if not self.enabled:
            return
        width = 30
        fill = int(width * self.done / max(self.total, 1))
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        sys.stderr.write(f"\r  decode [{'#' * fill}{'.' * (width - fill)}] "
                         f"{self.done}/{self.total} tokens, {running} running, {rate:.0f} tok/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def generate(engine: Engine, requests: Sequence[Request], *, max_batch: int = 4,
             sampler: Callable[[Tensor], Tensor] = sample_next,
             progress: bool = False) -> List[GenerationResult]:
    """Run every request to its ``max_new_tokens``; results in request order."""
    results = [GenerationResult(prompt=list(r.prompt)) for r in requests]
    waiting = deque(range(len(requests)))
    running: List[int] = []
    tables = {i: [] for i in range(len(requests))}
    bar = _Progress(sum(r.max_new_tokens for r in requests), progress)

    def emit(idx: int, logits: Tensor, token: int) -> None:
        results[idx].logits.append(logits)
        results[idx].tokens.append(token)

    def finished(idx: int) -> bool:
        return len(results[idx].tokens) >= requests[idx].max_new_tokens

    while waiting or running:
        admitted = []
        while waiting and len(running) + len(admitted) < max_batch:
            admitted.append(waiting.popleft())
        if admitted:
            logits = engine.prefill([requests[i].prompt for i in admitted],
                                    [tables[i] for i in admitted])
            for i, row, tok in zip(admitted, logits, sampler(logits).tolist()):
                emit(i, row, tok)
            running += admitted
            bar.update(len(admitted), len(running))
        for i in [i for i in running if finished(i)]:
            running.remove(i)
            engine.pool.release(tables[i])
        if not running:
            continue
        positions = [len(requests[i].prompt) + len(results[i].tokens) - 1 for i in running]
        logits = engine.decode([results[i].tokens[-1] for i in running], positions,
                               [tables[i] for i in running])
        for i, row, tok in zip(running, logits, sampler(logits).tolist()):
            emit(i, row, tok)
        bar.update(len(running), len(running))
        for i in [i for i in running if finished(i)]:
            running.remove(i)
            engine.pool.release(tables[i])
    bar.close()
    return results
