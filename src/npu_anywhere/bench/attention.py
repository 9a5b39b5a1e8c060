"""Benchmark cases for inference attention: prefill (causal GQA) and paged decode.

Presets (llama-3-8B-like heads: 32 query heads, 8 KV heads, head dim 128):

* ``prefill tnd``: 8 sequences x 1024 tokens packed (TND), ``sparse_mode=3`` (causal);
* ``prefill s4096``: one sequence of 4096 tokens (BSND), causal;
* ``decode paged``: 32 sequences x 4096 cached tokens, one new token each, block size 128, the
  cache ``[num_blocks, 128, 8 * 128]`` with each sequence's blocks scattered at random.

Contenders:

* ``naive``: what users hand-write -- (decode: gather every sequence's blocks into a dense K/V)
  then ``softmax(q k^T * scale + mask) v`` in float32 (GQA by grouping query heads), per
  sequence for the packed prefill;
* ``sdpa``: ``F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)`` on the same math
  (decode: after the same dense gather);
* ``npu_anywhere``: ``npu_fused_infer_attention_score`` with the documented layout;
* ``kernel``: the solver of ``npu_anywhere.kernels.attention`` on the normalized problem
  (what the op runs, without its layout conversion; decode on the CPU: the C++ loop nest of
  ``kernels/attention/cpu_decode.py``);
* ``inductor`` (decode): ``paged.decode_core`` compiled by Inductor, the fused decode used
  off the CPU, on the same problem.

``bytes_moved`` is one read of q, k, v (the cache, for decode) and one write of the output: the
runner's floor is the time of a plain copy of that many bytes.  Run as
``npu-anywhere bench -k attention``; :func:`measure` (``python -m npu_anywhere.bench.attention``)
prints median times and peak memory per contender with fewer repetitions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..kernels.attention import dense_attention, paged, paged_attention
from ..ops.attention.fused_infer_attention_score import npu_fused_infer_attention_score
from ..ops.attention.problem import UNBOUNDED, AttentionProblem
from .registry import Case, register

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SCALE = 1 / math.sqrt(HEAD_DIM)
DTYPES = (torch.bfloat16, torch.float32)
PREFILL = {"tnd": (8, 1024), "s4096": (1, 4096)}
DECODE_BATCH, DECODE_CONTEXT, BLOCK_SIZE = 32, 4096, 128
COMPRESSED_MASK = 2048      # sparse_mode 2-4 take a 2048 x 2048 template (its values unread)


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]


# -- prefill --------------------------------------------------------------------------------

def _prefill_inputs(batch: int, seq: int, dtype: torch.dtype, device) -> tuple:
    gen = torch.Generator().manual_seed(0)
    tokens = batch * seq
    q = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).to(device=device, dtype=dtype)
    return q, k, v, batch, seq


def _bnsd(t: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """A packed [B*S, N, D] tensor of equal-length sequences as a [B, N, S, D] view."""
    return t.view(batch, seq, t.shape[1], t.shape[2]).transpose(1, 2)


def naive_prefill(q, k, v, batch, seq):
    """Per sequence: float32 scores, causal fill, softmax, weighted sum (GQA by head groups)."""
    outs = []
    g = HEADS // KV_HEADS
    causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    for b in range(batch):
        rows = slice(b * seq, (b + 1) * seq)
        qb = q[rows].float().transpose(0, 1).reshape(KV_HEADS, g * seq, HEAD_DIM)
        kb = k[rows].float().transpose(0, 1)
        vb = v[rows].float().transpose(0, 1)
        s = (qb @ kb.transpose(1, 2) * SCALE).view(KV_HEADS, g, seq, seq)
        p = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        o = (p.view(KV_HEADS, g * seq, seq) @ vb).view(HEADS, seq, HEAD_DIM)
        outs.append(o.transpose(0, 1))
    return torch.cat(outs).to(q.dtype)


def sdpa_prefill(q, k, v, batch, seq):
    o = F.scaled_dot_product_attention(_bnsd(q, batch, seq), _bnsd(k, batch, seq),
                                       _bnsd(v, batch, seq), is_causal=True, enable_gqa=True,
                                       scale=SCALE)
    return o.transpose(1, 2).reshape(batch * seq, HEADS, HEAD_DIM)


def ours_prefill(q, k, v, batch, seq):
    lengths = [seq * (b + 1) for b in range(batch)]
    mask = torch.ones(COMPRESSED_MASK, COMPRESSED_MASK, dtype=torch.bool,
                      device=q.device).triu(1)
    out, _ = npu_fused_infer_attention_score(
        q, k, v, atten_mask=mask, actual_seq_lengths=lengths, actual_seq_lengths_kv=lengths,
        num_heads=HEADS, num_key_value_heads=KV_HEADS, scale=SCALE, input_layout="TND",
        sparse_mode=3)
    return out


def kernel_prefill(q, k, v, batch, seq):
    problem = AttentionProblem(query=_bnsd(q, batch, seq), key=_bnsd(k, batch, seq),
                               value=_bnsd(v, batch, seq), q_lens=[seq] * batch,
                               kv_lens=[seq] * batch, scale=SCALE, next_tokens=0)
    out, _ = dense_attention(problem)
    return out.to(q.dtype).transpose(1, 2).reshape(batch * seq, HEADS, HEAD_DIM)


def _prefill_case(preset: str, dtype: torch.dtype) -> Case:
    batch, seq = PREFILL[preset]
    tokens = batch * seq
    nbytes = tokens * HEAD_DIM * dtype.itemsize * (2 * HEADS + 2 * KV_HEADS)
    return Case(
        name=f"attention prefill {preset} {_dtype_name(dtype)}", op="npu_fused_infer_attention_score",
        preset=f"prefill {batch}x{seq}", dtype=dtype,
        make_inputs=lambda device: _prefill_inputs(batch, seq, dtype, device),
        bytes_moved=nbytes,
        contenders={"naive": naive_prefill, "sdpa": sdpa_prefill, "npu_anywhere": ours_prefill,
                    "kernel": kernel_prefill},
        check="naive")


# -- paged decode ---------------------------------------------------------------------------

def _decode_inputs(dtype: torch.dtype, device) -> tuple:
    gen = torch.Generator().manual_seed(0)
    per_seq = DECODE_CONTEXT // BLOCK_SIZE
    num_blocks = DECODE_BATCH * per_seq
    hidden = KV_HEADS * HEAD_DIM
    q = torch.randn(DECODE_BATCH, 1, HEADS * HEAD_DIM, generator=gen).to(device=device, dtype=dtype)
    key_cache = torch.randn(num_blocks, BLOCK_SIZE, hidden, generator=gen).to(device=device,
                                                                              dtype=dtype)
    value_cache = torch.randn(num_blocks, BLOCK_SIZE, hidden, generator=gen).to(device=device,
                                                                                dtype=dtype)
    table = torch.randperm(num_blocks, generator=gen).view(DECODE_BATCH, per_seq)
    return q, key_cache, value_cache, table.to(device=device, dtype=torch.int32)


def _gather_dense(cache, table):
    """[B, Nkv, S, D] float32: every sequence's blocks copied out of the cache."""
    rows = cache[table.long().reshape(-1)]
    b, blocks = table.shape
    return rows.view(b, blocks * BLOCK_SIZE, KV_HEADS, HEAD_DIM).transpose(1, 2).float()


