"""npu_fused_infer_attention_score: KV antiquant, int4 KV, int8 output quantization, the .out
overload and graph helpers, errors, strict mode, FakeTensor / compile / opcheck."""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from entry_points import assert_raises_everywhere
from golden import attend, decode_allowed

FIA = na.npu_fused_infer_attention_score
NPU = getattr(torch.ops, na.library.TORCH_NPU_NS)


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def ints(*shape, lo=-8, hi=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int8)


def close(out, golden, atol=2e-3):
    torch.testing.assert_close(out.double(), golden, atol=atol, rtol=atol)


# -- KV antiquant: k = (k_int8 + offset) * scale ------------------------------------------------

B, N, NKV, S, D = 2, 4, 2, 6, 16


def _decode_golden(q, kf, vf, kv_lens=(S, S), scale=0.25):
    return [attend(q[i], kf[i], vf[i], scale, decode_allowed(S, kv_lens[i])[None])[0]
            for i in range(B)]


@pytest.mark.parametrize("kind", ["per_channel", "per_tensor", "per_token"])
def test_legacy_antiquant_bnsd_decode(kind):
    q = rnd(B, N, 1, D, dtype=torch.float16)
    k8, v8 = ints(B, NKV, S, D, seed=1), ints(B, NKV, S, D, seed=2)
    if kind == "per_channel":
        sc, off = rnd(2, NKV, 1, D, seed=3).abs() * 0.1, rnd(2, NKV, 1, D, seed=4)
        ks, vs, ko, vo = sc[0][None], sc[1][None], off[0][None], off[1][None]
        mode, sc, off = 0, sc.half(), off.half()
    elif kind == "per_tensor":
        sc, off = torch.tensor([0.05, 0.1]), torch.tensor([1.0, -2.0])
        ks, vs, ko, vo = sc[0], sc[1], off[0], off[1]
        mode, sc, off = 0, sc.half(), off.half()
    else:
        sc, off = rnd(2, B, S, seed=3).abs() * 0.1, rnd(2, B, S, seed=4)
        ks, vs = sc[0][:, None, :, None], sc[1][:, None, :, None]
        ko, vo = off[0][:, None, :, None], off[1][:, None, :, None]
        mode = 1
    kf = (k8.double() + ko.double()) * ks.double()
    vf = (v8.double() + vo.double()) * vs.double()
    out, _ = FIA(q, k8, v8, antiquant_scale=sc, antiquant_offset=off, antiquant_mode=mode,
                 num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", scale=0.25)
    assert out.dtype == torch.float16
    for i, g in enumerate(_decode_golden(q, kf, vf)):
        close(out[i], g)


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_separate_key_value_antiquant_modes(mode):
    q = rnd(B, N, 1, D, dtype=torch.bfloat16)
    k8, v8 = ints(B, NKV, S, D, seed=1), ints(B, NKV, S, D, seed=2)
    shape = {1: (1, B, S), 2: (NKV,), 3: (B, NKV, S)}[mode]
    ks, vs = rnd(*shape, seed=3).abs() * 0.1, rnd(*shape, seed=4).abs() * 0.1
    ko, vo = rnd(*shape, seed=5), rnd(*shape, seed=6)
    view = {1: lambda t: t.reshape(B, 1, S, 1), 2: lambda t: t.reshape(1, NKV, 1, 1),
            3: lambda t: t.reshape(B, NKV, S, 1)}[mode]
    kf = (k8.double() + view(ko.double())) * view(ks.double())
    vf = (v8.double() + view(vo.double())) * view(vs.double())
    out, _ = FIA(q, k8, v8, key_antiquant_scale=ks, key_antiquant_offset=ko,
                 value_antiquant_scale=vs, value_antiquant_offset=vo, key_antiquant_mode=mode,
                 value_antiquant_mode=mode, num_heads=N, num_key_value_heads=NKV,
                 input_layout="BNSD", scale=0.25)
    for i, g in enumerate(_decode_golden(q, kf, vf)):
        close(out[i], g, atol=1.6e-2)


@pytest.mark.parametrize("mode", [4, 5])
def test_paged_managed_antiquant_scales(mode):
    bs, nb = 16, 4
    q = rnd(1, N, 1, D, dtype=torch.float16)
    pool_k, pool_v = ints(nb, bs, NKV, D, seed=1), ints(nb, bs, NKV, D, seed=2)
    table = torch.tensor([[2, 0]], dtype=torch.int32)
    shape = (nb, bs) if mode == 4 else (nb, NKV, bs)
    ks, vs = rnd(*shape, seed=3).abs() * 0.1, rnd(*shape, seed=4).abs() * 0.1
    expand = (lambda t: t[:, :, None, None]) if mode == 4 else \
        (lambda t: t.transpose(1, 2)[..., None])
    kfp = pool_k.double() * expand(ks.double())
    vfp = pool_v.double() * expand(vs.double())
    length = 20
    kf = torch.cat([kfp[2], kfp[0]])[:length].permute(1, 0, 2)          # [Nkv, S, D]
    vf = torch.cat([vfp[2], vfp[0]])[:length].permute(1, 0, 2)
    out, _ = FIA(q.reshape(1, 1, N * D), pool_k.reshape(nb, bs, NKV * D),
                 pool_v.reshape(nb, bs, NKV * D), key_antiquant_scale=ks, value_antiquant_scale=vs,
                 key_antiquant_mode=mode, value_antiquant_mode=mode, block_table=table,
                 block_size=bs, actual_seq_lengths_kv=[length], num_heads=N,
                 num_key_value_heads=NKV, scale=0.25)
    g, _ = attend(q[0], kf, vf, 0.25, torch.ones(1, 1, length, dtype=torch.bool))
    close(out.reshape(1, N, D).transpose(0, 1), g)


def test_int4_kv_packed_in_int32():
    q = rnd(B, 1, N * D, dtype=torch.float16)                    # BSH decode
    k4, v4 = ints(B, S, NKV * D, seed=1), ints(B, S, NKV * D, seed=2)
    from npu_anywhere.ops.quant.core import pack_int4
    kp, vp = pack_int4(k4), pack_int4(v4)
    assert kp.dtype == torch.int32 and kp.shape[-1] == NKV * D // 8
    sc = rnd(2, NKV * D, seed=3).abs().half() * 0.1
    out, _ = FIA(q, kp, vp, antiquant_scale=sc, num_heads=N, num_key_value_heads=NKV,
                 scale=0.25)
    assert out.shape == (B, 1, N * D)
    bnsd = lambda t: t.reshape(B, S, NKV, D).permute(0, 2, 1, 3).double()
    kf = bnsd(k4) * sc[0].double().reshape(1, NKV, 1, D)
    vf = bnsd(v4) * sc[1].double().reshape(1, NKV, 1, D)
    qq = q.reshape(B, 1, N, D).permute(0, 2, 1, 3)
    for i, g in enumerate(_decode_golden(qq, kf, vf)):
        close(out[i].reshape(1, N, D).transpose(0, 1), g)


@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_output_quantization(per_channel):
    q, k, v = rnd(1, N, 3, D, dtype=torch.float16), rnd(1, N, 5, D, dtype=torch.float16, seed=1), \
        rnd(1, N, 5, D, dtype=torch.float16, seed=2)
    if per_channel:
        qs, qo = rnd(N, D, seed=3).abs() * 50 + 10, rnd(N, D, seed=4) * 3
    else:
        qs, qo = torch.tensor([80.0]), torch.tensor([2.0])
    out, _ = FIA(q, k, v, num_heads=N, input_layout="BNSD", quant_scale2=qs, quant_offset2=qo)
    assert out.dtype == torch.int8
    g, _ = attend(q[0], k[0], v[0], 1.0, torch.ones(1, 3, 5, dtype=torch.bool))
    shape = (N, 1, D) if per_channel else ()
    want = g * qs.double().reshape(shape) + qo.double().reshape(shape)
    want = want.round().clamp(-128, 127)
    assert (out[0].double() - want).abs().max() <= 1       # float32 vs float64 near .5


# -- .out overload and graph helpers ---------------------------------------------------------

def test_out_overload_torch_ops_and_python_forms():
    q, k = rnd(1, 2, 3, 8, dtype=torch.float16), rnd(1, 2, 4, 8, dtype=torch.float16, seed=1)
    want, want_lse = FIA(q, k, k, num_heads=2, input_layout="BNSD", softmax_lse_flag=True)
    ws = NPU._npu_fused_infer_attention_score_get_max_workspace(q, k, k, num_heads=2,
                                                                 input_layout="BNSD")
    assert ws.dim() == 1 and ws.dtype == q.dtype
    o, lse = torch.empty_like(want), torch.empty(1, 2, 3, 1)
    r = NPU.npu_fused_infer_attention_score.out(q, k, k, num_heads=2, input_layout="BNSD",
                                                softmax_lse_flag=True, workspace=ws,
                                                attention_out=o, softmax_lse=lse)
    assert r[0] is o and r[1] is lse and torch.equal(o, want) and torch.equal(lse, want_lse)
    o2, lse2 = torch.zeros_like(want), torch.randn(1, dtype=torch.float16)
    keep = lse2.clone()
    r2 = FIA.out(q, k, k, workspace=ws, out=[o2, lse2], num_heads=2, input_layout="BNSD")
    assert torch.equal(o2, want) and torch.equal(lse2, keep)      # reserved lse untouched
    o3 = torch.zeros_like(want)
    FIA(q, k, k, out=[o3, torch.empty(0)], num_heads=2, input_layout="BNSD")
    assert torch.equal(o3, want)
    with pytest.raises(RuntimeError, match="attention_out"):
        FIA.out(q, k, k, out=[torch.empty(1, 2, 3, 4, dtype=torch.float16), lse2], num_heads=2,
                input_layout="BNSD")


@pytest.mark.parametrize("layout,qshape,vshape,table,out_shape,lse_shape", [
    ("BNSD", (1, 8, 5, 64), (1, 8, 9, 32), None, (1, 8, 5, 32), (1, 8, 5, 1)),
    ("BSH", (2, 1, 256), (2, 9, 64), None, (2, 1, 128), (2, 4, 1, 1)),
    ("BNSD_BSND", (1, 4, 5, 16), (1, 4, 9, 16), None, (1, 5, 4, 16), (1, 4, 5, 1)),
    ("TND", (7, 4, 16), (2, 16, 2 * 16), True, (7, 4, 16), (7, 4, 1)),
])
def test_infer_output_shapes(layout, qshape, vshape, table, out_shape, lse_shape):
    q, v = torch.zeros(qshape, dtype=torch.bfloat16), torch.zeros(vshape, dtype=torch.bfloat16)
    bt = torch.zeros(2, 1, dtype=torch.int32) if table else None
    out, lse = na.library.REGISTRY["_npu_fused_infer_attention_score_infer_output"](
        q, v, input_layout=layout, num_heads=qshape[1] if layout != "BSH" else 4,
        num_key_value_heads=2 if layout in ("BSH", "TND") else 0, softmax_lse_flag=True,
        block_table=bt)
    assert out.shape == out_shape and out.dtype == torch.bfloat16
    assert lse.shape == lse_shape and lse.dtype == torch.float32
    # The page's example passes (q, k, v): the middle tensor is ignored.
    o2, _ = na._npu_fused_infer_attention_score_infer_output(
        q, torch.zeros(1), v, input_layout=layout, num_heads=qshape[1] if layout != "BSH" else 4,
        num_key_value_heads=2 if layout in ("BSH", "TND") else 0, block_table=bt)
    assert o2.shape == out_shape


# -- errors -----------------------------------------------------------------------------------

def _q():
    return rnd(1, 2, 3, 8), rnd(1, 2, 4, 8, seed=1)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(input_layout="SBH"), ValueError, "input_layout"),
    (dict(num_heads=3), RuntimeError, "num_heads"),
    (dict(num_key_value_heads=3), ValueError, "num_key_value_heads"),
    (dict(sparse_mode=1), ValueError, "atten_mask"),
    (dict(sparse_mode=3, atten_mask=torch.ones(3, 4, dtype=torch.bool)), ValueError, "2048"),
    (dict(sparse_mode=9), ValueError, "sparse_mode"),      # the tree mask needs MLA rope
    (dict(sparse_mode=6), ValueError, "sparse_mode"),
    (dict(atten_mask=torch.ones(3, 4)), TypeError, "atten_mask"),
    (dict(atten_mask=torch.ones(2, 4, dtype=torch.bool)), RuntimeError, "atten_mask"),
    (dict(actual_seq_lengths=[4]), ValueError, "actual_seq_lengths"),
    (dict(actual_seq_lengths_kv=[1, 2, 3, 4, 5][:0] + [9]), ValueError, "actual_seq_lengths_kv"),
    (dict(dequant_scale1=torch.ones(1)), ValueError, "dequant_scale1"),
    (dict(query_rope=torch.ones(1, 2, 3, 4)), ValueError, "key_rope"),
    (dict(quant_offset2=torch.ones(1)), ValueError, "quant_offset2"),
    (dict(pse_shift=torch.ones(1, 2, 3, 2)), RuntimeError, "pse_shift"),
])
def test_bad_inputs_raise_the_same_in_eager_ops_and_fake(kwargs, error, match):
    q, k = _q()
    base = dict(num_heads=2, input_layout="BNSD")
    base.update(kwargs)
    assert_raises_everywhere("npu_fused_infer_attention_score", error, match, q, k, k, **base)


