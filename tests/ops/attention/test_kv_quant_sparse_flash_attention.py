"""npu_kv_quant_sparse_flash_attention against a float64 golden of the documented layout.

Golden (op-plugin test/test_custom_ops/test_npu_kv_quant_sparse_flash_attention.py): the key's
last axis is [int8 nope | rope bytes (query dtype) | float32 per-tile scale bytes]; the nope
part is dequantized and rounded to query's dtype and also serves as the value; the attention
runs over the selected tokens (rightDownCausal) with the probabilities rounded to query's dtype.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere

I32 = torch.int32


def _pack(nope, rope, scales):
    return torch.cat([nope.view(torch.int8), rope.view(torch.int8), scales.view(torch.int8)],
                     -1)


def _golden(q, k_nope, k_rope, idx, scale, mode, dtype, sinks=None):
    """q [s1, N1, Dn + Dr] (float64 values), keys [s2, 1, *] dequantized; one batch."""
    s1, n1, _ = q.shape
    s2 = k_nope.shape[0]
    dn = k_nope.shape[-1]
    out = torch.zeros(s1, n1, dn, dtype=torch.float64)
    ka = torch.cat([k_nope, k_rope], -1)[:, 0].double()
    for i in range(s1):
        limit = s2 if mode == 0 else s2 - s1 + i + 1
        toks = []
        for j in range(min(idx.shape[-1], limit)):
            t = int(idx[i, 0, j])
            if t == -1:
                break
            if t < limit:
                toks.append(t)
        for h in range(n1):
            logits = [scale * float(q[i, h].double() @ ka[t]) for t in toks]
            extra = [] if sinks is None else [float(sinks[h])]
            if not logits:
                continue
            m = max(logits + extra)
            e = [math.exp(x - m) for x in logits]
            total = sum(e) + sum(math.exp(x - m) for x in extra)
            for t, w in zip(toks, e):
                p = float(torch.tensor(w / total).to(dtype))
                out[i, h] += p * k_nope[t, 0].double()
    return out


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_paged_bsnd_against_golden(sparse_mode):
    gen = torch.Generator().manual_seed(0)
    dn, dr, tile, block, n1 = 16, 8, 8, 4, 4
    dt = torch.bfloat16
    kv_len = 7
    nope = torch.randint(-128, 128, (kv_len, 1, dn), generator=gen).to(torch.int8)
    scales = torch.rand(kv_len, 1, dn // tile, generator=gen) * 0.05
    rope = torch.randn(kv_len, 1, dr, generator=gen).to(dt)
    dense = _pack(nope, rope, scales)                                # [7, 1, width]
    cache = torch.zeros(3, block, 1, dense.shape[-1], dtype=torch.int8)
    table = torch.tensor([[2, 0]], dtype=I32)
    cache[2] = dense[:4]
    cache[0, :3] = dense[4:]
    q = torch.randn(1, 3, n1, dn + dr, generator=gen).to(dt)
    idx = torch.tensor([[[[1, 6, 0, -1]], [[5, 5, 2, 3]], [[0, 1, 2, 3]]]], dtype=I32)
    before = [t.clone() for t in (q, cache, idx)]
    out = npu_anywhere.npu_kv_quant_sparse_flash_attention(
        q, cache, cache[..., :dn].clone(), idx, 0.2, 2, 2, block_table=table,
        actual_seq_lengths_kv=torch.tensor([kv_len], dtype=I32), layout_kv="PA_BSND",
        sparse_mode=sparse_mode, attention_mode=2, tile_size=tile, rope_head_dim=dr)
    assert out.shape == (1, 3, n1, dn) and out.dtype == dt
    k_deq = (nope.double() * scales.double().repeat_interleave(tile, -1)).to(dt)
    want = _golden(q[0], k_deq, rope, idx[0], 0.2, sparse_mode, dt)
    torch.testing.assert_close(out[0].double(), want, atol=3e-2, rtol=2e-2)
    for t, t0 in zip((q, cache, idx), before):
        assert torch.equal(t, t0)


def test_seed_positional_order_and_sinks_tnd():
    gen = torch.Generator().manual_seed(1)
    dn, dr, tile, n1 = 8, 4, 4, 2
    dt = torch.float16
    nope = torch.randint(-128, 128, (5, 1, dn), generator=gen).to(torch.int8)
    scales = torch.rand(5, 1, dn // tile, generator=gen) * 0.1
    rope = torch.randn(5, 1, dr, generator=gen).to(dt)
    key = _pack(nope, rope, scales)
    q = torch.randn(2, n1, dn + dr, generator=gen).to(dt)
    idx = torch.tensor([[[0, 4, 2]], [[3, -1, -1]]], dtype=I32)
    sinks = torch.tensor([0.3, -0.7])
    common = dict(actual_seq_lengths_query=torch.tensor([2], dtype=I32),
                  actual_seq_lengths_kv=torch.tensor([5], dtype=I32), layout_query="TND",
                  layout_kv="TND", sparse_mode=0, attention_mode=2, tile_size=tile,
                  rope_head_dim=dr, sinks=sinks)
    seed_order = npu_anywhere.npu_kv_quant_sparse_flash_attention(
        q, key, nope, idx, 0.5, 1, 2, 2, **common)
    yaml_order = npu_anywhere.npu_kv_quant_sparse_flash_attention(
        q, key, nope, idx, 0.5, 2, 2, sparse_block_size=1, **common)
    assert torch.equal(seed_order, yaml_order)
    k_deq = (nope.double() * scales.double().repeat_interleave(tile, -1)).to(dt)
    want = _golden(q, k_deq, rope, idx, 0.5, 0, dt, sinks=sinks)
    torch.testing.assert_close(seed_order.double(), want, atol=3e-3, rtol=3e-3)


def test_rejects_separate_scales_and_strict_rules():
    gen = torch.Generator().manual_seed(2)
    key = _pack(torch.zeros(1, 4, 1, 8, dtype=torch.int8),
                torch.zeros(1, 4, 1, 4, dtype=torch.bfloat16), torch.ones(1, 4, 1, 2))
    q = torch.randn(1, 1, 2, 12, generator=gen).bfloat16()
    idx = torch.zeros(1, 1, 1, 2, dtype=I32)
    kw = dict(tile_size=4, rope_head_dim=4, attention_mode=2)
    with pytest.raises(ValueError, match="expected value_dequant_scale None"):
        npu_anywhere.npu_kv_quant_sparse_flash_attention(
            q, key, key[..., :8], idx, 0.5, 2, 2, value_dequant_scale=torch.ones(1), **kw)
    with npu_anywhere.strict("A3"):
        with pytest.raises(ValueError, match="expected layout_kv 'PA_BSND'"):
            npu_anywhere.npu_kv_quant_sparse_flash_attention(q, key, key[..., :8], idx, 0.5, 2,
                                                             2, **kw)
