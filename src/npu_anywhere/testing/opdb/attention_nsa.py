"""Op database entries of the Native Sparse Attention ops (compression, compressed attention,
selection attention)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_I32 = torch.int32


def _t(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64).to(dtype)


def _compress_args(dtype=torch.float16, **kw):
    x = _t(41, 2, 16, dtype=dtype, seed=1)
    w = _t(32, 2, dtype=dtype, seed=2)
    return (x, w, 32, 16), dict(dict(actual_seq_len=[5, 41]), **kw)


def _compress() -> None:
    e = _entry("npu_nsa_compress")
    # One sample per op keeps the generic tests' time down; the per-op tests cover the rest.
    e.samples += [
        Sample("fp64_two_batches", lambda: ((_t(20, 1, 4, dtype=torch.float64, seed=1),
                                             _t(16, 1, dtype=torch.float64, seed=2), 16, 16),
                                            dict(actual_seq_len=[3, 20])), differentiable=True),
    ]
    e.errors += [
        ErrorSample("weight_shape", lambda: ((_t(41, 2, 16), _t(16, 2), 32, 16),
                                             dict(actual_seq_len=[41])), RuntimeError,
                    "npu_nsa_compress: expected weight shape \\[32, 2\\]"),
        ErrorSample("seq_len_total", lambda: _compress_args(actual_seq_len=[5, 40]),
                    ValueError, "npu_nsa_compress: expected actual_seq_len a last value"),
        ErrorSample("stride", lambda: ((_t(41, 2, 16), _t(16, 2), 16, 32),
                                       dict(actual_seq_len=[41])), ValueError,
                    "npu_nsa_compress: expected compress_block_size at least"),
    ]
    g = _entry("npu_nsa_compress_grad")

    def grad_args(dtype=torch.bfloat16):
        (x, w, block, stride), kw = _compress_args(dtype)
        return (_t(1, 2, 16, dtype=dtype, seed=3), x, w, block, stride), kw

    g.samples += [Sample("bf16", lambda: grad_args())]
    g.errors += [
        ErrorSample("grad_shape", lambda: ((_t(3, 2, 16),) + _compress_args()[0],
                                           _compress_args()[1]), RuntimeError,
                    "npu_nsa_compress_grad: expected grad shape \\[1, 2, 16\\]"),
    ]


def _select_args(dtype=torch.float16, topk_by_keyword=False, **kw):
    q = _t(7, 4, 16, dtype=dtype, seed=4)
    k = _t(13, 2, 16, dtype=dtype, seed=5)
    v = _t(13, 2, 8, dtype=dtype, seed=6)
    topk = torch.tensor([[[0, 1], [1, 0]]] * 3 + [[[0, 1], [1, 1]]] * 4, dtype=_I32)
    args = dict(actual_seq_qlen=[3, 7], actual_seq_kvlen=[6, 13])
    args.update(kw)
    if topk_by_keyword:
        # a differentiable sample's positional tensors all require grad
        return (q, k, v), dict(topk_indices=topk, scale_value=0.3, head_num=4,
                               select_block_size=4, select_block_count=2, **args)
    return (q, k, v, topk, 0.3, 4, 4, 2), args


def _select() -> None:
    e = _entry("npu_nsa_select_attention")
    e.samples += [
        # causal (a mask given), the rule the backward always applies
        Sample("fp64_causal", lambda: _select_args(
            torch.float64, True, actual_seq_qlen=[7], actual_seq_kvlen=[13],
            atten_mask=torch.ones(7, 7, dtype=torch.bool)), differentiable=True),
    ]
    e.errors += [
        ErrorSample("head_num", lambda: ((_t(7, 4, 16), _t(13, 2, 16), _t(13, 2, 8),
                                          torch.zeros(7, 2, 2, dtype=_I32), 0.3, 3, 4, 2),
                                         dict(actual_seq_qlen=[7], actual_seq_kvlen=[13])),
                    ValueError, "npu_nsa_select_attention: expected head_num"),
        ErrorSample("topk_shape", lambda: ((_t(7, 4, 16), _t(13, 2, 16), _t(13, 2, 8),
                                            torch.zeros(7, 2, 3, dtype=_I32), 0.3, 4, 4, 2),
                                           dict(actual_seq_qlen=[7], actual_seq_kvlen=[13])),
                    RuntimeError, "npu_nsa_select_attention: expected topk_indices shape"),
        ErrorSample("batches", lambda: _select_args(actual_seq_kvlen=[13]), ValueError,
                    "npu_nsa_select_attention: expected actual_seq_kvlen one entry per batch"),
    ]
    g = _entry("npu_nsa_select_attention_grad")

    def grad_args():
        (q, k, v, topk, *rest), kw = _select_args(torch.bfloat16)
        stats = _t(7, 4, 1, dtype=torch.float32, seed=7).abs().expand(7, 4, 8).contiguous()
        kw = dict(kw, actual_seq_qlen=[7], actual_seq_kvlen=[13])
        return (_t(7, 4, 8, dtype=torch.bfloat16, seed=8), q, k, v,
                _t(7, 4, 8, dtype=torch.bfloat16, seed=9), stats, stats + 1, topk, *rest), kw

    g.samples += [Sample("bf16", grad_args)]
    g.errors += [
        ErrorSample("stats_shape", lambda: (grad_args()[0][:5] + (torch.ones(7, 4, 1),)
                                            + grad_args()[0][6:], grad_args()[1]),
                    RuntimeError,
                    "npu_nsa_select_attention_grad: expected softmax_max shape"),
    ]


def _compress_attention_args(dtype=torch.float16, **kw):
    q = _t(9, 4, 16, dtype=dtype, seed=10)
    k = _t(13, 2, 16, dtype=dtype, seed=11)
    v = _t(13, 2, 8, dtype=dtype, seed=12)
    args = dict(actual_seq_qlen=[4, 9], actual_cmp_seq_kvlen=[6, 13],
                actual_sel_seq_kvlen=[2, 4])
    args.update(kw)
    return (q, k, v, 0.3, 4, 32, 16, 64, 2), args


def _compress_attention() -> None:
    e = _entry("npu_nsa_compress_attention")
    e.samples += [
        Sample("fp64_masks", lambda: _compress_attention_args(
            torch.float64, actual_seq_qlen=[9], actual_cmp_seq_kvlen=[13],
            actual_sel_seq_kvlen=[4], atten_mask=torch.ones(9, 13, dtype=torch.bool).triu(5),
            topk_mask=torch.eye(9, 4, dtype=torch.bool)), differentiable=True),
    ]
    e.errors += [
        ErrorSample("sel_len", lambda: _compress_attention_args(actual_sel_seq_kvlen=[2, 5]),
                    ValueError, "npu_nsa_compress_attention: expected actual_sel_seq_kvlen "
                                "CeilDiv"),
        ErrorSample("select_block_size", lambda: ((_t(9, 4, 16), _t(13, 2, 16), _t(13, 2, 8),
                                                   0.3, 4, 32, 16, 24, 2),
                                                  _compress_attention_args()[1]), ValueError,
                    "npu_nsa_compress_attention: expected select_block_size at least"),
        ErrorSample("mask_shape", lambda: _compress_attention_args(
            atten_mask=torch.ones(4, 7, dtype=torch.bool)), RuntimeError,
            "npu_nsa_compress_attention: expected atten_mask a shape of at least \\[5, 7\\]"),
    ]


_compress()
_select()
_compress_attention()


def _select_infer_args(layout="BSND", dtype=torch.float16, **kw):
    q = _t(2, 1, 4, 16, dtype=dtype, seed=13)
    if layout == "BSH":
        q = q.reshape(2, 1, 64)
    elif layout == "TND":
        q = q.reshape(2, 4, 16)
    k = _t(5, 8, 2, 16, dtype=dtype, seed=14)
    v = _t(5, 8, 32, dtype=dtype, seed=15)          # [blocks, page, N2 * Dv], Dv = 16
    topk = torch.tensor([[[0, 2], [1, -1]], [[1, 0], [0, 1]]], dtype=_I32)
    args = dict(layout=layout, block_table=torch.tensor([[4, 1, 0], [2, 3, 0]], dtype=_I32),
                actual_seq_kvlen=[21, 11])
    args.update(kw)
    return (q, k, v, topk, 0.3, 4, 2, 8, 2, 8), args


def _select_infer() -> None:
    e = _entry("npu_nsa_select_attention_infer")
    # one sample (its layouts and dtypes are covered in tests/ops/attention/test_nsa_infer.py)
    e.samples += [Sample("bsh_bf16", lambda: _select_infer_args("BSH", torch.bfloat16))]
    e.errors += [
        ErrorSample("layout", lambda: _select_infer_args(layout="BNSD"), ValueError,
                    "npu_nsa_select_attention_infer: expected layout one of"),
        ErrorSample("kv_len", lambda: _select_infer_args(actual_seq_kvlen=[25, 11]),
                    ValueError, "npu_nsa_select_attention_infer: expected actual_seq_kvlen "
                                "lengths in \\[0, 24\\]"),
        ErrorSample("atten_mask", lambda: _select_infer_args(
            atten_mask=torch.zeros(1, 8, dtype=torch.bool)), ValueError,
            "npu_nsa_select_attention_infer: expected atten_mask None"),
    ]


def _compress_infer_args(**kw):
    x = _t(3, 16, 2, 16, seed=16)
    args = dict(block_table=torch.tensor([[2, 0], [1, 0]], dtype=_I32),
                actual_seq_len=[32, 24], cache=torch.zeros(4, 2, 16, dtype=torch.float16))
    args.update(kw)
    return (x, _t(16, 2, seed=17), torch.tensor([3, 1], dtype=_I32), 16, 8, 16), args


def _compress_infer() -> None:
    e = _entry("npu_nsa_compress_infer.cache")
    e.samples += [Sample("fp16_two_batches", lambda: _compress_infer_args())]
    e.errors += [
        ErrorSample("cache_shape", lambda: _compress_infer_args(
            cache=torch.zeros(4, 32, dtype=torch.float16)), RuntimeError,
            "npu_nsa_compress_infer: expected cache a \\[slots, 2, 16\\] tensor"),
        ErrorSample("no_block_table", lambda: _compress_infer_args(block_table=None),
                    ValueError, "npu_nsa_compress_infer: expected block_table a tensor"),
    ]


_select_infer()
_compress_infer()


def _compress_attention_infer_args(**kw):
    q = _t(2, 4, 16, seed=18)
    k = _t(5, 8, 32, seed=19)                  # [blocks, page, N2 * D]
    v = _t(5, 8, 16, seed=20)                  # Dv = 8
    args = dict(block_table=torch.tensor([[3, 0, 4], [1, 2, 0]], dtype=_I32),
                actual_cmp_seq_kvlen=[20, 13])
    if kw.pop("one_batch", False):
        q, args = q[:1], dict(args, block_table=args["block_table"][:1],
                              actual_cmp_seq_kvlen=[20])
    args.update(kw)
    return (q, k, v, 0.25, 4, 2, 32, 4, 8, 32, 16), args


def _compress_attention_infer() -> None:
    e = _entry("npu_nsa_compress_attention_infer")
    e.samples += [Sample("tnd_fp16", lambda: _compress_attention_infer_args(one_batch=True))]
    e.errors += [
        ErrorSample("count", lambda: ((_t(2, 4, 16), _t(5, 8, 32), _t(5, 8, 16), 0.25, 4, 2, 32,
                                       15, 8, 32, 16), _compress_attention_infer_args()[1]),
                    ValueError, "npu_nsa_compress_attention_infer: expected select_block_count "
                                "at most each batch's selection block count \\(11\\)"),
        ErrorSample("topk_mask", lambda: _compress_attention_infer_args(
            topk_mask=torch.ones(1, 4, dtype=torch.bool)), ValueError,
            "npu_nsa_compress_attention_infer: expected topk_mask None"),
    ]


_compress_attention_infer()


def _softmax_lse_args(layout="BSND", **kw):
    if layout == "BSND":
        tensors = (_t(2, 3, 4, 16, dtype=torch.bfloat16, seed=21),
                   _t(2, 5, 1, 16, dtype=torch.bfloat16, seed=22),
                   _t(2, 3, 4, dtype=torch.float32, seed=23))
        return tensors, dict(kw)
    tensors = (_t(5, 4, 16, seed=24), _t(9, 2, 16, seed=25), _t(5, 4, seed=26))
    return tensors, dict(dict(actual_seq_qlen=[2, 5], actual_seq_klen=[4, 9], layout="TND"),
                         **kw)


def _softmax_lse() -> None:
    e = _entry("npu_dense_lightning_indexer_softmax_lse")
    e.samples += [Sample("tnd_mode0", lambda: _softmax_lse_args("TND", sparse_mode=0))]
    e.errors += [
        ErrorSample("sparse_mode", lambda: _softmax_lse_args(sparse_mode=1), ValueError,
                    "npu_dense_lightning_indexer_softmax_lse: expected sparse_mode 0"),
        ErrorSample("weights_shape", lambda: ((_t(2, 3, 4, 16), _t(2, 5, 1, 16), _t(2, 3, 3)),
                                              {}), RuntimeError,
                    "npu_dense_lightning_indexer_softmax_lse: expected weights shape"),
        ErrorSample("tnd_lengths", lambda: _softmax_lse_args("TND", actual_seq_klen=[4, 8]),
                    ValueError, "npu_dense_lightning_indexer_softmax_lse: expected "
                                "actual_seq_klen a last value"),
    ]


_softmax_lse()


def _dense_kl_args(**kw):
    stats = (torch.zeros(1, 2, 4, 1), torch.ones(1, 2, 4, 1), torch.full((1, 1, 4), 2.0),
             torch.full((1, 1, 4), 3.0))
    tensors = (_t(1, 4, 2, 16, seed=27), _t(1, 6, 2, 16, seed=28), _t(1, 4, 3, 16, seed=29),
               _t(1, 6, 1, 16, seed=30), _t(1, 4, 3, seed=31))
    return tensors + stats + (0.25,), dict(kw)


def _dense_kl() -> None:
    e = _entry("npu_dense_lightning_indexer_grad_kl_loss")
    e.samples += [Sample("bsnd_fp16_rope", lambda: _dense_kl_args(
        query_rope=_t(1, 4, 2, 8, seed=32), key_rope=_t(1, 6, 2, 8, seed=33)))]
    e.errors += [
        ErrorSample("sparse_mode", lambda: _dense_kl_args(sparse_mode=0), ValueError,
                    "npu_dense_lightning_indexer_grad_kl_loss: expected sparse_mode 3"),
        ErrorSample("stats_shape", lambda: (_dense_kl_args()[0][:5] + (torch.zeros(1, 2, 4),)
                                            + _dense_kl_args()[0][6:], {}), RuntimeError,
                    "npu_dense_lightning_indexer_grad_kl_loss: expected softmax_max shape"),
    ]


_dense_kl()
