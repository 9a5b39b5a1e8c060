"""Benchmark cases for training attention: npu_fusion_attention forward and forward + backward.

Presets: one sequence of S = 4096 or 8192 tokens, 32 heads, head dim 128, causal
(``sparse_mode=2`` with the compressed 2048x2048 mask), BNSD, float32 and bfloat16.

Contenders:

* ``naive``: the doc formula as users hand-write it -- ``softmax(q k^T * scale + mask) v`` in
  float32, the whole ``[N, S, S]`` score matrix materialized (4k only: 8k needs > 20 GiB);
* ``sdpa``: ``F.scaled_dot_product_attention(is_causal=True)`` (PyTorch's fused CPU flash kernel);
* ``npu_anywhere``: ``npu_fusion_attention`` (its SDPA flash provider takes these calls);
* ``reference``: the op's row-blocked float32 reference, which never holds more than a
  block of scores.

Further cases (below) time the calls the fused kernels cannot take: an explicit band mask and
an alibi pse, which run on the op's tiled provider.

``fwd+bwd`` cases time the forward and one backward of a ones-like gradient.  ``bytes_moved``
is one read of q, k, v and one write of the output.  ``python -m
npu_anywhere.bench.training_attention [filter]`` prints median times and the peak extra
resident memory of each contender, each in a fresh process.

On an oversubscribed CPU (more runnable threads than cores) every PyTorch call of a
multi-threaded process may wait for its worker threads, whatever its size (measured: a 8K
element ``exp`` took ~20 ms with 2 threads at load 11, 0.1 ms with one): the tiled provider,
a few dozen calls per tile, then loses ground to SDPA's single call.  ``--threads 1`` compares
the work itself.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ops.training_attention.fusion_attention import npu_fusion_attention
from .registry import Case, register, with_reference

HEADS, HEAD_DIM = 32, 128
SCALE = 1 / math.sqrt(HEAD_DIM)
PRESETS = {"s4096": 4096, "s8192": 8192}
DTYPES = (torch.float32, torch.bfloat16)


def _mask() -> torch.Tensor:
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def naive(q, k, v):
    s = q.shape[2]
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * SCALE
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), 1)
    scores = scores.masked_fill(causal, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=SCALE)


def fusion(q, k, v):
    return npu_fusion_attention(q, k, v, HEADS, "BNSD", atten_mask=_mask(), scale=SCALE,
                                sparse_mode=2)[0]


def with_backward(fn):
    """``fn``'s forward and the backward of ``sum(out)``; returns (out, dq, dk, dv)."""
    def run(q, k, v):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
        return (out.detach(), *grads)
    run.__name__ = f"{getattr(fn, '__name__', 'fn')}_fwd_bwd"
    return run


