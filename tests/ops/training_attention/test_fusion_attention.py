"""npu_fusion_attention / npu_fusion_attention_grad against the float64 golden of fa_golden.py.

Spec: seed 004 (formula ``Softmax(Mask(scale * (pse + q k^T), atten_mask), keep_prob) v``, the
sparse-mode table, the [B, N, S, 8] statistics), op-plugin's yaml (grad schema, sink) and
derivatives.yaml (autograd through the grad op).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from fa_golden import attention, visible

INT_MAX = 2147483647
TRIU = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _to_layout(x, layout):
    """[B, N, S, D] -> the layout (golden side, written independently of the op)."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BSH":
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d)
    if layout == "SBH":
        return x.permute(2, 0, 1, 3).reshape(s, b, n * d)
    raise ValueError(layout)


def _tol(dtype):
    return {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]


# -- forward: layouts, GQA, dtypes ------------------------------------------------------------

@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_layouts_gqa_dtypes_match_the_golden(layout, dtype):
    b, n, nkv, sq, skv, d = 2, 4, 2, 7, 9, 8
    q, k, v = _rand(b, n, sq, d), _rand(b, nkv, skv, d, seed=1), _rand(b, nkv, skv, d, seed=2)
    q, k, v = (t.to(dtype).double() for t in (q, k, v))
    want, m, l = attention(q, k, v, 0.3)
    out, smax, ssum, placeholder, seed, offset, numels = na.npu_fusion_attention(
        _to_layout(q, layout).to(dtype), _to_layout(k, layout).to(dtype),
        _to_layout(v, layout).to(dtype), n, layout, scale=0.3)
    assert out.dtype == dtype and out.shape == _to_layout(want, layout).shape
    torch.testing.assert_close(out.double(), _to_layout(want, layout), atol=_tol(dtype),
                               rtol=_tol(dtype))
    assert smax.shape == (b, n, sq, 8) and smax.dtype == torch.float32
    # lse is what any path must reproduce (the fused path stores max = lse, sum = 1)
    lse = smax[..., 0].double() + ssum[..., 0].double().log()
    torch.testing.assert_close(lse, m + l.log(), atol=1e-4, rtol=1e-4)
    assert (smax == smax[..., :1]).all() and placeholder.numel() == 0
    assert (seed, offset, numels) == (0, 0, 0)


def test_reference_statistics_are_the_row_max_and_exp_sum():
    q, k, v = _rand(1, 2, 5, 4), _rand(1, 2, 6, 4, seed=1), _rand(1, 2, 6, 4, seed=2)
    pse = _rand(1, 2, 5, 6, seed=3)
    out, smax, ssum = na.npu_fusion_attention(q, k, v, 2, "BNSD", pse=pse, scale=0.5)[:3]
    want, m, l = attention(q.double(), k.double(), v.double(), 0.5, pse=pse.double())
    torch.testing.assert_close(smax[..., 0].double(), m, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ssum[..., 0].double(), l, atol=1e-5, rtol=1e-5)


def test_dv_smaller_than_dk_and_non_contiguous_inputs():
    q = _rand(2, 3, 6, 8).transpose(1, 2)            # BSND view of a BNSD buffer
    k = _rand(2, 3, 5, 8, seed=1).transpose(1, 2)
    v = _rand(2, 3, 5, 4, seed=2).transpose(1, 2)
    out = na.npu_fusion_attention(q, k, v, 3, "BSND", scale=0.2)[0]
    want = attention(*(t.transpose(1, 2).double() for t in (q, k, v)), 0.2)[0]
    torch.testing.assert_close(out.double(), want.transpose(1, 2), atol=2e-5, rtol=2e-5)
    assert out.shape == (2, 6, 3, 4)


def test_inputs_are_untouched():
    q, k, v = _rand(1, 2, 4, 4), _rand(1, 2, 4, 4, seed=1), _rand(1, 2, 4, 4, seed=2)
    copies = [t.clone() for t in (q, k, v)]
    na.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.5)
    for t, c in zip((q, k, v), copies):
        assert torch.equal(t, c)


# -- sparse modes -------------------------------------------------------------------------------

