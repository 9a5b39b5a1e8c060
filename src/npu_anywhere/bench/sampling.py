"""Benchmark case for npu_top_k_top_p on decode-step logits (vLLM's sampler).

Per-row k in [10, 1024) and p in [0.5, 1), float32 logits.  Contenders:

* ``naive``: the filter vLLM hand-writes in PyTorch (``apply_top_k_top_p`` in
  vllm/v1/sample/ops/topk_topp_sampler.py): one ascending sort, the k-th value gathered as a
  threshold, a masked softmax, its running sum compared with ``1 - p``, and a scatter back.
  Its sort is not stable; random float32 logits have no ties, so it matches the op here.
* ``compiled``: ``torch.compile`` of ``naive``.
* ``reference`` (eager, the op's oracle) and ``npu_anywhere`` (the op's providers).

Every contender's output goes through ``clamp_min(-1e4)`` (removed entries become -1e4), so
that the runner's relative-error check compares masks instead of ``-inf - -inf``.  Bytes moved:
logits read once, the output written once.
"""

from __future__ import annotations

import torch

from ..ops.sampling.top_k_top_p import npu_top_k_top_p
from .registry import Case, register, with_reference

# name: (batch, vocab)
PRESETS = {
    "qwen2-decode-b32": (32, 151936),
    "llama3-decode-b128": (128, 128256),
}
_REMOVED = -1e4


def vllm_style_top_k_top_p(logits, p, k):
    ascending, positions = logits.sort(dim=-1)
    cut = ascending.gather(1, (ascending.shape[1] - k.long()).unsqueeze(1))
    ascending = ascending.masked_fill(ascending < cut, float("-inf"))
    running = ascending.softmax(dim=-1).cumsum(dim=-1)
    outside = running <= (1 - p).unsqueeze(1)
    outside[:, -1] = False
    ascending = ascending.masked_fill(outside, float("-inf"))
    return ascending.scatter(-1, positions, ascending)


def naive(logits, p, k):
    return vllm_style_top_k_top_p(logits, p, k).clamp_min(_REMOVED)


_compiled_naive = torch.compile(naive, dynamic=False)


def _op(logits, p, k):
    return npu_top_k_top_p(logits, p, k).clamp_min(_REMOVED)


def _case(preset, dtype):
    batch, vocab = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        logits = (torch.randn(batch, vocab, generator=gen) * 3).to(device=device, dtype=dtype)
        p = (torch.rand(batch, generator=gen) * 0.5 + 0.5).to(device=device, dtype=dtype)
        k = torch.randint(10, 1024, (batch,), generator=gen, dtype=torch.int32).to(device)
        return logits, p, k

    size = torch.finfo(dtype).bits // 8
    return Case(
        name=f"npu_top_k_top_p {preset} {str(dtype)[6:]}", op="npu_top_k_top_p",
        preset=preset, dtype=dtype, make_inputs=make,
        bytes_moved=2 * size * batch * vocab + (size + 4) * batch,
        contenders={
            "naive": naive,
            "compiled": _compiled_naive,
            "reference": with_reference(_op),
            "npu_anywhere": _op,
        })


for _preset in PRESETS:
    register(_case(_preset, torch.float32))
