"""npu_fused_infer_attention_score against the float64 golden of golden.py: layouts, GQA,
lengths, masks and sparse modes, lse, decode, paged KV, MLA rope, pse, shared prefix, left
padding."""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from golden import INF, attend, decode_allowed, prompt_allowed, rnd

FIA = na.npu_fused_infer_attention_score
ATOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# Every golden test runs on the reference and on the fast kernels (conftest.py).
pytestmark = pytest.mark.usefixtures("each_provider")


def to_layout(x, layout):
    """[B, N, S, D] -> layout (explicit permutes)."""
    if layout == "BSH":
        b, n, s, d = x.shape
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d).contiguous()
    if layout == "BSND":
        return x.permute(0, 2, 1, 3).contiguous()
    return x.contiguous()


def from_layout(x, layout, n):
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    return x


def check(out, golden_out, dtype=torch.float32):
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), golden_out, atol=ATOL[dtype], rtol=ATOL[dtype])


def lse_close(lse, golden_lse):
    want = torch.where(torch.isneginf(golden_lse), torch.full_like(golden_lse, -3.4e38), golden_lse)
    torch.testing.assert_close(lse.double(), want, atol=1e-4, rtol=1e-5)


# -- layouts, GQA, lengths, lse ---------------------------------------------------------------

@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prompt_layouts_gqa_lengths_lse(layout, dtype):
    b, n, nkv, sq, skv, d = 2, 4, 2, 5, 7, 16
    q, k, v = rnd(b, n, sq, d, dtype=dtype), rnd(b, nkv, skv, d, dtype=dtype, seed=1), \
        rnd(b, nkv, skv, d, dtype=dtype, seed=2)
    q_lens, kv_lens = [5, 3], [7, 4]
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    out, lse = FIA(to_layout(q, in_layout), to_layout(k, in_layout), to_layout(v, in_layout),
                   num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=0.3,
                   actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens,
                   softmax_lse_flag=True)
    out_layout = "BSND" if layout == "BNSD_BSND" else layout
    got = from_layout(out, out_layout, n)
    assert lse.shape == (b, n, sq, 1) and lse.dtype == torch.float32
    for i in range(b):
        allowed = prompt_allowed(sq, skv, q_lens[i], kv_lens[i]).unsqueeze(0)
        go, gl = attend(q[i], k[i], v[i], 0.3, allowed)
        check(got[i], go, dtype)
        lse_close(lse[i, :, :, 0], gl)


def test_lse_placeholder_and_default_scale():
    q, k = rnd(1, 2, 3, 8), rnd(1, 2, 4, 8, seed=1)
    out, lse = FIA(q, k, k, num_heads=2, input_layout="BNSD")
    assert lse.shape == (0,) and lse.dtype == torch.float32
    go, _ = attend(q[0], k[0], k[0], 1.0, torch.ones(1, 3, 4, dtype=torch.bool))
    check(out[0], go)


def test_tnd_cumulative_lengths_causal():
    n, d = 2, 8
    q_lens, kv_lens = [3, 1, 4], [5, 2, 4]
    qs = [rnd(n, s, d, seed=10 + i) for i, s in enumerate(q_lens)]
    ks = [rnd(n, s, d, seed=20 + i) for i, s in enumerate(kv_lens)]
    vs = [rnd(n, s, d, seed=30 + i) for i, s in enumerate(kv_lens)]
    pack = lambda xs: torch.cat([x.transpose(0, 1) for x in xs], dim=0)        # [T, N, D]
    q_cum = torch.tensor(q_lens).cumsum(0).tolist()
    kv_cum = torch.tensor(kv_lens).cumsum(0).tolist()
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    out, lse = FIA(pack(qs), pack(ks), pack(vs), num_heads=n, input_layout="TND", scale=0.5,
                   actual_seq_lengths=q_cum, actual_seq_lengths_kv=kv_cum, sparse_mode=3,
                   atten_mask=mask, softmax_lse_flag=True)
    assert out.shape == (sum(q_lens), n, d) and lse.shape == (sum(q_lens), n, 1)
    start = 0
    for i, (ql, kl) in enumerate(zip(q_lens, kv_lens)):
        allowed = prompt_allowed(ql, kl, ql, kl, 3).unsqueeze(0)
        go, gl = attend(qs[i], ks[i], vs[i], 0.5, allowed)
        check(out[start:start + ql].transpose(0, 1), go)
        lse_close(lse[start:start + ql, :, 0].T, gl)
        start += ql