def _band_mask(sq, skv, pre, nxt):
    i = torch.arange(sq).view(-1, 1)
    j = torch.arange(skv).view(1, -1)
    return (j - i > nxt) | (j - i < -pre)


SPARSE_CASES = [
    # (mode, sq, skv, pre, nxt)
    (0, 7, 7, 2, 1), (0, 6, 9, INT_MAX, 0), (0, 8, 8, 9, -3), (0, 8, 8, -3, 7),
    (1, 6, 9, INT_MAX, INT_MAX), (2, 7, 5, 0, 0), (2, 5, 8, 3, 3), (3, 5, 8, 0, 0),
    (3, 8, 5, 0, 0), (4, 7, 9, 2, 1), (4, 9, 6, 3, -1),
]


@pytest.mark.parametrize("mode,sq,skv,pre,nxt", SPARSE_CASES)
def test_sparse_modes_match_the_doc_table(mode, sq, skv, pre, nxt):
    b, n, d = 2, 2, 8
    q, k, v = (_rand(b, n, s, d, seed=i) for i, s in enumerate((sq, skv, skv)))
    if mode == 0:
        user = _band_mask(sq, skv, pre, nxt)
    elif mode == 1:
        user = _rand(b, 1, sq, skv, seed=7) > 0.3
        user[..., 0] = False
    else:
        user = TRIU
    out = na.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=user, scale=0.4,
                                  sparse_mode=mode, pre_tockens=pre, next_tockens=nxt)[0]
    if mode == 1:
        vis = ~user
    else:
        vis = visible(mode, sq, skv, pre, nxt, mask=user if mode == 0 else None)
    want = attention(q.double(), k.double(), v.double(), 0.4, vis=vis)[0]
    rows_seen = vis.any(-1) if vis.dim() == 2 else vis.any(-1)
    want = torch.where(rows_seen.unsqueeze(-1), want, torch.zeros_like(want))
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_no_mask_ignores_sparse_mode_and_tokens():
    q, k, v = _rand(1, 2, 6, 4), _rand(1, 2, 6, 4, seed=1), _rand(1, 2, 6, 4, seed=2)
    full = na.npu_fusion_attention(q, k, v, 2, "BNSD")[0]
    for mode in (0, 2, 3, 4):
        out = na.npu_fusion_attention(q, k, v, 2, "BNSD", sparse_mode=mode, pre_tockens=1,
                                      next_tockens=0)[0]
        torch.testing.assert_close(out, full)


