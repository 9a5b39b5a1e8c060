"""npu_nsa_compress_attention against a float64 golden written from the doc formula and
op-plugin's golden (attention over compressed KV, block importance scores, stable top-k)."""

import pytest
import torch

import npu_anywhere as na


def _golden(q, k, v, scale, block, stride, sel_block, count, qcum, ccum, scum, atten_mask=None,
            topk_mask=None):
    q, k, v = q.double(), k.double(), v.double()
    t1, n1, _ = q.shape
    n2 = k.shape[1]
    g = n1 // n2
    m, nc = sel_block // stride, block // stride
    taps = m + nc - 1
    out = q.new_zeros(t1, n1, v.shape[2])
    topk = torch.zeros(t1, n2, count, dtype=torch.int32)
    stats = []
    qs = cs = ss = 0
    for qe, ce, se in zip(qcum, ccum, scum):
        ql, cl, sl = qe - qs, ce - cs, se - ss
        probs = []
        for h in range(n1):
            s = q[qs:qe, h] @ k[cs:ce, h // g].T * scale
            if atten_mask is not None:
                s = s - 40000.0 * atten_mask[:ql, :cl].double()
            p = torch.softmax(s, dim=-1)
            out[qs:qe, h] = p @ v[cs:ce, h // g]
            probs.append(p)
            stats.append((s.max(-1).values, torch.exp(s - s.max(-1, keepdim=True).values)
                          .sum(-1)))
        for n in range(n2):
            score = torch.zeros(ql, sl, dtype=torch.float64)
            for b in range(sl):
                for j in range(taps):
                    t = m * (b + 1) - j
                    if 0 <= t < cl:
                        c = min(nc, j + 1, taps - j)
                        score[:, b] += c * sum(probs[h][:, t] for h in range(n * g, n * g + g))
            if topk_mask is not None:
                score = score.masked_fill(topk_mask[:ql, :sl], 23333.0)
            for i in range(ql):
                order = sorted(range(sl), key=lambda b: (-score[i, b].item(), b))
                topk[qs + i, n] = torch.tensor(order[:count], dtype=torch.int32)
        qs, cs, ss = qe, ce, se
    return out, topk, stats


def _inputs(dtype, seed, qcum, ccum, n1=4, n2=2, d=16, dv=8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(qcum[-1], n1, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(ccum[-1], n2, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(ccum[-1], n2, dv, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("masks", [False, True])
def test_matches_golden(dtype, masks):
    qcum, ccum, scum = [5, 11], [9, 20], [3, 6]     # sel = CeilDiv(cmp, 64 // 16)
    q, k, v = _inputs(dtype, int(masks), qcum, ccum)
    am = torch.ones(6, 11, dtype=torch.bool).triu(4) if masks else None
    tm = torch.eye(6, 3, dtype=torch.bool) if masks else None
    before = [t.clone() for t in (q, k, v)]
    out, topk, mx, sm = na.npu_nsa_compress_attention(
        q, k, v, 0.25, 4, 32, 16, 64, 2, topk_mask=tm, atten_mask=am, actual_seq_qlen=qcum,
        actual_cmp_seq_kvlen=ccum, actual_sel_seq_kvlen=scum)
    # golden from the rounded inputs in float64; ranking compared on the float64 inputs
    want, want_topk, stats = _golden(q, k, v, 0.25, 32, 16, 64, 2, qcum, ccum, scum, am, tm)
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    assert out.dtype == dtype and topk.dtype == torch.int32 and mx.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    if masks:   # the forced block (topk_mask's diagonal) comes first in each batch
        forced = torch.tensor([0, 1, 2, 5, 6, 7])
        assert torch.equal(topk[forced, :, 0].long(), torch.tensor([0, 1, 2] * 2).view(6, 1)
                           .expand(6, 2))
    agree = (topk == want_topk).float().mean()
    assert agree > 0.9, agree   # near-ties may swap under half-precision rounding
    # statistics: rows head-major within each batch
    rows = torch.cat([torch.stack([m for m, _ in stats[:4]]).reshape(5, 4),
                      torch.stack([m for m, _ in stats[4:]]).reshape(6, 4)])
    torch.testing.assert_close(mx[..., 3].double(), rows, rtol=tol, atol=tol)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v)))


def test_topk_exact_in_float64_and_backward_matches_golden():
    qcum, ccum, scum = [7], [13], [4]
    q, k, v = (t.requires_grad_() for t in _inputs(torch.float64, 3, qcum, ccum))
    am = torch.ones(7, 13, dtype=torch.bool).triu(8)
    out, topk, _, _ = na.npu_nsa_compress_attention(
        q, k, v, 0.3, 4, 32, 16, 64, 3, atten_mask=am, actual_seq_qlen=qcum,
        actual_cmp_seq_kvlen=ccum, actual_sel_seq_kvlen=scum)
    want, want_topk, _ = _golden(q, k, v, 0.3, 32, 16, 64, 3, qcum, ccum, scum, am)
    assert torch.equal(topk, want_topk)
    dy = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, (q, k, v), dy)
    exp = torch.autograd.grad(want, (q, k, v), dy)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b)


def test_bad_inputs_and_strict_rules():
    q, k, v = _inputs(torch.float16, 0, [5], [9])
    kw = dict(actual_seq_qlen=[5], actual_cmp_seq_kvlen=[9], actual_sel_seq_kvlen=[3])
    with pytest.raises(ValueError, match="expected select_block_count at most"):
        na.npu_nsa_compress_attention(q, k, v, 0.3, 4, 32, 16, 64, 4, **kw)
    with pytest.raises(ValueError, match="expected head_num"):
        na.npu_nsa_compress_attention(q, k, v, 0.3, 8, 32, 16, 64, 2, **kw)
    with pytest.raises(TypeError, match="expected atten_mask dtype"):
        na.npu_nsa_compress_attention(q, k, v, 0.3, 4, 32, 16, 64, 2,
                                      atten_mask=torch.ones(5, 9), **kw)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected compress_block_size 32 with"):
            na.npu_nsa_compress_attention(q, k, v, 0.3, 4, 32, 16, 64, 2, **kw)