def test_tnd_no_mask_is_full_attention_and_trailing_rows_zero():
    n, d = 2, 8
    q = rnd(6, n, d)          # T = 6 but the lengths cover 5 tokens
    k, v = rnd(7, n, d, seed=1), rnd(7, n, d, seed=2)
    out, _ = FIA(q, k, v, num_heads=n, input_layout="TND", actual_seq_lengths=[2, 5],
                 actual_seq_lengths_kv=[3, 7])
    for (qa, qb), (ka, kb) in (((0, 2), (0, 3)), ((2, 5), (3, 7))):
        allowed = torch.ones(1, qb - qa, kb - ka, dtype=torch.bool)
        go, _ = attend(q[qa:qb].transpose(0, 1), k[ka:kb].transpose(0, 1),
                       v[ka:kb].transpose(0, 1), 1.0, allowed)
        check(out[qa:qb].transpose(0, 1), go)
    assert torch.equal(out[5], torch.zeros(n, d))


# -- masks and sparse modes -------------------------------------------------------------------

MASK_SHAPES = ["SS", "1SS", "B1SS", "11SS"]


@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("mdtype", [torch.bool, torch.int8, torch.uint8])
def test_prompt_mask_shapes_and_dtypes(shape, mdtype):
    b, n, sq, skv, d = 2, 2, 4, 6, 8
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    g = torch.Generator().manual_seed(5)
    full = torch.rand(b, sq + 2, skv + 3, generator=g) < 0.3     # padded (aligned) mask
    full[:, :, 0] = False
    if shape == "B1SS":
        mask, per_batch = full.unsqueeze(1), True
    else:
        m = full[0]
        mask = {"SS": m, "1SS": m[None], "11SS": m[None, None]}[shape]
        per_batch = False
    out, _ = FIA(q, k, v, num_heads=n, input_layout="BNSD", atten_mask=mask.to(mdtype))
    for i in range(b):
        m = full[i if per_batch else 0]
        go, _ = attend(q[i], k[i], v[i], 1.0, prompt_allowed(sq, skv, sq, skv, 0, mask=m)[None])
        check(out[i], go)


@pytest.mark.parametrize("mode,pre,nxt", [(0, 2, 1), (0, 1, -1), (1, 0, 0), (2, INF, INF),
                                          (3, INF, INF), (4, 2, 1), (4, 3, -1)])
def test_sparse_modes_with_unequal_lengths(mode, pre, nxt):
    b, n, sq, skv, d = 2, 2, 4, 7, 8
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    q_lens, kv_lens = [4, 3], [7, 5]
    g = torch.Generator().manual_seed(3)
    user = torch.rand(sq, skv, generator=g) < 0.25
    mask = user if mode in (0, 1) else torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out, lse = FIA(q, k, v, num_heads=n, input_layout="BNSD", atten_mask=mask, sparse_mode=mode,
                   pre_tokens=pre, next_tokens=nxt, actual_seq_lengths=q_lens,
                   actual_seq_lengths_kv=kv_lens, softmax_lse_flag=True, inner_precise=2)
    for i in range(b):
        allowed = prompt_allowed(sq, skv, q_lens[i], kv_lens[i], mode, pre, nxt,
                                 user if mode in (0, 1) else None)
        # Rows the user mask alone empties take the row-invalid correction (inner_precise 2).
        base = prompt_allowed(sq, skv, q_lens[i], kv_lens[i], mode, pre, nxt,
                              torch.zeros_like(user) if mode in (0, 1) else None)
        go, gl = attend(q[i], k[i], v[i], 1.0, allowed[None], base=base[None], rule="invalid")
        check(out[i], go)
        rows = q_lens[i]
        lse_close(lse[i, :, :rows, 0], gl[:, :rows])