@pytest.mark.parametrize("mode", [5, 6])
def test_prefix_modes(mode):
    b, n, sq, skv, d = 2, 2, 4, 7, 8
    prefix = [4, 5]
    q, k, v = (_rand(b, n, s, d, seed=i) for i, s in enumerate((sq, skv, skv)))
    vis = torch.stack([visible(6, sq, skv, prefix_n=p) for p in prefix]).unsqueeze(1)
    if mode == 5:
        mask = ~vis
    else:
        mask = torch.zeros(3072, 2048, dtype=torch.bool)
    out = na.npu_fusion_attention(q, k, v, n, "BNSD", atten_mask=mask, scale=0.3,
                                  sparse_mode=mode, prefix=prefix)[0]
    want = attention(q.double(), k.double(), v.double(), 0.3, vis=vis)[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


# -- pse and sink --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["BNSS", "BN1S", "1NSS"])
def test_pse_is_added_before_the_scale(shape):
    b, n, sq, skv, d = 2, 3, 5, 6, 4
    q, k, v = (_rand(b, n, s, d, seed=i) for i, s in enumerate((sq, skv, skv)))
    dims = {"BNSS": (b, n, sq, skv), "BN1S": (b, n, 1, skv), "1NSS": (1, n, sq, skv)}[shape]
    pse = _rand(*dims, seed=5)
    out = na.npu_fusion_attention(q, k, v, n, "BNSD", pse=pse, scale=0.7)[0]
    want = attention(q.double(), k.double(), v.double(), 0.7, pse=pse.double())[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_sink_is_one_extra_logit_per_head():
    q, k, v = _rand(1, 4, 16, 8), _rand(1, 4, 16, 8, seed=1), _rand(1, 4, 16, 8, seed=2)
    sink = torch.linspace(-0.2, 0.2, 4)
    out = na.npu_fusion_attention(q, k, v, 4, "BNSD", sink=sink, scale=0.35)[0]
    # the seed doc's own reference: cat the sink logit, softmax, drop that column
    s = q @ k.transpose(2, 3) * 0.35
    probs = torch.softmax(torch.cat([s, sink.view(1, 4, 1, 1).expand(1, 4, 16, 1)], -1), -1)
    torch.testing.assert_close(out, probs[..., :-1] @ v, atol=2e-5, rtol=2e-5)


# -- TND ------------------------------------------------------------------------------------------

def _tnd_case(q_lens, kv_lens, n=2, nkv=1, d=4):
    q = _rand(sum(q_lens), n, d, seed=1)
    k = _rand(sum(kv_lens), nkv, d, seed=2)
    v = _rand(sum(kv_lens), nkv, d, seed=3)
    return q, k, v


def _cum(lens):
    out, acc = [], 0
    for x in lens:
        acc += x
        out.append(acc)
    return out


def _tnd_golden(q, k, v, q_lens, kv_lens, scale, vis_of):
    outs, ms, ls = [], [], []
    qs, ks = 0, 0
    for b, (a, c) in enumerate(zip(q_lens, kv_lens)):
        qb = q[qs:qs + a].double().permute(1, 0, 2).unsqueeze(0)
        kb = k[ks:ks + c].double().permute(1, 0, 2).unsqueeze(0)
        vb = v[ks:ks + c].double().permute(1, 0, 2).unsqueeze(0)
        o, m, l = attention(qb, kb, vb, scale, vis=vis_of(b, a, c))
        outs.append(o[0].permute(1, 0, 2))
        ms.append(m[0])
        ls.append(l[0])
        qs, ks = qs + a, ks + c
    return torch.cat(outs), ms, ls


@pytest.mark.parametrize("mode", [None, 2, 3, 4, 7, 8])
def test_tnd_varlen_modes(mode):
    q_lens, kv_lens = [3, 2, 4], [3, 6, 8]
    q, k, v = _tnd_case(q_lens, kv_lens)
    pre, nxt = (6, -2) if mode == 7 else (4, 1) if mode in (4, 8) else (INT_MAX, INT_MAX)
    kwargs = {} if mode is None else dict(atten_mask=TRIU, sparse_mode=mode, pre_tockens=pre,
                                          next_tockens=nxt)
    out, smax, ssum = na.npu_fusion_attention(
        q, k, v, 2, "TND", scale=0.5, actual_seq_qlen=_cum(q_lens),
        actual_seq_kvlen=_cum(kv_lens), softmax_layout="TND", **kwargs)[:3]

    def vis_of(b, a, c):
        if mode is None:
            return None
        band = (mode == 7 and b == 2) or (mode == 8 and b == 0)
        return visible(mode, a, c, pre, nxt, band=band)

    want, ms, ls = _tnd_golden(q, k, v, q_lens, kv_lens, 0.5, vis_of)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    assert smax.shape == (sum(q_lens), 2, 8)
    lse = torch.cat([(m + l.log()).transpose(0, 1) for m, l in zip(ms, ls)])
    torch.testing.assert_close(smax[..., 0].double() + ssum[..., 0].double().log(), lse,
                               atol=1e-5, rtol=1e-5)


def test_tnd_default_softmax_layout_is_head_major_per_sequence_and_trailing_zeros():
    q_lens, kv_lens = [2, 3], [4, 2]
    q, k, v = _tnd_case(q_lens, kv_lens)
    smax = na.npu_fusion_attention(q, k, v, 2, "TND", actual_seq_qlen=[2, 5, 0],
                                   actual_seq_kvlen=[4, 6, 0])[1]
    _, ms, _ = _tnd_golden(q, k, v, q_lens, kv_lens, 1.0, lambda *a: None)
    # batch b's len_b * N rows: head 0's tokens, then head 1's
    want = torch.cat([m.reshape(-1) for m in ms]).view(5, 2)
    torch.testing.assert_close(smax[..., 0].double(), want, atol=1e-5, rtol=1e-5)


# -- gradients ----------------------------------------------------------------------------------

def _f64(*shape, seed=0):
    return _rand(*shape, dtype=torch.float64, seed=seed).requires_grad_()


def test_gradcheck_bsnd_gqa_pse_causal():
    q, k, v = _f64(1, 3, 4, 3), _f64(1, 5, 2, 3, seed=1), _f64(1, 5, 2, 3, seed=2)
    pse = _f64(1, 4, 3, 5, seed=3)

    def f(q, k, v, pse):
        return na.npu_fusion_attention(q, k, v, 4, "BSND", pse=pse, atten_mask=TRIU,
                                       sparse_mode=3, scale=0.6)[0]
    assert torch.autograd.gradcheck(f, (q, k, v, pse), fast_mode=True)


@pytest.mark.parametrize("name", ["npu_fusion_attention", "npu_fusion_attention_v3"])
def test_gradcheck_float64_on_the_fused_kernel_path(name):
    # no mask, no pse: the call maps onto the CPU flash kernels, forward and backward
    q, k, v = _f64(1, 2, 5, 3), _f64(1, 1, 4, 3, seed=1), _f64(1, 1, 4, 3, seed=2)
    fn = getattr(na, name)

    def f(q, k, v):
        return fn(q, k, v, 2, "BNSD", scale=0.7)[0]
    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


def test_gradcheck_sink_and_band():
    q, k, v = _f64(1, 2, 5, 3), _f64(1, 2, 5, 3, seed=1), _f64(1, 2, 5, 3, seed=2)
    sink = _f64(2, seed=4)

    def f(q, k, v, sink):
        return na.npu_fusion_attention(q, k, v, 2, "BNSD", sink=sink, atten_mask=TRIU,
                                       sparse_mode=4, pre_tockens=2, next_tockens=1)[0]
    assert torch.autograd.gradcheck(f, (q, k, v, sink), fast_mode=True)


def test_gradcheck_tnd_and_dropout_with_a_fixed_seed():
    q, k, v = _f64(5, 2, 3), _f64(7, 2, 3, seed=1), _f64(7, 2, 3, seed=2)

    def f(q, k, v):
        return na.npu_fusion_attention(q, k, v, 2, "TND", actual_seq_qlen=[2, 5],
                                       actual_seq_kvlen=[3, 7], atten_mask=TRIU, sparse_mode=3,
                                       keep_prob=0.7, seed=1234, offset=5)[0]
    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BNSD"])
def test_float32_grads_match_autograd_of_the_golden(layout):
    b, n, nkv, sq, skv, d = 2, 4, 2, 9, 11, 8
    base = [_rand(b, n, sq, d), _rand(b, nkv, skv, d, seed=1), _rand(b, nkv, skv, d, seed=2)]
    ins = [_to_layout(t, layout).clone().requires_grad_() for t in base]
    out = na.npu_fusion_attention(*ins, n, layout, atten_mask=TRIU, sparse_mode=2, scale=0.3)[0]
    dy = _rand(*out.shape, seed=9)
    out.backward(dy)
    gold = [t.double().requires_grad_() for t in base]
    want = attention(*gold, 0.3, vis=visible(2, sq, skv))[0]
    want.backward(_to_layout_inverse(dy.double(), layout, b, n, sq))
    for got, ref in zip(ins, gold):
        torch.testing.assert_close(got.grad.double(), _to_layout(ref.grad, layout), atol=1e-4,
                                   rtol=1e-4)


def _to_layout_inverse(x, layout, b, n, s):
    if layout == "BNSD":
        return x
    if layout == "BSH":
        return x.reshape(b, s, n, -1).permute(0, 2, 1, 3)
    return x.reshape(s, b, n, -1).permute(1, 2, 0, 3)


def test_grad_op_returns_no_dpse_and_an_empty_dsink_without_them():
    # op-plugin's kernel returns an undefined dpse (None) and at::empty({0}, float32) for dsink
    q, k, v = _rand(1, 2, 4, 4), _rand(1, 2, 4, 4, seed=1), _rand(1, 2, 4, 4, seed=2)
    out, smax, ssum = na.npu_fusion_attention(q, k, v, 2, "BNSD")[:3]
    dq, dk, dv, dpse, dsink = na.npu_fusion_attention_grad(
        q, k, v, torch.ones_like(out), 2, "BNSD", softmax_max=smax, softmax_sum=ssum,
        attention_in=out)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dpse is None
    assert dsink.shape == (0,) and dsink.dtype == torch.float32


# -- dropout ------------------------------------------------------------------------------------

def test_dropout_seed_regenerates_the_mask_and_manual_seed_repeats():
    q, k, v = _rand(1, 2, 70, 4), _rand(1, 2, 70, 4, seed=1), _rand(1, 2, 70, 4, seed=2)
    torch.manual_seed(3)
    first = na.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.6)
    torch.manual_seed(3)
    again = na.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.6)
    other = na.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.6)
    assert torch.equal(first[0], again[0]) and first[4] == again[4]
    assert not torch.equal(first[0], other[0])
    assert first[6] == 2 * 70 * 70
    replay = na.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.6, seed=first[4],
                                     offset=first[5])
    assert torch.equal(replay[0], first[0])
    no_drop = na.npu_fusion_attention(q, k, v, 2, "BNSD")[0]
    assert not torch.equal(first[0], no_drop)


