"""npu_fusion_attention's tiled provider, alibi-compressed / TND pse and caller dropout_mask.

Golden: fa_golden.attention (seed 004's formula in float64, everything materialized).  The
alibi-compressed pse is op-plugin's ``alibi_compress = ori_pse[:, :, -1024:, :]``: the golden
uses the original full pse.  The dropout_mask bits follow ``_npu_dropout_gen_mask``'s packing
(one bit per element of [B, N, Sq, Skv], least significant bit first).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na
from fa_golden import attention, visible
from npu_anywhere.dispatch import use_providers
from npu_anywhere.ops.training_attention import fa_pse, fa_tiled

INT_MAX = 2147483647
TRIU = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 7 * sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.fixture
def small_tiles(monkeypatch):
    """Odd tile sizes, so that every test call runs many partial, skipped and full tiles."""
    monkeypatch.setattr(fa_tiled, "_tiles", lambda b, n, sq, skv: (5, 7))


def _golden_grads(q, k, v, dy, scale, **kw):
    ins = [t.double().detach().requires_grad_() for t in (q, k, v)]
    extra = {}
    for name in ("pse", "sink"):
        if kw.get(name) is not None:
            extra[name] = kw.pop(name).double().detach().requires_grad_()
    out = attention(*ins, scale, **kw, **extra)[0]
    out.backward(dy.double())
    return out.detach(), [t.grad for t in ins] + [extra[n].grad for n in extra]


def _fa(q, k, v, n, layout="BNSD", **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    extra = {name: kw[name].detach().clone().requires_grad_() for name in ("pse", "sink")
             if kw.get(name) is not None}
    kw.update(extra)
    res = na.npu_fusion_attention(*leaves, n, layout, **kw)
    return res, leaves + list(extra.values())


# -- the tiled provider against the golden, many tiles ---------------------------------------

TILED_CASES = [
    # (name, sq, skv, kwargs, visible-of)
    ("band_mode0", 13, 17, dict(sparse_mode=0, pre_tockens=4, next_tockens=2),
     lambda sq, skv: visible(0, sq, skv, 4, 2)),
    ("causal_mode2", 16, 11, dict(sparse_mode=2), lambda sq, skv: visible(2, sq, skv)),
    ("right_down_empty_rows", 17, 9, dict(sparse_mode=3), lambda sq, skv: visible(3, sq, skv)),
    ("band_mode4", 12, 19, dict(sparse_mode=4, pre_tockens=5, next_tockens=-1),
     lambda sq, skv: visible(4, sq, skv, 5, -1)),
    ("prefix_mode6", 11, 15, dict(sparse_mode=6, prefix=[6, 9]), None),
]


@pytest.mark.parametrize("name,sq,skv,kw,vis_of", TILED_CASES, ids=[c[0] for c in TILED_CASES])
def test_tiled_sparse_modes_forward_and_grads(small_tiles, name, sq, skv, kw, vis_of):
    b, n, nkv, d = 2, 4, 2, 8
    q, k, v = _rand(b, n, sq, d), _rand(b, nkv, skv, d, seed=1), _rand(b, nkv, skv, d, seed=2)
    kw = dict(kw)
    if kw["sparse_mode"] == 0:
        i, j = torch.arange(sq).view(-1, 1), torch.arange(skv).view(1, -1)
        mask = (j - i > 2) | (j - i < -4)
    elif kw["sparse_mode"] == 6:
        mask = torch.triu(torch.ones(3072, 2048, dtype=torch.bool), 1)
    else:
        mask = TRIU
    if vis_of is None:
        vis = torch.stack([visible(6, sq, skv, prefix_n=p) for p in kw["prefix"]]).unsqueeze(1)
    else:
        vis = vis_of(sq, skv)
    dy = _rand(b, n, sq, d, seed=3)
    with use_providers("tiled"):
        res, leaves = _fa(q, k, v, n, atten_mask=mask, scale=0.4, **kw)
        res[0].backward(dy)
    # rows that see no key give 0 and pass no gradient: the golden sees all keys there and
    # gets a zero dy on them (its softmax of an all -inf row would be NaN)
    seen = vis.any(-1, keepdim=True)
    want, grads = _golden_grads(q, k, v, dy * seen, 0.4, vis=vis | ~seen)
    want = torch.where(seen, want, torch.zeros_like(want))
    torch.testing.assert_close(res[0].double(), want, atol=2e-5, rtol=2e-5)
    for got, ref in zip(leaves, grads):
        torch.testing.assert_close(got.grad.double(), ref, atol=1e-4, rtol=1e-4)


def test_tiled_pse_sink_gqa_bsh_statistics_and_grads(small_tiles):
    b, n, nkv, sq, skv, d = 2, 4, 1, 9, 12, 4
    q, k, v = _rand(b, n, sq, d), _rand(b, nkv, skv, d, seed=1), _rand(b, nkv, skv, d, seed=2)
    pse = _rand(1, n, sq, skv, seed=4)
    sink = torch.linspace(-0.5, 0.5, n)
    dy = _rand(b, n, sq, d, seed=3)
    to_bsh = lambda t: t.permute(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1)
    with use_providers("tiled"):
        res, leaves = _fa(to_bsh(q), to_bsh(k), to_bsh(v), n, "BSH", pse=pse, sink=sink,
                          atten_mask=TRIU, sparse_mode=3, scale=0.6)
        res[0].backward(to_bsh(dy))
    vis = visible(3, sq, skv)
    want, grads = _golden_grads(q, k, v, dy, 0.6, vis=vis, pse=pse, sink=sink)
    _, m, l = attention(q.double(), k.double(), v.double(), 0.6, vis=vis, pse=pse.double(),
                        sink=sink.double())
    torch.testing.assert_close(res[0].double(), to_bsh(want), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(res[1][..., 0].double(), m, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res[2][..., 0].double(), l, atol=1e-5, rtol=1e-5)
    for got, ref in zip(leaves, [to_bsh(g) for g in grads[:3]] + grads[3:]):
        torch.testing.assert_close(got.grad.double(), ref, atol=1e-4, rtol=1e-4)


def test_tiled_equals_reference_with_dropout_and_tnd(small_tiles):
    q, k, v = _rand(9, 2, 4), _rand(11, 1, 4, seed=1), _rand(11, 1, 4, seed=2)
    kw = dict(actual_seq_qlen=[4, 9], actual_seq_kvlen=[5, 11], atten_mask=TRIU,
              sparse_mode=3, keep_prob=0.7, seed=99, offset=3, scale=0.5)
    dy = _rand(9, 2, 4, seed=3)
    results = {}
    for name in ("tiled", "reference"):
        with use_providers(name):
            out, smax, ssum = na.npu_fusion_attention(q, k, v, 2, "TND", **kw)[:3]
            grads = na.npu_fusion_attention_grad(
                q, k, v, dy, 2, "TND", softmax_max=smax, softmax_sum=ssum, attention_in=out,
                scale_value=0.5, **{a: b for a, b in kw.items() if a != "scale"})
        results[name] = (out, smax, ssum, *grads[:3])
    for got, want in zip(results["tiled"], results["reference"]):
        torch.testing.assert_close(got, want, atol=2e-6, rtol=2e-6)


# -- alibi-compressed pse ------------------------------------------------------------------------

def _alibi(b, n, s, slopes):
    i, j = torch.arange(s).view(-1, 1), torch.arange(s).view(1, -1)
    return (-(i - j).abs().double() * slopes.view(1, n, 1, 1)).expand(b, n, s, s)


@pytest.mark.parametrize("mode_kw", [dict(sparse_mode=2), dict(sparse_mode=0, next_tockens=0)])
def test_alibi_compressed_pse_equals_the_full_pse(mode_kw):
    b, n, s, d = 1, 1, 1029, 2
    q, k, v = _rand(b, n, s, d), _rand(b, n, s, d, seed=1), _rand(b, n, s, d, seed=2)
    full = _alibi(1, n, s, torch.tensor([0.25]))
    compressed = full[:, :, -1024:, :].float().contiguous()
    mask = TRIU if mode_kw["sparse_mode"] == 2 else torch.triu(
        torch.ones(s, s, dtype=torch.bool), 1)
    out = na.npu_fusion_attention(q, k, v, n, "BNSD", pse=compressed, atten_mask=mask,
                                  scale=0.3, **mode_kw)[0]
    want = attention(q.double(), k.double(), v.double(), 0.3, vis=visible(2, s, s),
                     pse=full)[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_alibi_compressed_pse_grad_is_the_adjoint_of_its_diagonal_read():
    b, n, s, d = 1, 1, 1027, 2
    q, k, v = _rand(b, n, s, d), _rand(b, n, s, d, seed=1), _rand(b, n, s, d, seed=2)
    comp = _rand(1, n, 1024, s, seed=5) * 0.1          # any values: the read rule decides
    dy = _rand(b, n, s, d, seed=3)
    res, leaves = _fa(q, k, v, n, pse=comp, atten_mask=TRIU, sparse_mode=3, scale=0.5)
    res[0].backward(dy)
    # the documented rule, written out: the last 1024 rows as given, an earlier row i reads
    # the last stored row on its diagonal (j - i + S - 1)
    c = comp.double().requires_grad_()
    rows = []
    for i in range(s - 1024):
        idx = (torch.arange(s) - i + s - 1).clamp(max=s - 1)
        rows.append(c[:, :, 1023, idx])
    full = torch.cat([torch.stack(rows, dim=2), c], dim=2)
    ins = [t.double().requires_grad_() for t in (q, k, v)]
    want = attention(*ins, 0.5, vis=visible(3, s, s), pse=full)[0]
    want.backward(dy.double())
    torch.testing.assert_close(res[0].double(), want.detach(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(leaves[3].grad.double(), c.grad, atol=1e-4, rtol=1e-4)


ALIBI_TILED = [
    # (sparse_mode kwargs, scale, merge budget): mode 2 lets the pse mask j > i itself; mode 0
    # (an explicit mask) and a negative scale build tile masks; a budget of 1 merges the
    # tile products two at a time
    (dict(sparse_mode=2), 0.3, None),
    (dict(sparse_mode=0, next_tockens=0), 0.3, 1),
    (dict(sparse_mode=3), -0.2, None),
]


@pytest.mark.parametrize("mode_kw,scale,budget", ALIBI_TILED)
def test_alibi_compressed_pse_many_tiles_forward_and_grads(monkeypatch, mode_kw, scale,
                                                           budget):
    """Rows above the stored ones read the diagonals (in reverse, tile by tile, several
    blocks of rows and of columns); the split falls inside a tile of columns and between
    blocks of rows.  The compressed form is shrunk to 64 stored rows to keep this small."""
    monkeypatch.setattr(fa_pse, "ALIBI_ROWS", 64)
    monkeypatch.setattr(fa_tiled, "_tiles", lambda b, n, sq, skv: (18, 16))
    if budget is not None:
        monkeypatch.setattr(fa_tiled, "TILE_BUDGET", budget)
    b, n, s, d, stored = 1, 2, 100, 4, 64
    q, k, v = _rand(b, n, s, d), _rand(b, n, s, d, seed=1), _rand(b, n, s, d, seed=2)
    full = _alibi(1, n, s, torch.tensor([0.5, 0.0625]))
    comp = full[:, :, -stored:, :].float().contiguous()
    mask = TRIU if mode_kw["sparse_mode"] != 0 else torch.triu(
        torch.ones(s, s, dtype=torch.bool), 1)
    dy = _rand(b, n, s, d, seed=3)
    with use_providers("tiled"):
        res, leaves = _fa(q, k, v, n, pse=comp, atten_mask=mask, scale=scale, **mode_kw)
        res[0].backward(dy)
    # the golden's pse: the documented read of the stored rows (its grad is the adjoint)
    c = comp.double().requires_grad_()
    idx = (torch.arange(s).view(1, -1) - torch.arange(s - stored).view(-1, 1) + s - 1).clamp(
        max=s - 1)
    full_read = torch.cat([c[:, :, stored - 1, idx], c], dim=2)
    vis = visible(2, s, s)
    assert torch.equal(full_read.detach()[..., vis], full[..., vis])
    ins = [t.double().requires_grad_() for t in (q, k, v)]
    want, m, l = attention(*ins, scale, vis=vis, pse=full_read)
    want.backward(dy.double())
    torch.testing.assert_close(res[0].double(), want.detach(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(res[1][..., 0].double(), m.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res[2][..., 0].double(), l.detach(), atol=1e-5, rtol=1e-5)
    for got, ref in zip(leaves, ins + [c]):
        torch.testing.assert_close(got.grad.double(), ref.grad, atol=1e-4, rtol=1e-4)


ALIBI_ERRORS = [
    (dict(sparse_mode=1), ValueError, "expected pse the alibi-compressed form only with a "
                                      "lower-triangle mask"),
    (dict(sparse_mode=0, next_tockens=3), ValueError, "expected pse the alibi-compressed form "
                                                      "only with a lower-triangle mask"),
]


@pytest.mark.parametrize("kw,error,match", ALIBI_ERRORS)
def test_alibi_compressed_pse_needs_a_causal_call(kw, error, match):
    s = 1026
    q = _rand(1, 1, s, 2)
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    with pytest.raises(error, match="npu_fusion_attention: " + match):
        na.npu_fusion_attention(q, q, q, 1, "BNSD", pse=torch.zeros(1, 1, 1024, s),
                                atten_mask=mask, **kw)


def test_alibi_compressed_pse_needs_equal_lengths():
    q, k = _rand(1, 1, 1026, 2), _rand(1, 1, 1030, 2)
    with pytest.raises(ValueError, match="npu_fusion_attention: expected pse the alibi-"
                                         "compressed form only with Sq == Skv"):
        na.npu_fusion_attention(q, k, k, 1, "BNSD", pse=torch.zeros(1, 1, 1024, 1030),
                                atten_mask=TRIU, sparse_mode=3)


# -- TND pse -----------------------------------------------------------------------------------

def _tnd_golden(q, k, v, q_lens, kv_lens, scale, pse_of, vis_of):
    outs, qs, ks = [], 0, 0
    for bi, (a, c) in enumerate(zip(q_lens, kv_lens)):
        to4 = lambda t: t.double().permute(1, 0, 2).unsqueeze(0)
        o = attention(to4(q[qs:qs + a]), to4(k[ks:ks + c]), to4(v[ks:ks + c]), scale,
                      vis=vis_of(a, c), pse=pse_of(bi, a, c))[0]
        outs.append(o[0].permute(1, 0, 2))
        qs, ks = qs + a, ks + c
    return torch.cat(outs)


@pytest.mark.parametrize("form", ["ss", "1s"])
def test_tnd_flat_pse_forms(small_tiles, form):
    q_lens, kv_lens, n = [3, 6], [5, 8], 2
    q, k, v = _rand(9, n, 4), _rand(13, n, 4, seed=1), _rand(13, n, 4, seed=2)
    rows = q_lens if form == "ss" else [1, 1]
    per_batch = [_rand(n, r, c, seed=10 + i) for i, (r, c) in enumerate(zip(rows, kv_lens))]
    flat = torch.cat([t.reshape(-1) for t in per_batch])
    out = na.npu_fusion_attention(q, k, v, n, "TND", pse=flat, scale=0.5,
                                  actual_seq_qlen=[3, 9], actual_seq_kvlen=[5, 13])[0]
    want = _tnd_golden(q, k, v, q_lens, kv_lens, 0.5,
                       lambda bi, a, c: per_batch[bi].double().unsqueeze(0), lambda a, c: None)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_tnd_flat_pse_gradcheck():
    q = _rand(5, 2, 3, dtype=torch.float64).requires_grad_()
    k = _rand(6, 2, 3, dtype=torch.float64, seed=1).requires_grad_()
    v = _rand(6, 2, 3, dtype=torch.float64, seed=2).requires_grad_()
    pse = _rand(2 * (2 * 4 + 3 * 2), dtype=torch.float64, seed=3).requires_grad_()

    def f(q, k, v, pse):
        return na.npu_fusion_attention(q, k, v, 2, "TND", pse=pse, actual_seq_qlen=[2, 5],
                                       actual_seq_kvlen=[4, 6], atten_mask=TRIU,
                                       sparse_mode=3)[0]
    assert torch.autograd.gradcheck(f, (q, k, v, pse), fast_mode=True)


def test_tnd_alibi_compressed_pse():
    lens, n = [4, 7], 2
    q, k, v = _rand(11, n, 4), _rand(11, n, 4, seed=1), _rand(11, n, 4, seed=2)
    slopes = torch.tensor([0.5, 0.125])
    full = _alibi(1, n, 7, slopes)                       # max Skv = 7
    comp = torch.zeros(1, n, 1024, 7, dtype=torch.float64)
    comp[:, :, -7:] = full                               # ori_pse[:, :, -1024:] of a padded pse
    for r in range(1024 - 7):                            # rows above: the same diagonals
        comp[:, :, r] = full[:, :, 0] - slopes.view(1, n, 1).double() * (1017 - r)
    out = na.npu_fusion_attention(q, k, v, n, "TND", pse=comp.float(), atten_mask=TRIU,
                                  sparse_mode=3, scale=0.5, actual_seq_qlen=[4, 11],
                                  actual_seq_kvlen=[4, 11])[0]
    want = _tnd_golden(q, k, v, lens, lens, 0.5,
                       lambda bi, a, c: _alibi(1, n, a, slopes),
                       lambda a, c: visible(3, a, c))
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_tnd_pse_shape_and_empty_sequence_errors():
    q = _rand(5, 2, 3)
    kw = dict(actual_seq_qlen=[2, 5], actual_seq_kvlen=[2, 5])
    with pytest.raises(RuntimeError, match="npu_fusion_attention: expected pse for layout TND"):
        na.npu_fusion_attention(q, q, q, 2, "TND", pse=torch.zeros(7), **kw)
    with pytest.raises(ValueError, match="expected pse None when a sequence"):
        na.npu_fusion_attention(q, q, q, 2, "TND", pse=torch.zeros(2 * 5 * 3),
                                actual_seq_qlen=[0, 5], actual_seq_kvlen=[2, 5])


# -- a caller-supplied dropout_mask -------------------------------------------------------------

def _pack(keep: torch.Tensor) -> torch.Tensor:
    """_npu_dropout_gen_mask's packing: LSB-first bits, padded to a multiple of 128 bits."""
    bits = np.packbits(keep.reshape(-1).numpy().astype(np.uint8), bitorder="little")
    pad = (-len(bits)) % 16
    return torch.from_numpy(np.concatenate([bits, np.zeros(pad, np.uint8)]))