def test_errors_for_dtype_and_int8_query():
    q, k = _q()
    with pytest.raises(TypeError, match="key"):
        FIA(q, k.half(), k.half(), num_heads=2, input_layout="BNSD")
    with pytest.raises(ValueError, match="dequant_scale1"):     # int8 inputs need the scales
        FIA(q.to(torch.int8), k.to(torch.int8), k.to(torch.int8), num_heads=2, input_layout="BNSD")
    with pytest.raises(TypeError, match="key"):
        FIA(q.to(torch.int8), k.half(), k.half(), num_heads=2, input_layout="BNSD")
    with pytest.raises(ValueError, match="key_antiquant_scale"):
        FIA(q, k.to(torch.int8), k.to(torch.int8), num_heads=2, input_layout="BNSD")


def test_no_backward():
    q, k = _q()
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="do not require grad"):
        FIA(q, k, k, num_heads=2, input_layout="BNSD")


def test_strict_mode_rules():
    q, k = rnd(1, 2, 3, 16), rnd(1, 2, 4, 16, seed=1)    # D 16-aligned, as A2 needs for Q_S > 1
    with na.strict("A2"):
        with pytest.raises(TypeError, match="query"):
            FIA(q, k, k, num_heads=2, input_layout="BNSD")
        FIA(q.half(), k.half(), k.half(), num_heads=2, input_layout="BNSD")
        with pytest.raises(ValueError, match="D <= 512"):
            FIA(torch.zeros(1, 1, 1, 520).half(), torch.zeros(1, 1, 2, 520).half(),
                torch.zeros(1, 1, 2, 520).half(), num_heads=1, input_layout="BNSD")
    with na.strict("910"), pytest.raises(RuntimeError, match="product"):
        FIA(q.half(), k.half(), k.half(), num_heads=2, input_layout="BNSD")