def test_dropout_keeps_about_keep_prob_and_scales_kept_values():
    # v = ones: each output element is sum_j P_ij Z_ij / keep_prob, whose mean is 1
    n, s = 4, 96
    q, k = _rand(1, n, s, 4), _rand(1, n, s, 4, seed=1)
    out = na.npu_fusion_attention(q, k, torch.ones(1, n, s, 4), n, "BNSD", keep_prob=0.8)[0]
    assert abs(out.mean().item() - 1.0) < 0.05


# -- ring attention ------------------------------------------------------------------------------

def _merge(o1, m1, l1, o2, m2, l2):
    """Two partial results with their max / sum: the softmax-weighted combination."""
    m = torch.maximum(m1, m2)
    a, c = l1 * torch.exp(m1 - m), l2 * torch.exp(m2 - m)
    l = a + c
    return (o1 * (a / l).unsqueeze(-1) + o2 * (c / l).unsqueeze(-1)), m, l


def test_ring_attention_over_kv_chunks_equals_full_attention_forward_and_backward():
    b, n, s, d, chunks = 1, 2, 12, 4, 3
    q, k, v = _rand(b, n, s, d), _rand(b, n, s, d, seed=1), _rand(b, n, s, d, seed=2)
    dy = _rand(b, n, s, d, seed=3)
    size = s // chunks
    acc = None
    for c in range(chunks):
        kc, vc = k[:, :, c * size:(c + 1) * size], v[:, :, c * size:(c + 1) * size]
        o, smax, ssum = na.npu_fusion_attention(q, kc, vc, n, "BNSD", scale=0.5)[:3]
        part = (o, smax[..., 0], ssum[..., 0])
        acc = part if acc is None else _merge(*acc, *part)
    out, m, l = acc
    qf, kf, vf = (t.double().requires_grad_() for t in (q, k, v))
    full = attention(qf, kf, vf, 0.5)[0]
    torch.testing.assert_close(out.double(), full, atol=2e-5, rtol=2e-5)
    full.backward(dy.double())
    smax = m.unsqueeze(-1).expand(*m.shape, 8).contiguous()
    ssum = l.unsqueeze(-1).expand(*l.shape, 8).contiguous()
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    for c in range(chunks):
        kc, vc = k[:, :, c * size:(c + 1) * size], v[:, :, c * size:(c + 1) * size]
        g = na.npu_fusion_attention_grad(q, kc, vc, dy, n, "BNSD", softmax_max=smax,
                                         softmax_sum=ssum, attention_in=out, scale_value=0.5)
        dq += g[0]
        dks.append(g[1])
        dvs.append(g[2])
    torch.testing.assert_close(dq.double(), qf.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(dks, 2).double(), kf.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(dvs, 2).double(), vf.grad, atol=1e-4, rtol=1e-4)