def naive_decode(q, key_cache, value_cache, table):
    k, v = _gather_dense(key_cache, table), _gather_dense(value_cache, table)
    g = HEADS // KV_HEADS
    qg = q.float().view(DECODE_BATCH, KV_HEADS, g, HEAD_DIM)
    p = torch.softmax(qg @ k.transpose(-1, -2) * SCALE, dim=-1)
    return (p @ v).reshape(DECODE_BATCH, 1, HEADS * HEAD_DIM).to(q.dtype)


def sdpa_decode(q, key_cache, value_cache, table):
    k, v = _gather_dense(key_cache, table), _gather_dense(value_cache, table)
    qb = q.float().view(DECODE_BATCH, 1, HEADS, HEAD_DIM).transpose(1, 2)
    o = F.scaled_dot_product_attention(qb, k, v, enable_gqa=True, scale=SCALE)
    return o.transpose(1, 2).reshape(DECODE_BATCH, 1, HEADS * HEAD_DIM).to(q.dtype)


def ours_decode(q, key_cache, value_cache, table):
    out, _ = npu_fused_infer_attention_score(
        q, key_cache, value_cache, block_table=table, block_size=BLOCK_SIZE,
        actual_seq_lengths_kv=[DECODE_CONTEXT] * DECODE_BATCH, num_heads=HEADS,
        num_key_value_heads=KV_HEADS, scale=SCALE, input_layout="BSH")
    return out


