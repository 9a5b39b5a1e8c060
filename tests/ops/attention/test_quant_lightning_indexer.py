"""npu_quant_lightning_indexer against a float64 golden with the kernel's rounding steps.

Golden steps (op-plugin test/test_custom_ops/test_npu_quant_lightning_indexer.py): exact
``q . k``, ReLU, ``/ 1024`` rounded to float16; ``weights * query_dequant_scale`` rounded in its
dtype; the weighted head sum (float64 here) times ``key_dequant_scale``; stable descending
ranking with -1 padding.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere
from npu_anywhere.dtypes import HIFLOAT8

I32 = torch.int32


def _golden(q, k, w, qs, ks, count, mode, q_values=None, k_values=None):
    """One batch: q [s1, N1, D], k [s2, N2, D], w/qs [s1, N1], ks [s2, N2]."""
    s1, n1, _ = q.shape
    s2, n2, _ = k.shape
    g = n1 // n2
    qv = (q.double() if q_values is None else q_values).double()
    kv = (k.double() if k_values is None else k_values).double()
    hw = (w * qs).double()
    out = torch.full((s1, n2, count), -1, dtype=I32)
    for i in range(s1):
        limit = s2 if mode == 0 else max(0, s2 - s1 + i + 1)
        for n in range(n2):
            ranked = []
            for t in range(limit):
                total = 0.0
                for h in range(n * g, (n + 1) * g):
                    dot = max(float(qv[i, h] @ kv[t, n]), 0.0) / 1024.0
                    total += float(hw[i, h]) * float(torch.tensor(dot).half())
                ranked.append((-(total * float(ks[t, n])), t))
            ranked.sort()
            for j, (_, t) in enumerate(ranked[:count]):
                out[i, n, j] = t
    return out


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_int8_bsnd_with_lengths(sparse_mode):
    gen = torch.Generator().manual_seed(0)
    b, s1, s2, n1, n2, d, count = 2, 3, 9, 4, 2, 16, 6
    q = torch.randint(-128, 128, (b, s1, n1, d), generator=gen).to(torch.int8)
    k = torch.randint(-128, 128, (b, s2, n2, d), generator=gen).to(torch.int8)
    w = (torch.rand(b, s1, n1, generator=gen) * 0.02 - 0.005).half()
    qs = (torch.rand(b, s1, n1, generator=gen) * 10).half()
    ks = (torch.rand(b, s2, n2, generator=gen) * 10).half()
    lq, lk = torch.tensor([3, 2], dtype=I32), torch.tensor([9, 5], dtype=I32)
    out = npu_anywhere.npu_quant_lightning_indexer(
        q, k, w, qs, ks, 0, 0, actual_seq_lengths_query=lq, actual_seq_lengths_key=lk,
        sparse_count=count, sparse_mode=sparse_mode)
    assert out.shape == (b, s1, n2, count) and out.dtype == I32
    for bi in range(b):
        ql, kl = int(lq[bi]), int(lk[bi])
        want = _golden(q[bi, :ql], k[bi, :kl], w[bi, :ql], qs[bi, :ql], ks[bi, :kl], count,
                       sparse_mode)
        assert torch.equal(out[bi, :ql], want)
        assert (out[bi, ql:] == -1).all()


def test_float8_paged_tnd_with_float32_scales():
    gen = torch.Generator().manual_seed(1)
    n1, d, block = 4, 16, 8
    q = (torch.rand(5, n1, d, generator=gen) * 8 - 4).to(torch.float8_e4m3fn)
    cache = (torch.rand(4, block, 1, d, generator=gen) * 8 - 4).to(torch.float8_e4m3fn)
    k_scale = torch.rand(4, block, 1, generator=gen)
    w = torch.rand(5, n1, generator=gen).bfloat16()
    qs = torch.rand(5, n1, generator=gen)
    table = torch.tensor([[2, -1], [3, 0]], dtype=I32)
    out = npu_anywhere.npu_quant_lightning_indexer(
        q, cache, w, qs, k_scale, 0, 0, actual_seq_lengths_query=torch.tensor([2, 5], dtype=I32),
        actual_seq_lengths_key=torch.tensor([6, 13], dtype=I32), block_table=table,
        layout_query="TND", layout_key="PA_BSND", sparse_count=8)
    dense = [cache[2, :6], torch.cat([cache[3], cache[0]])[:13]]
    dense_s = [k_scale[2, :6], torch.cat([k_scale[3], k_scale[0]])[:13]]
    for (qs_, qe), kk, kss in zip(((0, 2), (2, 5)), dense, dense_s):
        want = _golden(q[qs_:qe], kk, w[qs_:qe], qs[qs_:qe], kss, 8, 3,
                       q_values=q[qs_:qe].float(), k_values=kk.float())
        assert torch.equal(out[qs_:qe], want)


def test_hifloat8_codes():
    from npu_anywhere.ops.quant.hifloat8 import decode_hifloat8
    gen = torch.Generator().manual_seed(2)

    def codes(*shape):
        c = torch.randint(0, 256, shape, generator=gen).to(torch.uint8)
        ok = torch.isfinite(decode_hifloat8(c)) & (decode_hifloat8(c).abs() < 64)
        return torch.where(ok, c, torch.zeros_like(c))
    q, k = codes(1, 2, 2, 8), codes(1, 5, 1, 8)
    w = torch.rand(1, 2, 2, generator=gen).bfloat16()
    qs, ks = torch.rand(1, 2, 2, generator=gen), torch.rand(1, 5, 1, generator=gen)
    out = npu_anywhere.npu_quant_lightning_indexer(q, k, w, qs, ks, 0, 0, sparse_count=4,
                                                   query_dtype=HIFLOAT8, key_dtype=HIFLOAT8)
    want = _golden(q[0], k[0], w[0], qs[0], ks[0], 4, 3,
                   q_values=decode_hifloat8(q[0]), k_values=decode_hifloat8(k[0]))
    assert torch.equal(out[0], want)
    with pytest.raises(TypeError, match="expected query int8 or float8_e4m3fn"):
        npu_anywhere.npu_quant_lightning_indexer(q, k, w, qs, ks, 0, 0, sparse_count=4)


def test_strict_a3_dtype_combination():
    gen = torch.Generator().manual_seed(3)
    q = torch.randint(-8, 8, (1, 1, 2, 128), generator=gen).to(torch.int8)
    k = torch.randint(-8, 8, (1, 4, 1, 128), generator=gen).to(torch.int8)
    w = torch.rand(1, 1, 2).bfloat16()
    qs, ks = torch.rand(1, 1, 2), torch.rand(1, 4, 1)
    with npu_anywhere.strict("A3"):
        with pytest.raises(TypeError, match="expected weights weights / query_dequant_scale"):
            npu_anywhere.npu_quant_lightning_indexer(q, k, w, qs, ks, 0, 0, sparse_count=2)
        out = npu_anywhere.npu_quant_lightning_indexer(q, k, w.half(), qs.half(), ks.half(), 0,
                                                       0, sparse_count=2)
    assert out.shape == (1, 1, 1, 2)
