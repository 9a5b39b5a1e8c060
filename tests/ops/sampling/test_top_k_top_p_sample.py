"""npu_top_k_top_p_sample against a float64 golden written from seed 004 and op-plugin's golden
steps (test_top_k_top_p_sample.py), one Python loop per row.

Deterministic modes ('None', 'qSample') are compared exactly.  A row is left out of the
comparison only when the float64 golden finds a decision within 1e-6 (relative) of its
threshold -- a top-p running sum next to p, a probability next to the min-p threshold, or two
scores tied for the maximum -- where float32 may round either way; the tests assert that such
rows are rare.  The multinomial mode is tested in distribution and against torch.multinomial
on the packed probabilities with the same seed (what op-plugin's golden does).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na

I32 = torch.int32
NEG = float("-inf")


def _near(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-30)


def golden_row(x, k, p, q, min_p, eps, ks_max, input_is_logits, mode):
    """(chosen index, kept indices, ambiguous) for one row, in float64."""
    v = len(x)
    limit = min((min(ks_max, 1024) + 7) // 8 * 8, 1024, v)
    use_k, use_p = 1 <= k <= limit, p < 1
    min_p = -1.0 if min_p is None else min_p
    ambiguous = False
    if not use_k and not use_p and min_p < 1:
        cand = list(range(v))
    else:
        cand = sorted(range(v), key=lambda i: (-x[i], i))
    if use_k:
        cand = cand[:k]
    vals = [x[i] for i in cand]
    if input_is_logits:
        m = max(vals)
        e = [math.exp(t - m) for t in vals]
        s = sum(e)
        probs = [t / s for t in e]
    else:
        probs = list(vals)
    if use_p:
        if p <= 0:
            n = 1
        else:
            n, run = 0, 0.0
            for pr in probs:
                ambiguous |= _near(run, p)
                if run >= p:
                    break
                n += 1
                run += pr
        cand, probs = cand[:n], probs[:n]
        if p <= 0 and input_is_logits:
            probs[0] = 1.0
    if 0 < min_p < 1:
        thd = max(probs) * min_p
        ambiguous |= any(_near(pr, thd) for pr in probs)
        pairs = [(i, pr) for i, pr in zip(cand, probs) if pr >= thd]
        cand, probs = [i for i, _ in pairs], [pr for _, pr in pairs]
    elif min_p >= 1:
        cand, probs = cand[:1], probs[:1]
    if mode == "qSample":
        score = [pr / (abs(q[j]) + eps) for j, pr in enumerate(probs)]
    else:
        score = probs
    best = max(score)
    ambiguous |= sum(1 for s in score if _near(s, best)) > 1
    return cand[score.index(best)], set(cand), ambiguous


def golden(logits, top_k, top_p, q=None, min_ps=None, eps=1e-8, ks_max=1024,
           input_is_logits=True, mode="None"):
    x = logits.double().tolist()
    out = []
    for b, row in enumerate(x):
        out.append(golden_row(row, int(top_k[b]), float(top_p[b]),
                              q[b].double().tolist() if q is not None else None,
                              float(min_ps[b]) if min_ps is not None else None, eps, ks_max,
                              input_is_logits, mode))
    return out


def check(logits, top_k, top_p, q=None, min_ps=None, max_ambiguous=0, **kw):
    mode = kw.get("post_sample", "qSample") if q is not None else "None"
    input_is_logits = kw.get("input_is_logits", True)
    idx, sel = na.npu_top_k_top_p_sample(logits, top_k, top_p, q=q, min_ps=min_ps,
                                         is_need_logits=True, **kw)
    assert idx.dtype == torch.int64 and idx.shape == (logits.shape[0],)
    assert sel.dtype == torch.float32 and sel.shape == logits.shape
    want = golden(logits, top_k, top_p, q, min_ps, kw.get("eps", 1e-8), kw.get("ks_max", 1024),
                  input_is_logits, mode)
    fill = NEG if input_is_logits else 0.0
    x = logits.float()
    skipped = 0
    for b, (chosen, kept, ambiguous) in enumerate(want):
        if ambiguous:
            skipped += 1
            continue
        assert int(idx[b]) == chosen, (b, int(idx[b]), chosen)
        row = torch.full_like(x[b], fill)
        row[sorted(kept)] = x[b, sorted(kept)]
        assert torch.equal(sel[b], row), b
    assert skipped <= max_ambiguous, skipped
    return idx, sel


def _rows(b, v, dtype, seed, low=-3.0, high=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(b, v, generator=gen, dtype=torch.float64) * (high - low) + low).to(dtype)


# per row: a mix of every documented range of top_k / top_p / min_ps
K = torch.tensor([3, 0, 40, 7, 1, 2000, 0, 5, 12, 0], dtype=I32)
P = [0.6, 0.7, 1.0, 0.0, 0.9, 0.3, 1.0, -0.5, 0.95, 1.0]
MIN_P = [0.0, 0.2, 0.5, 0.1, -1.0, 0.3, 0.0, 0.9, 1.0, 2.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("with_min_p", [False, True])
def test_deterministic_modes_match_golden(dtype, sampled, with_min_p):
    logits = _rows(10, 40, dtype, seed=1)
    p = torch.tensor(P).to(dtype)
    min_ps = torch.tensor(MIN_P).to(dtype) if with_min_p else None
    q = None
    if sampled:
        q = torch.empty(10, 40)
        na.npu_sim_exponential_(q, generator=torch.Generator().manual_seed(2))
    check(logits, K, p, q=q, min_ps=min_ps, max_ambiguous=1)


@pytest.mark.parametrize("sampled", [False, True])
def test_probabilities_as_input(sampled):
    # input_is_logits=False: values in [0, 1] are used as they are, removed entries read 0
    probs = _rows(10, 33, torch.float32, seed=3, low=0.0, high=1.0)
    probs = probs / probs.sum(-1, keepdim=True)
    q = torch.rand(10, 33, generator=torch.Generator().manual_seed(4)) if sampled else None
    check(probs, K, torch.tensor(P), q=q, min_ps=torch.tensor(MIN_P), input_is_logits=False,
          max_ambiguous=1)


def test_unsorted_rows_read_q_in_vocabulary_order():
    # No top-k, no top-p, min_p < 1: positions are vocabulary indices, so q[b, j] weighs
    # token j; a q that is tiny at one token picks it.
    logits = _rows(3, 16, torch.float32, seed=5)
    q = torch.ones(3, 16)
    q[0, 11], q[1, 2], q[2, 7] = 1e-6, 1e-6, 1e-6
    top_k = torch.tensor([0, 0, 5000], dtype=I32)
    idx, _ = na.npu_top_k_top_p_sample(logits, top_k, torch.ones(3), q=q)
    assert idx.tolist() == [11, 2, 7]
    check(logits, top_k, torch.ones(3), q=q)


def test_ks_max_is_aligned_to_8_and_capped():
    logits = _rows(4, 30, torch.float32, seed=6)
    top_k = torch.tensor([7, 8, 9, 30], dtype=I32)
    p = torch.ones(4)
    _, sel = na.npu_top_k_top_p_sample(logits, top_k, p, is_need_logits=True, ks_max=5)
    # ks_max 5 -> 8: k 7 and 8 apply, k 9 and 30 skip top-k (all 30 kept)
    assert (sel != NEG).sum(-1).tolist() == [7, 8, 30, 30]
    check(logits, top_k, p, ks_max=5)
    _, sel = na.npu_top_k_top_p_sample(logits, top_k, p, is_need_logits=True, ks_max=5000)
    assert (sel != NEG).sum(-1).tolist() == [7, 8, 9, 30]


def test_ties_rank_lower_index_first():
    logits = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0, 2.0]])
    idx, sel = na.npu_top_k_top_p_sample(logits, torch.tensor([2], dtype=I32), torch.ones(1),
                                         is_need_logits=True)
    assert idx.tolist() == [1] and sel[0].tolist() == [NEG, 2.0, 2.0, NEG, NEG, NEG]


def test_non_contiguous_and_one_row():
    base = _rows(37, 6, torch.bfloat16, seed=7)
    logits = base.t()
    top_k = torch.tensor([4, 0, 9, 1, 36, 2, 3, 0, 5, 8, 1, 7], dtype=I32)[::2]
    p = torch.tensor([0.8, 0.5, 1.0, 0.2, 0.9, 0.7], dtype=torch.bfloat16)
    before = base.clone()
    check(logits, top_k, p, max_ambiguous=1)
    assert torch.equal(base, before)
    one = _rows(1, 9, torch.float16, seed=8)
    check(one, torch.tensor([4], dtype=I32), torch.tensor([0.75], dtype=torch.float16))


def test_without_is_need_logits_the_second_output_has_its_size():
    _, sel = na.npu_top_k_top_p_sample(_rows(2, 5, torch.float32, 9),
                                       torch.tensor([2, 2], dtype=I32), torch.ones(2))
    assert sel.shape == (2, 5) and sel.dtype == torch.float32


def _packed_probs(logits, top_k, top_p, min_ps):
    """The golden's multinomial input: kept probabilities packed to the front, zeros after."""
    want = golden(logits, top_k, top_p, None, min_ps)
    rows = []
    for b, (_, kept, _) in enumerate(want):
        order = sorted(kept, key=lambda i: (-float(logits[b, i]), i))
        x = logits[b].float()
        vals = x[order]
        cand = sorted(range(logits.shape[1]), key=lambda i: (-float(logits[b, i]), i))
        k = int(top_k[b])
        limit = cand[:k] if 1 <= k <= min(1024, logits.shape[1]) else cand
        lim = x[limit]
        e = torch.exp(lim - lim.max())
        probs = dict(zip(limit, (e / e.sum()).tolist()))
        row = torch.zeros(logits.shape[1])
        row[:len(order)] = torch.tensor([probs[i] for i in order])
        rows.append((row, order))
        del vals
    return rows


