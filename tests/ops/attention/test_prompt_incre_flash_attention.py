"""npu_prompt_flash_attention and npu_incre_flash_attention against the float64 golden."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from golden import INF, attend, close, decode_allowed, prompt_allowed, rnd

NPU = getattr(torch.ops, na.library.TORCH_NPU_NS)


# Every golden test runs on the reference and on the fast kernels (conftest.py).
pytestmark = pytest.mark.usefixtures("each_provider")


# -- prompt ----------------------------------------------------------------------------------

def test_pfa_next_tokens_defaults_to_zero_with_a_mask():
    """sparse_mode 0 with a mask applies the band; next_tokens = 0 by default makes it causal."""
    b, n, s, d = 2, 2, 5, 8
    q, k, v = rnd(b, s, n * d), rnd(b, s, n * d, seed=1), rnd(b, s, n * d, seed=2)
    mask = torch.zeros(s, s, dtype=torch.bool)
    mask[4, 0] = True
    out = na.npu_prompt_flash_attention(q, k, v, num_heads=n, atten_mask=mask, scale_value=0.3)
    bnsd = lambda t: t.reshape(b, s, n, d).transpose(1, 2)
    for i in range(b):
        allowed = prompt_allowed(s, s, s, s, 0, INF, 0, mask)[None]
        go, _ = attend(bnsd(q)[i], bnsd(k)[i], bnsd(v)[i], 0.3, allowed)
        close(bnsd(out)[i], go)


@pytest.mark.parametrize("mode,pre,nxt", [(10, 1, 0), (12, INF, INF), (14, 2, 1)])
def test_pfa_high_precision_sparse_modes_and_masked_rows(mode, pre, nxt):
    """op-plugin maps sparse_mode 10-14 onto 0-4 in high precision; a row the mask hides
    entirely (sparse_mode 0 / 10, no row-invalid correction in PFA) is the mean of its keys'
    values."""
    b, n, s, d = 1, 2, 4, 8
    q, k, v = rnd(b, n, s, d), rnd(b, n, s, d, seed=1), rnd(b, n, s, d, seed=2)
    base_mode = mode - 10
    mask = torch.zeros(s, s, dtype=torch.bool) if base_mode == 0 else \
        torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    if base_mode == 0:
        mask[2, 1:3] = True                     # row 2's band keys 1, 2: all masked
    out = na.npu_prompt_flash_attention(q, k, v, num_heads=n, input_layout="BNSD",
                                        atten_mask=mask, sparse_mode=mode, pre_tokens=pre,
                                        next_tokens=nxt)
    user = mask if base_mode == 0 else None
    allowed = prompt_allowed(s, s, s, s, base_mode, pre, nxt, user)
    base = prompt_allowed(s, s, s, s, base_mode, pre, nxt,
                          torch.zeros(s, s) if base_mode == 0 else None)
    go, _ = attend(q[0], k[0], v[0], 1.0, allowed[None], base=base[None], rule="uniform",
                   fill=-3.4028234663852886e38)
    close(out[0], go)
    if base_mode == 0:
        close(out[0, :, 2], v[0, :, 1:3].double().mean(1))


def test_pfa_single_token_query_stays_on_the_prompt_branch():
    """Q_S = 1 with sparse_mode 2 (top-left causal): the row sees key 0 only (FIA would take
    the incremental branch and see every key)."""
    q, k = rnd(1, 2, 1, 8), rnd(1, 2, 4, 8, seed=1)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out = na.npu_prompt_flash_attention(q, k, k, num_heads=2, input_layout="BNSD",
                                        sparse_mode=2, atten_mask=mask)
    go, _ = attend(q[0], k[0], k[0], 1.0, prompt_allowed(1, 4, 1, 4, 2)[None])
    close(out[0], go)
    fia, _ = na.npu_fused_infer_attention_score(q, k, k, num_heads=2, input_layout="BNSD",
                                                sparse_mode=2, atten_mask=mask)
    go_all, _ = attend(q[0], k[0], k[0], 1.0, decode_allowed(4, 4)[None])
    close(fia[0], go_all)


def test_pfa_tnd_and_bnsd_bsnd_and_fp16():
    n, d = 2, 16
    q = rnd(5, n, d, dtype=torch.float16)
    k, v = rnd(6, n, d, dtype=torch.float16, seed=1), rnd(6, n, d, dtype=torch.float16, seed=2)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out = na.npu_prompt_flash_attention(q, k, v, num_heads=n, input_layout="TND",
                                        actual_seq_lengths=[2, 5], actual_seq_lengths_kv=[3, 6],
                                        sparse_mode=3, atten_mask=mask)
    for (qa, qb), (ka, kb) in (((0, 2), (0, 3)), ((2, 5), (3, 6))):
        allowed = prompt_allowed(qb - qa, kb - ka, qb - qa, kb - ka, 3)[None]
        go, _ = attend(q[qa:qb].transpose(0, 1), k[ka:kb].transpose(0, 1),
                       v[ka:kb].transpose(0, 1), 1.0, allowed)
        close(out[qa:qb].transpose(0, 1), go, 2e-3)
    qb_, kb_ = rnd(1, n, 3, d), rnd(1, n, 4, d, seed=1)
    out2 = na.npu_prompt_flash_attention(qb_, kb_, kb_, num_heads=n, input_layout="BNSD_BSND",
                                         next_tokens=INF)
    go, _ = attend(qb_[0], kb_[0], kb_[0], 1.0, torch.ones(1, 3, 4, dtype=torch.bool))
    close(out2[0].transpose(0, 1), go)


def test_pfa_rejects_fia_only_layouts_and_grads():
    q = rnd(4, 2, 8)
    with pytest.raises(ValueError, match="input_layout"):
        na.npu_prompt_flash_attention(q, q, q, num_heads=2, input_layout="NTD",
                                      actual_seq_lengths=[4], actual_seq_lengths_kv=[4])
    q4 = rnd(1, 2, 3, 8).requires_grad_(True)
    with pytest.raises(RuntimeError, match="do not require grad"):
        na.npu_prompt_flash_attention(q4, q4, q4, num_heads=2, input_layout="BNSD")


# -- incremental -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_ifa_decode_lengths_mask_gqa(layout):
    b, n, nkv, s, d = 3, 4, 2, 6, 8
    q, k, v = rnd(b, n, 1, d), rnd(b, nkv, s, d, seed=1), rnd(b, nkv, s, d, seed=2)
    lens = [6, 1, 4]
    m = torch.rand(b, s, generator=torch.Generator().manual_seed(2)) < 0.3
    m[:, 0] = False
    conv = {"BSH": lambda t: t.permute(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1),
            "BSND": lambda t: t.permute(0, 2, 1, 3), "BNSD": lambda t: t}[layout]
    out = na.npu_incre_flash_attention(conv(q), conv(k), conv(v), num_heads=n,
                                       num_key_value_heads=nkv, input_layout=layout,
                                       actual_seq_lengths=torch.tensor(lens),
                                       atten_mask=m.to(torch.int8)[:, None], scale_value=0.5)
    assert out.shape == conv(q).shape
    back = {"BSH": lambda t: t.reshape(b, 1, n, d).permute(0, 2, 1, 3),
            "BSND": lambda t: t.permute(0, 2, 1, 3), "BNSD": lambda t: t}[layout]
    for i in range(b):
        go, _ = attend(q[i], k[i], v[i], 0.5, decode_allowed(s, lens[i], m[i])[None])
        close(back(out)[i], go)


def test_ifa_paged_bnsd_cache_and_antiquant():
    b, n, d, bs = 2, 2, 16, 16
    lens = [18, 5]
    q = rnd(b, n, 1, d, dtype=torch.float16)
    k8 = torch.randint(-8, 8, (b, n, 32, d), generator=torch.Generator().manual_seed(1),
                       dtype=torch.int8)
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    pool = torch.zeros(4, n, bs, d, dtype=torch.int8)          # [blocknum, N, blocksize, D]
    for i in range(b):
        for j in range(lens[i]):
            pool[table[i, j // bs], :, j % bs] = k8[i, :, j]
    sc = rnd(2, n, 1, d, seed=3).abs().half() * 0.1
    off = rnd(2, n, 1, d, seed=4).half()
    out = na.npu_incre_flash_attention(q, pool, pool, num_heads=n, input_layout="BNSD",
                                       block_table=table, block_size=bs, actual_seq_lengths=lens,
                                       antiquant_scale=sc, antiquant_offset=off)
    for i in range(b):
        kf = (k8[i].double() + off[0].double()) * sc[0].double()
        vf = (k8[i].double() + off[1].double()) * sc[1].double()
        go, _ = attend(q[i], kf, vf, 1.0, decode_allowed(32, lens[i])[None])
        close(out[i], go, 2e-3)


def test_ifa_kv_left_padding_and_window_before_zero():
    b, n, s, d = 2, 2, 6, 8
    q, k, v = rnd(b, n, 1, d), rnd(b, n, s, d, seed=1), rnd(b, n, s, d, seed=2)
    lens = [3, 6]                    # pad 2: batch 1's window starts at 6 - 2 - 6 < 0 -> zeros
    out = na.npu_incre_flash_attention(q, k, v, num_heads=n, input_layout="BNSD",
                                       actual_seq_lengths=lens, kv_padding_size=torch.tensor([2]))
    go, _ = attend(q[0], k[0, :, 1:4], v[0, :, 1:4], 1.0, torch.ones(1, 1, 3, dtype=torch.bool))
    close(out[0], go)
    assert torch.equal(out[1], torch.zeros(n, 1, d))


def test_ifa_requires_one_query_token():
    q = rnd(1, 2, 64)
    with pytest.raises(ValueError, match="Q_S == 1"):
        na.npu_incre_flash_attention(q, q, q, num_heads=4)


@pytest.mark.parametrize("which", ["pfa", "ifa"])
def test_fake_and_compile(which):
    q, k = rnd(2, 1, 32), rnd(2, 5, 32, seed=1)
    if which == "pfa":
        op, kwargs = NPU.npu_prompt_flash_attention, dict(num_heads=4, actual_seq_lengths_kv=[5, 2])
    else:
        op, kwargs = NPU.npu_incre_flash_attention, dict(num_heads=4, actual_seq_lengths=[5, 2])
    want = op(q, k, k, **kwargs)
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b_: op(a, b_, b_, **kwargs), fullgraph=True, backend="eager")
    got = fn(q, k)
    torch.testing.assert_close(got, want)
    torch.library.opcheck(op.default, (q, k, k), kwargs,
                          test_utils=("test_schema", "test_faketensor"))


def test_strict_products_of_the_pages():
    q, k = rnd(1, 1, 32, dtype=torch.float16), rnd(1, 4, 32, dtype=torch.float16, seed=1)
    with na.strict("310P"):
        na.npu_incre_flash_attention(q, k, k, num_heads=2)
        na.npu_prompt_flash_attention(q, k, k, num_heads=2)
        with pytest.raises(TypeError, match="query"):
            na.npu_incre_flash_attention(q.bfloat16(), k.bfloat16(), k.bfloat16(), num_heads=2)
        with pytest.raises(ValueError, match="sparse_mode"):
            na.npu_prompt_flash_attention(q, k, k, num_heads=2, sparse_mode=1,
                                          atten_mask=torch.zeros(1, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="actual_seq_lengths"):
            na.npu_prompt_flash_attention(q, k, k, num_heads=2, actual_seq_lengths=[1])
        with pytest.raises(RuntimeError, match="product"):
            na.npu_fused_infer_attention_score(q, k, k, num_heads=2)
    with na.strict("A3"):
        na.npu_prompt_flash_attention(q, k, k, num_heads=2)
        with pytest.raises(RuntimeError, match="product"):
            na.npu_incre_flash_attention(q, k, k, num_heads=2)
