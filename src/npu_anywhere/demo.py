"""``npu-anywhere demo``: a short RoPE walkthrough against the naive formula."""

from __future__ import annotations

import time

import torch

from . import ops
from .kernels import compiled
from .bench.posembedding import naive_pair, rope_tables
from .ops.posembedding import npu_apply_rotary_pos_emb
from .testing import cann_mere_mare, judge_msprobe


def _time(fn, repeat: int = 20) -> float:
    for _ in range((compiled.compile_after() or 0) + 2):   # past the compile threshold
        fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> int:
    torch.manual_seed(0)
    b, s, nq, nk, d = 2, 256, 16, 4, 128
    print("npu_anywhere demo: RoPE on query and key (BSND, Llama-style half rotation)")
    print(f"shapes: query ({b}, {s}, {nq}, {d}), key ({b}, {s}, {nk}, {d}), cos/sin "
          f"({b}, {s}, 1, {d})\n")
    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        q = torch.randn(b, s, nq, d).to(dtype)
        k = torch.randn(b, s, nk, d).to(dtype)
        cos, sin = rope_tables(b, s, d, dtype, "cpu")
        golden = naive_pair(q.double(), k.double(), cos.double(), sin.double())
        ours = ops.apply_rotary_pos_emb(q, k, cos, sin, "BSND", "half")
        naive = naive_pair(q, k, cos, sin)
        err_ours = max(float((o.double() - g).abs().max()) for o, g in zip(ours, golden))
        err_naive = max(float((o.double() - g).abs().max()) for o, g in zip(naive, golden))
        mere, _ = cann_mere_mare(ours[0], golden[0])
        verdict = judge_msprobe(ours[0], golden[0])
        t_ours = _time(lambda: ops.apply_rotary_pos_emb(q, k, cos, sin))
        t_naive = _time(lambda: naive_pair(q, k, cos, sin))
        rows.append((str(dtype)[6:], err_ours, err_naive, mere, "PASS" if verdict else "FAIL",
                     t_ours * 1e3, t_naive * 1e3))
    print(f"{'dtype':<9} {'max err ours':>13} {'max err naive':>14} {'CANN MERE':>10} "
          f"{'msprobe':>8} {'ours ms':>8} {'naive ms':>9}")
    for r in rows:
        print(f"{r[0]:<9} {r[1]:>13.3g} {r[2]:>14.3g} {r[3]:>10.2g} {r[4]:>8} {r[5]:>8.3f} "
              f"{r[6]:>9.3f}")
    print("\nErrors are against a float64 golden of the doc formula; ours computes in float32 "
          "and rounds once,\nas the NPU kernel does, where the naive formula rounds after every "
          "op in half precision.")
    q = torch.randn(1, 4, 2, 64)
    before = q.clone()
    k = torch.randn(1, 4, 2, 64)
    cos, sin = rope_tables(1, 4, 64, torch.float32, "cpu")
    out_q, _ = npu_apply_rotary_pos_emb(q, k, cos, sin)
    print(f"\ntorch_npu.npu_apply_rotary_pos_emb updates in place: returned query is the input: "
          f"{out_q is q}; changed: {not torch.equal(before, q)}")
    print("Run Ascend scripts unchanged with:  npu-anywhere run your_script.py")
    return 0