def test_multinomial_uses_the_generator_like_the_golden():
    logits = _rows(6, 20, torch.float32, seed=10)
    top_k = torch.tensor([5, 0, 8, 3, 20, 12], dtype=I32)
    top_p = torch.tensor([0.9, 0.8, 1.0, 0.6, 0.95, 1.0])
    min_ps = torch.tensor([0.0, 0.05, 0.1, 0.0, 0.0, 0.3])
    rows = _packed_probs(logits, top_k, top_p, min_ps)
    packed = torch.stack([r for r, _ in rows])
    draw = torch.multinomial(packed, 1, replacement=True,
                             generator=torch.Generator().manual_seed(1))
    want = [order[int(draw[b])] for b, (_, order) in enumerate(rows)]
    idx, sel = na.npu_top_k_top_p_sample(logits, top_k, top_p, min_ps=min_ps,
                                         post_sample="multiNomial", is_need_logits=True,
                                         generator=torch.Generator().manual_seed(1))
    assert idx.tolist() == want
    for b, (_, order) in enumerate(rows):
        assert sorted((sel[b] != NEG).nonzero().flatten().tolist()) == sorted(order)
    # the doc's lower-case spelling is the same mode
    again, _ = na.npu_top_k_top_p_sample(logits, top_k, top_p, min_ps=min_ps,
                                         post_sample="multinomial",
                                         generator=torch.Generator().manual_seed(1))
    assert torch.equal(again, idx)


