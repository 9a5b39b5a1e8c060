"""Op database entries of the kv_rope_cache family (npu_kv_rmsnorm_rope_cache, _v2,
_v2_functional).

Samples carry valid index values (checked eagerly, which FakeTensor cannot do); error samples
are metadata errors only.  Caches are passed positionally (the generic compile test clones
positional args).  float8 caches are tested in tests/ops/kv_rope_cache/ only (opcheck
multiplies tensors, which PyTorch does not implement for float8 on CPU); hifloat8 caches are
uint8 tensors with ``k_cache_dtype`` / ``ckv_cache_dtype`` = 290, which only the _v2 ops take.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from . import ErrorSample, Sample, entry as _entry

NAMES = ("npu_kv_rmsnorm_rope_cache", "_npu_kv_rmsnorm_rope_cache_inplace",
         "npu_kv_rmsnorm_rope_cache_v2", "npu_kv_rmsnorm_rope_cache_v2_functional")
WITH_DTYPE_CODES = NAMES[2:]


def _make(mode="PA_BNSD", dtype=torch.float16, *, b=2, s=3, dv=32, dk=32, bs=32,
          k_dtype=None, c_dtype=None, quant=False, is_output_kv=True, v_heads=None,
          hifloat8=(False, False)):
    """V1 inputs, or with ``v_heads`` = N the V2 path's: kv [B, N, S, 192], v [B, N, S, 128],
    cos [B, N, S, 64], caches of widths 192 / 128 and N heads (``quant``: int8 per-head scales
    and offsets for the quantized caches).  ``hifloat8``: (k, ckv) caches of uint8 codes,
    with their dtype code and a scale (k also an offset)."""
    g = torch.Generator().manual_seed(1)
    n = v_heads or 1
    if v_heads:
        kv = torch.randn(b, n, s, 192, generator=g).to(dtype)
        v = torch.randn(b, n, s, 128, generator=g).to(dtype)
        gamma = (torch.rand(192, generator=g) + 0.5).to(dtype)
        rope, dk, dv = 64, 192, 128
    else:
        kv = torch.randn(b, 1, s, dv + dk, generator=g).to(dtype)
        gamma = (torch.rand(dv, generator=g) + 0.5).to(dtype)
        rope = dk
    cos = torch.randn(b, n, s, rope, generator=g).to(dtype)
    sin = torch.randn(b, n, s, rope, generator=g).to(dtype)
    k_dtype, c_dtype = k_dtype or dtype, c_dtype or dtype
    if mode == "Norm":
        kc = torch.zeros(b, n, s + 2, dk).to(k_dtype)
        cc = torch.zeros(b, n, s + 2, dv).to(c_dtype)
        index = torch.stack([torch.randperm(s + 2, generator=g)[:s] for _ in range(b)])
        index[0, 0] = -1
    else:
        pages = math.ceil(s / bs)
        nb = b * pages + 1
        kc = torch.zeros(nb, bs, n, dk).to(k_dtype)
        cc = torch.zeros(nb, bs, n, dv).to(c_dtype)
        if "BLK" in mode:
            index = torch.randperm(nb, generator=g)[:b * pages] * bs
        else:
            index = torch.randperm(nb * bs, generator=g)[:b * s]
            index[0] = -1
    kwargs = {"cache_mode": mode, "is_output_kv": is_output_kv}
    if v_heads:
        kwargs["v"] = v
        for name, oname, cache, d in (("k_rope_scale", "k_rope_offset", kc, dk),
                                      ("c_kv_scale", "c_kv_offset", cc, dv)):
            if quant and cache.dtype == torch.int8:
                kwargs.update({name: torch.rand(n, d) + 1, oname: torch.randn(n, d)})
    elif quant:
        kwargs.update(k_rope_scale=torch.rand(dk) + 1, c_kv_scale=torch.rand(dv) + 1,
                      k_rope_offset=torch.randn(dk))
    if hifloat8[0]:
        kwargs.update(k_cache_dtype=dtypes.HIFLOAT8, k_rope_scale=torch.rand(dk) * 100,
                      k_rope_offset=torch.randn(dk))
    if hifloat8[1]:
        kwargs.update(ckv_cache_dtype=dtypes.HIFLOAT8, c_kv_scale=torch.rand(1) + 0.5)
    return (kv, gamma, cos, sin, index.to(torch.int64), kc, cc), kwargs


def _all_padding(sample):
    """The same call with every index -1: a batch of padding only, which writes nothing."""
    args, kwargs = sample
    args[4].fill_(-1)
    return args, kwargs


def _samples(e):
    for mode in ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"):
        e.samples.append(Sample(f"{mode}_fp16", lambda mode=mode: _make(mode)))
    e.samples += [
        Sample("PA_BNSD_bf16", lambda: _make("PA_BNSD", torch.bfloat16)),
        Sample("PA_NZ_fp64", lambda: _make("PA_NZ", torch.float64)),
        Sample("Norm_all_padding", lambda: _all_padding(_make("Norm"))),
        Sample("PA_NZ_int8_both", lambda: _make("PA_NZ", k_dtype=torch.int8,
                                                c_dtype=torch.int8, quant=True)),
        Sample("PA_BLK_NZ_int8_k", lambda: _make("PA_BLK_NZ", k_dtype=torch.int8, quant=True,
                                                 s=40)),
        Sample("Norm_no_output_kv", lambda: _make("Norm", is_output_kv=False)),
        # the V2 path (v given)
        Sample("v2_PA_BNSD_fp16_n2", lambda: _make("PA_BNSD", bs=16, v_heads=2)),
        Sample("v2_Norm_bf16_n4", lambda: _make("Norm", torch.bfloat16, v_heads=4)),
        Sample("v2_PA_NZ_int8_both_n2", lambda: _make("PA_NZ", k_dtype=torch.int8,
                                                      c_dtype=torch.int8, quant=True,
                                                      v_heads=2)),
        Sample("v2_Norm_int8_k_n1", lambda: _make("Norm", k_dtype=torch.int8, quant=True,
                                                  v_heads=1)),
        Sample("v2_PA_BLK_NZ_fp16_n4", lambda: _make("PA_BLK_NZ", bs=16, s=20, v_heads=4)),
    ]


def _hifloat8_samples(e):
    u8 = torch.uint8
    e.samples += [
        Sample("PA_NZ_hifloat8_both", lambda: _make("PA_NZ", k_dtype=u8, c_dtype=u8,
                                                    hifloat8=(True, True))),
        Sample("Norm_hifloat8_ckv_bf16", lambda: _make("Norm", torch.bfloat16, c_dtype=u8,
                                                       hifloat8=(False, True))),
        Sample("PA_BLK_BNSD_hifloat8_k", lambda: _make("PA_BLK_BNSD", k_dtype=u8, s=40,
                                                       hifloat8=(True, False))),
    ]


def _hifloat8_errors(e, op):
    e.errors += [
        ErrorSample("hifloat8_code_2byte_cache", lambda: _make(hifloat8=(True, False)),
                    TypeError, f"{op}: expected k_cache_dtype a dtype code of 2-byte elements"),
        ErrorSample("hifloat8_nz_dk_16", lambda: _make("PA_NZ", dk=16, k_dtype=torch.uint8,
                                                       hifloat8=(True, False)),
                    ValueError, f"{op}: expected k_cache a last dim whose bytes"),
    ]


def _errors(e, op):
    def with_(mutate, **kw):
        def make():
            args, kwargs = _make()
            args = list(args)
            mutate(args)
            kwargs.update(kw)
            return tuple(args), kwargs
        return make
    e.errors += [
        ErrorSample("bad_mode", with_(lambda a: None, cache_mode="BNSD"), ValueError,
                    f"{op}: expected cache_mode one of"),
        ErrorSample("int32_index", with_(lambda a: a.__setitem__(4, a[4].int())), TypeError,
                    f"{op}: expected index dtype"),
        ErrorSample("heads_2", with_(lambda a: a.__setitem__(0, torch.cat([a[0], a[0]], 1))),
                    ValueError, f"{op}: expected kv a head number"),
        ErrorSample("int8_cache_no_scale",
                    with_(lambda a: a.__setitem__(5, a[5].to(torch.int8))), ValueError,
                    f"{op}: expected k_rope_scale a float32 tensor"),
        ErrorSample("fp32_kv", lambda: _make("PA_NZ", torch.float32), TypeError,
                    f"{op}: expected kv dtype in"),
        ErrorSample("block_size_8", lambda: _make("PA_BNSD", bs=8), ValueError,
                    f"{op}: expected k_cache a BlockSize"),
        ErrorSample("nz_dk_8", lambda: _make("PA_NZ", dk=8, dv=56, bs=16), ValueError,
                    f"{op}: expected k_cache a last dim whose bytes"),
    ]

    def v2_with(mutate, **kw):
        def make():
            args, kwargs = _make(bs=16, v_heads=2)
            args = list(args)
            mutate(args, kwargs)
            kwargs.update(kw)
            return tuple(args), kwargs
        return make
    e.errors += [
        ErrorSample("v2_v_dv_64", v2_with(lambda a, k: k.update(v=k["v"][..., :64])),
                    ValueError, f"{op}: expected v a last dim of 128"),
        ErrorSample("v2_v_dtype", v2_with(lambda a, k: k.update(v=k["v"].float())),
                    TypeError, f"{op}: expected v the same dtype as kv"),
        ErrorSample("v2_v_tokens", v2_with(lambda a, k: k.update(v=k["v"][:, :, :2])),
                    RuntimeError, f"{op}: expected v kv's"),
        ErrorSample("v2_heads_3", v2_with(lambda a, k: a.__setitem__(0, a[0][:, :1].expand(
            -1, 3, -1, -1))), ValueError, f"{op}: expected kv a head number"),
        ErrorSample("v2_gamma_128", v2_with(lambda a, k: a.__setitem__(1, a[1][:128])),
                    RuntimeError, f"{op}: expected gamma kv's last dim"),
        ErrorSample("v2_float_cache_scale", v2_with(lambda a, k: None,
                                                    c_kv_scale=torch.ones(2, 128)),
                    ValueError, f"{op}: expected c_kv_scale None when ckv_cache is not"),
        ErrorSample("v2_scale_1d_n2", v2_with(lambda a, k: a.__setitem__(5, a[5].to(torch.int8)),
                                              k_rope_scale=torch.ones(192)),
                    RuntimeError, f"{op}: expected k_rope_scale shape .2, 192. .\\[N, D\\]"),
        ErrorSample("v2_cos_bcast_nz", v2_with(lambda a, k: (a.__setitem__(2, a[2][:, :, :1]),
                                                             a.__setitem__(3, a[3][:, :, :1])),
                                               cache_mode="PA_NZ"),
                    RuntimeError, f"{op}: expected cos shape .2, 2, 3, 64. with cache_mode"),
    ]


for _name in NAMES:
    _e = _entry(_name)
    _samples(_e)
    _errors(_e, "npu_kv_rmsnorm_rope_cache" if _name.startswith("_") else _name)
    if _name in WITH_DTYPE_CODES:
        _hifloat8_samples(_e)
        _hifloat8_errors(_e, _name)
