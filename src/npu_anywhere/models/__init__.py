"""A small LLM inference engine written the way Ascend serving code is written.

The model code imports ``torch_npu`` and calls ``torch_npu.npu_*`` in the forms vllm-ascend
uses (paged KV cache, TND prefill / BSND decode attention, fused residual RMSNorm, SwiGLU, MoE
routing through grouped matmul).  Run it after :func:`npu_anywhere.install` so those calls land
on npu_anywhere's kernels; ``npu-anywhere demo`` checks it against Hugging Face transformers.

- :mod:`.config`: the architecture numbers taken from a Hugging Face ``config.json``;
- :mod:`.weights`: Hugging Face state dicts (or a local safetensors checkpoint) repacked into
  the fused layouts the ops want;
- :mod:`.paged_cache`: block allocator and the per-layer paged KV cache;
- :mod:`.layers`: attention, dense MLP and MoE blocks;
- :mod:`.engine`: the decoder stack over packed tokens;
- :mod:`.scheduler`: continuous batching, greedy / top-k / top-p sampling;
- :mod:`.op_timer`: per-op wall time of every ``torch_npu.npu_*`` call;
- :mod:`.reference`: the transformers side (tiny configs, seeded weights, eager greedy loop).
"""

from importlib import import_module

from .config import ModelConfig

# The engine modules import torch_npu, which exists once npu_anywhere.install() has run (or on
# a real Ascend machine); they load on first use so that .config / .reference / .weights import
# without it.
_LAZY = {"Engine": ".engine", "Request": ".scheduler", "GenerationResult": ".scheduler",
         "generate": ".scheduler", "sample_next": ".scheduler"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ModelConfig", "Engine", "Request", "GenerationResult", "generate", "sample_next"]