def test_multinomial_frequencies_follow_the_filtered_softmax():
    n = 4000
    row = torch.tensor([2.0, 0.5, 1.5, -1.0, 1.0, 0.0])
    logits = row.expand(n, 6)
    top_k = torch.full((n,), 4, dtype=I32)        # keeps tokens 0, 2, 4, 1
    idx, _ = na.npu_top_k_top_p_sample(logits, top_k, torch.ones(n), post_sample="multiNomial",
                                       generator=torch.Generator().manual_seed(7))
    counts = torch.bincount(idx, minlength=6).double()
    kept = torch.tensor([0, 2, 4, 1])
    p = torch.softmax(row[kept].double(), 0)
    assert counts[[3, 5]].sum() == 0
    sigma = torch.sqrt(n * p * (1 - p))
    assert bool(((counts[kept] - n * p).abs() < 4 * sigma).all()), counts


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(top_k=torch.ones(3, dtype=torch.int64)), TypeError, "expected top_k dtype in"),
    (dict(top_k=torch.ones(4, dtype=I32)), RuntimeError, "expected top_k a 1-D tensor"),
    (dict(top_p=torch.ones(3).half()), TypeError, "expected top_p the same dtype as logits"),
    (dict(min_ps=torch.ones(2)), RuntimeError, "expected min_ps a 1-D tensor"),
    (dict(q=torch.ones(3, 5, dtype=torch.float64)), TypeError, "expected q dtype in"),
    (dict(q=torch.ones(3, 4)), RuntimeError, "expected q logits' shape"),
    (dict(q=torch.ones(3, 5), post_sample="multiNomial"), TypeError, "expected q dtype in"),
    (dict(post_sample="greedy"), ValueError, "expected post_sample one of"),
    (dict(ks_max=0), ValueError, "expected ks_max a positive int"),
    (dict(logits=torch.ones(3, 2, 5)), ValueError, "expected logits a 2-D tensor"),
    (dict(logits=torch.ones(0, 5), top_k=torch.ones(0, dtype=I32), top_p=torch.ones(0)),
     ValueError, "expected logits a non-empty tensor"),
])
def test_bad_inputs(kwargs, error, match):
    args = dict(logits=torch.randn(3, 5), top_k=torch.ones(3, dtype=I32), top_p=torch.ones(3))
    args.update(kwargs)
    with pytest.raises(error, match="npu_top_k_top_p_sample: " + match):
        na.npu_top_k_top_p_sample(**args)


