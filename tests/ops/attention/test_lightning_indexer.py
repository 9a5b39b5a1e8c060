"""npu_lightning_indexer and npu_lightning_indexer_grad against float64 goldens written here.

The golden follows the doc formula (op-plugin torch_npu-npu_lightning_indexer.md) token by
token in float64 and the kernel golden's rules (hicann/ops-transformer attention/
lightning_indexer/tests/pytest/lightning_indexer_golden.py): rightDownCausal visibility, a
stable descending ranking (equal scores: lower key position first), -1 in unused slots.
Inputs are multiples of 1/4 (query, key) and 1/8 (weights) with small magnitudes, so float32
scores are exact and the integer outputs must match bit for bit, ties included.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere

I32 = torch.int32


def _grid(shape, scale, gen, lo=-3, hi=4, dtype=torch.bfloat16):
    return (torch.randint(lo, hi, shape, generator=gen).double() / scale).to(dtype)


def _golden(q_rows, k_rows, w_rows, sparse_count, sparse_mode):
    """float64 indices and scores of one batch: q [s1, N1, D], k [s2, N2, D], w [s1, N1]."""
    s1, n1, _ = q_rows.shape
    s2, n2, _ = k_rows.shape
    g = n1 // n2
    idx = torch.full((s1, n2, sparse_count), -1, dtype=I32)
    val = torch.full((s1, n2, sparse_count), float("-inf"), dtype=torch.float64)
    for i in range(s1):
        limit = s2 if sparse_mode == 0 else max(0, min(s2, s2 - s1 + i + 1))
        for n in range(n2):
            scores = []
            for t in range(limit):
                total = 0.0
                for h in range(n * g, (n + 1) * g):
                    dot = float((q_rows[i, h].double() * k_rows[t, n].double()).sum())
                    total += float(w_rows[i, h]) * max(dot, 0.0)
                scores.append((-total, t))          # ascending (-score, position)
            scores.sort()
            for j, (neg, t) in enumerate(scores[:sparse_count]):
                idx[i, n, j] = t
                val[i, n, j] = -neg
    return idx, val


def _paged(keys_per_batch, block_size, gen):
    """A shuffled paged cache holding each batch's [len, N2, D] keys, and its block table."""
    n2, d = keys_per_batch[0].shape[1:]
    need = [(k.shape[0] + block_size - 1) // block_size for k in keys_per_batch]
    total = sum(need) + 1                                   # one spare block, never read
    order = torch.randperm(total, generator=gen)
    cache = torch.full((total, block_size, n2, d), 99.0).to(keys_per_batch[0].dtype)
    table = torch.full((len(keys_per_batch), max(need) + 1), -1, dtype=I32)
    used = 0
    for b, k in enumerate(keys_per_batch):
        for j in range(need[b]):
            blk = int(order[used])
            used += 1
            table[b, j] = blk
            part = k[j * block_size:(j + 1) * block_size]
            cache[blk, :part.shape[0]] = part
    return cache, table


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_bsnd_with_lengths_ties_and_values(sparse_mode):
    gen = torch.Generator().manual_seed(0)
    b, s1, s2, n1, n2, d, count = 2, 4, 7, 4, 2, 8, 6
    q = _grid((b, s1, n1, d), 4, gen, -2, 3)
    k = _grid((b, s2, n2, d), 4, gen, -2, 3)
    w = _grid((b, s1, n1), 8, gen)
    lq, lk = torch.tensor([3, 4], dtype=I32), torch.tensor([7, 5], dtype=I32)
    before = [t.clone() for t in (q, k, w)]
    idx, val = npu_anywhere.npu_lightning_indexer(
        q, k, w, actual_seq_lengths_query=lq, actual_seq_lengths_key=lk, sparse_count=count,
        sparse_mode=sparse_mode, return_value=True)
    assert idx.shape == (b, s1, n2, count) and idx.dtype == I32 and val.dtype == q.dtype
    for bi in range(b):
        gi, gv = _golden(q[bi, :lq[bi]], k[bi, :lk[bi]], w[bi, :lq[bi]], count, sparse_mode)
        assert torch.equal(idx[bi, :lq[bi]], gi)
        torch.testing.assert_close(val[bi, :lq[bi]].double(), gv.to(q.dtype).double())
        assert (idx[bi, lq[bi]:] == -1).all()
    for t, t0 in zip((q, k, w), before):
        assert torch.equal(t, t0)


def test_ties_break_by_lower_position():
    q = torch.ones(1, 1, 2, 4, dtype=torch.float16)
    k = torch.ones(1, 6, 1, 4, dtype=torch.float16)
    k[0, 4] = 2                                    # position 4 scores highest, the rest tie
    w = torch.ones(1, 1, 2, dtype=torch.float16)
    idx, _ = npu_anywhere.npu_lightning_indexer(q, k, w, sparse_count=8, sparse_mode=0)
    assert idx.flatten().tolist() == [4, 0, 1, 2, 3, 5, -1, -1]


@pytest.mark.parametrize("layout_query", ["TND", "BSND"])
def test_paged_keys(layout_query):
    gen = torch.Generator().manual_seed(1)
    n1, d, count, block_size = 4, 8, 10, 4
    q_lens, k_lens = [2, 3], [9, 6]
    keys = [_grid((n, 1, d), 4, gen, -2, 3, torch.float16) for n in k_lens]
    cache, table = _paged(keys, block_size, gen)
    s1 = max(q_lens)
    if layout_query == "TND":
        q = _grid((sum(q_lens), n1, d), 4, gen, -2, 3, torch.float16)
        w = _grid((sum(q_lens), n1), 8, gen, dtype=torch.float32)
        lq = torch.tensor([2, 5], dtype=I32)
        rows = [q[:2], q[2:5]]
        wrows = [w[:2], w[2:5]]
    else:
        q = _grid((2, s1, n1, d), 4, gen, -2, 3, torch.float16)
        w = _grid((2, s1, n1), 8, gen, dtype=torch.float32)
        lq = torch.tensor(q_lens, dtype=I32)
        rows = [q[0, :2], q[1, :3]]
        wrows = [w[0, :2], w[1, :3]]
    idx, val = npu_anywhere.npu_lightning_indexer(
        q, cache, w, actual_seq_lengths_query=lq, actual_seq_lengths_key=torch.tensor(
            k_lens, dtype=I32), block_table=table, layout_query=layout_query,
        layout_key="PA_BSND", sparse_count=count)
    assert val.shape == (0,)
    got = [idx[:2], idx[2:5]] if layout_query == "TND" else [idx[0, :2], idx[1, :3]]
    for b in range(2):
        gi, _ = _golden(rows[b], keys[b], wrows[b], count, 3)
        assert torch.equal(got[b], gi)


def test_tnd_keys_and_non_contiguous_inputs():
    gen = torch.Generator().manual_seed(2)
    n1, d = 2, 8
    q = _grid((n1, 5, d), 4, gen, -2, 3).transpose(0, 1)          # [T1, N1, D], strided
    k = _grid((7, 1, d * 2), 4, gen, -2, 3)[..., ::2]              # [T2, 1, D], strided
    w = _grid((n1, 5), 8, gen).t()
    lq, lk = torch.tensor([2, 5], dtype=I32), torch.tensor([3, 7], dtype=I32)
    idx, val = npu_anywhere.npu_lightning_indexer(
        q, k, w, actual_seq_lengths_query=lq, actual_seq_lengths_key=lk, layout_query="TND",
        layout_key="TND", sparse_count=4, return_value=True)
    assert idx.shape == (5, 1, 4)
    for (qs, qe), (ks, ke) in (((0, 2), (0, 3)), ((2, 5), (3, 7))):
        gi, gv = _golden(q[qs:qe], k[ks:ke], w[qs:qe], 4, 3)
        assert torch.equal(idx[qs:qe], gi)
        torch.testing.assert_close(val[qs:qe].double(), gv.to(q.dtype).double())


def test_continuous_inputs_match_float64_ranking():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 3, 8, 16, generator=gen).to(torch.bfloat16)
    k = torch.randn(1, 11, 1, 16, generator=gen).to(torch.bfloat16)
    w = torch.randn(1, 3, 8, generator=gen).to(torch.bfloat16)
    idx, val = torch.ops.npu.npu_lightning_indexer(q, k, w, sparse_count=5, return_value=True)
    gi, gv = _golden(q[0], k[0], w[0], 5, 3)
    assert torch.equal(idx[0], gi)
    torch.testing.assert_close(val[0].double(), gv.to(torch.bfloat16).double())