def test_strict_950_rules():
    """Ascend 950 runs FIA (aclnnFusedInferAttentionScoreV5): no N <= 256 / ratio <= 64 bound,
    a 2-D mask only with sparse_mode 2/3/4, no legacy antiquant_scale."""
    q, k = torch.zeros(1, 65, 1, 8).half(), torch.zeros(1, 1, 4, 8).half()
    with na.strict("950"):
        out, _ = FIA(q, k, k, num_heads=65, num_key_value_heads=1, input_layout="BNSD")
        assert out.shape == q.shape
        v2_out, _ = na.npu_fused_infer_attention_score_v2(q, k, k, num_query_heads=65,
                                                          num_key_value_heads=1,
                                                          input_layout="BNSD")
        assert v2_out.shape == q.shape
        with pytest.raises(TypeError, match="query"):
            FIA(q.float(), k.float(), k.float(), num_heads=65, num_key_value_heads=1,
                input_layout="BNSD")
        q2 = torch.zeros(1, 1, 3, 8).half()
        with pytest.raises(ValueError, match="expected sparse_mode 2, 3 or 4"):
            FIA(q2, k, k, num_heads=1, input_layout="BNSD",
                atten_mask=torch.zeros(3, 4, dtype=torch.bool))
        k8 = torch.zeros(1, 1, 4, 8, dtype=torch.int8)
        with pytest.raises(ValueError, match="expected antiquant_scale None on 950"):
            FIA(q2, k8, k8, num_heads=1, input_layout="BNSD",
                antiquant_scale=torch.ones(2, 8).half())
        nsd = torch.zeros(2, 1, 8).half()
        assert FIA(nsd, nsd, nsd, num_heads=2, input_layout="NSD")[0].shape == (2, 1, 8)
    with na.strict("A3"), pytest.raises(ValueError, match="input_layout not NSD on A3"):
        FIA(nsd, nsd, nsd, num_heads=2, input_layout="NSD")
    with na.strict("A2"), pytest.raises(ValueError, match="N <= 256"):
        FIA(torch.zeros(1, 257, 1, 8).half(), k, k, num_heads=257, num_key_value_heads=1,
            input_layout="BNSD")


