"""npu_top_k_top_p against a float64 golden written from the doc formula (seed 004,
aclnnApplyTopKTopP.md), one Python loop per row.

Ranking is by (value, index), ascending, which is what a stable ascending sort gives; the
k-th largest value is the threshold and every value equal to it survives; the running sum of
the softmax starts from the smallest entry.  Where the float64 running sum sits within 1e-5 of
``1 - p`` the float32 kernel may round either way; such entries are reported as ambiguous and
not compared (random inputs below have none or nearly none; the test asserts that).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na

NEG = float("-inf")


def golden(logits, p, k):
    """(expected float64 rows, ambiguous (row, col) set)."""
    rows = logits.double().tolist()
    out, ambiguous = [], set()
    for b, row in enumerate(rows):
        v = len(row)
        order = sorted(range(v), key=lambda i: (row[i], i))
        keep = [True] * v
        if k is not None:
            kk = int(k[b])
            if 0 < kk < v:
                thr = row[order[v - kk]]
                keep = [row[i] >= thr for i in range(v)]
        if p is not None and v > 1:
            alive = [i for i in order if keep[i]]
            m = max(row[i] for i in alive)
            e = {i: math.exp(row[i] - m) for i in alive}
            s = sum(e.values())
            limit = 1.0 - float(p[b])
            run = 0.0
            for pos, i in enumerate(order):
                if not keep[i]:
                    continue
                run += e[i] / s
                if pos == v - 1:
                    continue
                if abs(run - limit) < 1e-5:
                    ambiguous.add((b, i))
                if run <= limit:
                    keep[i] = False
        out.append([row[i] if keep[i] else NEG for i in range(v)])
    return torch.tensor(out, dtype=torch.float64), ambiguous


def assert_matches(got, logits, p, k, max_ambiguous=0):
    want, ambiguous = golden(logits, p, k)
    assert len(ambiguous) <= max_ambiguous, ambiguous
    got64 = got.double().clone()
    for b, i in ambiguous:
        got64[b, i] = want[b, i]
    assert got.dtype == logits.dtype and got.shape == logits.shape
    assert torch.equal(got64, want), (got64, want)


def _logits(b, v, dtype, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, v, generator=gen, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["k_and_p", "k_only", "p_only"])
def test_matches_golden(dtype, mode):
    b, v = 6, 37
    logits = _logits(b, v, dtype, seed=1)
    gen = torch.Generator().manual_seed(2)
    p = (torch.rand(b, generator=gen) * 0.9 + 0.05).to(dtype) if mode != "k_only" else None
    k = torch.tensor([1, 5, 36, 2, 17, 9], dtype=torch.int32) if mode != "p_only" else None
    got = na.npu_top_k_top_p(logits, p, k)
    assert_matches(got, logits, p, k)
    # the keyword spelling vllm-ascend uses, and the torch.ops path, agree
    assert torch.equal(torch.ops.npu.npu_top_k_top_p(logits, k=k, p=p), got)


def test_ties_at_the_k_th_value_all_survive_and_top_p_drops_lower_index_first():
    logits = torch.tensor([[2.0, 1.0, 2.0, 3.0, 2.0, 0.0],
                           [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    k = torch.tensor([2, 3], dtype=torch.int32)
    out = na.npu_top_k_top_p(logits, k=k)
    # row 0: the 2nd largest is 2.0, held by three entries: all three stay (4 kept for k=2)
    assert out[0].tolist() == [2.0, NEG, 2.0, 3.0, 2.0, NEG]
    assert out[1].tolist() == [1.0] * 6
    # six equal probabilities 1/6: p = 0.5 drops those whose running sum <= 0.5 -- the three
    # lowest indices come first in the stable ascending order
    p = torch.tensor([0.5, 0.5])
    out = na.npu_top_k_top_p(logits[1:].expand(2, 6).contiguous(), p)
    assert out[0].tolist() == [NEG, NEG, NEG, 1.0, 1.0, 1.0]
    gen = torch.Generator().manual_seed(5)
    tied = torch.randint(-2, 3, (8, 23), generator=gen).to(torch.float32)
    pk = torch.rand(8, generator=gen) * 0.8 + 0.1
    kk = torch.randint(1, 23, (8,), generator=gen, dtype=torch.int32)
    assert_matches(na.npu_top_k_top_p(tied, pk, kk), tied, pk, kk, max_ambiguous=2)


def test_out_of_range_k_skips_top_k_for_that_row():
    logits = _logits(5, 9, torch.float32, seed=3)
    k = torch.tensor([0, -4, 9, 50, 3], dtype=torch.int32)
    out = na.npu_top_k_top_p(logits, k=k)
    assert torch.equal(out[:4], logits[:4])
    assert_matches(out, logits, None, k)


def test_p_extremes_keep_the_maximum():
    logits = _logits(3, 11, torch.float32, seed=4)
    zeros = torch.zeros(3)
    out = na.npu_top_k_top_p(logits, zeros)
    # p = 0: the running sum never exceeds 1 before the last entry (up to float32 rounding)
    assert ((out != NEG).sum(-1) >= 1).all()
    assert torch.equal(out.argmax(-1), logits.argmax(-1))
    assert torch.equal(na.npu_top_k_top_p(logits, torch.ones(3)), logits)


def test_one_row_one_column_and_empty():
    x = torch.tensor([[0.25], [-3.0]])
    assert torch.equal(na.npu_top_k_top_p(x, torch.tensor([0.1, 0.9]),
                                          torch.tensor([1, 1], dtype=torch.int32)), x)
    one = _logits(1, 40, torch.bfloat16, seed=6)
    p, k = torch.tensor([0.7], dtype=torch.bfloat16), torch.tensor([12], dtype=torch.int32)
    assert_matches(na.npu_top_k_top_p(one, p, k), one, p, k)
    empty = torch.empty(0, 5)
    assert na.npu_top_k_top_p(empty, torch.empty(0), None).shape == (0, 5)


def test_non_contiguous_inputs_and_inputs_untouched():
    base = _logits(29, 4, torch.float16, seed=7)
    logits = base.t()                       # (4, 29), strided
    p = torch.tensor([0.3, 0.0, 0.9, 0.6, 0.2, 0.8, 0.5, 0.1], dtype=torch.float16)[::2]
    k = torch.tensor([3, 0, 7, 7, 28, 1, 2, 2], dtype=torch.int32)[::2]
    before = (base.clone(), p.clone(), k.clone())
    got = na.npu_top_k_top_p(logits, p, k)
    assert_matches(got, logits, p, k)
    assert torch.equal(got, na.npu_top_k_top_p(logits.contiguous(), p.contiguous(),
                                               k.contiguous()))
    assert all(torch.equal(a, b) for a, b in zip(before, (base, p, k)))


@pytest.mark.parametrize("call,error,match", [
    (lambda: na.npu_top_k_top_p(torch.randn(2, 5)), ValueError, "expected p and k not both"),
    (lambda: na.npu_top_k_top_p(torch.randn(2, 5), torch.rand(2).half()), TypeError,
     "expected p the same dtype as logits"),
    (lambda: na.npu_top_k_top_p(torch.randn(2, 5), None, torch.ones(2, dtype=torch.int64)),
     TypeError, "expected k dtype in"),
    (lambda: na.npu_top_k_top_p(torch.randn(2, 5), torch.rand(3)), RuntimeError,
     "expected p a 1-D tensor of logits.size"),
    (lambda: na.npu_top_k_top_p(torch.randn(2, 3, 5), torch.rand(2)), ValueError,
     "expected logits a 2-D tensor"),
    (lambda: na.npu_top_k_top_p(torch.randn(2, 5).double(), torch.rand(2).double()), TypeError,
     "expected logits dtype in"),
])
def test_bad_inputs(call, error, match):
    with pytest.raises(error, match="npu_top_k_top_p: " + match):
        call()


def test_no_backward():
    x = torch.randn(2, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_top_k_top_p: expected inputs that do not"):
        na.npu_top_k_top_p(x, torch.rand(2))


def _chosen_provider(*args):
    from npu_anywhere.library import REGISTRY
    return REGISTRY["npu_top_k_top_p"].providers.select(*args).name


@pytest.mark.parametrize("with_p", [True, False])
def test_partial_sort_provider_matches_golden_and_reference(with_p):
    b, v = 3, 4099
    logits = _logits(b, v, torch.float32, seed=8)
    p = torch.tensor([0.9, 0.3, 0.6]) if with_p else None
    k = torch.tensor([1000, 7, 64], dtype=torch.int32)
    assert _chosen_provider(logits, p, k) == "partial_sort"
    got = na.npu_top_k_top_p(logits, p, k)
    assert_matches(got, logits, p, k, max_ambiguous=1)
    with na.use_providers("reference"):
        want = na.npu_top_k_top_p(logits, p, k)
    assert torch.equal(got, want)


def test_partial_sort_provider_falls_back_on_skipped_rows_and_wide_ties():
    v = 4100
    logits = torch.randint(-3, 4, (2, v), generator=torch.Generator().manual_seed(9)).float()
    k = torch.tensor([5, 9], dtype=torch.int32)       # ~600 entries tie at the threshold
    p = torch.tensor([0.5, 0.95])
    assert _chosen_provider(logits, p, k) == "partial_sort"
    with na.use_providers("reference"):
        want = na.npu_top_k_top_p(logits, p, k)
        skipped = na.npu_top_k_top_p(logits, p, torch.tensor([0, 9], dtype=torch.int32))
    assert torch.equal(na.npu_top_k_top_p(logits, p, k), want)
    assert torch.equal(na.npu_top_k_top_p(logits, p, torch.tensor([0, 9], dtype=torch.int32)),
                       skipped)
    assert _chosen_provider(logits, p, None) == "reference"
