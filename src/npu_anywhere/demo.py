"""``npu-anywhere demo``: a small LLM served by torch_npu ops, checked against transformers.

For each architecture (Llama, Qwen2, Qwen2-MoE, Mixtral; tiny configs with seeded random
weights, or a local Hugging Face checkpoint with ``--model PATH``) the demo

1. builds the transformers model (``attn_implementation="eager"``) and loads the same state
   dict into :mod:`npu_anywhere.models`, an engine written as Ascend serving code is written
   (``import torch_npu``; paged KV cache; TND prefill and BSND decode attention);
2. serves a batch of prompts of different lengths with continuous batching (sequences finish at
   different steps and waiting requests take their place), greedily;
3. runs transformers' own KV-cached greedy loop on each prompt and prints the max |logit
   difference| at every step, whether the greedy tokens are identical, tokens/s of both, and the
   time spent in each ``torch_npu.npu_*`` op;
4. samples one continuation with top-k / top-p.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import List, Optional, Sequence

# torch is imported inside the functions: the command-line parser imports this module for its
# options, and `npu-anywhere --help` / `--version` must not pay for a torch import.
ARCHS = ("llama", "qwen2", "qwen2_moe", "mixtral")
DTYPES = ("float32", "bfloat16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The demo's options (also the ``npu-anywhere demo`` subcommand's)."""
    p.add_argument("--model", metavar="PATH", default=None,
                   help="local Hugging Face checkpoint directory (config.json + safetensors); "
                        "default: tiny seeded models of every architecture")
    p.add_argument("--arch", choices=ARCHS, action="append", default=None,
                   help="tiny architecture to run (repeatable; default: all)")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--new-tokens", type=int, default=12, help="longest generation (default 12)")
    p.add_argument("--requests", type=int, default=5, help="number of prompts (default 5)")
    p.add_argument("--max-batch", type=int, default=4, help="running batch size (default 4)")
    p.add_argument("--block-size", type=int, default=16, help="paged cache block size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top-k", type=int, default=20, help="top-k of the sampled continuation")
    p.add_argument("--top-p", type=float, default=0.9, help="top-p of the sampled continuation")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def _parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="npu-anywhere demo",
                                                 description=__doc__.splitlines()[0]))


def _requests(vocab: int, count: int, new_tokens: int, seed: int):
    import torch
    from .models import Request

    g = torch.Generator().manual_seed(seed)
    reqs = []
    for i in range(count):
        length = 3 + (7 * i + 5) % 29            # 3 .. 31 tokens, all different
        # Generation lengths differ too, so sequences leave the batch at different steps.
        budget = max(1, new_tokens - (5 * i) % max(new_tokens, 1))
        reqs.append(Request(torch.randint(3, vocab, (length,), generator=g).tolist(), budget))
    return reqs


def _fmt_steps(values: Sequence[float]) -> str:
    return " ".join(f"{v:.1e}" for v in values)


def _report(cmp, requests) -> None:
    toks = cmp.tokens
    ours = toks / cmp.engine_seconds
    ref = toks / cmp.reference_seconds
    lens = [len(r.prompt) for r in requests]
    gens = [r.max_new_tokens for r in requests]
    print(f"  {len(requests)} prompts of {min(lens)}-{max(lens)} tokens, {min(gens)}-{max(gens)} "
          f"new tokens each, continuous batching")
    print(f"  max |logit diff| per step: {_fmt_steps(cmp.step_max_diff)}")
    print(f"  max |logit diff| {cmp.max_diff:.2e} (tolerance {cmp.tolerance:.1e});  greedy tokens "
          f"identical: {sum(cmp.greedy_identical)}/{len(cmp.greedy_identical)} sequences  -> "
          f"{'PASS' if cmp.passed else 'FAIL'}")
    print(f"  tokens/s: engine {ours:7.1f}   transformers eager {ref:7.1f}  ({ours / ref:.2f}x; "
          f"{toks} tokens; transformers runs one sequence at a time)")
    total = sum(s for _, _, s in cmp.op_rows)
    cells = [f"{name[4:]} {s * 1e3:.0f}ms/{calls}" for name, calls, s in cmp.op_rows]
    print(f"  torch_npu ops ({total / cmp.engine_seconds:.0%} of engine time; ms/calls): "
          + ", ".join(cells))


def _sample_line(hf_model, requests, dtype, args) -> str:
    import torch
    from .models import Engine, ModelConfig, Request, generate, sample_next

    cfg = ModelConfig.from_hf(hf_model.config)
    engine = Engine(cfg, hf_model.state_dict(), dtype=dtype, block_size=args.block_size,
                    num_blocks=64)
    g = torch.Generator().manual_seed(args.seed)

    def sampler(logits):
        return sample_next(logits, temperature=args.temperature, top_k=args.top_k,
                           top_p=args.top_p, generator=g)

    with torch.no_grad():
        res = generate(engine, [Request(requests[0].prompt, args.new_tokens)], sampler=sampler)
    return (f"  sampled (T={args.temperature}, top_k={args.top_k}, top_p={args.top_p}): "
            f"{res[0].tokens}")


def main(argv: Optional[List[str]] = None, args: Optional[argparse.Namespace] = None) -> int:
    args = args if args is not None else _parser().parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("npu-anywhere demo compares against Hugging Face transformers; install it with\n"
              "  pip install -e \".[demo]\"      (or: make demo)", file=sys.stderr)
        return 2
    import npu_anywhere

    npu_anywhere.install()
    transformers.logging.set_verbosity_error()
    from .models.compare import compare
    from .models.reference import pretrained_model, tiny_model

    import torch
    dtype = getattr(torch, args.dtype)
    progress = not args.no_progress and sys.stderr.isatty()
    print("npu_anywhere demo: an LLM engine written against torch_npu (paged KV cache, TND "
          "prefill / BSND decode\nFIA, add_rms_norm, rotary, swiglu, MoE routing + grouped "
          f"matmul), vs Hugging Face transformers {transformers.__version__} eager, {args.dtype}")
    if args.model:
        models = [(args.model, lambda: pretrained_model(args.model, dtype))]
    else:
        models = [(f"{a} (tiny, seeded)", lambda a=a: tiny_model(a, dtype, args.seed))
                  for a in (args.arch or ARCHS)]
    # Tiny shapes gain nothing from the compiled provider and would pay its first-call stall;
    # NPU_ANYWHERE_COMPILE_AFTER, when set, is obeyed.
    from .kernels.compiled import ENV_VAR, compiling_after
    tiering = contextlib.nullcontext() if os.environ.get(ENV_VAR) else compiling_after(None)
    with tiering:
        return _run(models, args, dtype, progress)


def _run(models, args, dtype, progress) -> int:
    from .models.compare import compare

    ok = True
    for label, build in models:
        hf = build()
        c = hf.config
        print(f"\n{label}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
              f"{c.num_attention_heads}/{c.num_key_value_heads} q/kv heads, vocab {c.vocab_size}")
        requests = _requests(c.vocab_size, args.requests, args.new_tokens, args.seed)
        cmp = compare(hf, requests, dtype=dtype, block_size=args.block_size,
                      max_batch=args.max_batch, progress=progress)
        _report(cmp, requests)
        print(_sample_line(hf, requests, dtype, args))
        ok &= cmp.passed
    print("\nPASS: every model matches transformers" if ok else
          "\nFAIL: some model differs from transformers")
    print("Run Ascend scripts unchanged with:  npu-anywhere run your_script.py")
    return 0 if ok else 1