def test_unknown_keyword_hint():
    q, k = _q()
    with pytest.raises(TypeError, match="did you mean 'softmax_lse_flag'"):
        FIA(q, k, k, num_heads=2, input_layout="BNSD", softmax_lse_flg=True)
    with pytest.raises(TypeError, match="did you mean 'return_softmax_lse'"):
        na.npu_fused_infer_attention_score_v2(q, k, k, return_softmax_ls=True)
    with pytest.raises(TypeError, match="did you mean 'scale_value'"):
        na.npu_prompt_flash_attention(q, k, k, scale_valu=0.5)
    with pytest.raises(TypeError, match="did you mean 'num_heads'"):
        na.npu_incre_flash_attention(q, k, k, num_head=2)


# -- FakeTensor, compile, opcheck -------------------------------------------------------------

def _bnsd_call():
    q, k = rnd(2, 4, 3, 8), rnd(2, 2, 5, 8, seed=1)
    return (q, k, k), dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                           actual_seq_lengths_kv=[5, 3], softmax_lse_flag=True, scale=0.3)


def _tnd_paged_call():
    q = rnd(5, 2, 16)
    cache = rnd(4, 16, 2 * 16, seed=1)
    table = torch.tensor([[1, 3], [0, 2]], dtype=torch.int32)
    return (q, cache, cache), dict(num_heads=2, input_layout="TND", block_table=table,
                                   block_size=16, actual_seq_lengths=[2, 5],
                                   actual_seq_lengths_kv=[20, 7], sparse_mode=3,
                                   atten_mask=torch.triu(torch.ones(2048, 2048,
                                                                    dtype=torch.bool), 1),
                                   softmax_lse_flag=True)


