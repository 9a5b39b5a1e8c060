"""The fast attention solvers (npu_anywhere.kernels.attention) against a float64 naive golden.

The golden below is written from the visibility rule of ops/attention/problem.py, one (batch,
head) at a time, with the paged cache read token by token through the block table, so it shares
no code with the kernels:

    row i of batch b sees key j  iff  i < q_lens[b], j < kv_lens[b],
                                      -pre_tokens <= j - (i + diag_offset[b]) <= next_tokens,
                                      and mask[b, h, i, j] is False
    s = scale * q . k + pse;  out = softmax(s over visible j) @ v  (0 if none);  lse = logsumexp
    (-inf if none); query head h reads kv head h // (Nq / Nkv).

Inputs are rounded to their dtype first; the kernels compute in float32 from those values.  For
float16 / bfloat16 queries the NPU also rounds the unnormalized probabilities ``exp(s - max)`` to
that dtype before ``P @ V`` (after the row sum), and so does the golden; the kernels' float32
``exp`` can land a probability on the other side of a rounding midpoint than the float64 one,
so those dtypes allow about one such flip (``TOL``); :func:`test_probabilities_rounding_exact`
checks the rounding itself on inputs far from every midpoint.
"""

from __future__ import annotations

import math

import pytest
import torch

from npu_anywhere.kernels.attention import (cpu_decode, dense, dense_attention, online, paged,
                                            paged_attention)
from npu_anywhere.ops.attention.problem import UNBOUNDED, AttentionProblem

ATOL = RTOL = 2e-5
TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
ROUNDED = (torch.float16, torch.bfloat16)


