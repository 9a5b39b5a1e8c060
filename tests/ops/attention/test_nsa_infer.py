"""npu_nsa_select_attention_infer and npu_nsa_compress_infer against float64 goldens written
from the doc formulas, reading the paged cache token by token through the block table."""

import pytest
import torch

import npu_anywhere as na


def _token(cache, table, b, p):
    page = cache.shape[1]
    return cache[int(table[b, p // page]), p % page]


def _select_golden(q, k, v, topk, scale, block, kv_lens, table):
    """q [B, N1, D], k / v [blocks, page, N2, *] -> [B, N1, Dv] in float64."""
    bsz, n1, _ = q.shape
    n2 = k.shape[2]
    out = torch.zeros(bsz, n1, v.shape[3], dtype=torch.float64)
    for b in range(bsz):
        for h in range(n1):
            n = h // (n1 // n2)
            pos = []
            for c in topk[b, n].tolist():
                if c < 0:
                    break                      # -1 ends the selection
                pos += [p for p in range(c * block, (c + 1) * block) if p < kv_lens[b]]
            keys = torch.stack([_token(k, table, b, p)[n].double() for p in pos])
            vals = torch.stack([_token(v, table, b, p)[n].double() for p in pos])
            out[b, h] = torch.softmax(keys @ q[b, h].double() * scale, 0) @ vals
    return out


def _select_inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(3, 4, 16, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(7, 8, 2, 16, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(7, 8, 2, 8, generator=g, dtype=torch.float64).to(dtype)
    topk = torch.tensor([[[0, 2, 1], [2, -1, 0]], [[1, 0, -1], [0, 1, 1]],
                         [[0, -1, -1], [0, 0, -1]]], dtype=torch.int32)
    table = torch.tensor([[6, 1, 3], [2, 5, 0], [4, 0, 0]], dtype=torch.int32)
    return q, k, v, topk, table, [21, 13, 5]


@pytest.mark.parametrize("layout,dtype", [("BSND", torch.float16), ("BSH", torch.bfloat16),
                                          ("TND", torch.float16)])
def test_select_infer_matches_golden(layout, dtype):
    q, k, v, topk, table, lens = _select_inputs(dtype, seed=len(layout))
    want = _select_golden(q, k, v, topk, 0.3, 8, lens, table)
    if layout == "BSND":
        qi, ki, vi = q.unsqueeze(1), k, v
    elif layout == "BSH":
        qi, ki, vi = q.reshape(3, 1, 64), k.reshape(7, 8, 32), v.reshape(7, 8, 16)
    else:
        qi, ki, vi = q, k.reshape(7, 8, 32), v
    before = [t.clone() for t in (qi, ki, vi, topk, table)]
    out = na.npu_nsa_select_attention_infer(qi, ki, vi, topk, 0.3, 4, 2, 8, 3, 8, layout=layout,
                                            block_table=table, actual_seq_kvlen=lens)
    assert out.dtype == dtype
    expected_shape = {"BSND": (3, 1, 4, 8), "BSH": (3, 1, 32), "TND": (3, 4, 8)}[layout]
    assert out.shape == expected_shape
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(out.double().reshape(3, 4, 8), want, rtol=tol, atol=tol)
    assert all(torch.equal(a, b) for a, b in zip(before, (qi, ki, vi, topk, table)))


def test_select_infer_rejects_and_has_no_backward():
    q, k, v, topk, table, lens = _select_inputs(torch.float16)
    kw = dict(layout="TND", block_table=table, actual_seq_kvlen=lens)
    with pytest.raises(ValueError, match="expected actual_seq_qlen None"):
        na.npu_nsa_select_attention_infer(q, k, v, topk, 0.3, 4, 2, 8, 3, 8,
                                          actual_seq_qlen=[1, 2, 3], **kw)
    with pytest.raises(RuntimeError, match="expected key a block size"):
        na.npu_nsa_select_attention_infer(q, k, v, topk, 0.3, 4, 2, 8, 3, 16, **kw)
    with pytest.raises(RuntimeError, match="expected inputs that do not require grad"):
        na.npu_nsa_select_attention_infer(q.float().requires_grad_(), k.float(), v.float(),
                                          topk, 0.3, 4, 2, 8, 3, 8, **kw)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected query a head dim of 192"):
            na.npu_nsa_select_attention_infer(q, k, v, topk, 0.3, 4, 2, 16, 3, 8, **kw)


def test_compress_infer_writes_only_due_slots():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 16, 2, 16, generator=g, dtype=torch.float64).half()
    w = torch.randn(32, 2, generator=g, dtype=torch.float64).half()
    table = torch.tensor([[3, 0, 4], [1, 2, 0], [4, 0, 0]], dtype=torch.int32)
    lens = [48, 44, 40]        # window 32, stride 16: batches 0 ((48-32)%16 = 0) and 2 (none)
    slots = torch.tensor([5, 0, 2], dtype=torch.int32)
    cache = torch.full((6, 2, 16), 7.0, dtype=torch.float16)
    x_before = x.clone()
    out = torch.ops.npu.npu_nsa_compress_infer(x, w, slots, 32, 16, 16, block_table=table,
                                               actual_seq_len=lens, cache=cache)
    assert out is cache or out.data_ptr() == cache.data_ptr()
    want = torch.full((6, 2, 16), 7.0, dtype=torch.float64)
    for b, n in enumerate(lens):
        if n >= 32 and (n - 32) % 16 == 0:
            rows = [_token(x, table, b, p).double() for p in range(n - 32, n)]
            want[int(slots[b])] = sum(r * w[i].double().unsqueeze(-1) for i, r in enumerate(rows))
    torch.testing.assert_close(cache.double(), want.half().double(), rtol=1e-2, atol=2e-2)
    assert torch.equal(cache[[1, 2, 3, 4]], torch.full((4, 2, 16), 7.0, dtype=torch.float16))
    assert torch.equal(x, x_before)


def test_compress_infer_bad_inputs_leave_cache_untouched():
    x = torch.randn(2, 16, 1, 16, dtype=torch.float16)
    cache = torch.zeros(2, 1, 16, dtype=torch.float16)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    with pytest.raises(ValueError, match="expected actual_seq_len a list of 1 lengths"):
        na.npu_nsa_compress_infer(x, torch.randn(16, 1, dtype=torch.float16),
                                  torch.tensor([0], dtype=torch.int32), 16, 16, 16,
                                  block_table=table, actual_seq_len=[16, 16], cache=cache)
    with pytest.raises(TypeError, match="expected slot_mapping dtype"):
        na.npu_nsa_compress_infer(x, torch.randn(16, 1, dtype=torch.float16),
                                  torch.tensor([0]), 16, 16, 16, block_table=table,
                                  actual_seq_len=[16], cache=cache)
    assert not cache.any()
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected page_block_size 64 or 128"):
            na.npu_nsa_compress_infer(x, torch.randn(16, 1, dtype=torch.float16),
                                      torch.tensor([0], dtype=torch.int32), 16, 16, 16,
                                      block_table=table, actual_seq_len=[16], cache=cache)


def _compress_attention_golden(q, k, v, scale, sbs, count, cbs, stride, lens, table):
    """Per batch and head in float64; the block scores summed window by window."""
    bsz, n1, _ = q.shape
    n2 = k.shape[2]
    g = n1 // n2
    m, nc = sbs // stride, cbs // stride
    out = torch.zeros(bsz, n1, v.shape[3], dtype=torch.float64)
    topk = []
    for b in range(bsz):
        keys = torch.stack([_token(k, table, b, p).double() for p in range(lens[b])])
        vals = torch.stack([_token(v, table, b, p).double() for p in range(lens[b])])
        probs = []
        for h in range(n1):
            p = torch.softmax(keys[:, h // g] @ q[b, h].double() * scale, 0)
            out[b, h] = p @ vals[:, h // g]
            probs.append(p)
        sel = -(-((lens[b] - 1) * stride + cbs) // sbs)
        rows = []
        for n in range(n2):
            score = [0.0] * sel
            for s in range(sel):
                for a in range(m):          # every (a, c) pair of strides overlapping block s
                    for c in range(nc):
                        t = m * (s + 1) - a - c
                        if 0 <= t < lens[b]:
                            score[s] += sum(float(probs[h][t]) for h in range(n * g, n * g + g))
            middle = sorted(range(1, sel - 2), key=lambda s: (-score[s], s))
            rows.append(([0, sel - 2, sel - 1] + middle)[:count])
        topk.append(rows)
    return out, torch.tensor(topk, dtype=torch.int32)


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_compress_attention_infer_matches_golden(layout):
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4, 16, generator=g, dtype=torch.float64)
    k = torch.randn(6, 8, 2, 16, generator=g, dtype=torch.float64)
    v = torch.randn(6, 8, 2, 8, generator=g, dtype=torch.float64)
    table = torch.tensor([[5, 0, 3], [2, 4, 1]], dtype=torch.int32)
    lens = [23, 17]
    want, want_topk = _compress_attention_golden(q, k, v, 0.3, 64, 5, 32, 16, lens, table)
    qi = q.unsqueeze(1).half() if layout == "BSND" else q.half()
    out, topk = na.npu_nsa_compress_attention_infer(
        qi, k.reshape(6, 8, 32).half(), v.reshape(6, 8, 16).half(), 0.3, 4, 2, 64, 5, 8, 32,
        16, layout=layout, block_table=table, actual_cmp_seq_kvlen=lens)
    assert out.dtype == torch.float16 and topk.dtype == torch.int32
    if layout == "BSND":
        assert out.shape == (2, 1, 4, 8) and topk.shape == (2, 1, 2, 5)
        out, topk = out[:, 0], topk[:, 0]
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    assert torch.equal(topk[..., :3], want_topk[..., :3])
    # ranking of the rest on float64 inputs is exact
    _, topk64 = na.npu_nsa_compress_attention_infer(
        q, k.reshape(6, 8, 32), v.reshape(6, 8, 16), 0.3, 4, 2, 64, 5, 8, 32, 16,
        block_table=table, actual_cmp_seq_kvlen=lens)
    assert torch.equal(topk64, want_topk)