@pytest.mark.parametrize("make", [_bnsd_call, _tnd_paged_call], ids=["bnsd", "tnd_paged"])
def test_compile_fullgraph_matches_eager(make):
    args, kwargs = make()
    want = FIA(*args, **kwargs)
    torch._dynamo.reset()
    fn = torch.compile(lambda *a: NPU.npu_fused_infer_attention_score(*a, **kwargs),
                       fullgraph=True, backend="eager")
    got = fn(*args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("make", [_bnsd_call, _tnd_paged_call], ids=["bnsd", "tnd_paged"])
def test_opcheck(make):
    args, kwargs = make()
    torch.library.opcheck(NPU.npu_fused_infer_attention_score.default, args, kwargs,
                          test_utils=("test_schema", "test_faketensor"))


def test_strict_block_size_and_inner_precise():
    q = rnd(1, 1, 16, dtype=torch.float16)
    cache = rnd(2, 16, 16, dtype=torch.float16, seed=1)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    kw = dict(num_heads=1, block_table=table, block_size=16, actual_seq_lengths_kv=[20])
    with na.strict("A2"):
        FIA(q, cache, cache, **kw)                                  # decode: 16-aligned is fine
        with pytest.raises(ValueError, match="inner_precise"):
            FIA(q, cache, cache, inner_precise=2, **kw)
        q2 = rnd(1, 2, 16, dtype=torch.float16)
        with pytest.raises(ValueError, match="block_size"):         # prompt: multiples of 128
            FIA(q2, cache, cache, **kw)
    with pytest.raises(ValueError, match="inner_precise"):
        FIA(q, cache, cache, inner_precise=4, **kw)


def test_out_overload_compiles_fullgraph():
    q, k = rnd(1, 2, 3, 8), rnd(1, 2, 4, 8, seed=1)

    def fn(q, k, o, lse):
        NPU.npu_fused_infer_attention_score.out(q, k, k, num_heads=2, input_layout="BNSD",
                                                softmax_lse_flag=True, attention_out=o,
                                                softmax_lse=lse)
        return o, lse

    o, lse = torch.empty(1, 2, 3, 8), torch.empty(1, 2, 3, 1)
    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k, o, lse)
    want, want_lse = FIA(q, k, k, num_heads=2, input_layout="BNSD", softmax_lse_flag=True)
    assert torch.equal(o, want) and torch.equal(lse, want_lse)