# -- the fused-kernel path -----------------------------------------------------------------------

def test_fused_path_agrees_with_the_reference_forward_and_grad():
    from npu_anywhere.dispatch import use_providers
    q, k, v = _rand(1, 4, 40, 8), _rand(1, 2, 40, 8, seed=1), _rand(1, 2, 40, 8, seed=2)
    dy = _rand(1, 4, 40, 8, seed=3)
    results = {}
    for name in ("sdpa_flash", "reference"):
        with use_providers(name):
            out, smax, ssum = na.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=TRIU,
                                                      sparse_mode=2, scale=0.3)[:3]
            grads = na.npu_fusion_attention_grad(
                q, k, v, dy, 4, "BNSD", atten_mask=TRIU, sparse_mode=2, softmax_max=smax,
                softmax_sum=ssum, attention_in=out, scale_value=0.3)
        results[name] = (out, smax[..., 0] + ssum[..., 0].log(), *grads[:3])
    for got, want in zip(results["sdpa_flash"], results["reference"]):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


# -- errors and strict mode ----------------------------------------------------------------------

ERRORS = [
    (dict(input_layout="BSDN"), ValueError, "expected input_layout one of"),
    (dict(keep_prob=0.0), ValueError, "expected keep_prob in (0, 1]"),
    (dict(sparse_mode=9), ValueError, "expected sparse_mode in [0, 8]"),
    (dict(sparse_mode=7, atten_mask=TRIU), ValueError, "expected sparse_mode 7 or 8 only with"),
    (dict(sparse_mode=2, atten_mask=torch.ones(4, 4, dtype=torch.bool)), RuntimeError,
     "expected atten_mask the compressed 2048x2048"),
    (dict(atten_mask=torch.ones(4, 5)), TypeError, "expected atten_mask dtype in"),
    (dict(padding_mask=torch.ones(1)), ValueError, "expected padding_mask None"),
    (dict(head_num=3), ValueError, "expected head_num the query's head count"),
    (dict(pse=torch.ones(1, 2, 3, 3)), RuntimeError, "expected pse a BNSS, BN1Skv or 1NSS"),
    (dict(atten_mask=torch.zeros(4, 4, dtype=torch.bool), next_tockens=-2, pre_tockens=1),
     ValueError, "expected pre_tockens >= -next_tockens"),
]


