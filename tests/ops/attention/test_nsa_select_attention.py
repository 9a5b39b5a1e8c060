"""npu_nsa_select_attention / _grad against a float64 golden written from the doc formula:
per token and head, gather the selected key blocks, softmax, weight the values."""

import pytest
import torch

import npu_anywhere as na

BLOCK, COUNT = 4, 2


def _golden(q, k, v, topk, scale, qcum, kvcum, causal):
    """``(out, max, sum)`` token by token, head by head, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    t1, n1, _ = q.shape
    n2 = k.shape[1]
    g = n1 // n2
    out = q.new_zeros(t1, n1, v.shape[2])
    mx = q.new_zeros(t1, n1)
    sm = q.new_zeros(t1, n1)
    qs = ks = 0
    rows = []
    for qe, ke in zip(qcum, kvcum):
        for t in range(qs, qe):
            i = t - qs
            for h in range(n1):
                n = h // g
                pos = [c * BLOCK + j for c in topk[t, n].tolist() for j in range(BLOCK)]
                seen = [0 <= p < ke - ks and (not causal or p <= i) for p in pos]
                keys = torch.stack([k[ks + min(max(p, 0), ke - ks - 1), n] for p in pos])
                vals = torch.stack([v[ks + min(max(p, 0), ke - ks - 1), n] for p in pos])
                s = keys @ q[t, h] * scale
                s = torch.where(torch.tensor(seen), s, torch.full_like(s, -1e300))
                m = s.max()
                e = torch.exp(s - m)
                rows.append((t, h, (e / e.sum()) @ vals, m, e.sum()))
        qs, ks = qe, ke
    for t, h, o, m, s in rows:
        out[t, h], mx[t, h], sm[t, h] = o, m, s
    return out, mx, sm


def _inputs(dtype, seed=0, qcum=(3, 7), kvcum=(6, 13), n1=4, n2=2, d=16, dv=8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(qcum[-1], n1, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(kvcum[-1], n2, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(kvcum[-1], n2, dv, generator=g, dtype=torch.float64).to(dtype)
    # block 0 always first so that no causal row is fully masked; the second block varies
    # (and for the second batch reaches the partial last block 1 of 7 keys, or repeats 0)
    second = torch.randint(0, 2, (qcum[-1], n2), generator=g)
    topk = torch.stack([torch.zeros_like(second), second], dim=-1).to(torch.int32)
    return q, k, v, topk


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_golden(dtype, causal):
    q, k, v, topk = _inputs(dtype, seed=int(causal))
    mask = torch.ones(8, 8, dtype=torch.bool) if causal else None
    before = [t.clone() for t in (q, k, v, topk)]
    out, mx, sm = na.npu_nsa_select_attention(q, k, v, topk, 0.3, 4, BLOCK, COUNT,
                                              atten_mask=mask, actual_seq_qlen=[3, 7],
                                              actual_seq_kvlen=[6, 13])
    want, wmax, wsum = _golden(q, k, v, topk, 0.3, [3, 7], [6, 13], causal)
    assert out.dtype == dtype and mx.dtype == sm.dtype == torch.float32
    assert mx.shape == sm.shape == (7, 4, 8)
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(mx.double(), wmax.unsqueeze(-1).expand(7, 4, 8), rtol=tol,
                               atol=tol)
    torch.testing.assert_close(sm.double(), wsum.unsqueeze(-1).expand(7, 4, 8), rtol=tol,
                               atol=tol)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, topk)))


def test_grad_op_and_autograd_match_golden_gradients():
    q, k, v, topk = _inputs(torch.float64, seed=5)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = torch.ones(7, 7, dtype=torch.bool)
    want = _golden(q, k, v, topk, 0.4, [3, 7], [6, 13], True)[0]
    dy = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    gq, gk, gv = torch.autograd.grad(want, (q, k, v), dy)
    kw = dict(atten_mask=mask, actual_seq_qlen=[3, 7], actual_seq_kvlen=[6, 13])
    out, mx, sm = na.npu_nsa_select_attention(q, k, v, topk, 0.4, 4, BLOCK, COUNT, **kw)
    aq, ak, av = torch.autograd.grad(out, (q, k, v), dy)
    for got, exp in ((aq, gq), (ak, gk), (av, gv)):
        torch.testing.assert_close(got, exp)
    dq, dk, dv = torch.ops.npu.npu_nsa_select_attention_grad(
        dy, q.detach(), k.detach(), v.detach(), out.detach(), mx, sm, topk, 0.4, 4, BLOCK,
        COUNT, **kw)
    torch.testing.assert_close(dk, gk)
    # bf16 inputs: float32 math, results rounded to the inputs' dtype
    b = [t.detach().bfloat16() for t in (q, k, v)]
    ob, mb, sb = na.npu_nsa_select_attention(*b, topk, 0.4, 4, BLOCK, COUNT, **kw)
    bq, bk, bv = na.npu_nsa_select_attention_grad(dy.bfloat16(), *b, ob, mb, sb, topk, 0.4, 4,
                                                  BLOCK, COUNT, **kw)
    assert bq.dtype == bk.dtype == bv.dtype == torch.bfloat16
    torch.testing.assert_close(bv.double(), gv, rtol=5e-2, atol=5e-2)


def test_non_contiguous_inputs():
    q, k, v, topk = _inputs(torch.float64, seed=7, qcum=(5,), kvcum=(9,))
    qn = q.transpose(0, 1).contiguous().transpose(0, 1)
    vn = torch.cat([v, v], dim=-1)[..., :8]
    assert not qn.is_contiguous() and not vn.is_contiguous()
    out = na.npu_nsa_select_attention(qn, k, vn, topk, 0.5, 4, BLOCK, COUNT,
                                      actual_seq_qlen=[5], actual_seq_kvlen=[9])[0]
    torch.testing.assert_close(out, _golden(q, k, v, topk, 0.5, [5], [9], False)[0])


def test_bad_inputs_and_strict_rules():
    q, k, v, topk = _inputs(torch.float16)
    kw = dict(actual_seq_qlen=[3, 7], actual_seq_kvlen=[6, 13])
    with pytest.raises(TypeError, match="expected topk_indices dtype"):
        na.npu_nsa_select_attention(q, k, v, topk.long(), 0.3, 4, BLOCK, COUNT, **kw)
    with pytest.raises(ValueError, match="expected query a head count N1 divisible by N2"):
        na.npu_nsa_select_attention(q[:, :3], k, v, topk, 0.3, 3, BLOCK, COUNT, **kw)
    with pytest.raises(ValueError, match="expected value a head dim of at most D = 16"):
        na.npu_nsa_select_attention(q, k, torch.cat([v, v, v], -1), topk, 0.3, 4, BLOCK, COUNT,
                                    **kw)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected select_block_size 64 with"):
            na.npu_nsa_select_attention(q, k, v, topk, 0.3, 4, BLOCK, COUNT, **kw)


def test_grad_op_is_causal_without_a_mask_as_the_kernel():
    """The grad kernel masks by sparse mode 2 alone: atten_mask=None gives the causal grads."""
    q, k, v, topk = _inputs(torch.float64, seed=8)
    kw = dict(actual_seq_qlen=[3, 7], actual_seq_kvlen=[6, 13])
    mask = torch.ones(7, 7, dtype=torch.bool)
    out, mx, sm = na.npu_nsa_select_attention(q, k, v, topk, 0.4, 4, BLOCK, COUNT,
                                              atten_mask=mask, **kw)
    dy = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    with_mask = na.npu_nsa_select_attention_grad(dy, q, k, v, out, mx, sm, topk, 0.4, 4, BLOCK,
                                                 COUNT, atten_mask=mask, **kw)
    without = na.npu_nsa_select_attention_grad(dy, q, k, v, out, mx, sm, topk, 0.4, 4, BLOCK,
                                               COUNT, **kw)
    for a, b in zip(with_mask, without):
        torch.testing.assert_close(a, b)
    # while the forward without a mask attends to every selected key
    unmasked = na.npu_nsa_select_attention(q, k, v, topk, 0.4, 4, BLOCK, COUNT, **kw)[0]
    assert not torch.allclose(unmasked, out)