def golden(p: AttentionProblem):
    b_, n_q, s_q, _ = p.query.shape
    g = p.group
    if p.paged:
        cap = p.kv_capacity
        n_kv = p.key_cache.shape[2]
        k = torch.zeros(b_, n_kv, cap, p.key_cache.shape[3], dtype=torch.float64)
        v = torch.zeros(b_, n_kv, cap, p.value_cache.shape[3], dtype=torch.float64)
        for b in range(b_):
            for j in range(p.kv_lens[b]):
                blk = int(p.block_table[b, j // p.block_size])
                k[b, :, j] = p.key_cache[blk, j % p.block_size].double()
                v[b, :, j] = p.value_cache[blk, j % p.block_size].double()
    else:
        k, v = p.key.double(), p.value.double()
    cap = k.shape[2]
    mask = None if p.mask is None else torch.broadcast_to(p.mask, (b_, n_q, s_q, cap))
    pse = None if p.pse is None else torch.broadcast_to(p.pse.double(), (b_, n_q, s_q, cap))
    out = torch.zeros(b_, n_q, s_q, v.shape[-1], dtype=torch.float64)
    lse = torch.full((b_, n_q, s_q), -math.inf, dtype=torch.float64)
    i = torch.arange(s_q).view(-1, 1)
    j = torch.arange(cap).view(1, -1)
    for b in range(b_):
        ok = (i < p.q_lens[b]) & (j < p.kv_lens[b])
        rel = j - (i + p.diag_offset[b])
        if p.pre_tokens < UNBOUNDED:
            ok &= rel >= -p.pre_tokens
        if p.next_tokens < UNBOUNDED:
            ok &= rel <= p.next_tokens
        for h in range(n_q):
            vis = ok if mask is None else ok & ~mask[b, h]
            s = p.scale * (p.query[b, h].double() @ k[b, h // g].T)
            if pse is not None:
                s = s + pse[b, h]
            s = s.masked_fill(~vis, -math.inf)
            for r in range(min(s_q, p.q_lens[b])):
                if vis[r].any():
                    e = torch.exp(s[r] - s[r].max())
                    if p.query.dtype in ROUNDED:      # the NPU's cast before P @ V
                        num = e.to(p.query.dtype).double()
                    else:
                        num = e
                    out[b, h, r] = (num @ v[b, h // g]) / e.sum()
                    lse[b, h, r] = torch.logsumexp(s[r], dim=0)
    return out, lse


def check(p: AttentionProblem, solver):
    out, lse = solver(p)
    want, want_lse = golden(p)
    assert out.shape == want.shape and out.dtype in (torch.float32, torch.float64)
    tol = TOL.get(p.query.dtype, ATOL)
    for b, q_len in enumerate(p.q_lens):        # rows past q_len: out 0, lse unspecified
        assert (out[b, :, q_len:] == 0).all()
        torch.testing.assert_close(out[b, :, :q_len].double(), want[b, :, :q_len],
                                   atol=tol, rtol=tol)
        if p.return_lse:
            got = lse[b, :, :q_len].double()
            ref = want_lse[b, :, :q_len]
            assert torch.equal(torch.isinf(got), torch.isinf(ref))
            torch.testing.assert_close(got.masked_fill(torch.isinf(got), 0),
                                       ref.masked_fill(torch.isinf(ref), 0), atol=ATOL, rtol=RTOL)
    return out, lse


def rand(*shape, dtype=torch.float32, gen):
    return torch.randn(*shape, generator=gen).to(dtype)


def dense_problem(b=2, n_q=4, n_kv=2, s_q=5, s_kv=7, d=16, dv=None, dtype=torch.float32,
                  seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    kw.setdefault("q_lens", [s_q] * b)
    kw.setdefault("kv_lens", [s_kv] * b)
    return AttentionProblem(query=rand(b, n_q, s_q, d, dtype=dtype, gen=g),
                            key=rand(b, n_kv, s_kv, d, dtype=dtype, gen=g),
                            value=rand(b, n_kv, s_kv, dv or d, dtype=dtype, gen=g),
                            scale=kw.pop("scale", 1 / math.sqrt(d)), return_lse=True, **kw)


CAUSAL = dict(pre_tokens=UNBOUNDED, next_tokens=0)


# -- dense: the fused flash path ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=str)
@pytest.mark.parametrize("n_q,n_kv", [(4, 4), (4, 2), (4, 1)])
def test_flash_no_mask(n_q, n_kv, dtype):
    p = dense_problem(n_q=n_q, n_kv=n_kv, dtype=dtype, seed=n_q + n_kv)
    if dtype in ROUNDED and not dense._low_precision_flash():
        # run in bf16 / fp16 the flash kernel would be slow on this CPU: tiled engine
        assert "round the probabilities" in dense.flash_supports(p)
    else:
        assert dense.flash_supports(p) is None
    out, _ = check(p, dense_attention)
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("s_q,s_kv", [(6, 6), (3, 8), (8, 3)])
def test_flash_causal_top_left_and_bottom_right(s_q, s_kv):
    top = dense_problem(s_q=s_q, s_kv=s_kv, **CAUSAL)
    assert dense.flash_supports(top) is None
    check(top, dense_attention)
    bottom = dense_problem(s_q=s_q, s_kv=s_kv, diag_offset=[s_kv - s_q] * 2, **CAUSAL)
    assert dense.flash_supports(bottom) is None
    check(bottom, dense_attention)


def test_flash_varlen_bottom_right_and_empty_sequences():
    q_lens, kv_lens = [3, 5, 0, 4, 2], [7, 2, 4, 4, 0]
    p = dense_problem(b=5, s_q=5, s_kv=7, q_lens=q_lens, kv_lens=kv_lens,
                      diag_offset=[kv - q for q, kv in zip(q_lens, kv_lens)], **CAUSAL)
    assert dense.flash_supports(p) is None
    check(p, dense_attention)
    check(dense_problem(b=5, s_q=5, s_kv=7, q_lens=q_lens, kv_lens=kv_lens), dense_attention)


def test_flash_non_contiguous_and_value_width():
    p = dense_problem(s_q=4, s_kv=6, d=8)
    p.query = p.query.transpose(2, 3).contiguous().transpose(2, 3)
    p.key = torch.randn(2, 6, 2, 8).transpose(1, 2)
    check(p, dense_attention)
    wide_v = dense_problem(dv=24)                       # Dv != Dk: the tiled engine
    assert dense.flash_supports(wide_v) is not None
    check(wide_v, dense_attention)


# -- dense: the tiled online-softmax engine ------------------------------------------------

@pytest.fixture
def small_tiles(monkeypatch):
    """Several key chunks and query blocks even on test-sized shapes."""
    monkeypatch.setattr(dense, "TILE_KEYS", 3)
    monkeypatch.setattr(online, "SCORE_BUDGET_BYTES", 2 * 4 * 4 * 3 * 2)


@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_tiled_bool_mask_with_fully_masked_rows(small_tiles, n_kv):
    p = dense_problem(n_kv=n_kv, s_q=6, s_kv=9, seed=n_kv)
    g = torch.Generator().manual_seed(5)
    mask = torch.rand(2, 4, 6, 9, generator=g) < 0.4
    mask[0, 1, 2] = True                                 # a row with no visible key
    mask[1, :, 4] = True
    p.mask = mask
    assert dense.flash_supports(p) == "a boolean mask"
    out, lse = check(p, dense_attention)
    assert (out[0, 1, 2] == 0).all() and lse[0, 1, 2] == -math.inf


@pytest.mark.parametrize("mask_shape", [(6, 9), (2, 1, 6, 9), (1, 4, 6, 9)])
def test_tiled_broadcast_masks_and_pse(small_tiles, mask_shape):
    p = dense_problem(s_q=6, s_kv=9, seed=3)
    g = torch.Generator().manual_seed(7)
    p.mask = torch.rand(*mask_shape, generator=g) < 0.3
    p.pse = torch.randn(1, 4, 6, 9, generator=g)
    check(p, dense_attention)
    p.pse = torch.randn(2, 1, 1, 9, generator=g)          # broadcast over heads and rows
    check(p, dense_attention)


@pytest.mark.parametrize("pre,nxt", [(2, 0), (1, 1), (UNBOUNDED, -1), (3, UNBOUNDED), (0, 0)])
def test_tiled_window_bands(small_tiles, pre, nxt):
    q_lens, kv_lens = [6, 4], [9, 7]
    p = dense_problem(s_q=6, s_kv=9, q_lens=q_lens, kv_lens=kv_lens, pre_tokens=pre,
                      next_tokens=nxt, diag_offset=[kv - q for q, kv in zip(q_lens, kv_lens)])
    check(p, dense_attention)


def test_tiled_causal_with_mask_and_varlen(small_tiles):
    q_lens, kv_lens = [2, 6, 0], [9, 6, 3]
    p = dense_problem(b=3, s_q=6, s_kv=9, q_lens=q_lens, kv_lens=kv_lens,
                      diag_offset=[kv - q for q, kv in zip(q_lens, kv_lens)], **CAUSAL)
    p.mask = torch.zeros(6, 9, dtype=torch.bool)
    p.mask[:, 0] = True
    check(p, dense_attention)


def test_tiled_matches_flash_on_a_causal_problem(small_tiles):
    p = dense_problem(s_q=7, s_kv=7, **CAUSAL)
    flash_out, flash_lse = dense_attention(p)
    p.mask = torch.zeros(7, 7, dtype=torch.bool)          # same problem, tiled path
    tiled_out, tiled_lse = dense_attention(p)
    torch.testing.assert_close(tiled_out, flash_out, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(tiled_lse, flash_lse, atol=ATOL, rtol=RTOL)


# -- paged ---------------------------------------------------------------------------------

def paged_problem(kv_lens, q_lens=None, n_q=4, n_kv=2, d=16, bs=4, max_blocks=None,
                  dtype=torch.float32, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    b = len(kv_lens)
    q_lens = q_lens or [1] * b
    max_blocks = max_blocks or max(-(-kv // bs) for kv in kv_lens) + 1
    num_blocks = b * max_blocks + 3
    cache_k = rand(num_blocks, bs, n_kv, d, dtype=dtype, gen=g)
    cache_v = rand(num_blocks, bs, n_kv, d, dtype=dtype, gen=g)
    perm = torch.randperm(num_blocks, generator=g)[:b * max_blocks]
    table = perm.view(b, max_blocks).to(torch.int32)
    for bi, kv in enumerate(kv_lens):                    # unused entries: padding ids
        table[bi, -(-kv // bs):] = -1 if bi % 2 else 0
    s_q = max(q_lens)
    return AttentionProblem(query=rand(b, n_q, s_q, d, dtype=dtype, gen=g), q_lens=q_lens,
                            kv_lens=list(kv_lens), scale=kw.pop("scale", 0.3),
                            key_cache=cache_k, value_cache=cache_v, block_table=table,
                            block_size=bs, return_lse=True, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n_kv", [4, 1])
def test_paged_decode(dtype, n_kv):
    p = paged_problem([9, 1, 0, 16, 5], n_kv=n_kv, dtype=dtype, seed=n_kv)
    assert paged.supports(p) is None and dense.supports(p) is not None
    check(p, paged_attention)


@pytest.fixture
def small_chunks(monkeypatch):
    """One block per chunk and one batch per group at these shapes."""
    monkeypatch.setattr(paged, "CHUNK_BYTES", 4 * 2 * 16 * 4)


def test_paged_decode_in_many_chunks(small_chunks):
    p = paged_problem([9, 13, 3, 16], seed=2)
    assert paged._plan(p) == (1, 1)
    check(p, paged_attention)


def test_paged_chunked_prefill_bottom_right(small_chunks):
    q_lens, kv_lens = [3, 1, 5, 0], [11, 4, 5, 6]
    p = paged_problem(kv_lens, q_lens=q_lens, seed=4,
                      diag_offset=[kv - q for q, kv in zip(q_lens, kv_lens)], **CAUSAL)
    check(p, paged_attention)


def test_paged_with_mask_pse_and_window(small_chunks):
    q_lens, kv_lens = [3, 2], [10, 7]
    p = paged_problem(kv_lens, q_lens=q_lens, seed=6, pre_tokens=4, next_tokens=0,
                      diag_offset=[kv - q for q, kv in zip(q_lens, kv_lens)])
    cap = p.kv_capacity
    g = torch.Generator().manual_seed(8)
    p.mask = torch.rand(2, 1, 3, cap, generator=g) < 0.3
    p.pse = torch.randn(1, 4, 3, cap, generator=g)
    check(p, paged_attention)


def test_paged_groups_batches(monkeypatch):
    monkeypatch.setattr(paged, "CHUNK_BYTES", 4 * 2 * 16 * 4 * 6)
    p = paged_problem([8, 8, 7, 5, 8], seed=9)
    group, per_chunk = paged._plan(p)
    assert group > 1 and per_chunk == 2
    check(p, paged_attention)


@pytest.mark.slow
def test_paged_decode_compiled_path(monkeypatch):
    """The Inductor-fused decode (compiled once hot; what runs off the CPU) against the golden,
    with ragged lengths."""
    from npu_anywhere.kernels.compiled import compiling_after
    monkeypatch.setattr(cpu_decode, "supports", lambda *args: "held off for this test")
    p = paged_problem([9, 1, 0, 16, 5], n_kv=2, dtype=torch.bfloat16, seed=11)
    args = paged._decode_args(p)
    assert isinstance(args, tuple)
    # run eagerly (a failed compilation) it declines instead of materializing the gather
    assert paged._decode_compiled_only(*args) is None
    with compiling_after(0):
        check(p, paged_attention)
        assert paged._compiled_decode._compiled, "the compiled decode did not run"
    masked = paged_problem([9, 4], seed=12)
    masked.mask = torch.zeros(2, 1, 1, masked.kv_capacity, dtype=torch.bool)
    assert paged._decode_args(masked) == "a mask or pse"


# -- the CPU decode loop nest ------------------------------------------------------------------

def _have_cpp_compiler() -> bool:
    """Whether the compiler Inductor would use exists (the kernel is built with it)."""
    import shutil
    from torch._inductor import cpp_builder
    try:
        return shutil.which(cpp_builder.get_cpp_compiler()) is not None
    except Exception:        # Inductor found no compiler at all
        return False


@pytest.fixture
def built_cpu_decode():
    """The CPU decode kernel built (once per process; the suite otherwise never compiles)."""
    from npu_anywhere.kernels.compiled import compiling_after
    with compiling_after(0):
        p = paged_problem([3], dtype=torch.float32)
        reason = cpu_decode.supports(*paged._decode_args(p))
        if reason is not None and "build failure" in reason and not _have_cpp_compiler():
            pytest.skip(f"no C++ toolchain: {reason}")
        assert reason is None           # with a compiler, a failed build is a failure
        yield


def _spy_cpu_decode(monkeypatch) -> list:
    calls = []
    real = cpu_decode.decode
    monkeypatch.setattr(cpu_decode, "decode", lambda *a: calls.append(a) or real(*a))
    return calls


# (n_q, n_kv, head dim, value head dim, block size): GQA groups of 2, 3 (a partial register
# tile), 10 (tiles 4 + 4 + 2) and 1; head dims shorter than a vector, not a multiple of one,
# and a value width of its own.
CPU_DECODE_SHAPES = [(4, 2, 16, 16, 4), (3, 1, 20, 12, 5), (20, 2, 40, 72, 3), (4, 4, 33, 33, 8)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", CPU_DECODE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cpu_decode_against_golden(built_cpu_decode, monkeypatch, dtype, shape):
    """Ragged lengths (one empty sequence, one three blocks and a token long, partial last
    blocks), padding ids past each length, blocks scattered, a strided query view, through
    paged_attention."""
    from dataclasses import replace
    n_q, n_kv, d, dv, bs = shape
    p = paged_problem([9, 1, 0, 3 * bs + 1, 5, 4 * bs], n_q=n_q, n_kv=n_kv, d=d, bs=bs,
                      dtype=dtype, seed=d)
    g = torch.Generator().manual_seed(dv)
    value_cache = torch.randn(*p.value_cache.shape[:3], dv, generator=g).to(dtype)
    wide = torch.zeros(*p.query.shape[:3], d + 3, dtype=dtype)
    wide[..., 1:d + 1] = p.query
    query = wide[..., 1:d + 1]                                      # a strided view
    p = replace(p, value_cache=value_cache, query=query)
    calls = _spy_cpu_decode(monkeypatch)
    check(p, paged_attention)
    assert calls, "the CPU decode kernel did not run"


def test_cpu_decode_one_sequence_splits_heads(built_cpu_decode, monkeypatch):
    """Fewer batches than threads: the heads of a sequence are spread over tasks (partial
    cache rows), same answer."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert cpu_decode._head_split(1, 4) == 1 and cpu_decode._head_split(16, 4) == 4
    p = paged_problem([37], n_q=8, n_kv=4, d=24, bs=8, dtype=torch.bfloat16, seed=21)
    calls = _spy_cpu_decode(monkeypatch)
    check(p, paged_attention)
    assert calls


def test_cpu_decode_declines_what_it_does_not_read():
    p = paged_problem([5, 2], dtype=torch.bfloat16)
    q, k, v, table, lens, scale, rounding = paged._decode_args(p)
    assert "float32" in cpu_decode.supports(q.double(), k, v, table, lens, scale, rounding)
    assert "cache dtype" in cpu_decode.supports(q, k, v.float(), table, lens, scale, rounding)
    assert "non-contiguous" in cpu_decode.supports(q, k.transpose(1, 2), v, table, lens, scale,
                                                   rounding)


def test_cpu_decode_tiering_and_build_failure(monkeypatch):
    """Built on the compiled provider's schedule; a failed build turns the kernel off and
    paged_attention answers from the chunked engine."""
    from npu_anywhere.kernels.compiled import compiling_after
    builds = []

    def failing_build():
        builds.append(1)
        raise RuntimeError("no compiler here")

    from npu_anywhere.kernels.cpp import CppKernel
    kernel = CppKernel("test decode", [], "", build=failing_build)
    with compiling_after(None):
        assert "never" in kernel.ready("k")
    with compiling_after(2):
        assert "not hot" in kernel.ready("k") and "not hot" in kernel.ready("k")
        assert not builds
        assert "no compiler here" in kernel.ready("k") and builds == [1]
        assert "build failure" in kernel.ready("other key") and builds == [1]
    monkeypatch.setattr(cpu_decode, "_kernel", kernel)
    monkeypatch.setattr(paged, "_compiled_decode",
                        type("Off", (), {"supports": lambda self, *a: "off"})())
    with compiling_after(0):
        check(paged_problem([6, 3], dtype=torch.float16, seed=3), paged_attention)


# -- probabilities rounded to the input dtype before P @ V -----------------------------------

SCORES = [0.0, -0.125, -0.375, -1.25, -2.5, -0.0625, -0.75, -1.5]     # exact in fp16 / bf16
VALUES = [1.0, -2.0, 3.0, 0.5, -1.5, 2.5, -0.25, 4.0]


def _rounding_problem(dtype, paged_kv: bool) -> AttentionProblem:
    """One query row whose scores are exactly SCORES (q = e0, k_j = SCORES[j] e0, scale 1)."""
    n = len(SCORES)
    q = torch.zeros(1, 2, 1, 2, dtype=dtype)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, n, 2, dtype=dtype)
    k[0, 0, :, 0] = torch.tensor(SCORES)
    v = torch.tensor(VALUES, dtype=dtype).view(1, 1, n, 1).expand(1, 1, n, 2).contiguous()
    if not paged_kv:
        return AttentionProblem(query=q, key=k, value=v, q_lens=[1], kv_lens=[n], scale=1.0,
                                return_lse=True)
    bs = 4                                          # two blocks, stored in reverse order
    key_cache = k[0].transpose(0, 1).reshape(2, bs, 1, 2).flip(0).contiguous()
    value_cache = v[0].transpose(0, 1).reshape(2, bs, 1, 2).flip(0).contiguous()
    return AttentionProblem(query=q, key_cache=key_cache, value_cache=value_cache,
                            block_table=torch.tensor([[1, 0]], dtype=torch.int32), block_size=bs,
                            q_lens=[1], kv_lens=[n], scale=1.0, return_lse=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("solver", ["reference", "dense", "paged", "decode_core", "cpu_decode"])
def test_probabilities_rounding_exact(solver, dtype, monkeypatch, request):
    """``out = sum_j round(e_j) v_j / sum_j e_j`` with ``e_j = exp(s_j - max)`` (kernel's cast of
    the probabilities to the input dtype, the row sum taken before it).  The dense solver is
    held to its tiled engine: the flash kernel run in bf16 / fp16 rounds its output too, which
    hides the difference (see test_low_precision_flash_matches_the_reference)."""
    from npu_anywhere.ops.attention.core import reference_attention
    monkeypatch.setattr(dense, "_LOW_PRECISION_FLASH", False)
    e = torch.exp(torch.tensor(SCORES, dtype=torch.float64))
    # Precondition: every e_j is far from a rounding midpoint of the dtype, so the kernels'
    # float32 exp rounds the same way as this float64 one.
    bits = {torch.float16: 10, torch.bfloat16: 7}[dtype]
    ulp = 2.0 ** (torch.floor(torch.log2(e)) - bits)
    frac = (e / ulp) % 1.0
    assert ((frac - 0.5).abs() > 1e-3).all()
    v = torch.tensor(VALUES, dtype=torch.float64)
    rounded = (e.to(dtype).double() @ v) / e.sum()
    plain = (e @ v) / e.sum()
    assert abs(rounded - plain) > 1e-4              # the check below can tell them apart
    p = _rounding_problem(dtype, paged_kv=solver in ("paged", "decode_core", "cpu_decode"))
    if solver == "reference":
        out, _ = reference_attention(p)
    elif solver == "dense":
        out, _ = dense_attention(p)
    elif solver == "paged":
        out, _ = paged_attention(p)
    else:
        args = paged._decode_args(p)
        assert args[-1] == dtype
        if solver == "cpu_decode":
            request.getfixturevalue("built_cpu_decode")
            assert cpu_decode.supports(*args) is None
            out, _ = cpu_decode.decode(*args)
        else:
            out, _ = paged.decode_core(*args)
    torch.testing.assert_close(out.double().reshape(-1), rounded.expand(4), atol=2e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_low_precision_flash_matches_the_reference(dtype, monkeypatch):
    """Run in the input dtype, the flash kernel rounds the probabilities before ``P @ V`` as the
    NPU does: its output agrees with the reference's (which rounds them too) to one rounding."""
    from npu_anywhere.ops.attention.core import reference_attention
    monkeypatch.setattr(dense, "_LOW_PRECISION_FLASH", True)
    p = dense_problem(n_q=4, n_kv=2, s_q=9, s_kv=13, dtype=dtype, seed=5, **CAUSAL)
    assert dense.flash_supports(p) is None
    out, lse = dense_attention(p)
    ref, ref_lse = reference_attention(p)
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(out.to(dtype).float(), ref.to(dtype).float(), rtol=ulp, atol=ulp)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)


def test_low_precision_flash_keeps_dequantized_keys_in_float32(monkeypatch):
    """A bf16 query over antiquant (float32, dequantized) K/V stays off the bf16 flash run,
    which would round the dequantized keys to bf16 (large score errors on int8 caches)."""
    from dataclasses import replace
    from npu_anywhere.ops.attention.core import reference_attention
    monkeypatch.setattr(dense, "_LOW_PRECISION_FLASH", True)
    p = dense_problem(dtype=torch.bfloat16, seed=9, **CAUSAL)
    g = torch.Generator().manual_seed(10)
    k = torch.randint(-128, 128, p.key.shape, generator=g).float() * 0.37   # not bf16-exact
    v = torch.randint(-128, 128, p.value.shape, generator=g).float() * 0.41
    p = replace(p, key=k, value=v)
    assert "dequantized" in dense.flash_supports(p)
    out, _ = dense_attention(p)
    ref, _ = reference_attention(p)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