@pytest.mark.parametrize("kwargs,error,match", ERRORS)
def test_bad_calls_raise_the_documented_message(kwargs, error, match):
    q, k, v = _rand(1, 2, 4, 4), _rand(1, 2, 4, 4, seed=1), _rand(1, 2, 4, 4, seed=2)
    args = dict(head_num=2, input_layout="BNSD")
    args.update(kwargs)
    with pytest.raises(error, match="npu_fusion_attention: " + match.replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        na.npu_fusion_attention(q, k, v, **args)


def test_grad_needs_the_forward_statistics():
    q = _rand(1, 2, 4, 4)
    with pytest.raises(ValueError, match="npu_fusion_attention_grad: expected attention_in"):
        na.npu_fusion_attention_grad(q, q, q, q, 2, "BNSD")


def test_kv_heads_must_divide_query_heads():
    with pytest.raises(ValueError, match="expected key a head count Nkv dividing Nq"):
        na.npu_fusion_attention(_rand(1, 3, 4, 4), _rand(1, 2, 4, 4), _rand(1, 2, 4, 4), 3,
                                "BNSD")


def test_tokens_spelled_like_the_later_ops_are_accepted():
    q, k, v = _rand(1, 2, 6, 4), _rand(1, 2, 6, 4, seed=1), _rand(1, 2, 6, 4, seed=2)
    mask = _band_mask(6, 6, 1, 1)
    a = na.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, pre_tokens=1,
                                next_tokens=1)[0]
    b = na.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, pre_tockens=1,
                                next_tockens=1)[0]
    assert torch.equal(a, b)