def test_no_backward():
    x = torch.randn(2, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_top_k_top_p_sample: expected inputs"):
        na.npu_top_k_top_p_sample(x, torch.ones(2, dtype=I32), torch.ones(2))


def _provider(*args, **kwargs):
    from npu_anywhere.library import REGISTRY
    return REGISTRY["npu_top_k_top_p_sample"].providers.select(*args, **kwargs).name


@pytest.mark.parametrize("sampled", [False, True])
def test_partial_sort_provider_matches_golden_and_reference(sampled):
    b, v = 4, 4101
    logits = _rows(b, v, torch.float32, seed=11)
    top_k = torch.tensor([50, 1, 700, 9], dtype=I32)
    top_p = torch.tensor([0.9, 0.5, 0.7, 1.0])
    min_ps = torch.tensor([0.0, 0.5, 0.05, 1.0])
    q = torch.rand(b, v, generator=torch.Generator().manual_seed(12)) if sampled else None
    assert _provider(logits, top_k, top_p, q) == "partial_sort"
    got = check(logits, top_k, top_p, q=q, min_ps=min_ps, max_ambiguous=1)
    with na.use_providers("reference"):
        want = na.npu_top_k_top_p_sample(logits, top_k, top_p, q=q, min_ps=min_ps,
                                         is_need_logits=True)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    # multinomial: the same samples for a seed whichever provider runs
    draws = [na.npu_top_k_top_p_sample(logits, top_k, top_p, post_sample="multiNomial",
                                       generator=torch.Generator().manual_seed(3))[0]]
    with na.use_providers("reference"):
        draws.append(na.npu_top_k_top_p_sample(logits, top_k, top_p, post_sample="multiNomial",
                                               generator=torch.Generator().manual_seed(3))[0])
    assert torch.equal(draws[0], draws[1])


def test_partial_sort_provider_falls_back_without_top_k_everywhere():
    logits = _rows(2, 4100, torch.float32, seed=13)
    top_k = torch.tensor([5, 0], dtype=I32)
    top_p = torch.tensor([0.8, 0.9])
    got = na.npu_top_k_top_p_sample(logits, top_k, top_p, is_need_logits=True)
    with na.use_providers("reference"):
        want = na.npu_top_k_top_p_sample(logits, top_k, top_p, is_need_logits=True)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
