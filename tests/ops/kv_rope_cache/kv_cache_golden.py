"""Goldens and input builders for the npu_kv_rmsnorm_rope_cache tests (test_kv_rmsnorm_rope_cache*.py),
written from the documentation.

Spec (seed 002 aclnnKvRmsNormRopeCache; op-plugin torch_npu-npu_kv_rmsnorm_rope_cache.md and
test_npu_kv_rms_norm_rope_cache.py)::

    y       = kv[..., :Dv] / sqrt(mean(kv[..., :Dv]^2) + eps) * gamma       -> ckv_cache
    x       = kv[..., Dv:];  k = cat(x[0::2], x[1::2])
    k_embed = k * cos + cat(-k[Dk/2:], k[:Dk/2]) * sin                     -> k_cache
    quantized cache: clip(round_half_even(value * scale + offset)) (int8), float8 RNE,
    hifloat8 (uint8 codes, _v2 ops' k_cache_dtype=290): the CANN goldens' en_dtypes cast
    Norm: cache[b, 0, index[b, s]];  PA/PA_BNSD/PA_NZ: slot index[b*S+s];
    PA_BLK_*: block index[b*P + s//bs] // bs, offset s % bs;  -1 skips
    NZ: cache memory = [nb, 1, D // ld, bs, ld], ld = 32 // element size

V2 path (v given; hicann/ops-transformer docs/aclnnKvRmsNormRopeCacheV2.md formulas (1)-(5))::

    kv [B, N, S, 192], v [B, N, S, 128], N in {1, 2, 4, 8}, cos/sin [B, N, S, 64]
    y       = kv / sqrt(mean(kv^2) + eps) * gamma (all 192);  x = y[..., :64]
    k_embed = cat(rope(cat(x[0::2], x[1::2])), y[..., 64:])                -> k_cache
    v                                                                       -> ckv_cache
    int8 only; scale/offset [N, D] per head; every head of a token goes to the token's slot
    outputs: (k_embed, v); zeros in 'Norm' without a quantized cache

Goldens are Python loops over tokens in float64; caches start filled with a sentinel so that
every slot the call does not name is checked unchanged, bit for bit.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import npu_anywhere as na
from npu_anywhere import dtypes as npu_dtypes
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))

from quant_goldens import assert_hifloat8_near, hifloat8_golden  # noqa: E402

OP = "npu_kv_rmsnorm_rope_cache: expected"
V2 = "npu_kv_rmsnorm_rope_cache_v2: expected"
HIF8 = npu_dtypes.HIFLOAT8
_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
SENT = {torch.float16: 9.0, torch.bfloat16: 9.0, torch.float32: 9.0, torch.float64: 9.0,
        torch.int8: 77, torch.uint8: 77, torch.float8_e4m3fn: 9.0, torch.float8_e5m2: 9.0}


def bits(t):
    return t.view(_INT[t.element_size()])


def golden_rows(kv, gamma, cos, sin, eps):
    """(k_embed, y) float64 [B, 1, S, Dk] / [B, 1, S, Dv], straight from the doc formulas."""
    kv, gamma, cos, sin = (t.double() for t in (kv, gamma, cos, sin))
    dv = gamma.shape[0]
    x = kv[..., :dv]
    rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    y = x / rms * gamma
    r = kv[..., dv:]
    x1, x2 = r[..., ::2], r[..., 1::2]
    k = torch.cat((x1, x2), -1) * cos.expand(*r.shape[:3], -1) + \
        torch.cat((-x2, x1), -1) * sin.expand(*r.shape[:3], -1)
    return k, y


def golden_v2(kv, gamma, cos, sin, v, eps):
    """(k_embed, v) float64 [B, N, S, 192] / [B, N, S, 128] from the V2 doc formulas."""
    kv, gamma, cos, sin = (t.double() for t in (kv, gamma, cos, sin))
    y = kv / torch.sqrt((kv * kv).mean(-1, keepdim=True) + eps) * gamma
    x = y[..., :64]
    x1, x2 = x[..., ::2], x[..., 1::2]
    rope = torch.cat((x1, x2), -1) * cos + torch.cat((-x2, x1), -1) * sin
    return torch.cat((rope, y[..., 64:]), -1), v.double()


def per_head(t):
    """A quant parameter as float64 broadcasting over [B, N, S, D] rows: [N, D] -> [N, 1, D]."""
    t = t.double()
    return t.reshape(t.shape[0], 1, -1) if t.dim() == 2 else t.reshape(-1)


def quant_golden(v, dtype, scale, offset):
    """float64 -> cache dtype following the doc rounding (computed here, not by the library)."""
    if scale is None:
        return v.to(dtype)
    q = v * per_head(scale)
    if offset is not None:
        q = q + per_head(offset)
    if dtype == torch.int8:
        return torch.round(q).clamp(-128, 127).to(torch.int8)
    lim = 448.0 if dtype == torch.float8_e4m3fn else 57344.0
    return q.clamp(-lim, lim).to(torch.float32).to(dtype)


def dests(mode, index, b, s, bs):
    """[(token (b, s), destination)] per the doc: (batch, pos) for Norm, else (block, offset)."""
    out = []
    for bi in range(b):
        for si in range(s):
            if mode == "Norm":
                p = int(index[bi, si])
                if p >= 0:
                    out.append(((bi, si), (bi, p)))
            elif mode in ("PA_BLK_BNSD", "PA_BLK_NZ"):
                pages = math.ceil(s / bs)
                st = int(index[bi * pages + si // bs])
                if st >= 0:
                    out.append(((bi, si), (st // bs, si % bs)))
            else:
                p = int(index[bi * s + si])
                if p >= 0:
                    out.append(((bi, si), (p // bs, p % bs)))
    return out


def expected_cache(cache, rows, mode, index, b, s, quant, ld=None):
    """(expected cache, written mask) for one cache; rows [B, N, S, D] in the cache dtype
    (head n of token (b, s) -> head n of the token's slot); ``ld``: the NZ row width when
    ``cache`` stands in for a cache of another dtype."""
    exp = cache.clone()
    mask = torch.zeros(cache.shape, dtype=torch.bool)
    nz = mode in ("PA_NZ", "PA_BLK_NZ")
    if mode == "Norm":
        bs, heads = None, cache.shape[1]
    else:
        bs, heads = cache.shape[1], cache.shape[2]
    d = cache.shape[-1]
    ld = ld or 32 // cache.element_size()
    view_e = exp.view(cache.shape[0], heads, d // ld, bs, ld) if nz else exp
    view_m = mask.view(cache.shape[0], heads, d // ld, bs, ld) if nz else mask
    for (bi, si), (x, y) in dests(mode, index, b, s, bs):
        for n in range(heads):
            row = rows[bi, n, si]
            if mode == "Norm":
                view_e[x, n, y] = row
                view_m[x, n, y] = True
            elif nz:
                view_e[x, n, :, y, :] = row.reshape(-1, ld)
                view_m[x, n, :, y, :] = True
            else:
                view_e[x, y, n] = row
                view_m[x, y, n] = True
    return exp, mask


def make(b=2, s=3, dv=32, dk=16, dtype=torch.float16, mode="PA_BNSD", nb=None, bs=16,
         k_dtype=None, c_dtype=None, cos_one=False, skip=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    kv = (torch.randn(b, 1, s, dv + dk, generator=g) * 2).to(dtype)
    gamma = (torch.rand(dv, generator=g) + 0.5).to(dtype)
    cs = (1, 1) if cos_one else (s, 1)
    cos = torch.randn(b, 1, cs[0], dk, generator=g).to(dtype)
    sin = torch.randn(b, 1, cs[0], dk, generator=g).to(dtype)
    kc, cc, index = caches_and_index(g, mode, b, 1, s, bs, nb, (dk, dv),
                                     (k_dtype or dtype, c_dtype or dtype), skip)
    return kv, gamma, cos, sin, index, kc, cc


def caches_and_index(g, mode, b, n, s, bs, nb, widths, cache_dtypes, skip):
    """Sentinel-filled (k_cache, ckv_cache) with n heads and a valid random index for mode
    (Norm: Scache = S + 3, Bcache = B + 1; paged: nb blocks, default 2 more than needed)."""
    if mode == "Norm":
        sc = s + 3
        kc, cc = (torch.full((b + 1, n, sc, d), SENT[dt]).to(dt)
                  for d, dt in zip(widths, cache_dtypes))
        index = torch.stack([torch.randperm(sc, generator=g)[:s] for _ in range(b)])
        if skip:
            index[0, 0] = -1
    else:
        pages = math.ceil(s / bs)
        nb = nb or b * pages + 2
        kc, cc = (torch.full((nb, bs, n, d), SENT[dt]).to(dt)
                  for d, dt in zip(widths, cache_dtypes))
        if mode in ("PA_BLK_BNSD", "PA_BLK_NZ"):
            index = torch.randperm(nb, generator=g)[:b * pages] * bs
        else:
            index = torch.randperm(nb * bs, generator=g)[:b * s]
        if skip:
            index[0] = -1
    return kc, cc, index.to(torch.int64)


def check_hifloat8_cache(cache0, cache, rows, scale, offset, mode, index, b, s):
    """A cache holding hifloat8 codes: every named slot holds the golden's code of the float64
    ``rows * scale + offset`` (or, for at most 1% of them, its other neighbour: the kernel
    computes in float32), every other byte is unchanged."""
    pre = rows * per_head(scale) + (0 if offset is None else per_head(offset))
    _, mask = expected_cache(cache0, hifloat8_golden(pre).view(cache0.dtype), mode, index, b,
                             s, True)
    exact, _ = expected_cache(torch.zeros(cache0.shape, dtype=torch.float64), pre, mode, index,
                              b, s, True, ld=32)
    assert mask.any()
    assert torch.equal(bits(cache)[~mask], bits(cache0)[~mask])
    assert_hifloat8_near(bits(cache)[mask].view(torch.uint8), exact[mask], max_mismatch=0.01)


def check_result(args, out_caches, outs, mode, eps=1e-5, scales=(None, None),
                 offsets=(None, None), is_output_kv=True, v=None, hif8=(False, False)):
    kv, gamma, cos, sin, index, kc0, cc0 = args
    b, _, s, _ = kv.shape
    if v is None:
        k64, y64 = golden_rows(kv, gamma, cos, sin, eps)
    else:
        k64, y64 = golden_v2(kv, gamma, cos, sin, v, eps)
    for cache0, cache, rows, scale, offset, hif in (
            (kc0, out_caches[0], k64, scales[0], offsets[0], hif8[0]),
            (cc0, out_caches[1], y64, scales[1], offsets[1], hif8[1])):
        if hif:
            check_hifloat8_cache(cache0, cache, rows, scale, offset, mode, index, b, s)
            continue
        quant = cache0.dtype in (torch.int8, torch.float8_e4m3fn, torch.float8_e5m2)
        want_rows = quant_golden(rows, cache0.dtype, scale if quant else None, offset)
        exp, mask = expected_cache(cache0, want_rows, mode, index, b, s, quant)
        assert mask.any()
        # every slot not named: unchanged, bit for bit
        assert torch.equal(bits(cache)[~mask], bits(cache0)[~mask])
        if cache0.dtype == torch.int8:
            pre = rows * per_head(scale) + (0 if offset is None else per_head(offset))
            near_tie = ((pre - pre.floor()) - 0.5).abs() < 1e-3
            _, tie_mask = expected_cache(torch.zeros_like(cache0, dtype=torch.int8).view(torch.int8),
                                         near_tie.to(torch.int8), mode, index, b, s, True)
            diff = (cache.to(torch.int32) - exp.to(torch.int32)).abs()
            ok = (diff == 0) | ((diff <= 1) & tie_mask.bool())
            assert bool(ok[mask].all())
        else:
            tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12,
                   torch.float8_e4m3fn: 0.13, torch.float8_e5m2: 0.26}[cache0.dtype]
            torch.testing.assert_close(cache.float()[mask], exp.float()[mask], rtol=tol,
                                       atol=tol)
    if is_output_kv:
        tol = 1.6e-2 if kv.dtype == torch.bfloat16 else 2e-3
        torch.testing.assert_close(outs[0].double(), k64, rtol=tol, atol=tol)
        torch.testing.assert_close(outs[1].double(), y64, rtol=tol, atol=tol)
        assert outs[0].dtype == kv.dtype and outs[1].dtype == kv.dtype
        if v is not None:       # c_kv is v itself
            assert torch.equal(bits(outs[1]), bits(v))
    else:
        assert not outs[0].any() and not outs[1].any()


MODES = ["Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"]


def make_v2(b=2, n=2, s=3, dtype=torch.float16, mode="PA_BNSD", bs=16, k_dtype=None,
            c_dtype=None, cos_one=False, skip=True, seed=0):
    """V2 inputs: kv [B, N, S, 192], gamma [192], cos/sin [B, N, S|1, 64], sentinel caches
    [.., N, 192] / [.., N, 128]; returns (kv, gamma, cos, sin, index, k_cache, ckv_cache), v."""
    g = torch.Generator().manual_seed(seed)
    kv = (torch.randn(b, n, s, 192, generator=g) * 2).to(dtype)
    v = (torch.randn(b, n, s, 128, generator=g) * 3).to(dtype)
    gamma = (torch.rand(192, generator=g) + 0.5).to(dtype)
    cs = 1 if cos_one else s
    cos = torch.randn(b, n, cs, 64, generator=g).to(dtype)
    sin = torch.randn(b, n, cs, 64, generator=g).to(dtype)
    kc, cc, index = caches_and_index(g, mode, b, n, s, bs, None, (192, 128),
                                     (k_dtype or dtype, c_dtype or dtype), skip)
    return (kv, gamma, cos, sin, index, kc, cc), v


def _raises_before_write(product, args, kwargs, error, match, fn=na.npu_kv_rmsnorm_rope_cache):
    """Under strict(product) (None: default mode): the call raises ``error`` (message
    ``match``), leaves every input bit-identical, and FakeTensor raises the same words."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def strict():
        return targets.strict(product) if product else _null()

    saved = [bits(t).clone() for t in args]
    with strict(), pytest.raises(error, match=match) as eager:
        fn(*args, **kwargs)
    assert all(torch.equal(bits(t), s) for t, s in zip(args, saved))
    mode = FakeTensorMode()
    fargs = [mode.from_tensor(t) for t in args]
    fkw = {k: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
           for k, t in kwargs.items()}
    with strict(), pytest.raises(error) as fake, mode:
        fn(*fargs, **fkw)
    assert str(fake.value) == str(eager.value)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