def test_strict_mode_products_and_float64():
    q = _rand(1, 2, 4, 4, dtype=torch.float64)
    with na.strict("A2"):
        with pytest.raises(TypeError, match="npu_fusion_attention: expected query dtype in"):
            na.npu_fusion_attention(q, q, q, 2, "BNSD")
        na.npu_fusion_attention(q.float(), q.float(), q.float(), 2, "BNSD")
    with na.strict("310P"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            na.npu_fusion_attention(q.float(), q.float(), q.float(), 2, "BNSD")


@pytest.mark.parametrize("layout", ["SBH", "TND"])
def test_ring_attention_update_merges_kv_chunks_into_full_attention(layout):
    # npu_ring_attention_update reads the statistics exactly as npu_fusion_attention writes them
    # (TND: the default head-major-per-sequence order).
    n, d = 2, 4 if layout == "SBH" else 64      # the update's TND needs D % 64 == 0
    if layout == "SBH":
        q, k, v = _rand(6, 1, n * d), _rand(8, 1, n * d, seed=1), _rand(8, 1, n * d, seed=2)
        chunks = [(k[:4], v[:4], {}), (k[4:], v[4:], {})]
        full = na.npu_fusion_attention(q, k, v, n, "SBH")[0]
        kw = {}
    else:
        q, k, v = _rand(5, n, d), _rand(8, n, d, seed=1), _rand(8, n, d, seed=2)
        # two sequences (2 and 3 queries; 4 and 4 keys), each key range split in halves
        halves = [torch.cat([k[0:2], k[4:6]]), torch.cat([k[2:4], k[6:8]])]
        vhalves = [torch.cat([v[0:2], v[4:6]]), torch.cat([v[2:4], v[6:8]])]
        lens = dict(actual_seq_qlen=[2, 5], actual_seq_kvlen=[2, 4])
        chunks = [(halves[i], vhalves[i], lens) for i in range(2)]
        full = na.npu_fusion_attention(q, k, v, n, "TND", actual_seq_qlen=[2, 5],
                                       actual_seq_kvlen=[4, 8])[0]
        kw = dict(actual_seq_qlen=torch.tensor([0, 2, 5]), input_layout="TND")
    parts = [na.npu_fusion_attention(q, kc, vc, n, layout, **extra)[:3]
             for kc, vc, extra in chunks]
    out = na.npu_ring_attention_update(parts[0][0], parts[0][1], parts[0][2], parts[1][0],
                                       parts[1][1], parts[1][2], **kw)[0]
    torch.testing.assert_close(out, full, atol=2e-5, rtol=2e-5)


def test_mask_shapes_bnss_b1ss_11ss_ss_accepted_and_1nss_rejected():
    q, k, v = _rand(2, 2, 4, 4), _rand(2, 2, 4, 4, seed=1), _rand(2, 2, 4, 4, seed=2)
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    want = na.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=causal)[0]
    for shape in ((2, 2, 4, 4), (2, 1, 4, 4), (1, 1, 4, 4)):
        got = na.npu_fusion_attention(q, k, v, 2, "BNSD",
                                      atten_mask=causal.expand(shape).contiguous())[0]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="npu_fusion_attention: expected atten_mask a BNSS"):
        na.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=causal.expand(1, 2, 4, 4))


def test_compiled_dropout_with_drawn_seed_matches_eager_forward_and_backward():
    """keep_prob < 1 without a seed: the seed / offset are drawn at run time, so the schema
    returns them as SymInt (op-plugin's yaml says int) and the grad op takes SymInt; the
    compiled graph then carries the drawn values from forward to backward, as eager does."""
    def inputs():
        g = torch.Generator().manual_seed(1)
        return [torch.randn(1, 2, 32, 16, generator=g, requires_grad=True) for _ in range(3)]

    def f(q, k, v):
        out = torch.ops.npu.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.8, scale=0.25)
        return out[0], out[4], out[5]

    results = []
    for fn in (f, torch.compile(f, fullgraph=True, backend="aot_eager")):
        q, k, v = inputs()
        torch.manual_seed(123)
        fn(q, k, v)                  # a second draw after manual_seed has a nonzero offset
        o, seed, offset = fn(q, k, v)
        o.sum().backward()
        results.append((o.detach(), q.grad, k.grad, v.grad, seed, offset))
    eager, compiled = results
    assert eager[4] == compiled[4] == 123 and eager[5] == compiled[5] != 0
    for a, b in zip(eager[:4], compiled[:4]):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    undropped = torch.ops.npu.npu_fusion_attention(*inputs(), 2, "BNSD", scale=0.25)[0]
    assert not torch.allclose(eager[0], undropped.detach())       # dropout did apply
