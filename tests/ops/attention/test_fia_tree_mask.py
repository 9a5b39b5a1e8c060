"""sparse_mode 9 (treeMask) of npu_fused_infer_attention_score (v1 and v2): MLA speculative
decoding, the [Q_S, Q_S] tree mask over the last Q_S keys of each batch."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from entry_points import assert_raises_everywhere
from golden import attend, close, rnd

FIA = na.npu_fused_infer_attention_score
V2 = na.npu_fused_infer_attention_score_v2

pytestmark = pytest.mark.usefixtures("each_provider")

# Row i (draft token i) sees itself and its ancestors: 0 -> root; 1, 2 children of 0;
# 3 child of 1.  True = masked, as in every atten_mask.
TREE = ~torch.tensor([[1, 0, 0, 0],
                      [1, 1, 0, 0],
                      [1, 0, 1, 0],
                      [1, 1, 0, 1]], dtype=torch.bool)


def tree_allowed(q_len, kv_len, tree, sq, skv):
    """[1, Sq, Skv] from the page's reading: every context key (before the drafts) is visible,
    a draft key only where the tree does not mask it; nothing past kv_len."""
    ok = torch.zeros(1, sq, skv, dtype=torch.bool)
    context = kv_len - q_len
    for i in range(q_len):
        for j in range(kv_len):
            ok[0, i, j] = j < context or not bool(tree[i, j - context])
    return ok


def mla(b, s, n, skv, d=16, dr=8, seed=0):
    """BSND MLA inputs: one KV head, value = key (the latent), rope parts separate."""
    q, qr = rnd(b, s, n, d, seed=seed), rnd(b, s, n, dr, seed=seed + 1)
    k, kr = rnd(b, skv, 1, d, seed=seed + 2), rnd(b, skv, 1, dr, seed=seed + 3)
    return q, qr, k, kr


def test_bsnd_tree_mask_per_batch_lengths():
    b, s, n, skv = 2, 4, 2, 7
    q, qr, k, kr = mla(b, s, n, skv)
    trees = torch.stack([TREE, TREE.T | TREE])            # a different tree per batch
    kv_lens = [7, 5]
    out, lse = FIA(q, k, k, query_rope=qr, key_rope=kr, atten_mask=trees, sparse_mode=9,
                   num_heads=n, num_key_value_heads=1, input_layout="BSND", scale=0.4,
                   actual_seq_lengths_kv=kv_lens, softmax_lse_flag=True)
    for bi in range(b):
        qq = torch.cat([q[bi], qr[bi]], -1).transpose(0, 1)       # [N, S, D + Dr]
        kk = torch.cat([k[bi], kr[bi]], -1).transpose(0, 1)
        go, gl = attend(qq, kk, k[bi].transpose(0, 1), 0.4,
                        tree_allowed(s, kv_lens[bi], trees[bi], s, skv))
        close(out[bi].transpose(0, 1), go)
        torch.testing.assert_close(lse[bi, :, :, 0].double(), gl, atol=1e-4, rtol=1e-5)


def test_tnd_packed_tree_mask_through_v2():
    n = 2
    q, qr = rnd(6, n, 16), rnd(6, n, 8, seed=1)
    k, kr = rnd(9, 1, 16, seed=2), rnd(9, 1, 8, seed=3)
    small = torch.tensor([[0, 1], [0, 0]], dtype=torch.bool)
    packed = torch.cat([small.reshape(-1), TREE.reshape(-1)]).to(torch.uint8)   # (4 + 16,)
    out, _ = V2(q, k, k, query_rope=qr, key_rope=kr, atten_mask=packed, sparse_mode=9,
                num_query_heads=n, num_key_value_heads=1, input_layout="TND",
                softmax_scale=0.3, actual_seq_qlen=[2, 6], actual_seq_kvlen=[3, 9])
    for (qa, qb), (ka, kb), tree in (((0, 2), (0, 3), small), ((2, 6), (3, 9), TREE)):
        qq = torch.cat([q[qa:qb], qr[qa:qb]], -1).transpose(0, 1)
        kk = torch.cat([k[ka:kb], kr[ka:kb]], -1).transpose(0, 1)
        go, _ = attend(qq, kk, k[ka:kb].transpose(0, 1), 0.3,
                       tree_allowed(qb - qa, kb - ka, tree, qb - qa, kb - ka))
        close(out[qa:qb].transpose(0, 1), go)


def test_paged_bf16_tree_mask_matches_dense():
    """The tree mask reads KV positions, not storage: a paged cache gives the dense result."""
    b, s, n, skv, bs = 1, 4, 2, 6, 16
    q, qr, k, kr = (t.to(torch.bfloat16) for t in mla(b, s, n, skv))
    kw = dict(query_rope=qr, atten_mask=TREE[None], sparse_mode=9, num_heads=n,
              num_key_value_heads=1, input_layout="BSND", scale=0.25)
    dense, _ = FIA(q, k, k, key_rope=kr, **kw)
    cache = torch.zeros(2, bs, 16, dtype=torch.bfloat16)
    rope_cache = torch.zeros(2, bs, 8, dtype=torch.bfloat16)
    cache[1, :skv], rope_cache[1, :skv] = k[0, :, 0], kr[0, :, 0]
    paged, _ = FIA(q, cache, cache, key_rope=rope_cache, block_table=torch.tensor([[1]]),
                   block_size=bs, actual_seq_lengths_kv=[skv], **kw)
    torch.testing.assert_close(paged, dense)


def test_decode_without_rope_ignores_sparse_mode():
    """Q_S == 1 without rope takes the incremental branch, where sparse_mode has no effect."""
    q, k = rnd(1, 2, 1, 8), rnd(1, 2, 5, 8, seed=1)
    got, _ = FIA(q, k, k, num_heads=2, input_layout="BNSD", sparse_mode=9)
    want, _ = FIA(q, k, k, num_heads=2, input_layout="BNSD")
    torch.testing.assert_close(got, want)


def _base(**kwargs):
    q, qr, k, kr = mla(2, 4, 2, 6)
    base = dict(query_rope=qr, key_rope=kr, atten_mask=TREE.expand(2, 4, 4).contiguous(),
                sparse_mode=9, num_heads=2, num_key_value_heads=1, input_layout="BSND")
    base.update(kwargs)
    return (q, k, k), base


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(query_rope=None, key_rope=None), ValueError, "query_rope and key_rope"),
    (dict(atten_mask=None), ValueError, "tree mask"),
    (dict(atten_mask=TREE[None]), RuntimeError, r"\(B, Q_S, Q_S\)"),
    (dict(atten_mask=torch.zeros(2, 4, 4)), TypeError, "atten_mask"),
    (dict(actual_seq_lengths_kv=[6, 3]), ValueError, "kv lengths >= query lengths"),
    (dict(pse_shift=torch.zeros(1, 2, 4, 6)), ValueError, "pse_shift"),
    (dict(quant_scale2=torch.ones(1)), ValueError, "int8 output"),
    (dict(key_shared_prefix=torch.zeros(1, 2, 1, 16), value_shared_prefix=torch.zeros(1, 2, 1, 16),
          key_rope=torch.zeros(2, 6, 1, 8)), ValueError, "key_shared_prefix"),
    (dict(kv_padding_size=torch.tensor([0]), actual_seq_lengths_kv=[6, 6]), ValueError,
     "left padding"),
])
def test_tree_mask_restrictions_eager_ops_and_fake(kwargs, error, match):
    (q, k, v), base = _base(**kwargs)
    assert_raises_everywhere("npu_fused_infer_attention_score", error, match, q, k, v, **base)


def test_tnd_tree_mask_size_is_checked():
    q, qr = rnd(6, 2, 16), rnd(6, 2, 8, seed=1)
    k, kr = rnd(9, 1, 16, seed=2), rnd(9, 1, 8, seed=3)
    with pytest.raises(RuntimeError, match=r"sum of q_len\*\*2"):
        FIA(q, k, k, query_rope=qr, key_rope=kr, atten_mask=torch.zeros(19, dtype=torch.bool),
            sparse_mode=9, num_heads=2, num_key_value_heads=1, input_layout="TND",
            actual_seq_lengths=[2, 6], actual_seq_lengths_kv=[3, 9])


def test_strict_950_has_no_tree_mask():
    (q, k, v), base = _base()
    with na.strict("950"), pytest.raises(ValueError, match="not 9"):
        FIA(q.bfloat16(), k.bfloat16(), v.bfloat16(),
            **{**base, "query_rope": base["query_rope"].bfloat16(),
               "key_rope": base["key_rope"].bfloat16()})
