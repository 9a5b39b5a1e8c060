"""Op database entries: npu_block_sparse_attention and npu_fused_floyd_attention (+ backwards)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F64 = torch.float64


# -- block sparse attention --------------------------------------------------------------------

def _bsa_bnsd(dtype=torch.float16, d=64):
    q = _g(1, 2, 5, d, dtype=dtype)
    k, v = _g(1, 1, 130, d, dtype=dtype), _g(1, 1, 130, d, dtype=dtype)
    mask = torch.tensor([[[[1, 0], [1, 1], [0, 1]]] * 2], dtype=torch.int8)   # [1, 2, 3, 2]
    return q, k, v, mask


def _bsa_tnd(dtype=torch.float16):
    q = _g(6, 2, 64, dtype=dtype)
    k, v = _g(132, 1, 64, dtype=dtype), _g(132, 1, 64, dtype=dtype)
    mask = torch.tensor([[[[1, 1]], [[0, 1]]], [[[1, 0]], [[1, 1]]]], dtype=torch.int8)
    return q, k, v, mask, {"actual_seq_lengths": [4, 2], "actual_seq_lengths_kv": [130, 2]}


_BNSD = {"q_input_layout": "BNSD", "kv_input_layout": "BNSD", "num_key_value_heads": 1}


def _block_sparse() -> None:
    e = _entry("npu_block_sparse_attention")
    e.samples.append(Sample("bnsd_gqa_fp16", lambda: (
        (*_bsa_bnsd(), [2, 128]), {**_BNSD, "scale_value": 0.125, "softmax_lse_flag": 1})))
    e.samples.append(Sample("bnsd_bf16_lengths", lambda: (
        (*_bsa_bnsd(torch.bfloat16), [2, 128]),
        {**_BNSD, "scale_value": 0.125, "inner_precise": 0, "actual_seq_lengths": [4],
         "actual_seq_lengths_kv": [129]})))
    e.samples.append(Sample("tnd_two_batches", lambda: (lambda q, k, v, m, kw: (
        (q, k, v, m, [4, 128]), {"scale_value": 0.1, **kw}))(*_bsa_tnd())))
    # the mask goes by keyword: a differentiable sample's positional tensors all need grad
    e.samples.append(Sample("grad_fp64_bnsd", lambda: (lambda q, k, v, m: (
        (q, k, v), {"block_sparse_mask": m, "block_shape": [2, 128], **_BNSD,
                    "scale_value": 0.2, "inner_precise": 0}))(*_bsa_bnsd(_F64)),
        differentiable=True))
    e.errors += [
        ErrorSample("block_y", lambda: ((*_bsa_bnsd(), [2, 64]), _BNSD), ValueError,
                    r"npu_block_sparse_attention: expected block_shape blockShapeY"),
        ErrorSample("mask_shape", lambda: ((*_bsa_bnsd(), [4, 128]), _BNSD), RuntimeError,
                    "npu_block_sparse_attention: expected block_sparse_mask shape"),
        ErrorSample("bf16_precise", lambda: ((*_bsa_bnsd(torch.bfloat16), [2, 128]), _BNSD),
                    ValueError, "npu_block_sparse_attention: expected inner_precise 0"),
        ErrorSample("tnd_no_lengths", lambda: ((*_bsa_tnd()[:4], [4, 128]), {}), ValueError,
                    "npu_block_sparse_attention: expected actual_seq_lengths a list"),
    ]
    g = _entry("npu_block_sparse_attention_backward")

    def grad_sample(dtype=torch.float16):
        from npu_anywhere.ops.training_attention.block_sparse_attention import (
            block_sparse_attention_reference)
        q, k, v, mask = _bsa_bnsd(dtype, d=128)
        out, lse = block_sparse_attention_reference(q, k, v, mask, [2, 128], **_BNSD,
                                                    scale_value=0.1, inner_precise=0)
        return ((torch.randn_like(out), q, k, v, out, lse, mask, [2, 128], None, None, "BNSD",
                 "BNSD", 1, 0.1), {})

    g.samples.append(Sample("bnsd_fp16", grad_sample))
    g.samples.append(Sample("bnsd_bf16", lambda: grad_sample(torch.bfloat16)))
    g.errors += [
        ErrorSample("lse_shape", lambda: (lambda a: (
            (*a[0][:5], a[0][5][..., :2, :], *a[0][6:]), {}))(grad_sample()), RuntimeError,
            "npu_block_sparse_attention_backward: expected softmax_lse shape"),
    ]


# -- fused floyd attention ---------------------------------------------------------------------

def _floyd(dtype=torch.bfloat16, b=1, h=2, m=3, n=4, k=5, d=32):
    return (_g(b, h, m, n, d, dtype=dtype), _g(b, h, m, k, d, dtype=dtype),
            _g(b, h, m, k, d, dtype=dtype), _g(b, h, k, n, d, dtype=dtype),
            _g(b, h, k, n, d, dtype=dtype))


def _floyd_mask(b=1, m=3, k=5):
    mask = torch.zeros(b, 1, m, 1, k, dtype=torch.bool)
    mask[..., 1:, :, 3:] = True
    return mask


def _fused_floyd() -> None:
    e = _entry("npu_fused_floyd_attention")
    e.samples.append(Sample("bf16_mask", lambda: (
        _floyd(), {"atten_mask": _floyd_mask(), "scale_value": 0.2})))
    e.samples.append(Sample("fp16_no_mask", lambda: (_floyd(torch.float16), {})))
    e.samples.append(Sample("grad_fp64_uint8_mask", lambda: (
        _floyd(_F64, h=1, m=2, n=3, k=4), {"atten_mask": _floyd_mask(m=2, k=4).to(torch.uint8),
                                           "scale_value": 0.3}), differentiable=True))
    e.errors += [
        ErrorSample("k_jk_shape", lambda: ((*_floyd()[:3], *_floyd(k=6)[3:]), {}), RuntimeError,
                    "npu_fused_floyd_attention: expected key_jk shape"),
        ErrorSample("head_dim", lambda: (_floyd(d=16), {}), ValueError,
                    r"npu_fused_floyd_attention: expected query_ik a head dim D in \[32, 256\]"),
        ErrorSample("mask_dtype", lambda: (_floyd(), {"atten_mask": _floyd_mask().float()}),
                    TypeError, "npu_fused_floyd_attention: expected atten_mask dtype"),
    ]
    g = _entry("npu_fused_floyd_attention_backward")

    def grad_sample(dtype=torch.bfloat16, mask=True):
        from npu_anywhere.ops.training_attention.floyd_attention import (
            fused_floyd_attention_reference)
        ins = _floyd(dtype)
        kw = {"atten_mask": _floyd_mask()} if mask else {}
        smax, ssum, out = fused_floyd_attention_reference(*ins, scale_value=0.2, **kw)
        return (torch.randn_like(out), *ins, out, smax, ssum), {**kw, "scale_value": 0.2}

    g.samples.append(Sample("bf16_mask", grad_sample))
    g.samples.append(Sample("fp16", lambda: grad_sample(torch.float16, mask=False)))
    g.errors += [
        ErrorSample("stats_shape", lambda: (lambda a: (
            (*a[0][:7], a[0][7][..., :4], a[0][8]), a[1]))(grad_sample()), RuntimeError,
            "npu_fused_floyd_attention_backward: expected softmax_max shape"),
    ]


_block_sparse()
_fused_floyd()
