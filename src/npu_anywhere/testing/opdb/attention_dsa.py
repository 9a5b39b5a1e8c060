"""Op database entries of the DeepSeek-V3.2 sparse-attention ops (lightning indexer, SFA)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_I32 = torch.int32


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _t(*shape, dtype=torch.bfloat16, seed=0):
    return torch.randn(*shape, generator=_gen(seed)).to(dtype)


def _li_bsnd(dtype=torch.bfloat16, wdtype=None, **kw):
    q = _t(2, 3, 4, 16, dtype=dtype, seed=1)
    k = _t(2, 7, 1, 16, dtype=dtype, seed=2)
    w = _t(2, 3, 4, dtype=wdtype or dtype, seed=3)
    return (q, k, w), dict(dict(sparse_count=5), **kw)


def _li_tnd_paged(**kw):
    q = _t(5, 4, 16, seed=4)
    w = _t(5, 4, seed=5)
    cache = _t(4, 16, 1, 16, seed=6)
    args = dict(actual_seq_lengths_query=torch.tensor([2, 5], dtype=_I32),
                actual_seq_lengths_key=torch.tensor([9, 20], dtype=_I32),
                block_table=torch.tensor([[3, 0], [1, 2]], dtype=_I32),
                layout_query="TND", layout_key="PA_BSND", sparse_count=12)
    args.update(kw)
    return (q, cache, w), args


def _lightning_indexer() -> None:
    e = _entry("npu_lightning_indexer")
    e.samples += [
        Sample("bsnd_causal_values", lambda: _li_bsnd(return_value=True)),
        Sample("tnd_paged_mode0", lambda: _li_tnd_paged(sparse_mode=0)),
        Sample("fp64_values", lambda: _li_bsnd(torch.float64, return_value=True,
                                                sparse_mode=0)),
        # Not marked differentiable: opcheck's AOT test sums the outputs into the first one's
        # dtype, and the first output here is int32.  tests/ops/attention/
        # test_lightning_indexer.py runs gradcheck instead.
    ]
    e.errors += [
        ErrorSample("sparse_count", lambda: _li_bsnd(sparse_count=3000), ValueError,
                    r"npu_lightning_indexer: expected sparse_count in \[1, 2048\]"),
        ErrorSample("sparse_mode", lambda: _li_bsnd(sparse_mode=1), ValueError,
                    "npu_lightning_indexer: expected sparse_mode 0"),
        ErrorSample("key_dtype", lambda: ((_t(1, 2, 4, 16), _t(1, 3, 1, 16, dtype=torch.float16),
                                           _t(1, 2, 4)), {}), TypeError,
                    "npu_lightning_indexer: expected "),
        ErrorSample("weights_shape", lambda: ((_t(1, 2, 4, 16), _t(1, 3, 1, 16), _t(1, 2, 3)),
                                              {}), ValueError,
                    "npu_lightning_indexer: expected weights shape "),
        ErrorSample("tnd_needs_lengths", lambda: ((_t(3, 4, 16), _t(3, 1, 16), _t(3, 4)),
                                                  dict(layout_query="TND", layout_key="TND")),
                    ValueError, "npu_lightning_indexer: expected actual_seq_lengths_query a "
                    "tensor when layout_query is 'TND'"),
        ErrorSample("paged_values", lambda: _li_tnd_paged(return_value=True), ValueError,
                    "npu_lightning_indexer: expected return_value False"),
        ErrorSample("heads", lambda: ((_t(1, 2, 3, 16), _t(1, 3, 2, 16), _t(1, 2, 3)), {}),
                    ValueError, "npu_lightning_indexer: expected query a head count N1"),
    ]

    def grad_args(layout="BSND"):
        (q, k, w), _ = _li_bsnd()
        idx = torch.tensor([[0, 3, 1, -1, -1], [2, 0, 4, 1, -1], [6, 5, 0, 1, 2]], dtype=_I32)
        idx = idx.view(1, 3, 1, 5).expand(2, 3, 1, 5).contiguous()
        dy = _t(2, 3, 1, 5, seed=9)
        if layout == "TND":
            return (q.flatten(0, 1), k.flatten(0, 1), dy.flatten(0, 1), idx.flatten(0, 1),
                    w.flatten(0, 1), torch.tensor([3, 6], dtype=_I32),
                    torch.tensor([7, 14], dtype=_I32), "TND"), {}
        return (q, k, dy, idx, w), {}

    g = _entry("npu_lightning_indexer_grad")
    g.samples += [Sample("tnd", lambda: grad_args("TND"))]   # BSND: the per-op tests
    g.errors += [
        ErrorSample("dy_shape", lambda: (grad_args()[0][:2] + (torch.zeros(2, 3, 1, 4, dtype=torch.bfloat16),)
                                         + grad_args()[0][3:], {}), ValueError,
                    "npu_lightning_indexer_grad: expected dy sparse_indices' shape"),
        ErrorSample("indices_dtype", lambda: (grad_args()[0][:3] + (
            grad_args()[0][3].long(),) + grad_args()[0][4:], {}), TypeError,
            "npu_lightning_indexer_grad: expected sparse_indices dtype in "),
    ]


_lightning_indexer()


def _sfa_bsnd(dtype=torch.bfloat16, rope=True, **kw):
    q = _t(2, 3, 4, 8, dtype=dtype, seed=11)
    k = _t(2, 9, 1, 8, dtype=dtype, seed=12)
    idx = torch.tensor([[4, 0, 2, -1], [1, 3, -1, -1], [0, 1, 2, 3]], dtype=_I32)
    idx = idx.view(1, 3, 1, 4).expand(2, 3, 1, 4).contiguous()
    args = dict(sparse_block_size=2)
    if rope:
        args.update(query_rope=_t(2, 3, 4, 4, dtype=dtype, seed=13),
                    key_rope=_t(2, 9, 1, 4, dtype=dtype, seed=14), attention_mode=2)
    args.update(kw)
    return (q, k, k.clone(), idx, 0.35), args


def _sfa_tnd_paged(**kw):
    q = _t(5, 2, 8, dtype=torch.float16, seed=15)
    cache = _t(3, 4, 1, 8, dtype=torch.float16, seed=16)
    idx = torch.tensor([[[0, 2, -1]], [[1, -1, -1]], [[0, 1, 2]], [[3, 0, -1]], [[2, 1, 0]]],
                       dtype=_I32)
    args = dict(actual_seq_lengths_query=torch.tensor([2, 5], dtype=_I32),
                actual_seq_lengths_kv=torch.tensor([3, 6], dtype=_I32),
                block_table=torch.tensor([[2, -1], [0, 1]], dtype=_I32), layout_query="TND",
                layout_kv="PA_BSND", sinks=torch.tensor([0.5, -1.0]))
    args.update(kw)
    return (q, cache, cache.clone(), idx, 0.5), args


def _sparse_flash_attention() -> None:
    e = _entry("npu_sparse_flash_attention")
    e.samples += [
        Sample("bsnd_rope_lse_block2", lambda: _sfa_bsnd(return_softmax_lse=True)),
        Sample("tnd_paged_sinks", _sfa_tnd_paged),
        # Not differentiable here: opcheck would ask sparse_indices (int32) for a gradient.
        # tests/ops/attention/test_sparse_flash_attention.py runs gradcheck instead.
        Sample("fp16_mode0_no_rope", lambda: _sfa_bsnd(torch.float16, rope=False,
                                                       sparse_mode=0)),
    ]
    e.errors += [
        ErrorSample("block_size", lambda: _sfa_bsnd(sparse_block_size=3), ValueError,
                    "npu_sparse_flash_attention: expected sparse_block_size a power of 2"),
        ErrorSample("rope_alone", lambda: _sfa_bsnd(key_rope=None), ValueError,
                    "npu_sparse_flash_attention: expected query_rope given together"),
        ErrorSample("indices_dtype", lambda: _sfa_bsnd()[0][:3] and (
            _sfa_bsnd()[0][:3] + (_sfa_bsnd()[0][3].long(), 0.35), _sfa_bsnd()[1]), TypeError,
            "npu_sparse_flash_attention: expected sparse_indices dtype"),
        ErrorSample("paged_lse", lambda: _sfa_tnd_paged(return_softmax_lse=True), ValueError,
                    "npu_sparse_flash_attention: expected return_softmax_lse False"),
        ErrorSample("paged_block_divisor", lambda: _sfa_tnd_paged(sparse_block_size=8),
                    ValueError, "npu_sparse_flash_attention: expected sparse_block_size a "
                    "divisor of the paged block_size 4"),
        ErrorSample("sinks_shape", lambda: _sfa_tnd_paged(sinks=torch.zeros(3)), ValueError,
                    "npu_sparse_flash_attention: expected sinks shape"),
        ErrorSample("attention_mode", lambda: _sfa_bsnd(attention_mode=1), ValueError,
                    "npu_sparse_flash_attention: expected attention_mode 0 or 2"),
    ]

    def grad_args(layout="BSND"):
        (q, k, v, idx, scale), kw = _sfa_bsnd()
        d_out = _t(*q.shape, seed=17)
        empty = torch.empty(0)
        if layout == "TND":
            return (q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), idx.flatten(0, 1),
                    d_out.flatten(0, 1), d_out.flatten(0, 1), empty, empty, scale, 2,
                    kw["query_rope"].flatten(0, 1), kw["key_rope"].flatten(0, 1),
                    torch.tensor([3, 6], dtype=_I32), torch.tensor([9, 18], dtype=_I32),
                    "TND", 3), {}
        return (q, k, v, idx, d_out, d_out, empty, empty, scale, 2), {}

    g = _entry("npu_sparse_flash_attention_grad")
    g.samples += [Sample("tnd_rope", lambda: grad_args("TND"))]   # BSND: the per-op tests
    g.errors += [
        ErrorSample("d_out_shape", lambda: (grad_args()[0][:4] + (torch.zeros(2, 3, 4, 7),)
                                            + grad_args()[0][5:], {}), ValueError,
                    "npu_sparse_flash_attention_grad: expected d_out shape"),
        ErrorSample("layout", lambda: (grad_args()[0] + (None, None, None, None, "PA_BSND"),
                                       {}), ValueError,
                    "npu_sparse_flash_attention_grad: expected layout one of"),
    ]


_sparse_flash_attention()


def _qli(**kw):
    gen = _gen(21)
    q = torch.randint(-128, 128, (2, 3, 4, 16), generator=gen).to(torch.int8)
    k = torch.randint(-128, 128, (2, 7, 1, 16), generator=gen).to(torch.int8)
    w = (torch.rand(2, 3, 4, generator=gen) * 0.01).half()
    qs = (torch.rand(2, 3, 4, generator=gen) * 10).half()
    ks = (torch.rand(2, 7, 1, generator=gen) * 10).half()
    return (q, k, w, qs, ks, 0, 0), dict(dict(sparse_count=5), **kw)


def _qli_tnd_paged():
    # int8 here: opcheck's schema check compares inputs with allclose, which float8 lacks on
    # CPU; tests/ops/attention/test_quant_lightning_indexer.py covers float8 and hifloat8.
    gen = _gen(22)
    q = torch.randint(-128, 128, (5, 4, 16), generator=gen).to(torch.int8)
    cache = torch.randint(-128, 128, (4, 16, 1, 16), generator=gen).to(torch.int8)
    w = torch.rand(5, 4, generator=gen).bfloat16()
    qs = torch.rand(5, 4, generator=gen)
    ks = torch.rand(4, 16, 1, generator=gen)
    return (q, cache, w, qs, ks, 0, 0), dict(
        actual_seq_lengths_query=torch.tensor([2, 5], dtype=_I32),
        actual_seq_lengths_key=torch.tensor([9, 20], dtype=_I32),
        block_table=torch.tensor([[3, 0], [1, 2]], dtype=_I32), layout_query="TND",
        layout_key="PA_BSND", sparse_count=12, sparse_mode=0)


def _quant_lightning_indexer() -> None:
    e = _entry("npu_quant_lightning_indexer")
    e.samples += [Sample("bsnd_int8_causal", _qli),
                  Sample("tnd_paged_mode0", _qli_tnd_paged)]
    e.errors += [
        ErrorSample("quant_mode", lambda: (_qli()[0][:5] + (1, 0), _qli()[1]), ValueError,
                    "npu_quant_lightning_indexer: expected query_quant_mode 0"),
        ErrorSample("key_scale_shape", lambda: (_qli()[0][:4] + (torch.ones(2, 7).half(), 0, 0),
                                                _qli()[1]), ValueError,
                    "npu_quant_lightning_indexer: expected key_dequant_scale shape"),
        ErrorSample("float_query", lambda: ((torch.ones(1, 2, 4, 16),) + _qli()[0][1:],
                                            _qli()[1]), TypeError,
                    "npu_quant_lightning_indexer: expected query dtype in"),
        ErrorSample("sparse_count", lambda: _qli(sparse_count=3072), ValueError,
                    r"npu_quant_lightning_indexer: expected sparse_count in \[1, 2048\]"),
    ]


_quant_lightning_indexer()


def _kvq(layout="PA_BSND", **kw):
    """Combined int8 keys: [int8 nope 8 | bf16 rope 4 (8 bytes) | 2 float32 scales (8 bytes)]."""
    gen = _gen(31)
    dn, dr, tile = 8, 4, 4
    lead = (3, 4, 1) if layout == "PA_BSND" else (1, 6, 1)
    nope = torch.randint(-100, 100, lead + (dn,), generator=gen).to(torch.int8)
    rope = torch.randn(lead + (dr,), generator=gen).bfloat16().view(torch.int8)
    scales = (torch.rand(lead + (dn // tile,), generator=gen) * 0.05).view(torch.int8)
    key = torch.cat([nope, rope, scales], -1)
    s1 = 2
    q = torch.randn(1, s1, 2, dn + dr, generator=gen).bfloat16()
    idx = torch.tensor([[[[0, 3, -1]], [[2, 1, 4]]]], dtype=_I32)
    args = dict(tile_size=tile, rope_head_dim=dr, attention_mode=2, layout_kv=layout,
                actual_seq_lengths_kv=torch.tensor([6], dtype=_I32))
    if layout == "PA_BSND":
        args["block_table"] = torch.tensor([[2, 0]], dtype=_I32)
    args.update(kw)
    return (q, key, nope.clone(), idx, 0.25, 2, 2), args


def _kv_quant_sparse_flash_attention() -> None:
    e = _entry("npu_kv_quant_sparse_flash_attention")
    e.samples += [Sample("paged_causal", _kvq),
                  Sample("bsnd_mode0_sinks", lambda: _kvq("BSND", sparse_mode=0,
                                                          sinks=torch.tensor([0.1, -0.2])))]
    e.errors += [
        ErrorSample("quant_mode", lambda: (_kvq()[0][:5] + (1, 2), _kvq()[1]), ValueError,
                    "npu_kv_quant_sparse_flash_attention: expected key_quant_mode 2"),
        ErrorSample("key_width", lambda: _kvq(tile_size=2), ValueError,
                    "npu_kv_quant_sparse_flash_attention: expected key a last dim of"),
        ErrorSample("separate_scale", lambda: _kvq(key_dequant_scale=torch.ones(1)),
                    ValueError, "npu_kv_quant_sparse_flash_attention: expected "
                    "key_dequant_scale None"),
        ErrorSample("attention_mode", lambda: _kvq(attention_mode=0), ValueError,
                    "npu_kv_quant_sparse_flash_attention: expected attention_mode 2"),
    ]


_kv_quant_sparse_flash_attention()