def _tensor_lengths_calls():
    """(name, fn, args): each op with its lengths given as tensors."""
    q, k = rnd(2, 4, 3, 8), rnd(2, 2, 5, 8, seed=1)
    qt, kt = rnd(5, 4, 8), rnd(8, 2, 8, seed=1)
    common = dict(num_key_value_heads=2, input_layout="BNSD")
    return [
        ("fia_bnsd", lambda q, k, ql, kl: FIA(q, k, k, num_heads=4, actual_seq_lengths=ql,
                                              actual_seq_lengths_kv=kl, **common)[0],
         (q, k, torch.tensor([3, 2]), torch.tensor([5, 3]))),
        ("fia_tnd", lambda q, k, ql, kl: FIA(q, k, k, num_heads=4, num_key_value_heads=2,
                                             input_layout="TND", actual_seq_lengths=ql,
                                             actual_seq_lengths_kv=kl, sparse_mode=3,
                                             atten_mask=torch.triu(torch.ones(
                                                 2048, 2048, dtype=torch.bool), 1))[0],
         (qt, kt, torch.tensor([2, 5]), torch.tensor([3, 8]))),
        ("pfa", lambda q, k, ql, kl: na.npu_prompt_flash_attention(
            q, k, k, num_heads=4, actual_seq_lengths=ql, actual_seq_lengths_kv=kl, **common),
         (q, k, torch.tensor([3, 2]), torch.tensor([5, 3]))),
        ("ifa", lambda q, k, ql, kl: na.npu_incre_flash_attention(
            q[:, :, :1], k, k, num_heads=4, actual_seq_lengths=kl, **common),
         (q, k, None, torch.tensor([5, 3]))),
    ]


@pytest.mark.parametrize("index", range(4), ids=["fia_bnsd", "fia_tnd", "pfa", "ifa"])
def test_tensor_lengths_compile_fullgraph(index):
    """Lengths given as tensors trace into the graph (their values are read when it runs)."""
    _name, fn, args = _tensor_lengths_calls()[index]
    want = fn(*args)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend="eager")(*args)
    torch.testing.assert_close(got, want)
    # Different length values through the same compiled graph: no stale specialization.
    q, k, ql, kl = args
    kl2 = torch.tensor([2, 4]) if index != 1 else torch.tensor([1, 8])
    again = torch.compile(fn, fullgraph=True, backend="eager")(q, k, ql, kl2)
    torch.testing.assert_close(again, fn(q, k, ql, kl2))


# -- full int8: int8 query/key/value with dequant_scale1 / quant_scale1 / dequant_scale2 --------

def _fp16(x):
    return x.to(torch.float16).to(torch.float64)


