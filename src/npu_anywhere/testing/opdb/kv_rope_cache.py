"""Op database entries of the kv_rope_cache family (npu_kv_rmsnorm_rope_cache, _v2,
_v2_functional).

Samples carry valid index values (checked eagerly, which FakeTensor cannot do); error samples
are metadata errors only.  Caches are passed positionally (the generic compile test clones
positional args).  float8 caches are tested in tests/ops/kv_rope_cache/ only (opcheck
multiplies tensors, which PyTorch does not implement for float8 on CPU).
"""

from __future__ import annotations

import math

import torch

from . import ErrorSample, Sample, entry as _entry

NAMES = ("npu_kv_rmsnorm_rope_cache", "_npu_kv_rmsnorm_rope_cache_inplace",
         "npu_kv_rmsnorm_rope_cache_v2", "npu_kv_rmsnorm_rope_cache_v2_functional")


def _make(mode="PA_BNSD", dtype=torch.float16, *, b=2, s=3, dv=32, dk=32, bs=32,
          k_dtype=None, c_dtype=None, quant=False, is_output_kv=True):
    g = torch.Generator().manual_seed(1)
    kv = torch.randn(b, 1, s, dv + dk, generator=g).to(dtype)
    gamma = (torch.rand(dv, generator=g) + 0.5).to(dtype)
    cos = torch.randn(b, 1, s, dk, generator=g).to(dtype)
    sin = torch.randn(b, 1, s, dk, generator=g).to(dtype)
    k_dtype, c_dtype = k_dtype or dtype, c_dtype or dtype
    if mode == "Norm":
        kc = torch.zeros(b, 1, s + 2, dk).to(k_dtype)
        cc = torch.zeros(b, 1, s + 2, dv).to(c_dtype)
        index = torch.stack([torch.randperm(s + 2, generator=g)[:s] for _ in range(b)])
        index[0, 0] = -1
    else:
        pages = math.ceil(s / bs)
        nb = b * pages + 1
        kc = torch.zeros(nb, bs, 1, dk).to(k_dtype)
        cc = torch.zeros(nb, bs, 1, dv).to(c_dtype)
        if "BLK" in mode:
            index = torch.randperm(nb, generator=g)[:b * pages] * bs
        else:
            index = torch.randperm(nb * bs, generator=g)[:b * s]
            index[0] = -1
    kwargs = {"cache_mode": mode, "is_output_kv": is_output_kv}
    if quant:
        kwargs.update(k_rope_scale=torch.rand(dk) + 1, c_kv_scale=torch.rand(dv) + 1,
                      k_rope_offset=torch.randn(dk))
    return (kv, gamma, cos, sin, index.to(torch.int64), kc, cc), kwargs


def _samples(e):
    for mode in ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"):
        e.samples.append(Sample(f"{mode}_fp16", lambda mode=mode: _make(mode)))
    e.samples += [
        Sample("PA_BNSD_bf16", lambda: _make("PA_BNSD", torch.bfloat16)),
        Sample("PA_NZ_fp32", lambda: _make("PA_NZ", torch.float32)),
        Sample("PA_NZ_int8_both", lambda: _make("PA_NZ", k_dtype=torch.int8,
                                                c_dtype=torch.int8, quant=True)),
        Sample("PA_BLK_NZ_int8_k", lambda: _make("PA_BLK_NZ", k_dtype=torch.int8, quant=True,
                                                 s=40)),
        Sample("Norm_no_output_kv", lambda: _make("Norm", is_output_kv=False)),
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
        ErrorSample("block_size_8", lambda: _make("PA_BNSD", bs=8), ValueError,
                    f"{op}: expected k_cache a BlockSize"),
        ErrorSample("nz_dk_8", lambda: _make("PA_NZ", dk=8, dv=56, bs=16), ValueError,
                    f"{op}: expected k_cache a last dim whose bytes"),
    ]


for _name in NAMES:
    _e = _entry(_name)
    _samples(_e)
    _errors(_e, "npu_kv_rmsnorm_rope_cache" if _name.startswith("_") else _name)
