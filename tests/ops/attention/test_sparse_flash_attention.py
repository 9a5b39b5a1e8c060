"""npu_sparse_flash_attention and its grad against float64 goldens written here.

The golden walks each query row in float64 with the kernel golden's rules (hicann/
ops-transformer attention/sparse_flash_attention/tests/pytest/sparse_flash_attention_golden.py):
the visible limit ``Lkv`` (mode 0) or ``Lkv - Lq + i + 1`` (mode 3), only the first
``ceil(limit / sparse_block_size)`` slots read up to the first -1, blocks cut at the limit,
probabilities rounded to query's dtype before the product with V, zeros for rows that see
nothing.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere

I32 = torch.int32


def _golden_rows(q, qr, k, kr, v, idx, scale, sbs, mode, sinks=None, round_to=None):
    """One batch: q [s1, N1, D], k/v [s2, N2, D], idx [s1, N2, K]; float64 out/max/sum."""
    s1, n1, _ = q.shape
    s2, n2, _ = k.shape
    g = n1 // n2
    out = torch.zeros(s1, n1, v.shape[-1], dtype=torch.float64)
    mx = torch.zeros(s1, n2, g, dtype=torch.float64)
    sm = torch.zeros(s1, n2, g, dtype=torch.float64)
    qa = q.double() if qr is None else torch.cat([q, qr], -1).double()
    ka = k.double() if kr is None else torch.cat([k, kr], -1).double()
    for i in range(s1):
        limit = s2 if mode == 0 else s2 - s1 + i + 1
        if limit <= 0:
            continue
        for n in range(n2):
            toks = []
            for j in range(min(idx.shape[-1], math.ceil(limit / sbs))):
                blk = int(idx[i, n, j])
                if blk == -1:
                    break
                toks += [t for t in range(blk * sbs, (blk + 1) * sbs) if t < limit and t < s2]
            for h in range(g):
                head = n * g + h
                logits = [scale * float(qa[i, head] @ ka[t, n]) for t in toks]
                extra = [] if sinks is None else [float(sinks[head])]
                if not logits and not extra:
                    continue
                m = max(logits + extra)
                e = [math.exp(x - m) for x in logits]
                total = sum(e) + sum(math.exp(x - m) for x in extra)
                mx[i, n, h], sm[i, n, h] = m, total
                acc = torch.zeros(v.shape[-1], dtype=torch.float64)
                for t, w in zip(toks, e):
                    p = torch.tensor(w / total, dtype=torch.float64)
                    if round_to is not None:
                        p = p.to(round_to).double()
                    acc += p * v[t, n].double()
                out[i, head] = acc
    return out, mx, sm


def _close(a, e, dtype):
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(a.double(), e, atol=tol, rtol=tol)


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_bsnd_rope_blocks_lengths_and_lse(sparse_mode):
    gen = torch.Generator().manual_seed(0)
    b, s1, s2, n1, n2, d, dr, k_slots, sbs = 2, 3, 11, 4, 2, 8, 4, 4, 2
    dt = torch.bfloat16
    q = torch.randn(b, s1, n1, d, generator=gen).to(dt)
    qr = torch.randn(b, s1, n1, dr, generator=gen).to(dt)
    k = torch.randn(b, s2, n2, d, generator=gen).to(dt)
    kr = torch.randn(b, s2, n2, dr, generator=gen).to(dt)
    v = torch.randn(b, s2, n2, d, generator=gen).to(dt)
    idx = torch.randint(0, 6, (b, s1, n2, k_slots), generator=gen).to(I32)
    idx[0, 0, 0, 2:] = -1
    idx[1, 1, 1, 1] = -1                     # the rest of that row is not read
    idx[1, 2, 0] = torch.tensor([3, 3, 1, 0], dtype=I32)   # a block listed twice counts twice
    lq, lkv = torch.tensor([3, 2], dtype=I32), torch.tensor([11, 7], dtype=I32)
    before = [t.clone() for t in (q, qr, k, kr, v, idx)]
    out, mx, sm = npu_anywhere.npu_sparse_flash_attention(
        q, k, v, idx, 0.3, sbs, actual_seq_lengths_query=lq, actual_seq_lengths_kv=lkv,
        query_rope=qr, key_rope=kr, sparse_mode=sparse_mode, attention_mode=2,
        return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == dt
    assert mx.shape == sm.shape == (b, n2, s1, n1 // n2) and mx.dtype == torch.float32
    for bi in range(b):
        ql, kl = int(lq[bi]), int(lkv[bi])
        go, gm, gs = _golden_rows(q[bi, :ql], qr[bi, :ql], k[bi, :kl], kr[bi, :kl], v[bi, :kl],
                                  idx[bi, :ql], 0.3, sbs, sparse_mode, round_to=dt)
        _close(out[bi, :ql], go, dt)
        torch.testing.assert_close(mx[bi, :, :ql].double(), gm.permute(1, 0, 2), atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(sm[bi, :, :ql].double(), gs.permute(1, 0, 2), atol=1e-5,
                                   rtol=1e-5)
        assert (out[bi, ql:] == 0).all()
    for t, t0 in zip((q, qr, k, kr, v, idx), before):
        assert torch.equal(t, t0)


def test_tnd_sinks_and_rows_that_see_nothing():
    gen = torch.Generator().manual_seed(1)
    n1, d = 2, 8
    dt = torch.float16
    q = torch.randn(6, n1, d, generator=gen).to(dt)
    k = torch.randn(7, 1, d, generator=gen).to(dt)
    idx = torch.randint(0, 3, (6, 1, 3), generator=gen).to(I32)
    idx[3, 0, 0] = -1                                     # nothing selected
    sinks = torch.tensor([0.25, -0.5])
    lq, lkv = torch.tensor([4, 6], dtype=I32), torch.tensor([2, 7], dtype=I32)
    # batch 0: 4 query rows, 2 keys: under mode 3 rows 0 and 1 see nothing (i < Lq - Lkv)
    out, mx, sm = npu_anywhere.npu_sparse_flash_attention(
        q, k, k, idx, 0.5, actual_seq_lengths_query=lq, actual_seq_lengths_kv=lkv,
        layout_query="TND", layout_kv="TND", sinks=sinks, return_softmax_lse=True)
    assert mx.shape == (1, 6, 2)
    for (qs, qe), (ks, ke) in (((0, 4), (0, 2)), ((4, 6), (2, 7))):
        go, gm, gs = _golden_rows(q[qs:qe], None, k[ks:ke], None, k[ks:ke], idx[qs:qe], 0.5, 1,
                                  3, sinks=sinks, round_to=dt)
        _close(out[qs:qe], go, dt)
        torch.testing.assert_close(mx[0, qs:qe].double(), gm[:, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sm[0, qs:qe].double(), gs[:, 0], atol=1e-5, rtol=1e-5)
    assert (out[:2] == 0).all() and (mx[0, :2] == 0).all() and (sm[0, :2] == 0).all()
    # row 3 of batch 0 sees keys 0 and 1 but selected nothing: zeros, max = sink, sum = 1
    assert (out[3] == 0).all()
    assert torch.equal(mx[0, 3], sinks) and torch.equal(sm[0, 3], torch.ones(2))


def test_paged_kv_with_bsnd_query_and_non_contiguous_query():
    gen = torch.Generator().manual_seed(2)
    n1, d, dr, block = 2, 8, 4, 4
    dt = torch.bfloat16
    lkv = [6, 9]
    dense_k = [torch.randn(n, 1, d, generator=gen).to(dt) for n in lkv]
    dense_r = [torch.randn(n, 1, dr, generator=gen).to(dt) for n in lkv]
    cache = torch.full((6, block, 1, d), 50.0).to(dt)
    rope_cache = torch.full((6, block, 1, dr), 50.0).to(dt)
    table = torch.tensor([[4, 1, -1], [0, 5, 2]], dtype=I32)
    for bi, n in enumerate(lkv):
        for j in range((n + block - 1) // block):
            part = slice(j * block, min(n, (j + 1) * block))
            rows = part.stop - part.start
            cache[table[bi, j], :rows] = dense_k[bi][part]
            rope_cache[table[bi, j], :rows] = dense_r[bi][part]
    q = torch.randn(2, n1, 2, d, generator=gen).to(dt).transpose(1, 2)     # strided
    qr = torch.randn(2, 2, n1, dr, generator=gen).to(dt)
    idx = torch.tensor([[[[2, 0, 1]], [[0, 2, -1]]], [[[4, 3, 0]], [[1, -1, -1]]]], dtype=I32)
    out, _, _ = npu_anywhere.npu_sparse_flash_attention(
        q, cache, cache, idx, 0.4, block_table=table,
        actual_seq_lengths_kv=torch.tensor(lkv, dtype=I32), query_rope=qr, key_rope=rope_cache,
        sparse_block_size=2, layout_kv="PA_BSND", attention_mode=2)
    for bi in range(2):
        go, _, _ = _golden_rows(q[bi], qr[bi], dense_k[bi], dense_r[bi], dense_k[bi], idx[bi],
                                0.4, 2, 3, round_to=dt)
        _close(out[bi], go, dt)


def test_backward_matches_float64_formula_and_gradcheck():
    gen = torch.Generator().manual_seed(3)
    b, s1, s2, n1, d, dr = 1, 3, 6, 2, 4, 2
    args = [torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
            for shape in ((b, s1, n1, d), (b, s2, 1, d), (b, s2, 1, d), (b, s1, n1, dr),
                          (b, s2, 1, dr))]
    idx = torch.tensor([[[[0, 2, -1]], [[1, 0, 2]], [[2, 2, 1]]]], dtype=I32)

    def sfa(q, k, v, qr, kr):
        return npu_anywhere.npu_sparse_flash_attention(
            q, k, v, idx, 0.7, query_rope=qr, key_rope=kr, sparse_block_size=2,
            attention_mode=2)[0]
    assert torch.autograd.gradcheck(sfa, tuple(args))
    # bfloat16 through the grad op against a float64 golden of the formula
    low = [a.detach().to(torch.bfloat16).requires_grad_() for a in args]
    out = sfa(*low)
    d_out = torch.randn(out.shape, generator=gen).to(torch.bfloat16)
    got = torch.autograd.grad(out, low, d_out)
    ref_in = [a.detach().to(torch.bfloat16).double().requires_grad_() for a in args]
    rows = []
    for i in range(s1):
        limit = s2 - s1 + i + 1
        toks = []
        for j in range(min(3, math.ceil(limit / 2))):
            blk = int(idx[0, i, 0, j])
            if blk == -1:
                break
            toks += [t for t in (2 * blk, 2 * blk + 1) if t < limit]
        qa = torch.cat([ref_in[0][0, i], ref_in[3][0, i]], -1)              # [N1, D + Dr]
        ka = torch.cat([ref_in[1][0, toks, 0], ref_in[4][0, toks, 0]], -1)  # [L, D + Dr]
        p = torch.softmax(0.7 * qa @ ka.T, -1)
        rows.append(p @ ref_in[2][0, toks, 0])
    ref = torch.autograd.grad(torch.stack(rows).unsqueeze(0), ref_in, d_out.double())
    for a, e in zip(got, ref):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), e, atol=3e-2, rtol=3e-2)


def test_grad_op_directly_returns_empty_rope_grads_without_rope():
    q, k = torch.randn(1, 2, 2, 4).half(), torch.randn(1, 3, 1, 4).half()
    idx = torch.tensor([[[[0, 1]], [[2, -1]]]], dtype=I32)
    d_out = torch.randn(1, 2, 2, 4).half()
    e = torch.empty(0)
    dq, dk, dv, dqr, dkr = npu_anywhere.npu_sparse_flash_attention_grad(
        q, k, k, idx, d_out, d_out, e, e, 0.5, 1)
    assert dq.shape == q.shape and dk.shape == k.shape and dqr.shape == dkr.shape == (0,)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(actual_seq_lengths_kv=torch.tensor([4], dtype=I32)), ValueError,
     r"actual_seq_lengths_kv values in \[0, S2 = 3\]"),
    (dict(layout_kv="TND"), ValueError, "expected layout_kv equal to layout_query"),
    (dict(next_tokens=0), ValueError, "expected next_tokens the default"),
    (dict(sparse_mode=2), ValueError, "expected sparse_mode 0"),
])
def test_bad_inputs_raise_before_writing(kwargs, error, match):
    q, k = torch.randn(1, 2, 2, 4).half(), torch.randn(1, 3, 1, 4).half()
    idx = torch.tensor([[[[0, 1]], [[2, -1]]]], dtype=I32)
    before = [t.clone() for t in (q, k, idx)]
    with pytest.raises(error, match=match):
        npu_anywhere.npu_sparse_flash_attention(q, k, k, idx, 0.5, **kwargs)
    for t, t0 in zip((q, k, idx), before):
        assert torch.equal(t, t0)


def test_strict_mode_and_unsupported_backward():
    q, k = torch.randn(1, 2, 2, 4).half(), torch.randn(1, 3, 1, 4).half()
    idx = torch.tensor([[[[0, 1]], [[2, -1]]]], dtype=I32)
    with npu_anywhere.strict("A2"):
        with pytest.raises(ValueError, match="expected attention_mode 2"):
            npu_anywhere.npu_sparse_flash_attention(q, k, k, idx, 0.5)
    qg = q.float().double().requires_grad_()
    kd = k.double()
    out = npu_anywhere.npu_sparse_flash_attention(qg, kd, kd, idx, 0.5,
                                                  sinks=torch.zeros(2, dtype=torch.float64))[0]
    with pytest.raises(NotImplementedError, match="expected sinks None for a backward"):
        out.sum().backward()