def _full_int8_golden(q, k, v, d1, q1, d2, scale, allowed, fill=None):
    """One batch, untiled, with the PFA kernel's rounding steps (int8 instantiation: bmm1 and
    bmm2 dequantized to float16 by the fixpipe, softmax in float16, P quantized to int8 with
    quant_scale1).  ``allowed`` [Sq, Skv] keys left by lengths / mask."""
    n, sq, _ = q.shape
    g = n // k.shape[0]
    out = torch.zeros(n, sq, v.shape[-1], dtype=torch.float64)
    for h in range(n):
        kh, vh = k[h // g].double(), v[h // g].double()
        for i in range(sq):
            row = _fp16(_fp16((q[h, i].double() @ kh.T) * d1) * scale)
            row = torch.where(allowed[i], row, torch.tensor(-math.inf, dtype=torch.float64))
            if not allowed[i].any():
                continue
            p = _fp16(torch.exp(row - row.max()))
            p8 = torch.round(p * q1).clamp(-128, 127)
            out[h, i] = _fp16((p8 @ vh) * d2) / p.sum()
    return out


@pytest.mark.parametrize("words", [False, True], ids=["float32_scales", "trans_quant_words"])
def test_full_int8_prompt_matches_kernel_steps(words):
    b, n, nkv, sq, skv, d = 2, 4, 2, 3, 6, 32
    q, k, v = ints(b, n, sq, d, lo=-20, hi=20, seed=1), ints(b, nkv, skv, d, lo=-20, hi=20,
                                                             seed=2), \
        ints(b, nkv, skv, d, lo=-20, hi=20, seed=3)
    d1, q1, d2 = 0.01, 100.0, 0.0005
    scales = [torch.tensor([d1]), torch.tensor([q1]), torch.tensor([d2])]
    if words:            # the fixpipe reads the fp19 field of npu_trans_quant_param's words
        scales[0], scales[2] = na.npu_trans_quant_param(scales[0]), \
            na.npu_trans_quant_param(scales[2])
        fp19 = lambda x: float((torch.tensor([x]).view(torch.int32) & -8192).view(torch.float32))
        d1, d2 = fp19(d1), fp19(d2)
    kv_lens = [6, 4]
    out, lse = FIA(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                   dequant_scale1=scales[0], quant_scale1=scales[1], dequant_scale2=scales[2],
                   scale=0.3, actual_seq_lengths_kv=kv_lens, softmax_lse_flag=True)
    assert out.dtype == torch.float16 and lse.shape == (b, n, sq, 1)
    for i in range(b):
        allowed = torch.zeros(sq, skv, dtype=torch.bool)
        allowed[:, :kv_lens[i]] = True
        want = _full_int8_golden(q[i], k[i], v[i], d1, q1, d2, 0.3, allowed)
        torch.testing.assert_close(out[i].double(), want, atol=1e-3, rtol=1e-3)
    # int8 output: int8(round(out * quant_scale2)) of the same float16 result
    out8, _ = FIA(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                  dequant_scale1=scales[0], quant_scale1=scales[1], dequant_scale2=scales[2],
                  quant_scale2=torch.tensor([40.0]), scale=0.3, actual_seq_lengths_kv=kv_lens)
    assert out8.dtype == torch.int8
    assert (out8.int() - torch.round(out.double() * 40).int()).abs().max() <= 1


def test_full_int8_through_pfa_fake_and_errors():
    q, k = ints(1, 2, 4, 32, seed=1), ints(1, 2, 5, 32, seed=2)
    kw = dict(num_heads=2, input_layout="BNSD", deq_scale1=torch.tensor([0.02]),
              quant_scale1=torch.tensor([50.0]), deq_scale2=torch.tensor([0.001]),
              next_tokens=65535)
    out = na.npu_prompt_flash_attention(q, k, k, **kw)
    fia_out, _ = FIA(q, k, k, num_heads=2, input_layout="BNSD", dequant_scale1=kw["deq_scale1"],
                     quant_scale1=kw["quant_scale1"], dequant_scale2=kw["deq_scale2"])
    assert torch.equal(out, fia_out)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fk = {a: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for a, t in kw.items()}
        fake = NPU.npu_prompt_flash_attention(mode.from_tensor(q), mode.from_tensor(k),
                                              mode.from_tensor(k), **fk)
    assert fake.shape == out.shape and fake.dtype == torch.float16
    with pytest.raises(ValueError, match="quant_scale1"):
        na.npu_prompt_flash_attention(q, k, k, **{**kw, "quant_scale1": None})
    with pytest.raises(ValueError, match="deq_scale1|dequant_scale1"):
        na.npu_prompt_flash_attention(q.half(), k.half(), k.half(), num_heads=2,
                                      input_layout="BNSD", deq_scale1=kw["deq_scale1"])
    with pytest.raises(ValueError, match="Q_S > 1"):       # the page: not supported at Q_S 1
        FIA(q[:, :, :1], k, k, num_heads=2, input_layout="BNSD", dequant_scale1=kw["deq_scale1"],
            quant_scale1=kw["quant_scale1"], dequant_scale2=kw["deq_scale2"])


def test_full_int8_strict_mode_warns_about_tiling():
    q = ints(1, 2, 3, 32, seed=4)
    kw = dict(num_heads=2, input_layout="BNSD", dequant_scale1=torch.tensor([0.01]),
              quant_scale1=torch.tensor([100.0]), dequant_scale2=torch.tensor([0.0005]))
    with na.strict("A2"), pytest.warns(UserWarning, match="per KV tile"):
        out, _ = FIA(q, q, q, **kw)
    assert out.dtype == torch.float16
