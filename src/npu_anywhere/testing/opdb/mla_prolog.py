"""Op database entries of the MLA prolog ops (npu_mla_prolog, _v2, _v3, _v3_functional)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

BF16 = torch.bfloat16


def mla_inputs(*, tokens=(2, 3), he=32, hcq=24, n=2, d=8, dr=16, hckv=32, blocks=4,
               block_size=8, nkv=1, scenario=(0, 0, 0), cache_mode="PA_BSND", seed=0,
               smooth=True):
    """(args, kwargs) of an npu_mla_prolog_v3 call: small random inputs of a scenario
    (weight_quant_mode, kv_cache_quant_mode, query_quant_mode), caches filled with a sentinel
    pattern, a cache_index that skips one token (PA modes)."""
    gen = torch.Generator().manual_seed(seed)
    wq, kvq, qq = scenario

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    def i8(*shape):
        return torch.randint(-100, 100, shape, generator=gen, dtype=torch.int8)

    def pos(*shape):
        return torch.rand(*shape, generator=gen) * 0.02 + 0.005

    t = 1
    for s in tokens:
        t *= s
    x = i8(*tokens, he) if wq == 2 else rnd(*tokens, he).to(BF16)
    w_dq = i8(he, hcq) if wq == 2 else rnd(he, hcq, scale=he ** -0.5).to(BF16)
    w_uq_qr = i8(hcq, n * (d + dr)) if wq else rnd(hcq, n * (d + dr), scale=hcq ** -0.5).to(BF16)
    w_uk = rnd(n, d, hckv, scale=d ** -0.5).to(BF16)
    w_dkv_kr = i8(he, hckv + dr) if wq == 2 else rnd(he, hckv + dr, scale=he ** -0.5).to(BF16)
    gamma_cq = (torch.rand(hcq, generator=gen) + 0.5).to(BF16)
    gamma_ckv = (torch.rand(hckv, generator=gen) + 0.5).to(BF16)
    sin = (torch.rand(*tokens, dr, generator=gen) * 2 - 1).to(BF16)
    cos = (torch.rand(*tokens, dr, generator=gen) * 2 - 1).to(BF16)
    if cache_mode in ("BSND", "TND"):
        lead = tokens
    else:
        lead = (blocks, block_size)
    kv_dtype = torch.int8 if kvq else BF16
    kr_dtype = torch.int8 if kvq == 2 else BF16
    kv_cache = torch.full(lead + (nkv, hckv), 7, dtype=kv_dtype)
    kr_cache = torch.full(lead + (nkv, dr), 5, dtype=kr_dtype)
    kw = dict(cache_mode=cache_mode, weight_quant_mode=wq, kv_cache_quant_mode=kvq,
              query_quant_mode=qq)
    total = blocks * block_size
    if cache_mode in ("PA_BSND", "PA_NZ"):
        slots = torch.randperm(total, generator=gen)[:t]
        if slots.numel():
            slots[min(1, slots.numel() - 1)] = -1
        kw["cache_index"] = slots.reshape(tokens) if slots.numel() == t else \
            torch.full(tokens, -1, dtype=torch.int64)
    elif cache_mode in ("PA_BLK_BSND", "PA_BLK_NZ"):
        ids = torch.randperm(blocks, generator=gen)
        if len(tokens) == 2:
            pages = -(-tokens[1] // block_size)
            kw["cache_index"] = ids[:tokens[0] * pages].reshape(tokens[0], pages)
        else:
            lens = torch.tensor([t - t // 2, t // 2])
            kw["actual_seq_len"] = torch.cumsum(lens, 0).to(torch.int32)
            pages = int(((lens + block_size - 1) // block_size).sum())
            kw["cache_index"] = ids[:pages]
    if wq:
        kw["dequant_scale_w_uq_qr"] = pos(1, n * (d + dr))
        if smooth:
            kw["smooth_scales_cq"] = torch.rand(1, hcq, generator=gen) + 0.5
    if wq == 2:
        kw["dequant_scale_x"] = pos(t, 1)
        kw["dequant_scale_w_dq"] = pos(1, hcq)
        kw["dequant_scale_w_dkv_kr"] = pos(1, hckv + dr)
    if kvq == 1:
        kw["quant_scale_ckv"] = torch.tensor([40.0])
    elif kvq == 2:
        kw["quant_scale_ckv"] = torch.rand(1, hckv, generator=gen) * 40 + 20
        kw["quant_scale_ckr"] = torch.rand(1, dr, generator=gen) * 40 + 20
    args = (x, w_dq, w_uq_qr, w_uk, w_dkv_kr, gamma_cq, gamma_ckv, sin, cos, kv_cache, kr_cache)
    return args, kw


def v1v2_inputs(version=2, **kw):
    """(args, kwargs) of an npu_mla_prolog / _v2 call (cache_index positional, no modes)."""
    args, kwargs = mla_inputs(**kw)
    index = kwargs.pop("cache_index")
    for key in ("weight_quant_mode", "kv_cache_quant_mode", "query_quant_mode",
                "actual_seq_len"):
        kwargs.pop(key, None)
    return args[:9] + (index,) + args[9:], kwargs


def _with(make, **changes):
    args, kwargs = make()
    kwargs.update(changes)
    return args, kwargs


def _v3_entry(name, functional=False):
    e = _entry(name)
    e.samples.append(Sample("PA_BSND_bf16_norm_out", lambda: _with(
        lambda: mla_inputs(), query_norm_flag=True, qc_qr_scale=0.5, kc_scale=2.0)))
    if functional:      # shares v3's code: its one more sample is the int8 full quant
        e.samples[0] = Sample("TND_int8_full_quant_pertensor", lambda: _with(lambda: mla_inputs(
            tokens=(5,), scenario=(2, 1, 1), cache_mode="TND"), query_norm_flag=True))
    else:
        e.samples.append(Sample("PA_NZ_int8_uq_qr_perchannel_cache", lambda: mla_inputs(
            scenario=(1, 2, 0), cache_mode="PA_NZ", dr=32)))
    e.errors += [
        ErrorSample("uk_shape", lambda: _swap(mla_inputs(), 3, torch.zeros(2, 4, 32, dtype=BF16)),
                    RuntimeError, f"{name}: expected weight_uq_qr the shape"),
        ErrorSample("mode_combo", lambda: _with(lambda: mla_inputs(), kv_cache_quant_mode=1),
                    ValueError, f"{name}: expected .weight_quant_mode, kv_cache_quant_mode, "
                    "query_quant_mode. one of the documented"),
        ErrorSample("pergroup", lambda: _with(lambda: mla_inputs(scenario=(1, 2, 0)),
                                              kv_cache_quant_mode=3),
                    NotImplementedError, f"{name}: expected .weight_quant_mode"),
        ErrorSample("cache_dtype", lambda: _swap(mla_inputs(), 9,
                                                 torch.zeros(4, 8, 1, 32, dtype=torch.int8)),
                    TypeError,
                    f"{name}: expected kv_cache dtype in .'bfloat16'. .kv_cache_quant_mode=0."),
        ErrorSample("no_index", lambda: _with(lambda: mla_inputs(), cache_index=None),
                    ValueError, f"{name}: expected cache_index a tensor"),
        ErrorSample("missing_scale", lambda: _with(lambda: mla_inputs(scenario=(1, 0, 0)),
                                                   dequant_scale_w_uq_qr=None),
                    ValueError, f"{name}: expected dequant_scale_w_uq_qr a tensor"),
    ]


def _swap(call, i, value):
    args, kwargs = call
    args = list(args)
    args[i] = value
    return tuple(args), kwargs


_v3_entry("npu_mla_prolog_v3")
_v3_entry("npu_mla_prolog_v3_functional", functional=True)


def _v1v2_entries():
    e = _entry("npu_mla_prolog")
    e.samples += [
        Sample("PA_BSND_int8_uq_qr_perchannel_cache", lambda: v1v2_inputs(
            1, tokens=(4,), scenario=(1, 2, 0))),
    ]
    e.errors += [
        ErrorSample("int8_token_x", lambda: v1v2_inputs(1, scenario=(2, 0, 0)), TypeError,
                    "npu_mla_prolog: expected token_x dtype in .'bfloat16'."),
        ErrorSample("tnd_mode", lambda: _with(lambda: v1v2_inputs(1), cache_mode="TND"),
                    ValueError, "npu_mla_prolog: expected cache_mode one of .'PA_BSND', 'PA_NZ'."),
    ]
    e = _entry("npu_mla_prolog_v2")
    e.samples += [
        Sample("PA_BSND_int8_full_quant_pertensor", lambda: v1v2_inputs(
            2, tokens=(5,), scenario=(2, 1, 1))),
    ]
    e.errors += [
        ErrorSample("index_shape", lambda: _swap(v1v2_inputs(2), 9,
                                                 torch.zeros(6, dtype=torch.int64)),
                    RuntimeError, "npu_mla_prolog_v2: expected cache_index the shape .2, 3."),
        ErrorSample("pertensor_scale_shape", lambda: _with(
            lambda: v1v2_inputs(2, tokens=(5,), scenario=(2, 1, 1)),
            quant_scale_ckv=torch.ones(2, 32)), RuntimeError,
            "npu_mla_prolog_v2: expected quant_scale_ckv a single value or the shape"),
    ]


_v1v2_entries()