def _grad_golden(q, k, w, idx, dy):
    """float64 autograd of the selected scores (selection fixed) -- the formula, not our code."""
    q, k, w = (t.double().requires_grad_() for t in (q, k, w))
    n1, d = q.shape[-2:]
    n2 = k.shape[-2]
    g = n1 // n2
    total = 0
    for b in range(q.shape[0]):
        for s in range(q.shape[1]):
            for n in range(n2):
                for j, t in enumerate(idx[b, s, n].tolist()):
                    if t < 0:
                        continue
                    dots = q[b, s, n * g:(n + 1) * g] @ k[b, t, n]
                    score = (w[b, s, n * g:(n + 1) * g] * dots.clamp_min(0)).sum()
                    total = total + score * float(dy[b, s, n, j])
    return torch.autograd.grad(total, (q, k, w))


def test_grad_op_against_float64_formula():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 4, 8, generator=gen).to(torch.bfloat16)
    k = torch.randn(2, 6, 2, 8, generator=gen).to(torch.bfloat16)
    w = torch.randn(2, 3, 4, generator=gen).to(torch.bfloat16)
    idx, _ = npu_anywhere.npu_lightning_indexer(q, k, w, sparse_count=4, sparse_mode=3)
    dy = torch.randn(idx.shape, generator=gen).to(torch.bfloat16)
    got = npu_anywhere.npu_lightning_indexer_grad(q, k, dy, idx, w)
    want = _grad_golden(q, k, w, idx, dy)
    for a, e in zip(got, want):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), e, atol=2e-2, rtol=1e-2)