def _case(preset: str, dtype: torch.dtype, backward: bool) -> Case:
    s = PRESETS[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        return tuple(torch.randn(1, HEADS, s, HEAD_DIM, generator=gen).to(device=device,
                                                                          dtype=dtype)
                     for _ in range(3))

    contenders = {"sdpa": sdpa, "npu_anywhere": fusion, "reference": with_reference(fusion)}
    if s <= 4096:
        contenders = {"naive": naive, **contenders}
    if backward:
        contenders = {name: with_backward(fn) for name, fn in contenders.items()}
    size = torch.finfo(dtype).bits // 8
    kind = "fwd+bwd" if backward else "fwd"
    return Case(name=f"npu_fusion_attention {preset} {kind} {str(dtype)[6:]}",
                op="npu_fusion_attention", preset=preset, dtype=dtype, make_inputs=make,
                bytes_moved=4 * size * HEADS * s * HEAD_DIM, contenders=contenders,
                check="sdpa", tolerance={"atol": 2e-2, "rtol": 2e-2})


for _preset in PRESETS:
    for _dtype in DTYPES:
        for _backward in (False, True):
            register(_case(_preset, _dtype, _backward))


# -- calls the fused kernels cannot take: an explicit band mask, an alibi pse ---------------
#
# One sequence of S = 4096, head dim 128, float32, N = 8 or 32 heads.  ``band``: a causal band
# of 1024 keys given as an explicit [S, S] mask (sparse_mode 0, next_tockens 0,
# pre_tockens 1024); ``alibi``: the alibi-compressed [1, N, 1024, S] pse with the compressed
# causal mask (sparse_mode 2).  Contenders: ``naive`` (the formula, [N, S, S] materialized),
# ``sdpa`` with the equivalent explicit mask (bool for the band; the float additive mask
# ``scale * pse`` with -inf above the diagonal for alibi, precomputed outside the timing),
# ``npu_anywhere`` (the tiled provider: fully masked tiles are skipped) and ``reference``.

MASKED_S, BAND = 4096, 1024
MASKED_HEADS = (8, 32)


def _band_masked(s: int) -> torch.Tensor:
    i = torch.arange(s).view(-1, 1)
    j = torch.arange(s).view(1, -1)
    return (j > i) | (j < i - BAND)


def _alibi_full(heads: int, s: int) -> torch.Tensor:
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
    i = torch.arange(s).view(-1, 1)
    j = torch.arange(s).view(1, -1)
    return -(i - j).abs().float() * slopes.view(1, heads, 1, 1)


def _masked_case(kind: str, heads: int, backward: bool) -> Case:
    s = MASKED_S

    def make(device):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, heads, s, HEAD_DIM, generator=gen).to(device)
                   for _ in range(3))
        if kind == "band":
            masked = _band_masked(s).to(device)
            return q, k, v, masked, ~masked
        full = _alibi_full(heads, s).to(device)
        additive = (full * SCALE).masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool,
                                                                    device=device), 1),
                                              float("-inf"))
        return q, k, v, full[:, :, -1024:].contiguous(), additive

    if kind == "band":
        def fusion_m(q, k, v, masked, _):
            return npu_fusion_attention(q, k, v, heads, "BNSD", atten_mask=masked, scale=SCALE,
                                        sparse_mode=0, pre_tockens=BAND, next_tockens=0)[0]
    else:
        def fusion_m(q, k, v, compressed, _):
            return npu_fusion_attention(q, k, v, heads, "BNSD", pse=compressed,
                                        atten_mask=_mask(), scale=SCALE, sparse_mode=2)[0]

    def sdpa_m(q, k, v, _, sdpa_mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, scale=SCALE)

    def naive_m(q, k, v, _, sdpa_mask):
        scores = torch.matmul(q, k.transpose(-1, -2)) * SCALE
        if sdpa_mask.dtype == torch.bool:
            scores = scores.masked_fill(~sdpa_mask, float("-inf"))
        else:
            scores = scores + sdpa_mask
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    contenders = {"naive": naive_m, "sdpa": sdpa_m, "npu_anywhere": fusion_m,
                  "reference": with_reference(fusion_m)}
    if backward:
        contenders = {name: _with_backward5(fn) for name, fn in contenders.items()}
    kind_name = "fwd+bwd" if backward else "fwd"
    return Case(name=f"npu_fusion_attention {kind} n{heads} s{s} {kind_name} float32",
                op="npu_fusion_attention", preset=f"{kind}_n{heads}", dtype=torch.float32,
                make_inputs=make, bytes_moved=4 * 4 * heads * s * HEAD_DIM,
                contenders=contenders, check="sdpa", tolerance={"atol": 2e-4, "rtol": 2e-4})


def _with_backward5(fn):
    """:func:`with_backward` for contenders that take two extra, non-differentiable inputs."""
    def run(q, k, v, extra, mask):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves, extra, mask)
        grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
        return (out.detach(), *grads)
    run.__name__ = f"{getattr(fn, '__name__', 'fn')}_fwd_bwd"
    return run


for _kind in ("band", "alibi"):
    for _heads in MASKED_HEADS:
        for _backward in (False, True):
            register(_masked_case(_kind, _heads, _backward))


# -- a quick side-by-side measurement ----------------------------------------------------------

def _child(case_name: str, contender: str, repeats: int, conn) -> None:
    import resource
    import time
    from .registry import CASES
    case = next(c for c in CASES if c.name == case_name)
    inputs = case.make_inputs(torch.device("cpu"))
    fn = case.contenders[contender]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    conn.send((sorted(times)[len(times) // 2], peak * 1024))


def measure(filter_text: str = "", repeats: int = 3,
            ops: tuple[str, ...] = ("npu_fusion_attention",)) -> list[dict]:
    """Median seconds and peak extra RSS (beyond the inputs) per contender of the cases of
    ``ops``, each in a fresh process; the contenders of one case run one after another."""
    import multiprocessing as mp
    from .registry import CASES
    ctx = mp.get_context("fork")
    rows = []
    for case in CASES:
        if case.op not in ops or filter_text not in case.name:
            continue
        for name in case.contenders:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(case.name, name, repeats, child))
            proc.start()
            seconds, peak = parent.recv()
            proc.join()
            rows.append({"case": case.name, "contender": name, "median_s": seconds,
                         "peak_extra_bytes": peak})
            print(f"{case.name:52} {name:13} {seconds * 1e3:10.1f} ms  peak +"
                  f"{peak / 2**20:8.1f} MiB", flush=True)
    return rows


if __name__ == "__main__":
    import sys
    measure(sys.argv[1] if len(sys.argv) > 1 else "",
            int(sys.argv[2]) if len(sys.argv) > 2 else 3)
