"""npu_fused_infer_attention_score_v2: v2 names, learnable sink, *_NBSD outputs, KV dequant,
int8 output, .out and helpers, errors."""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from golden import attend, close, decode_allowed, prompt_allowed, rnd

V2 = na.npu_fused_infer_attention_score_v2
NPU = getattr(torch.ops, na.library.TORCH_NPU_NS)


# Every golden test runs on the reference and on the fast kernels (conftest.py).
pytestmark = pytest.mark.usefixtures("each_provider")


def sink_golden(q, k, v, scale, allowed, sink):
    """Doc formula with the sink as one extra logit per head that has no value row."""
    n, sq, _ = q.shape
    g = n // k.shape[0]
    out = torch.zeros(n, sq, v.shape[-1], dtype=torch.float64)
    lse = torch.zeros(n, sq, dtype=torch.float64)
    for h in range(n):
        for i in range(sq):
            cols = allowed[0, i].nonzero().flatten()
            s = (q[h, i].double() @ k[h // g][cols].double().T) * scale
            logits = torch.cat([s, sink[h].double().reshape(1)])
            w = torch.softmax(logits, 0)[:-1]
            out[h, i] = w @ v[h // g][cols].double()
            lse[h, i] = torch.logsumexp(logits, 0)
    return out, lse


def test_learnable_sink_tnd_causal():
    n, nkv, d = 4, 2, 16
    q_lens, kv_lens = [2, 3], [4, 3]
    q, k, v = rnd(5, n, d), rnd(7, nkv, d, seed=1), rnd(7, nkv, d, seed=2)
    sink = rnd(n, seed=3).to(torch.bfloat16)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out, lse = V2(q, k, v, num_query_heads=n, num_key_value_heads=nkv, input_layout="TND",
                  actual_seq_qlen=[2, 5], actual_seq_kvlen=[4, 7], sparse_mode=3,
                  atten_mask=mask, learnable_sink=sink, softmax_scale=0.25,
                  return_softmax_lse=True)
    for (qa, qb), (ka, kb) in (((0, 2), (0, 4)), ((2, 5), (4, 7))):
        allowed = prompt_allowed(qb - qa, kb - ka, qb - qa, kb - ka, 3)[None]
        go, gl = sink_golden(q[qa:qb].transpose(0, 1), k[ka:kb].transpose(0, 1),
                             v[ka:kb].transpose(0, 1), 0.25, allowed, sink)
        close(out[qa:qb].transpose(0, 1), go)
        torch.testing.assert_close(lse[qa:qb, :, 0].T.double(), gl, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("layout", ["BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "NTD_TND", "TND_NTD"])
def test_output_layouts(layout):
    b, n, s, skv, d = 2, 2, 2, 3, 8
    q, k, v = rnd(b, n, s, d), rnd(b, n, skv, d, seed=1), rnd(b, n, skv, d, seed=2)
    golden = torch.stack([attend(q[i], k[i], v[i], 1.0,
                                 torch.ones(1, s, skv, dtype=torch.bool))[0] for i in range(b)])
    src = layout.split("_")[0]
    conv = {"BSH": lambda t: t.permute(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1),
            "BSND": lambda t: t.permute(0, 2, 1, 3), "BNSD": lambda t: t,
            "TND": lambda t: t.permute(0, 2, 1, 3).reshape(-1, t.shape[1], t.shape[3]),
            "NTD": lambda t: t.permute(1, 0, 2, 3).reshape(t.shape[1], -1, t.shape[3])}[src]
    lens = dict(actual_seq_qlen=[2, 4], actual_seq_kvlen=[3, 6]) if src in ("TND", "NTD") else {}
    out, _ = V2(conv(q), conv(k), conv(v), num_query_heads=n, input_layout=layout, **lens)
    if layout.endswith("NBSD"):
        assert out.shape == (n, b, s, d)
        close(out.transpose(0, 1), golden)
    elif layout == "NTD_TND":
        close(out.reshape(b, s, n, d).permute(0, 2, 1, 3), golden)
    else:                                              # TND_NTD: [N, T, D]
        close(out.reshape(n, b, s, d).transpose(0, 1), golden)


def test_paged_per_token_dequant_and_int8_output():
    b, n, nkv, d, bs = 2, 4, 1, 16, 16
    lens = [20, 7]
    q = rnd(b, 1, n, d, dtype=torch.bfloat16)                      # BSND decode
    k8 = torch.randint(-8, 8, (b, nkv, 32, d), generator=torch.Generator().manual_seed(1),
                       dtype=torch.int8)
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    pool = torch.zeros(4, bs, nkv * d, dtype=torch.int8)
    for i in range(b):
        for j in range(lens[i]):
            pool[table[i, j // bs], j % bs] = k8[i, :, j].reshape(-1)
    ks, vs = rnd(1, b, 32, seed=3).abs() * 0.1, rnd(1, b, 32, seed=4).abs() * 0.1
    qs = torch.tensor([40.0])
    out, _ = V2(q, pool, pool, dequant_scale_key=ks, dequant_scale_value=vs, key_quant_mode=1,
                value_quant_mode=1, block_table=table, block_size=bs, actual_seq_kvlen=lens,
                num_query_heads=n, num_key_value_heads=nkv, input_layout="BSND",
                softmax_scale=0.25, quant_scale_out=qs)
    assert out.dtype == torch.int8 and out.shape == q.shape
    for i in range(b):
        kf = k8[i].double() * ks[0, i].double().reshape(1, -1, 1)
        vf = k8[i].double() * vs[0, i].double().reshape(1, -1, 1)
        go, _ = attend(q[i].transpose(0, 1), kf, vf, 0.25, decode_allowed(32, lens[i])[None])
        want = (go * 40.0).round().clamp(-128, 127)
        assert (out[i].transpose(0, 1).double() - want).abs().max() <= 1


def test_out_overload_and_helpers():
    q, k = rnd(1, 2, 3, 8, dtype=torch.float16), rnd(1, 2, 4, 8, dtype=torch.float16, seed=1)
    want, want_lse = V2(q, k, k, num_query_heads=2, input_layout="BNSD", return_softmax_lse=True)
    ws = na._npu_fused_infer_attention_score_v2_get_max_workspace(q, k, k, num_query_heads=2,
                                                                 input_layout="BNSD")
    o, lse = torch.empty_like(want), torch.empty_like(want_lse)
    V2.out(q, k, k, workspace=ws, out=[o, lse], num_query_heads=2, input_layout="BNSD",
           return_softmax_lse=True)
    assert torch.equal(o, want) and torch.equal(lse, want_lse)
    o2 = torch.empty_like(want)
    NPU.npu_fused_infer_attention_score_v2.out(q, k, k, num_query_heads=2, input_layout="BNSD",
                                               attention_out=o2, softmax_lse=torch.empty(1))
    assert torch.equal(o2, want)
    out, lse0 = na._npu_fused_infer_attention_score_v2_infer_output(
        q, k, num_query_heads=2, input_layout="BNSD_NBSD", return_softmax_lse=True)
    assert out.shape == (2, 1, 3, 8) and lse0.shape == (1, 2, 3, 1)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(query_dtype=290), NotImplementedError, "query_dtype"),
    (dict(dequant_scale_query=torch.ones(1)), NotImplementedError, "dequant_scale_query"),
    (dict(learnable_sink=torch.ones(3)), RuntimeError, "learnable_sink"),
    (dict(out_dtype=23, quant_scale_out=torch.ones(1)), NotImplementedError, "float8_e5m2"),
    (dict(key_dtype=296), NotImplementedError, "float4_e2m1fn_x2"),
    (dict(dequant_scale_key=torch.ones(1), dequant_scale_key_dtype=293), NotImplementedError,
     "float8_e8m0fnu"),
    (dict(value_dtype=6), NotImplementedError, "value_dtype"),     # float32 code, no such dtype
    (dict(query_rope_dtype=5), NotImplementedError, "query_rope"),  # code without the tensor
    (dict(input_layout="SBH"), ValueError, "input_layout"),
])
def test_errors(kwargs, error, match):
    q, k = rnd(1, 2, 3, 8), rnd(1, 2, 4, 8, seed=1)
    if kwargs.get("value_dtype") == 6:     # a float16 value read as float32: not reproduced
        q, k = q.half(), k.half()
    base = dict(num_query_heads=2, input_layout="BNSD")
    base.update(kwargs)
    with pytest.raises(error, match=match):
        V2(q, k, k, **base)


def test_dtype_codes_naming_the_tensors_own_dtype_change_nothing():
    """A *_dtype code equal to the tensor's dtype is a no-op; out_dtype is ignored for floating
    inputs without quant_scale_out (op-plugin construct_fia_output_tensor_v2)."""
    q, k = rnd(1, 2, 3, 8, dtype=torch.float16), rnd(1, 2, 4, 8, seed=1, dtype=torch.float16)
    want, _ = V2(q, k, k, num_query_heads=2, input_layout="BNSD")
    got, _ = V2(q, k, k, num_query_heads=2, input_layout="BNSD", query_dtype=5, key_dtype=5,
                value_dtype=5, out_dtype=15)
    assert got.dtype == torch.float16 and torch.equal(got, want)
    go, _ = attend(q[0], k[0], k[0], 1.0, torch.ones(1, 3, 4, dtype=torch.bool))
    torch.testing.assert_close(got[0].double(), go, atol=2e-3, rtol=2e-3)


def test_compile_fullgraph_with_sink():
    q, k = rnd(2, 2, 1, 8), rnd(2, 2, 5, 8, seed=1)
    kwargs = dict(num_query_heads=2, input_layout="BNSD", actual_seq_kvlen=[5, 2],
                  learnable_sink=rnd(2, seed=2), return_softmax_lse=True)
    want = V2(q, k, k, **kwargs)
    torch._dynamo.reset()
    got = torch.compile(lambda a, b_: NPU.npu_fused_infer_attention_score_v2(a, b_, b_, **kwargs),
                        fullgraph=True, backend="eager")(q, k)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    go, _ = sink_golden(q[1], k[1], k[1], 1.0, decode_allowed(5, 2)[None], kwargs["learnable_sink"])
    close(want[0][1], go)
