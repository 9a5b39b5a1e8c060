"""Op database entries of the training-attention family (npu_fusion_attention and its grad)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_F64 = torch.float64


def _triu() -> torch.Tensor:
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


def _qkv(layout: str, dtype=torch.float32):
    b, n, nkv, s, d = 1, 2, 1, 5, 4
    shapes = {"BNSD": ((b, n, s, d), (b, nkv, s, d)), "BSND": ((b, s, n, d), (b, s, nkv, d)),
              "BSH": ((b, s, n * d), (b, s, nkv * d)), "SBH": ((s, b, n * d), (s, b, nkv * d)),
              "TND": ((s, n, d), (s, nkv, d))}[layout]
    return _g(*shapes[0], dtype=dtype), _g(*shapes[1], dtype=dtype), _g(*shapes[1], dtype=dtype)


def _tnd_kwargs() -> dict:
    return {"actual_seq_qlen": [2, 5], "actual_seq_kvlen": [2, 5]}


def _forward() -> None:
    e = _entry("npu_fusion_attention")
    for layout in ("BNSD", "BSND", "BSH", "SBH"):
        e.samples.append(Sample(f"{layout}_gqa", lambda layout=layout: (
            (*_qkv(layout), 2, layout), {"scale": 0.5})))
    e.samples.append(Sample("bnsd_causal_bf16", lambda: (
        (*_qkv("BNSD", torch.bfloat16), 2, "BNSD"),
        {"atten_mask": _triu(), "sparse_mode": 2, "scale": 0.5})))
    e.samples.append(Sample("tnd_right_down", lambda: (
        (*_qkv("TND"), 2, "TND"), {"atten_mask": _triu(), "sparse_mode": 3, **_tnd_kwargs()})))
    e.samples.append(Sample("dropout_fixed_seed", lambda: (
        (*_qkv("BNSD"), 2, "BNSD"), {"keep_prob": 0.5, "seed": 7, "offset": 1})))
    e.samples.append(Sample("grad_fp64_pse_band", lambda: (
        (*_qkv("BNSD", _F64), 2, "BNSD", _g(1, 2, 5, 5, dtype=_F64)),
        {"atten_mask": _triu(), "sparse_mode": 4, "pre_tockens": 2, "next_tockens": 1}),
        differentiable=True))
    e.errors += [
        ErrorSample("layout", lambda: ((*_qkv("BNSD"), 2, "NSD"), {}), ValueError,
                    "npu_fusion_attention: expected input_layout one of"),
        ErrorSample("keep_prob", lambda: ((*_qkv("BNSD"), 2, "BNSD"), {"keep_prob": 1.5}),
                    ValueError, r"npu_fusion_attention: expected keep_prob in \(0, 1\]"),
        ErrorSample("compressed_mask", lambda: (
            (*_qkv("BNSD"), 2, "BNSD"),
            {"atten_mask": torch.ones(5, 5, dtype=torch.bool), "sparse_mode": 3}),
            RuntimeError, "npu_fusion_attention: expected atten_mask the compressed"),
        ErrorSample("tnd_lengths", lambda: (
            (*_qkv("TND"), 2, "TND"), {"actual_seq_qlen": [2, 4], "actual_seq_kvlen": [2, 5]}),
            ValueError, "npu_fusion_attention: expected actual_seq_qlen to end at the token"),
        ErrorSample("dtype_mix", lambda: (
            (_qkv("BNSD")[0], *_qkv("BNSD", torch.float16)[1:], 2, "BNSD"), {}), TypeError,
            "npu_fusion_attention: expected key the same dtype as query"),
    ]


def _grad_kwargs(layout, q, k, v, extra=None):
    from npu_anywhere.ops.training_attention.fusion_attention import fusion_attention_reference
    extra = dict(extra or {})
    out, smax, ssum = fusion_attention_reference(q, k, v, 2, layout, **extra)[:3]
    extra.pop("scale", None)
    return {"softmax_max": smax, "softmax_sum": ssum, "attention_in": out, **extra}, out


def _grad_sample(layout, dtype=torch.float32, extra=None):
    q, k, v = _qkv(layout, dtype)
    kwargs, out = _grad_kwargs(layout, q, k, v, extra)
    return (q, k, v, torch.randn_like(out), 2, layout), kwargs


def _grad() -> None:
    e = _entry("npu_fusion_attention_grad")
    e.samples.append(Sample("bnsd_gqa", lambda: _grad_sample("BNSD")))
    e.samples.append(Sample("bsh_causal", lambda: _grad_sample(
        "BSH", extra={"atten_mask": _triu(), "sparse_mode": 2})))
    e.samples.append(Sample("tnd", lambda: _grad_sample("TND", extra=_tnd_kwargs())))
    e.samples.append(Sample("fp64_dropout", lambda: _grad_sample(
        "BNSD", _F64, extra={"keep_prob": 0.7, "seed": 3, "offset": 0})))
    e.errors += [
        ErrorSample("no_stats", lambda: ((*_qkv("BNSD"), _qkv("BNSD")[0], 2, "BNSD"), {}),
                    ValueError, "npu_fusion_attention_grad: expected attention_in a tensor"),
        ErrorSample("dy_shape", lambda: (
            (*_qkv("BNSD"), _g(1, 2, 4, 4), 2, "BNSD"), {}), RuntimeError,
            "npu_fusion_attention_grad: expected dy shape"),
    ]


def _mask_bits(count: int) -> torch.Tensor:
    """A bit-packed keep-mask of ``count`` elements (a fixed pattern, about 70 % kept)."""
    keep = torch.randn(count, generator=torch.Generator().manual_seed(count)) > -0.5
    keep = torch.cat([keep, keep.new_zeros((-count) % 128)]).view(-1, 8).to(torch.int64)
    return (keep * 2 ** torch.arange(8)).sum(1).to(torch.uint8)


def _dropout_mask() -> None:
    e = _entry("npu_fusion_attention")
    e.samples.append(Sample("grad_fp64_dropout_mask", lambda: (
        (*_qkv("BNSD", _F64), 2, "BNSD"),
        {"keep_prob": 0.7, "dropout_mask": _mask_bits(1 * 2 * 5 * 5), "seed": 5}),
        differentiable=True))
    g = _entry("_npu_fusion_attention_grad_dropout_mask")

    def sample(layout, extra=None):
        extra = {"keep_prob": 0.7, **(extra or {})}
        bits = _mask_bits(2 * 5 * 5 if layout != "TND" else 2 * (2 * 2 + 3 * 3))
        (q, k, v, dy, n, layout), kwargs = _grad_sample(layout, extra={**extra,
                                                                      "dropout_mask": bits})
        kwargs.pop("dropout_mask")
        return (q, k, v, dy, n, layout, bits), kwargs

    g.samples.append(Sample("bnsd_gqa", lambda: sample("BNSD")))
    g.samples.append(Sample("tnd_causal", lambda: sample(
        "TND", {"atten_mask": _triu(), "sparse_mode": 3, **_tnd_kwargs()})))
    g.errors += [
        ErrorSample("short_mask", lambda: (lambda s: ((*s[0][:6], s[0][6][:2]), s[1]))(
            sample("BNSD")), RuntimeError,
            "_npu_fusion_attention_grad_dropout_mask: expected dropout_mask at least"),
    ]


_forward()
_grad()
_dropout_mask()


def _lengths_t() -> dict:
    return {"actual_seq_qlen": torch.tensor([2, 5]), "actual_seq_kvlen": torch.tensor([2, 5])}


def _v3() -> None:
    e = _entry("npu_fusion_attention_v3")
    e.samples.append(Sample("BSND_gqa", lambda: ((*_qkv("BSND"), 2, "BSND"), {"scale": 0.5})))
    e.samples.append(Sample("tnd_causal", lambda: (
        (*_qkv("TND"), 2, "TND"), {"atten_mask": _triu(), "sparse_mode": 3, **_lengths_t()})))
    e.samples.append(Sample("grad_fp64_sbh_sink", lambda: (
        (*_qkv("SBH", _F64), 2, "SBH"), {"sink": _g(2, dtype=_F64)}), differentiable=True))
    e.errors += [
        ErrorSample("float_lengths", lambda: (
            (*_qkv("TND"), 2, "TND"),
            {"actual_seq_qlen": torch.tensor([2.0, 5.0]), "actual_seq_kvlen": torch.tensor([2, 5])}),
            TypeError, "npu_fusion_attention_v3: expected actual_seq_qlen a 1-D integer"),
        ErrorSample("sparse_mode", lambda: ((*_qkv("BNSD"), 2, "BNSD"), {"sparse_mode": -1}),
                    ValueError, r"npu_fusion_attention_v3: expected sparse_mode in \[0, 8\]"),
    ]
    g = _entry("npu_fusion_attention_grad_v3")

    def grad_sample(layout, extra=None, lengths=None):
        q, k, v = _qkv(layout)
        kwargs, out = _grad_kwargs(layout, q, k, v, extra if lengths is None else
                                   {**(extra or {}), **_tnd_kwargs()})
        if lengths is not None:
            kwargs.update(lengths)
        return (q, k, v, torch.randn_like(out), 2, layout), kwargs

    g.samples.append(Sample("bnsd", lambda: grad_sample("BNSD")))
    g.samples.append(Sample("tnd_seed_tensors", lambda: (lambda s: (s[0], {
        **s[1], "keep_prob": 0.9, "seed": torch.tensor([5]), "offset": torch.tensor([0])}))(
        grad_sample("TND", lengths=_lengths_t()))))
    g.errors += [
        ErrorSample("no_stats", lambda: ((*_qkv("BNSD"), _qkv("BNSD")[0], 2, "BNSD"), {}),
                    ValueError, "npu_fusion_attention_grad_v3: expected attention_in a tensor"),
    ]


_v3()


def _gen_mask() -> None:
    e = _entry("_npu_dropout_gen_mask.Tensor")
    e.samples += [
        Sample("bnss", lambda: ((_g(2, 3), [1, 2, 5, 7], 0.3, 11, 0), {})),
        Sample("flat_offset", lambda: ((_g(1), [300], 0.1, 5, 64), {"parallel": False})),
    ]
    e.errors += [
        ErrorSample("p", lambda: ((_g(1), [8], 1.5, 1, 0), {}), ValueError,
                    r"_npu_dropout_gen_mask: expected p in \[0, 1\]"),
        ErrorSample("size", lambda: ((_g(1), [4, -2], 0.5, 1, 0), {}), ValueError,
                    "_npu_dropout_gen_mask: expected size non-negative"),
    ]


_gen_mask()