def _decode_problem(q, key_cache, value_cache, table) -> AttentionProblem:
    shape = (key_cache.shape[0], BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    return AttentionProblem(
        query=q.view(DECODE_BATCH, 1, HEADS, HEAD_DIM).transpose(1, 2), q_lens=[1] * DECODE_BATCH,
        kv_lens=[DECODE_CONTEXT] * DECODE_BATCH, scale=SCALE, key_cache=key_cache.view(shape),
        value_cache=value_cache.view(shape), block_table=table, block_size=BLOCK_SIZE,
        pre_tokens=UNBOUNDED, next_tokens=UNBOUNDED)


def kernel_decode(q, key_cache, value_cache, table):
    out, _ = paged_attention(_decode_problem(q, key_cache, value_cache, table))
    return out.transpose(1, 2).reshape(DECODE_BATCH, 1, HEADS * HEAD_DIM).to(q.dtype)


def inductor_decode(q, key_cache, value_cache, table):
    """The Inductor-compiled ``decode_core`` (the fused path off the CPU), for comparison."""
    args = paged._decode_args(_decode_problem(q, key_cache, value_cache, table))
    out, _ = paged._compiled_decode.run(*args)
    return out.reshape(DECODE_BATCH, 1, HEADS * HEAD_DIM).to(q.dtype)


def _decode_case(dtype: torch.dtype) -> Case:
    cache = DECODE_BATCH * DECODE_CONTEXT * KV_HEADS * HEAD_DIM * dtype.itemsize
    nbytes = 2 * cache + 2 * DECODE_BATCH * HEADS * HEAD_DIM * dtype.itemsize
    return Case(
        name=f"attention decode paged {_dtype_name(dtype)}", op="npu_fused_infer_attention_score",
        preset=f"decode {DECODE_BATCH}x{DECODE_CONTEXT} bs{BLOCK_SIZE}", dtype=dtype,
        make_inputs=lambda device: _decode_inputs(dtype, device), bytes_moved=nbytes,
        contenders={"naive": naive_decode, "sdpa": sdpa_decode, "npu_anywhere": ours_decode,
                    "kernel": kernel_decode, "inductor": inductor_decode},
        check="naive")


for _dtype in DTYPES:
    for _preset in PREFILL:
        register(_prefill_case(_preset, _dtype))
    register(_decode_case(_dtype))


# -- a lighter measurement with peak memory ----------------------------------------------------

def _rss_status(field: str) -> int:
    """A ``VmRSS`` / ``VmHWM`` line of /proc/self/status, in bytes (0 where unavailable)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> None:
    """Start a new high-water mark at the current RSS (Linux: ``clear_refs`` value 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss_child(case_name: str, contender: str, repeats: int, threads: int, conn) -> None:
    import gc
    import statistics
    import time
    if threads:
        torch.set_num_threads(threads)
    case = next(c for c in _cases() if c.name == case_name)
    inputs = case.make_inputs(torch.device("cpu"))
    fn = case.contenders[contender]
    gc.collect()
    _reset_peak_rss()
    base = _rss_status("VmRSS")
    fn(*inputs)                                   # warm (allocator, lazy imports, compile)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - start)
    conn.send((statistics.median(times), _rss_status("VmHWM") - base))
    conn.close()


def _cases() -> list:
    from .registry import CASES
    return [c for c in CASES if c.name.startswith("attention ")]


def measure(filter_text: str = "", repeats: int = 3, threads: int = 0) -> list[dict]:
    """Median time and peak extra RSS of each contender, each in a fresh process.

    The peak is the process's resident high-water mark during the calls (reset once the inputs
    exist) minus its resident size then: what one call needs beyond its inputs, including what
    the first call's compilation and the allocator keep.  The copy floor is one read + write of
    ``bytes_moved`` in this process.
    """
    import multiprocessing as mp
    import os
    from ..kernels.compiled import ENV_VAR
    from .runner import copy_bandwidth
    # The children inherit this: their warm call compiles the hot tiers (paged decode), as a
    # serving loop does after its first calls; the default (8 calls) is never reached here.
    os.environ.setdefault(ENV_VAR, "0")
    # A fresh interpreter per contender: a forked child of a process whose OpenMP pool has
    # run (the copy-floor measurement) can hang in its first parallel op.
    ctx = mp.get_context("spawn")
    rows = []
    for case in _cases():
        if filter_text not in case.name:
            continue
        floor = case.bytes_moved / copy_bandwidth(case.bytes_moved, torch.device("cpu"))
        for name in case.contenders:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_peak_rss_child, args=(case.name, name, repeats, threads,
                                                               child))
            proc.start()
            seconds, peak = parent.recv()
            proc.join()
            rows.append({"case": case.name, "contender": name, "median_s": seconds,
                         "peak_extra_bytes": peak, "vs_floor": seconds / floor})
            print(f"{case.name:34} {name:13} {seconds * 1e3:10.1f} ms  x floor "
                  f"{seconds / floor:7.2f}  peak +{peak / 2**20:8.1f} MiB", flush=True)
    return rows


if __name__ == "__main__":
    import sys
    measure(sys.argv[1] if len(sys.argv) > 1 else "",
            threads=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