def test_autograd_through_values_gradcheck_and_tnd():
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 3, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 5, 1, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(1, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)

    def values(q, k, w):
        v = npu_anywhere.npu_lightning_indexer(q, k, w, sparse_count=3, sparse_mode=0,
                                               return_value=True)[1]
        return v
    assert torch.autograd.gradcheck(values, (q, k, w))
    # TND: the backward goes through the same grad op with layout "TND".
    qt, kt, wt = (t.detach().flatten(0, 1).requires_grad_() for t in (q, k, w))
    v = npu_anywhere.npu_lightning_indexer(
        qt, kt, wt, actual_seq_lengths_query=torch.tensor([3], dtype=I32),
        actual_seq_lengths_key=torch.tensor([5], dtype=I32), layout_query="TND",
        layout_key="TND", sparse_count=3, sparse_mode=0, return_value=True)[1]
    v.sum().backward()
    ref = torch.autograd.grad(values(q, k, w).sum(), (q, k, w))
    for a, e in zip((qt.grad, kt.grad, wt.grad), ref):
        torch.testing.assert_close(a, e.flatten(0, 1))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(actual_seq_lengths_query=torch.tensor([3], dtype=I32)), ValueError,
     r"actual_seq_lengths_query values in \[0, S1 = 2\]"),
    (dict(actual_seq_lengths_key=torch.tensor([-1], dtype=I32)), ValueError,
     r"actual_seq_lengths_key values in \[0, S2 = 3\]"),
    (dict(pre_tokens=5), ValueError, "expected pre_tokens the default"),
    (dict(layout_key="TND"), ValueError, "expected layout_key equal to layout_query"),
    (dict(block_table=torch.zeros(1, 1, dtype=I32)), ValueError, "expected block_table None"),
])
def test_bad_inputs_raise_before_writing(kwargs, error, match):
    q, k, w = torch.randn(1, 2, 2, 8), torch.randn(1, 3, 1, 8), torch.randn(1, 2, 2)
    q, k, w = q.half(), k.half(), w.half()
    before = [t.clone() for t in (q, k, w)]
    with pytest.raises(error, match=match):
        npu_anywhere.npu_lightning_indexer(q, k, w, **kwargs)
    for t, t0 in zip((q, k, w), before):
        assert torch.equal(t, t0)


def test_strict_mode_rules():
    q, k, w = torch.randn(1, 2, 2, 8).half(), torch.randn(1, 3, 1, 8).half(), \
        torch.randn(1, 2, 2).half()
    with npu_anywhere.strict("A3"):
        with pytest.raises(ValueError, match="expected query a head dim D of 128"):
            npu_anywhere.npu_lightning_indexer(q, k, w)
    with npu_anywhere.strict("310P"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            npu_anywhere.npu_lightning_indexer(q, k, w)