def test_mode0_without_mask_ignores_tokens():
    q, k = rnd(1, 1, 3, 8), rnd(1, 1, 5, 8, seed=1)
    out, _ = FIA(q, k, k, num_heads=1, input_layout="BNSD", pre_tokens=0, next_tokens=0)
    go, _ = attend(q[0], k[0], k[0], 1.0, torch.ones(1, 3, 5, dtype=torch.bool))
    check(out[0], go)


FP32_LOWEST = -3.4028234663852886e38


@pytest.mark.parametrize("inner_precise,dtype", [(0, torch.float32), (1, torch.float16),
                                                 (1, torch.bfloat16), (2, torch.float16),
                                                 (3, torch.bfloat16)])
def test_row_masked_entirely_by_atten_mask(inner_precise, dtype):
    """Prompt branch: the kernel writes a finite lowest value over masked scores, so a row the
    mask hides entirely is a flat softmax -- the mean of the values of its keys -- unless the
    row-invalid correction (inner_precise 2 / 3) zeroes it (lse +inf there)."""
    b, n, nkv, sq, skv, d = 2, 4, 2, 3, 5, 8
    q, k, v = rnd(b, n, sq, d, dtype=dtype), rnd(b, nkv, skv, d, dtype=dtype, seed=1), \
        rnd(b, nkv, skv, d, dtype=dtype, seed=2)
    kv_lens = [5, 3]
    mask = torch.zeros(b, 1, sq, skv, dtype=torch.bool)
    mask[0, 0, 1] = True                        # batch 0 row 1: every key masked
    mask[1, 0, 2, :3] = True                    # batch 1 row 2: the 3 keys of its length
    mask[1, 0, 0, 1] = True                     # an ordinary partly masked row
    out, lse = FIA(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                   atten_mask=mask, actual_seq_lengths_kv=kv_lens, softmax_lse_flag=True,
                   inner_precise=inner_precise)
    rule = "invalid" if inner_precise >= 2 else "uniform"
    fill = -65504.0 if (inner_precise == 1 and dtype == torch.float16) else FP32_LOWEST
    for i in range(b):
        base = prompt_allowed(sq, skv, sq, kv_lens[i], 0, mask=torch.zeros(sq, skv))
        allowed = prompt_allowed(sq, skv, sq, kv_lens[i], 0, mask=mask[i, 0])
        go, gl = attend(q[i], k[i], v[i], 1.0, allowed[None], base=base[None], rule=rule,
                        fill=fill)
        check(out[i], go, dtype)
        torch.testing.assert_close(lse[i, ..., 0].double(), gl, atol=1e-2, rtol=1e-5)
    if rule == "uniform":                       # the mean of the values of batch 0's 5 keys
        want = v[0].double().mean(1).repeat_interleave(n // nkv, 0)
        torch.testing.assert_close(out[0, :, 1].double(), want, atol=ATOL[dtype], rtol=0)
    else:
        assert torch.equal(out[0, :, 1], torch.zeros(n, d, dtype=dtype))
        assert torch.all(lse[0, :, 1] == math.inf)


def test_decode_row_masked_entirely_is_the_mean_of_its_values():
    """Decode (IFA kernel): masked scores become -1e12 and there is no row-invalid correction,
    so a fully masked token attends uniformly to its KV_S keys."""
    b, n, skv, d = 2, 2, 4, 8
    q, k, v = rnd(b, n, 1, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    mask = torch.zeros(b, skv, dtype=torch.bool)
    mask[1] = True
    out, lse = FIA(q, k, v, num_heads=n, input_layout="BNSD", atten_mask=mask,
                   actual_seq_lengths_kv=[4, 3], softmax_lse_flag=True)
    base = decode_allowed(skv, 3)[None]
    go, gl = attend(q[1], k[1], v[1], 1.0, decode_allowed(skv, 3, mask[1])[None], base=base,
                    rule="uniform", fill=-1e12)
    check(out[1], go)
    torch.testing.assert_close(out[1, :, 0].double(), v[1, :, :3].double().mean(1))
    torch.testing.assert_close(lse[1, :, :, 0].double(), gl, atol=0, rtol=1e-6)


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
@pytest.mark.parametrize("mask_form", [None, "B_KV", "B1KV", "B11KV"])
def test_decode_ignores_sparse_mode_and_tokens(layout, mask_form):
    b, n, nkv, skv, d = 3, 4, 1, 6, 8
    q, k, v = rnd(b, n, 1, d), rnd(b, nkv, skv, d, seed=1), rnd(b, nkv, skv, d, seed=2)
    kv_lens = [6, 2, 4]
    m = torch.rand(b, skv, generator=torch.Generator().manual_seed(4)) < 0.3
    m[:, 0] = False
    mask = None if mask_form is None else {"B_KV": m, "B1KV": m[:, None],
                                           "B11KV": m[:, None, None]}[mask_form]
    out, lse = FIA(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout),
                   num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=0.7,
                   actual_seq_lengths_kv=kv_lens, atten_mask=mask, sparse_mode=3, pre_tokens=0,
                   next_tokens=0, softmax_lse_flag=True, actual_seq_lengths=[7, 9, 2])
    got = from_layout(out, layout, n)
    for i in range(b):
        allowed = decode_allowed(skv, kv_lens[i], None if mask is None else m[i])[None]
        go, gl = attend(q[i], k[i], v[i], 0.7, allowed)
        check(got[i], go)
        lse_close(lse[i, :, :, 0], gl)


def test_decode_empty_kv_batch():
    q, k = rnd(2, 2, 1, 8), rnd(2, 2, 4, 8, seed=1)
    out, lse = FIA(q, k, k, num_heads=2, input_layout="BNSD", actual_seq_lengths_kv=[4, 0],
                   softmax_lse_flag=True)
    assert torch.equal(out[1], torch.zeros(2, 1, 8))
    assert torch.all(lse[1] == -3.4e38)


# -- paged KV ---------------------------------------------------------------------------------

def paged(k, kv_lens, block_size, form, seed=7):
    """Scatter dense [B, N, S, D] into a shuffled block pool; returns (cache, block_table)."""
    b, n, s, d = k.shape
    per = math.ceil(s / block_size)
    nb = b * per + 2
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(seed))
    table = perm[:b * per].reshape(b, per).to(torch.int32)
    pool = torch.zeros(nb, block_size, n, d, dtype=k.dtype)
    for i in range(b):
        for j in range(kv_lens[i]):
            pool[table[i, j // block_size], j % block_size] = k[i, :, j]
    if form == "BSH":
        cache = pool.reshape(nb, block_size, n * d)
    elif form == "BNSD":
        cache = pool.permute(0, 2, 1, 3).contiguous()
    else:                                         # NZ [nb, N, D/16, bs, 16]
        cache = pool.reshape(nb, block_size, n, d // 16, 16).permute(0, 2, 3, 1, 4).contiguous()
    return cache, table


@pytest.mark.parametrize("form", ["BSH", "BNSD", "NZ"])
def test_paged_decode(form):
    b, n, nkv, d, bs = 2, 4, 2, 16, 16
    kv_lens = [20, 9]
    q = rnd(b, n, 1, d)
    k, v = rnd(b, nkv, 32, d, seed=1), rnd(b, nkv, 32, d, seed=2)
    kc, table = paged(k, kv_lens, bs, form)
    vc, _ = paged(v, kv_lens, bs, form)
    out, _ = FIA(to_layout(q, "BSND"), kc, vc, num_heads=n, num_key_value_heads=nkv,
                 input_layout="BSND", block_table=table, block_size=bs,
                 actual_seq_lengths_kv=kv_lens, scale=0.25)
    for i in range(b):
        go, _ = attend(q[i], k[i], v[i], 0.25, decode_allowed(32, kv_lens[i])[None])
        check(out[i].transpose(0, 1), go)


def test_paged_tnd_chunked_prefill():
    """vllm-ascend's chunked prefill: TND queries (cumulative), per-request KV lengths, paged
    [nb, bs, H] cache, sparse_mode 3 with the compressed mask."""
    n, nkv, d, bs = 4, 2, 16, 16
    q_lens, kv_lens = [3, 1, 5], [10, 17, 5]
    k, v = rnd(3, nkv, 32, d, seed=1), rnd(3, nkv, 32, d, seed=2)
    kc, table = paged(k, kv_lens, bs, "BSH")
    vc, _ = paged(v, kv_lens, bs, "BSH")
    qs = [rnd(n, s, d, seed=40 + i) for i, s in enumerate(q_lens)]
    q = torch.cat([x.transpose(0, 1) for x in qs])
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out, lse = FIA(q, kc, vc, num_heads=n, num_key_value_heads=nkv, input_layout="TND",
                   block_table=table, block_size=bs, actual_seq_lengths=[3, 4, 9],
                   actual_seq_lengths_kv=kv_lens, sparse_mode=3, atten_mask=mask, scale=0.25,
                   softmax_lse_flag=True)
    start = 0
    for i, ql in enumerate(q_lens):
        allowed = prompt_allowed(ql, 32, ql, kv_lens[i], 3)[None]
        go, gl = attend(qs[i], k[i], v[i], 0.25, allowed)
        check(out[start:start + ql].transpose(0, 1), go)
        lse_close(lse[start:start + ql, :, 0].T, gl)
        start += ql


def test_paged_requires_kv_lengths():
    kc = torch.zeros(4, 16, 8)
    with pytest.raises(ValueError, match="actual_seq_lengths_kv"):
        FIA(rnd(1, 1, 8), kc, kc, num_heads=1, block_table=torch.zeros(1, 2, dtype=torch.int32),
            block_size=16)


# -- MLA rope, pse, prefix, left padding --------------------------------------------------------

def test_mla_rope_paged_decode():
    b, n, dn, dr, bs = 2, 4, 32, 16, 16
    kv_lens = [13, 30]
    q, qr = rnd(b, n, 1, dn), rnd(b, n, 1, dr, seed=3)
    latent, kr = rnd(b, 1, 32, dn, seed=1), rnd(b, 1, 32, dr, seed=2)
    cache, table = paged(latent, kv_lens, bs, "BSH")
    rope_cache, _ = paged(kr, kv_lens, bs, "BSH")
    out, _ = FIA(to_layout(q, "BSND"), cache, cache, query_rope=to_layout(qr, "BSND"),
                 key_rope=rope_cache, num_heads=n, num_key_value_heads=1, input_layout="BSND",
                 block_table=table, block_size=bs, actual_seq_lengths_kv=kv_lens, scale=0.1)
    for i in range(b):
        qcat = torch.cat([q[i], qr[i]], -1)
        kcat = torch.cat([latent[i], kr[i]], -1)
        go, _ = attend(qcat, kcat, latent[i], 0.1, decode_allowed(32, kv_lens[i])[None])
        check(out[i].transpose(0, 1), go)


def test_pse_shift_added_after_scale():
    b, n, sq, skv, d = 2, 2, 3, 5, 8
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    pse = rnd(1, n, sq, skv + 3, seed=4)            # KV_S padded: the extra columns are unused
    out, _ = FIA(q, k, v, num_heads=n, input_layout="BNSD", pse_shift=pse, scale=0.5)
    for i in range(b):
        go, _ = attend(q[i], k[i], v[i], 0.5, torch.ones(1, sq, skv, dtype=torch.bool),
                       pse[0, :, :, :skv])
        check(out[i], go)


def test_shared_prefix():
    b, n, sq, skv, d, sp = 2, 2, 1, 4, 8, 5
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    kp, vp = rnd(1, n, sp, d, seed=5), rnd(1, n, sp, d, seed=6)
    kv_lens = [4, 2]
    out, _ = FIA(q, k, v, key_shared_prefix=kp, value_shared_prefix=vp,
                 actual_shared_prefix_len=torch.tensor([3]), num_heads=n, input_layout="BNSD",
                 actual_seq_lengths_kv=kv_lens)
    for i in range(b):
        kk = torch.cat([kp[0, :, :3], k[i, :, :kv_lens[i]]], 1)
        vv = torch.cat([vp[0, :, :3], v[i, :, :kv_lens[i]]], 1)
        go, _ = attend(q[i], kk, vv, 1.0, torch.ones(1, 1, kk.shape[1], dtype=torch.bool))
        check(out[i], go)


def test_left_padding():
    b, n, sq, skv, d = 2, 2, 5, 6, 8
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    q_lens, kv_lens, qpad, kvpad = [3, 2], [4, 5], 1, 1
    out, _ = FIA(q, k, v, num_heads=n, input_layout="BNSD", actual_seq_lengths=q_lens,
                 actual_seq_lengths_kv=kv_lens, query_padding_size=torch.tensor([qpad]),
                 kv_padding_size=torch.tensor([kvpad]))
    for i in range(b):
        qa, ka = sq - qpad - q_lens[i], skv - kvpad - kv_lens[i]
        qi, ki, vi = q[i, :, qa:qa + q_lens[i]], k[i, :, ka:ka + kv_lens[i]], \
            v[i, :, ka:ka + kv_lens[i]]
        go, _ = attend(qi, ki, vi, 1.0, torch.ones(1, q_lens[i], kv_lens[i], dtype=torch.bool))
        check(out[i, :, qa:qa + q_lens[i]], go)
        assert torch.equal(out[i, :, :qa], torch.zeros(n, qa, d))
        assert torch.equal(out[i, :, qa + q_lens[i]:], torch.zeros(n, qpad, d))


@pytest.mark.parametrize("sq", [3, 1], ids=["prompt", "decode"])
def test_nsd_layout_with_value_head_dim_unequal(sq):
    """NSD: [N, S, D] tensors of a single batch (op-plugin's layout table; Ascend950 tests
    ``nsd_d_unequal``); value's D may differ from query/key's."""
    n, nkv, skv, d, dv = 4, 2, 5, 12, 8
    q, k, v = rnd(n, sq, d), rnd(nkv, skv, d, seed=1), rnd(nkv, skv, dv, seed=2)
    out, lse = FIA(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="NSD",
                   scale=0.3, softmax_lse_flag=True)
    go, gl = attend(q, k, v, 0.3, torch.ones(1, sq, skv, dtype=torch.bool))
    assert out.shape == (n, sq, dv) and lse.shape == (1, n, sq, 1)
    check(out, go)
    torch.testing.assert_close(lse[0, :, :, 0].double(), gl, rtol=1e-5, atol=1e-5)
    out2, _ = na.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=n,
                                                    num_key_value_heads=nkv, input_layout="NSD",
                                                    softmax_scale=0.3)
    check(out2, go)
    with pytest.raises(ValueError, match="a 3-D tensor for layout NSD"):
        FIA(q[None], k, v, num_heads=n, num_key_value_heads=nkv, input_layout="NSD")


def test_left_padding_mask_and_pse_are_read_at_padded_positions():
    """The PFA kernel offsets atten_mask and pse_shift by the left padding sizes
    (ops-transformer prompt_flash_attention_s1s2_bns1_x910_base.h: mask / pse core offset
    ``(sOuter + queryLeftPadding) * S2 + kvLeftPadding``): logical row r, column c read entry
    ``[qa + r, ka + c]`` of the padded-size mask."""
    b, n, sq, skv, d = 2, 2, 5, 6, 8
    q, k, v = rnd(b, n, sq, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    q_lens, kv_lens, qpad, kvpad = [3, 2], [4, 5], 1, 1
    gen = torch.Generator().manual_seed(5)
    mask = torch.rand(b, 1, sq, skv, generator=gen) < 0.3
    mask[..., 0, :] = False                 # keep a visible key on every row (no empty rows)
    mask[..., :, 1] = False
    pse = torch.randn(b, n, sq, skv, generator=gen)
    out, _ = FIA(q, k, v, num_heads=n, input_layout="BNSD", actual_seq_lengths=q_lens,
                 actual_seq_lengths_kv=kv_lens, query_padding_size=torch.tensor([qpad]),
                 kv_padding_size=torch.tensor([kvpad]), atten_mask=mask, pse_shift=pse)
    for i in range(b):
        qa, ka = sq - qpad - q_lens[i], skv - kvpad - kv_lens[i]
        rows, cols = slice(qa, qa + q_lens[i]), slice(ka, ka + kv_lens[i])
        allowed = ~mask[i, :, rows, cols]
        go, _ = attend(q[i, :, rows], k[i, :, cols], v[i, :, cols], 1.0, allowed,
                       pse=pse[i, :, rows, cols])
        check(out[i, :, rows], go)


# -- lengths as tensors, non-contiguous inputs, inputs untouched ------------------------------

def test_lengths_as_tensors_and_noncontiguous_inputs():
    b, n, sq, skv, d = 2, 2, 3, 5, 8
    base_q = rnd(b, sq, n, d)                         # a BNSD view of BSND storage
    q = base_q.transpose(1, 2)
    k, v = rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    before = (q.clone(), k.clone(), v.clone())
    out, _ = FIA(q, k, v, num_heads=n, input_layout="BNSD",
                 actual_seq_lengths=torch.tensor([3, 2]),
                 actual_seq_lengths_kv=torch.tensor([5, 1]))
    for i, (ql, kl) in enumerate(((3, 5), (2, 1))):
        go, _ = attend(q[i], k[i], v[i], 1.0, prompt_allowed(sq, skv, ql, kl)[None])
        check(out[i], go)
    assert all(torch.equal(a, c) for a, c in zip(before, (q, k, v)))


def test_paged_decode_with_mask_pse_and_int8_per_channel():
    """Paged KV with a (B, 1, 1, >= max_blocks*block_size) mask, a pse_shift and int8 caches
    dequantized per channel (the cache is gathered, then dequantized)."""
    b, n, d, bs = 2, 2, 16, 16
    lens = [25, 10]
    q = rnd(b, n, 1, d, dtype=torch.float16)
    k8 = torch.randint(-8, 8, (b, n, 32, d), generator=torch.Generator().manual_seed(1),
                       dtype=torch.int8)
    kc, table = paged(k8, lens, bs, "BSH")
    sc = (rnd(2, n * d, seed=3).abs() * 0.1).half()
    mask = torch.rand(b, 1, 1, 40, generator=torch.Generator().manual_seed(2)) < 0.3
    mask[..., 0] = False
    pse = rnd(b, n, 1, 32, seed=4, dtype=torch.float16)
    out, _ = FIA(q, kc, kc, antiquant_scale=sc, atten_mask=mask, pse_shift=pse, num_heads=n,
                 input_layout="BNSD", block_table=table, block_size=bs, actual_seq_lengths_kv=lens)
    for i in range(b):
        kf = k8[i].double() * sc[0].double().reshape(n, 1, d)
        vf = k8[i].double() * sc[1].double().reshape(n, 1, d)
        allowed = decode_allowed(32, lens[i], mask[i, 0, 0])[None]
        go, _ = attend(q[i], kf, vf, 1.0, allowed, pse[i])
        check(out[i], go, torch.float16)