def test_dropout_mask_is_used_in_forward_and_backward(small_tiles):
    b, n, sq, skv, d = 2, 2, 6, 9, 4
    q, k, v = _rand(b, n, sq, d), _rand(b, n, skv, d, seed=1), _rand(b, n, skv, d, seed=2)
    keep = _rand(b, n, sq, skv, seed=5) > -0.4
    dy = _rand(b, n, sq, d, seed=3)
    res, leaves = _fa(q, k, v, n, keep_prob=0.7, dropout_mask=_pack(keep), seed=42, offset=8,
                      scale=0.4)
    res[0].backward(dy)
    want, grads = _golden_grads(q, k, v, dy, 0.4, keep=keep.double(), keep_prob=0.7)
    torch.testing.assert_close(res[0].double(), want, atol=2e-5, rtol=2e-5)
    assert res[4:] == (42, 8, b * n * sq * skv)
    for got, ref in zip(leaves, grads):
        torch.testing.assert_close(got.grad.double(), ref, atol=1e-4, rtol=1e-4)


def test_dropout_mask_tnd_order_is_per_sequence():
    q_lens, kv_lens, n = [2, 3], [3, 4], 2
    q, k, v = _rand(5, n, 4), _rand(7, n, 4, seed=1), _rand(7, n, 4, seed=2)
    keeps = [_rand(n, a, c, seed=20 + i) > 0 for i, (a, c) in enumerate(zip(q_lens, kv_lens))]
    bits = _pack(torch.cat([t.reshape(-1) for t in keeps]))
    out = na.npu_fusion_attention(q, k, v, n, "TND", keep_prob=0.5, dropout_mask=bits,
                                  actual_seq_qlen=[2, 5], actual_seq_kvlen=[3, 7])[0]
    outs, qs, ks = [], 0, 0
    for keep, a, c in zip(keeps, q_lens, kv_lens):
        to4 = lambda t: t.double().permute(1, 0, 2).unsqueeze(0)
        o = attention(to4(q[qs:qs + a]), to4(k[ks:ks + c]), to4(v[ks:ks + c]), 1.0,
                      keep=keep.double().unsqueeze(0), keep_prob=0.5)[0]
        outs.append(o[0].permute(1, 0, 2))
        qs, ks = qs + a, ks + c
    torch.testing.assert_close(out.double(), torch.cat(outs), atol=2e-5, rtol=2e-5)


def test_dropout_mask_errors():
    q = _rand(1, 2, 4, 4)
    with pytest.raises(TypeError, match="npu_fusion_attention: expected dropout_mask dtype"):
        na.npu_fusion_attention(q, q, q, 2, "BNSD", keep_prob=0.5,
                                dropout_mask=torch.zeros(16))
    with pytest.raises(RuntimeError, match="npu_fusion_attention: expected dropout_mask at "
                                           "least 4 bytes"):
        na.npu_fusion_attention(q, q, q, 2, "BNSD", keep_prob=0.5,
                                dropout_mask=torch.zeros(3, dtype=torch.uint8))
