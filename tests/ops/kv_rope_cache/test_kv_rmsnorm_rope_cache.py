"""npu_kv_rmsnorm_rope_cache (+ _v2 in place, + _v2_functional) against float64 goldens written
from the documentation.

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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_modes_float(mode, dtype):
    args = make(dtype=dtype, mode=mode, s=19 if "BLK" in mode else 3,
                bs=16 if dtype != torch.float64 else 8)
    kc0, cc0 = args[5].clone(), args[6].clone()
    kv0 = args[0].clone()
    kc, cc = args[5], args[6]
    r = na.npu_kv_rmsnorm_rope_cache(*args[:5], kc, cc, cache_mode=mode, is_output_kv=True)
    assert r[0] is kc and r[1] is cc
    check_result(args[:5] + (kc0, cc0), (kc, cc), r[2:], mode)
    assert torch.equal(args[0], kv0)


@pytest.mark.parametrize("mode", MODES)
def test_int8_both_caches(mode):
    args = make(mode=mode, k_dtype=torch.int8, c_dtype=torch.int8, bs=32, dk=32,
                s=37 if "BLK" in mode else 3)
    ks, cs = torch.rand(32) * 20 + 1, torch.rand(32) * 20 + 1
    kc0, cc0 = args[5].clone(), args[6].clone()
    out = na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=ks, c_kv_scale=cs, cache_mode=mode,
                                       is_output_kv=True)
    check_result(args[:5] + (kc0, cc0), out[:2], out[2:], mode, scales=(ks, cs))


@pytest.mark.parametrize("k_dtype,c_dtype", [(torch.int8, torch.float16),
                                             (torch.float16, torch.int8),
                                             (torch.float8_e4m3fn, torch.float8_e5m2)])
@pytest.mark.parametrize("mode", ["PA_BNSD", "PA_NZ", "Norm"])
def test_mixed_and_float8(k_dtype, c_dtype, mode):
    args = make(mode=mode, k_dtype=k_dtype, c_dtype=c_dtype, bs=32, dk=32)
    ks, cs = torch.rand(1, 32) + 0.5, torch.rand(1) + 0.5
    offs = (torch.randn(32), None)
    kc0, cc0 = args[5].clone(), args[6].clone()
    out = na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=ks, c_kv_scale=cs,
                                       k_rope_offset=offs[0], cache_mode=mode, is_output_kv=True)
    check_result(args[:5] + (kc0, cc0), out[:2], out[2:], mode, scales=(ks, cs), offsets=offs)


def test_rounding_ties_and_saturation_bit_exact():
    # epsilon 0 and |x| constant: y = sign(x) * gamma exactly; cos 1, sin 0: k = de-interleaved x
    dv, dk = 32, 32
    kv = torch.ones(1, 1, 1, dv + dk, dtype=torch.float16)
    kv[..., 1:dv:2] = -1
    rope = torch.tensor([0.25, 0.75, 1.25, 2.5, -0.25, -0.75, -1.25, -2.5] * 4)
    kv[..., dv:] = rope.to(torch.float16)
    gamma = torch.tensor([0.25, 0.75, 1.25, 2.5, 100., 200., 0.5, 1.5] * 4, dtype=torch.float16)
    cos = torch.ones(1, 1, 1, dk, dtype=torch.float16)
    sin = torch.zeros_like(cos)
    kc = torch.zeros(1, 32, 1, dk, dtype=torch.int8)
    cc = torch.zeros(1, 32, 1, dv, dtype=torch.int8)
    scale2 = torch.full((dk,), 2.0)
    na.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, torch.tensor([5]), kc, cc,
                                 k_rope_scale=scale2, c_kv_scale=torch.full((dv,), 2.0),
                                 epsilon=0.0, cache_mode="PA_BNSD")
    x1, x2 = rope[0::2], rope[1::2]
    pre = torch.cat((x1, x2)) * 2           # exact ties .5, 1.5, 2.5, 5
    half_even = {0.5: 0, 1.5: 2, 2.5: 2, 5.0: 5, -0.5: 0, -1.5: -2, -2.5: -2, -5.0: -5}
    assert kc[0, 5, 0].tolist() == [half_even[float(v)] for v in pre]
    y = gamma.double() * torch.tensor([1., -1.] * 16)
    want = [max(-128, min(127, half_even.get(float(v), round(float(v)))))
            for v in y * 2]
    assert cc[0, 5, 0].tolist() == want      # 200 * 2 = 400 -> 127, -400 -> -128
    assert cc[0, 5, 0].tolist()[4:6] == [127, -128]


def test_v2_inplace_and_functional():
    args = make(mode="PA_NZ", bs=16)
    kc0, cc0 = args[5].clone(), args[6].clone()
    k_rope, c_kv = na.npu_kv_rmsnorm_rope_cache_v2(*args, cache_mode="PA_NZ", is_output_kv=True)
    check_result(args[:5] + (kc0, cc0), args[5:7], (k_rope, c_kv), "PA_NZ")
    fresh = make(mode="PA_NZ", bs=16)
    before = [t.clone() for t in fresh[5:7]]
    f = torch.ops.npu.npu_kv_rmsnorm_rope_cache_v2_functional(*fresh, cache_mode="PA_NZ",
                                                               is_output_kv=True)
    assert torch.equal(fresh[5], before[0]) and torch.equal(fresh[6], before[1])
    check_result(fresh[:5] + tuple(before), f[2:], f[:2], "PA_NZ")


def test_v2_cache_dtype_override_float8_in_uint8():
    args = make(mode="PA_BNSD", bs=32, k_dtype=torch.float8_e4m3fn)
    kv, gamma, cos, sin, index, kc, cc = args
    raw = kc.view(torch.uint8)
    ks = torch.rand(16) + 0.5
    na.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, index, raw, cc, k_rope_scale=ks,
                                    cache_mode="PA_BNSD", k_cache_dtype=npu_dtypes.FLOAT8_E4M3FN)
    k64, _ = golden_rows(kv, gamma, cos, sin, 1e-5)
    want = quant_golden(k64, torch.float8_e4m3fn, ks, None)
    slot = int(index[1])
    torch.testing.assert_close(kc[slot // 32, slot % 32, 0].float(), want[0, 0, 1].float(),
                               rtol=0.13, atol=0.13)


def test_5d_nz_cache_and_5d_equals_4d():
    args = make(mode="PA_NZ", bs=16)
    kv, gamma, cos, sin, index, kc, cc = args
    kc5 = kc.clone().view(kc.shape[0], 1, 1, 16, 16)
    cc5 = cc.clone().view(cc.shape[0], 1, 2, 16, 16)
    na.npu_kv_rmsnorm_rope_cache(*args, cache_mode="PA_NZ")
    na.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, kc5, cc5, cache_mode="PA_NZ")
    assert torch.equal(bits(kc5.reshape(kc.shape)), bits(kc))
    assert torch.equal(bits(cc5.reshape(cc.shape)), bits(cc))


def test_noncontiguous_inputs_and_broadcast_cos():
    args = make(mode="PA", cos_one=True, b=3, s=5)
    kv, gamma, cos, sin, index, kc, cc = args
    kv_nc = kv.transpose(2, 3).contiguous().transpose(2, 3)
    assert not kv_nc.is_contiguous()
    kc0, cc0 = kc.clone(), cc.clone()
    out = na.npu_kv_rmsnorm_rope_cache(kv_nc, gamma, cos, sin, index, kc, cc, cache_mode="PA",
                                       is_output_kv=True)
    check_result((kv, gamma, cos, sin, index, kc0, cc0), out[:2], out[2:], "PA")


def test_is_output_kv_false_and_one_token():
    args = make(mode="PA_BNSD", b=1, s=1, skip=False)
    out = na.npu_kv_rmsnorm_rope_cache(*args, cache_mode="PA_BNSD")
    assert out[2].shape == (1, 1, 1, 16) and out[3].shape == (1, 1, 1, 32)
    assert not out[2].any() and not out[3].any()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", ["v1", "v2", "v2_functional", "v2_path"])
def test_all_padding_call_writes_nothing(mode, api):
    """Every index -1 (a batch of padding only) is a valid call in every cache mode: both
    caches keep every bit, and the outputs are still computed."""
    if api == "v2_path":
        args, v = make_v2(mode=mode, s=19 if "BLK" in mode else 3)
    else:
        args, v = make(mode=mode, s=19 if "BLK" in mode else 3), None
    args[4].fill_(-1)
    kc0, cc0 = args[5].clone(), args[6].clone()
    fn = {"v1": na.npu_kv_rmsnorm_rope_cache, "v2_path": na.npu_kv_rmsnorm_rope_cache,
          "v2": na.npu_kv_rmsnorm_rope_cache_v2,
          "v2_functional": na.npu_kv_rmsnorm_rope_cache_v2_functional}[api]
    out = fn(*args, v=v, cache_mode=mode, is_output_kv=True)
    assert torch.equal(bits(args[5]), bits(kc0)) and torch.equal(bits(args[6]), bits(cc0))
    if api == "v2_functional":
        assert torch.equal(bits(out[2]), bits(kc0)) and torch.equal(bits(out[3]), bits(cc0))
    outs = out[2:] if fn is na.npu_kv_rmsnorm_rope_cache else out[:2]
    if v is None:
        k64, y64 = golden_rows(*args[:4], 1e-5)
        torch.testing.assert_close(outs[0].double(), k64, rtol=2e-3, atol=2e-3)
        torch.testing.assert_close(outs[1].double(), y64, rtol=2e-3, atol=2e-3)
    elif mode != "Norm":      # V2 'Norm' without quantization writes no outputs
        assert torch.equal(outs[1], v)


@pytest.mark.parametrize("v2", [False, True])
def test_float32_kv_is_refused_in_default_mode(v2):
    """No product takes float32 kv (seed 002, op-plugin's torch_npu doc, aclnn V2 doc:
    float16 / bfloat16); default mode adds float64 only.  Eager and FakeTensor agree."""
    if v2:
        args, v = make_v2(mode="PA_BNSD", dtype=torch.float32, bs=8)
    else:
        args, v = make(mode="PA_BNSD", dtype=torch.float32, bs=8), None
    kw = dict(cache_mode="PA_BNSD") if v is None else dict(cache_mode="PA_BNSD", v=v)
    _raises_before_write(None, args, kw, TypeError, f"{OP} kv dtype in \\[.*float16.*bfloat16"
                         ".*float64.*\\], but got float32")


def _bad(mode="PA_BNSD", **kw):
    return make(mode=mode, **kw)


@pytest.mark.parametrize("mode,mutate,err,msg", [
    ("PA_BNSD", lambda a: a[4].__setitem__(2, 10 ** 6), IndexError, "index values in"),
    ("PA_BNSD", lambda a: a[4].__setitem__(2, -2), IndexError, "index values in"),
    ("PA_BNSD", lambda a: a[4].__setitem__(2, int(a[4][3])), ValueError, "index values that do"),
    ("Norm", lambda a: a[4].__setitem__((1, 0), 99), IndexError, "index values in"),
    ("Norm", lambda a: a[4].__setitem__((1, 0), int(a[4][1, 1])), ValueError, "index positions"),
    ("PA_BLK_BNSD", lambda a: a[4].__setitem__(1, int(a[4][2]) + 1), ValueError,
     "index values whose"),
])
def test_bad_index_values_modify_nothing(mode, mutate, err, msg):
    args = list(_bad(mode, s=19 if "BLK" in mode else 3))
    mutate(args)
    kc0, cc0 = args[5].clone(), args[6].clone()
    with pytest.raises(err, match=f"{OP} {msg}"):
        na.npu_kv_rmsnorm_rope_cache(*args, cache_mode=mode)
    assert torch.equal(args[5], kc0) and torch.equal(args[6], cc0)


def test_bad_metadata():
    a = list(_bad())
    cases = [
        (dict(cache_mode="BSND"), ValueError, "cache_mode one of"),
    ]
    for kw, err, msg in cases:
        with pytest.raises(err, match=f"{OP} {msg}"):
            na.npu_kv_rmsnorm_rope_cache(*a, **kw)
    with pytest.raises(TypeError, match=f"{OP} index dtype"):
        na.npu_kv_rmsnorm_rope_cache(*a[:4], a[4].int(), *a[5:], cache_mode="PA_BNSD")
    with pytest.raises(TypeError, match=f"{OP} gamma the same dtype"):
        na.npu_kv_rmsnorm_rope_cache(a[0], a[1].float(), *a[2:], cache_mode="PA_BNSD")
    with pytest.raises(TypeError, match=f"{OP} k_cache dtype"):
        na.npu_kv_rmsnorm_rope_cache(*a[:5], a[5].float(), a[6], cache_mode="PA_BNSD")
    with pytest.raises(ValueError, match=f"{OP} k_rope_scale a float32 tensor"):
        na.npu_kv_rmsnorm_rope_cache(*a[:5], a[5].to(torch.int8), a[6], cache_mode="PA_BNSD")
    # N != 1
    kv2 = torch.cat([a[0], a[0]], 1)
    with pytest.raises(ValueError, match=f"{OP} kv a head number"):
        na.npu_kv_rmsnorm_rope_cache(kv2, *a[1:], cache_mode="PA_BNSD")
    # odd Dk
    with pytest.raises(ValueError, match=f"{OP} cos an even"):
        na.npu_kv_rmsnorm_rope_cache(a[0][..., :47], a[1], a[2][..., :15], a[3][..., :15],
                                     *a[4:], cache_mode="PA_BNSD")


def test_bad_alignment_nz_and_block_size():
    # Dk = 8 fp16 values = 16 bytes: not 32-byte aligned in an NZ mode
    args = make(mode="PA_NZ", dk=8, dv=40, bs=16)
    with pytest.raises(ValueError, match=f"{OP} k_cache a last dim whose bytes"):
        na.npu_kv_rmsnorm_rope_cache(*args, cache_mode="PA_NZ")
    # fine in PA_BNSD
    na.npu_kv_rmsnorm_rope_cache(*make(mode="PA_BNSD", dk=8, dv=40, bs=16), cache_mode="PA_BNSD")
    # BlockSize 16 with an int8 cache: needs 32
    args = make(mode="PA_BNSD", bs=16, k_dtype=torch.int8)
    with pytest.raises(ValueError, match=f"{OP} k_cache a BlockSize"):
        na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=torch.ones(16), cache_mode="PA_BNSD")
    args = make(mode="PA_BNSD", bs=8)
    with pytest.raises(ValueError, match=f"{OP} k_cache a BlockSize"):
        na.npu_kv_rmsnorm_rope_cache(*args, cache_mode="PA_BNSD")


# -- hifloat8 caches (950: aclnnKvRmsNormRopeCache doc; the kernel's CAST_FP32_TO_HIFLOAT8 is
# CAST_ROUND + SatMode::SAT; the _v2 ops carry the dtype code, the cache holds uint8 codes) ---

@pytest.mark.parametrize("which", ["k", "ckv", "both"])
@pytest.mark.parametrize("mode", ["Norm", "PA_BNSD", "PA_NZ", "PA_BLK_NZ"])
def test_hifloat8_caches_golden(mode, which):
    k_hif, c_hif = which in ("k", "both"), which in ("ckv", "both")
    dtype = torch.bfloat16 if which == "ckv" else torch.float16
    # 'both': the ckv cache is an int8 tensor holding the codes (any 1-byte storage works)
    args = make(mode=mode, dtype=dtype, dk=32, dv=64, bs=32, s=37 if "BLK" in mode else 5,
                k_dtype=torch.uint8 if k_hif else None,
                c_dtype=(torch.int8 if which == "both" else torch.uint8) if c_hif else None)
    g = torch.Generator().manual_seed(3)
    # log-uniform scales: values from hifloat8's denormals (2^-22) to saturation (> 2^15)
    ks = 10 ** (torch.rand(32, generator=g) * 8 - 4)
    cs = 10 ** (torch.rand(1, 64, generator=g) * 8 - 4)
    ko = torch.randn(32, generator=g) if k_hif else None
    co = torch.randn(1, generator=g) * 3 if c_hif else None
    kw = dict(k_rope_scale=ks if k_hif else None, c_kv_scale=cs if c_hif else None,
              k_rope_offset=ko, c_kv_offset=co, cache_mode=mode, is_output_kv=True,
              k_cache_dtype=HIF8 if k_hif else None, ckv_cache_dtype=HIF8 if c_hif else None)
    kc0, cc0 = args[5].clone(), args[6].clone()
    if which == "ckv":          # functional: new caches, inputs untouched
        k_rope, c_kv, kc, cc = na.npu_kv_rmsnorm_rope_cache_v2_functional(*args, **kw)
        assert torch.equal(bits(args[5]), bits(kc0)) and torch.equal(bits(args[6]), bits(cc0))
    else:
        k_rope, c_kv = na.npu_kv_rmsnorm_rope_cache_v2(*args, **kw)
        kc, cc = args[5], args[6]
    assert kc.dtype == kc0.dtype and cc.dtype == cc0.dtype
    check_result(args[:5] + (kc0, cc0), (kc, cc), (k_rope, c_kv), mode,
                 scales=(ks if k_hif else None, cs if c_hif else None), offsets=(ko, co),
                 hif8=(k_hif, c_hif))


def test_hifloat8_ties_saturation_and_nan_bit_exact():
    # epsilon 0 and |x| = 1: y = sign(x) * gamma exactly; cos 1, sin 0: k = de-interleaved x,
    # so every value reaching the cast is exact and the codes must match bit for bit
    dv, dk = 32, 32
    kv = torch.ones(1, 1, 1, dv + dk, dtype=torch.float16)
    kv[..., 1:dv:2] = -1
    rope = torch.tensor([1.0625, -1.0625, 2.125, -2.125, 0.1875, 40960.0, -49152.0, 1.0] * 4)
    rope[7] = float("nan")
    kv[..., dv:] = rope.to(torch.float16)
    gamma = torch.tensor([1.0625, 2.125, 0.1875, 3.0, 49152.0, 49152.0, 2.0 ** -20, 5.0] * 4,
                         dtype=torch.float16)
    cos = torch.ones(1, 1, 1, dk, dtype=torch.float16)
    sin = torch.zeros_like(cos)
    kc = torch.zeros(1, 32, 1, dk, dtype=torch.uint8)
    cc = torch.zeros(1, 32, 1, dv, dtype=torch.uint8)
    c_off = torch.full((1,), 0.5)
    na.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, torch.tensor([5]), kc, cc,
                                    k_rope_scale=torch.ones(1), c_kv_scale=torch.ones(dv),
                                    c_kv_offset=c_off, epsilon=0.0, cache_mode="PA_BNSD",
                                    k_cache_dtype=HIF8, ckv_cache_dtype=HIF8)
    k = torch.cat((rope[0::2], rope[1::2]))
    k[3] = float("nan")         # sin = 0 still carries the NaN: -NaN * 0 is NaN
    y = gamma.double() * torch.tensor([1.0, -1.0] * 16)
    assert torch.equal(kc[0, 5, 0], hifloat8_golden(k))
    assert torch.equal(cc[0, 5, 0], hifloat8_golden(y + 0.5))
    # explicit codes (sign | dot | exponent | mantissa): ties go away from zero (1.0625 ->
    # 1.125 = 0x09, -1.0625 -> 0x89, 2.125 -> 2.25 = 0x11); 40960 and -49152 saturate to
    # +-32768 (0x6E / 0xEE, not the inf codes 0x6F / 0xEF); NaN gives 0x00 (not 0x80)
    assert kc[0, 5, 0, [0, 16, 1, 18, 7, 3, 19]].tolist() == [0x09, 0x89, 0x11, 0x6E, 0xEE,
                                                              0x00, 0x00]
    # 49152.5 and -49151.5 saturate as well
    assert cc[0, 5, 0, [4, 5]].tolist() == [0x6E, 0xEE]


def _raises(fn, args, kwargs, error, match, product=None):
    _raises_before_write(product, args, kwargs, error, match, fn)


def test_hifloat8_products_and_errors():
    v2 = na.npu_kv_rmsnorm_rope_cache_v2
    args = make(mode="PA_NZ", dk=32, bs=32, k_dtype=torch.uint8)
    kw = dict(k_rope_scale=torch.ones(32), cache_mode="PA_NZ", k_cache_dtype=HIF8)
    with targets.strict("950"):            # offsets too, in every cache mode
        v2(*args, **dict(kw, k_rope_offset=torch.ones(32)))
        v2(*make(mode="Norm", dk=32, k_dtype=torch.uint8), **dict(kw, cache_mode="Norm"))
    for product in ("A2", "A3"):
        _raises(v2, args, kw, TypeError, f"{V2} k_cache dtype float16 \\(kv's\\) or a "
                "quantized dtype in \\['int8'\\], but got torch_npu.hifloat8", product)
    # v1 has no dtype code: a uint8 cache is refused, as op-plugin's v1 hands the aclnn op UINT8
    _raises(na.npu_kv_rmsnorm_rope_cache, args,
            dict(k_rope_scale=torch.ones(32), cache_mode="PA_NZ"), TypeError,
            f"{OP} k_cache dtype .* \\(a uint8 k_cache holds hifloat8 only with "
            "k_cache_dtype=torch_npu.hifloat8")
    # the code needs 1-byte elements
    _raises(v2, make(mode="PA_BNSD", dk=32, bs=32), dict(kw, cache_mode="PA_BNSD"), TypeError,
            f"{V2} k_cache_dtype a dtype code of 2-byte elements like k_cache \\(float16\\), "
            "but got torch_npu.hifloat8 \\(290\\)")
    # NZ rows and block sizes of 32 elements (32 bytes of a 1-byte cache)
    _raises(v2, make(mode="PA_NZ", dk=16, bs=32, k_dtype=torch.uint8),
            dict(kw, k_rope_scale=torch.ones(16)), ValueError,
            f"{V2} k_cache a last dim whose bytes are a multiple of 32 \\(a multiple of 32 for "
            "torch_npu.hifloat8\\)")
    _raises(v2, make(mode="PA_BNSD", dk=32, bs=16, k_dtype=torch.uint8),
            dict(kw, cache_mode="PA_BNSD"), ValueError,
            f"{V2} k_cache a BlockSize that is a multiple of 32")
    _raises(v2, args, dict(kw, k_rope_scale=None), ValueError,
            f"{V2} k_rope_scale a float32 tensor")
    # the V2 path (v given; A2/A3 kernels) quantizes to int8 only
    a2, v = make_v2(mode="PA_BNSD", bs=32, k_dtype=torch.uint8)
    _raises(v2, a2, dict(k_rope_scale=torch.ones(2, 192), v=v, cache_mode="PA_BNSD",
                         k_cache_dtype=HIF8), TypeError,
            f"{V2} k_cache dtype float16 \\(kv's\\) or a quantized dtype in \\['int8'\\]")


@pytest.mark.parametrize("c_dtype,code", [(torch.int8, None), (torch.uint8, HIF8),
                                          (torch.float8_e5m2, None)])
def test_strict_mode_one_quantized_dtype(c_dtype, code):
    """Two quantized caches share one dtype on every product (seed 002, quantization case 3;
    the 950's dtype table); default mode quantizes each cache to its own format."""
    args = make(mode="PA_BNSD", dk=32, bs=32, k_dtype=torch.float8_e4m3fn, c_dtype=c_dtype)
    kw = dict(k_rope_scale=torch.full((32,), 2.0), c_kv_scale=torch.full((32,), 3.0),
              cache_mode="PA_BNSD", is_output_kv=True, ckv_cache_dtype=code)
    _raises(na.npu_kv_rmsnorm_rope_cache_v2, args, kw, TypeError,
            f"{V2} ckv_cache k_cache's dtype \\(float8_e4m3fn\\) when both caches are "
            "quantized", "950")
    kc0, cc0 = args[5].clone(), args[6].clone()
    outs = na.npu_kv_rmsnorm_rope_cache_v2(*args, **kw)
    check_result(args[:5] + (kc0, cc0), args[5:7], outs, "PA_BNSD",
                 scales=(kw["k_rope_scale"], kw["c_kv_scale"]), hif8=(False, code == HIF8))


def test_strict_mode_rules():
    args = make(mode="PA_BNSD", bs=32, k_dtype=torch.float8_e4m3fn)
    with targets.strict("A2"):
        with pytest.raises(TypeError, match=f"{OP} k_cache dtype"):
            na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=torch.ones(16), cache_mode="PA_BNSD")
    args = make(mode="PA_BNSD", bs=32, k_dtype=torch.int8)
    with targets.strict("A3"):
        with pytest.raises(NotImplementedError, match=f"{OP} k_rope_offset None"):
            na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=torch.ones(16),
                                         k_rope_offset=torch.ones(16), cache_mode="PA_BNSD")
    with targets.strict("950"):
        na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=torch.ones(16),
                                     k_rope_offset=torch.ones(16), cache_mode="PA_BNSD")
    with targets.strict("910"):
        with pytest.raises(Exception, match="npu_kv_rmsnorm_rope_cache"):
            na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=torch.ones(16),
                                         cache_mode="PA_BNSD")
    with targets.strict("A2"):
        a = make(mode="PA_BNSD", dtype=torch.float32, bs=8)
        with pytest.raises(TypeError, match=f"{OP} kv dtype"):
            na.npu_kv_rmsnorm_rope_cache(*a, cache_mode="PA_BNSD")


class _Biggest(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("mode", ["PA_BNSD", "PA_NZ", "Norm"])
def test_inplace_path_never_copies_the_cache(mode):
    args = make(mode=mode, nb=400, s=2)
    if mode == "Norm":
        kv, gamma, cos, sin, index, _, _ = args
        kc = torch.zeros(2, 1, 5000, 16, dtype=torch.float16)
        cc = torch.zeros(2, 1, 5000, 32, dtype=torch.float16)
        args = (kv, gamma, cos, sin, index, kc, cc)
    with _Biggest() as m:
        na.npu_kv_rmsnorm_rope_cache(*args, cache_mode=mode)
    assert m.largest < args[5].numel() // 10


# -- the V2 path (v given) ---------------------------------------------------------------------

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


def run_v2_and_check(args, v, mode, fn=na.npu_kv_rmsnorm_rope_cache, scales=(None, None),
                     offsets=(None, None), is_output_kv=True, expect_outputs=True):
    kc0, cc0 = args[5].clone(), args[6].clone()
    inputs = [t.clone() for t in args[:5]] + [v.clone()]
    kw = dict(k_rope_scale=scales[0], c_kv_scale=scales[1], k_rope_offset=offsets[0],
              c_kv_offset=offsets[1], v=v, cache_mode=mode, is_output_kv=is_output_kv)
    out = fn(*args, **kw)
    outs = out[2:] if fn is na.npu_kv_rmsnorm_rope_cache else out
    b, n, s, _ = args[0].shape
    assert outs[0].shape == (b, n, s, 192) and outs[1].shape == (b, n, s, 128)
    check_result(args[:5] + (kc0, cc0), args[5:7], outs, mode, scales=scales, offsets=offsets,
                 is_output_kv=expect_outputs, v=v)
    for before, after in zip(inputs, list(args[:5]) + [v]):
        assert torch.equal(bits(before), bits(after))
    return out


V2_BS = {torch.float16: 16, torch.bfloat16: 16, torch.float64: 8}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,n", [(torch.float16, 2), (torch.bfloat16, 1),
                                     (torch.float64, 4)])
def test_v2_modes_float(mode, dtype, n):
    args, v = make_v2(n=n, dtype=dtype, mode=mode, s=19 if "BLK" in mode else 3,
                      bs=V2_BS[dtype])
    out = run_v2_and_check(args, v, mode, expect_outputs=mode != "Norm")
    assert out[0] is args[5] and out[1] is args[6]


@pytest.mark.parametrize("mode", MODES)
def test_v2_int8_asymmetric_per_head(mode):
    n = 2 if mode != "PA_BLK_NZ" else 8
    args, v = make_v2(n=n, mode=mode, k_dtype=torch.int8, c_dtype=torch.int8, bs=32,
                      s=37 if "BLK" in mode else 3)
    g = torch.Generator().manual_seed(5)
    scales = (torch.rand(n, 192, generator=g) * 20 + 1, torch.rand(n, 128, generator=g) * 8 + 1)
    offsets = (torch.randn(n, 192, generator=g) * 3, torch.randn(n, 128, generator=g) * 3)
    # Norm with a quantized cache: the outputs are written (aclnn V2 doc, isOutputKv rules)
    run_v2_and_check(args, v, mode, scales=scales, offsets=offsets)


@pytest.mark.parametrize("quantized", ["k", "ckv"])
@pytest.mark.parametrize("mode", ["Norm", "PA_NZ"])
def test_v2_one_cache_quantized_1d_scales_n1(quantized, mode):
    # N = 1: 1-D scales [D] (op-plugin's golden passes them so) equal [1, D]
    kd, cd = (torch.int8, None) if quantized == "k" else (None, torch.int8)
    args, v = make_v2(n=1, mode=mode, k_dtype=kd, c_dtype=cd, bs=32)
    scales = (torch.rand(192) * 10 + 1, None) if quantized == "k" else \
        (None, torch.rand(128) * 10 + 1)
    run_v2_and_check(args, v, mode, scales=scales)
    args2, v2 = make_v2(n=1, mode=mode, k_dtype=kd, c_dtype=cd, bs=32)
    scales2 = tuple(None if t is None else t.reshape(1, -1) for t in scales)
    na.npu_kv_rmsnorm_rope_cache(*args2, k_rope_scale=scales2[0], c_kv_scale=scales2[1], v=v2,
                                 cache_mode=mode)
    assert torch.equal(args2[5], args[5]) and torch.equal(args2[6], args[6])


def test_v2_rounding_ties_bit_exact():
    # epsilon 0, |kv| = 1 everywhere: y = sign(kv) * gamma exactly; cos 1, sin 0: the first 64
    # values are only de-interleaved.  v values * 2 land on exact .5 ties.
    kv = torch.ones(1, 1, 1, 192, dtype=torch.float16)
    kv[..., 1::2] = -1
    gamma = torch.full((192,), 0.75, dtype=torch.float16)
    cos = torch.ones(1, 1, 1, 64, dtype=torch.float16)
    sin = torch.zeros_like(cos)
    v = torch.tensor([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 100., -100.] * 16,
                     dtype=torch.float16).reshape(1, 1, 1, 128)
    kc = torch.zeros(1, 32, 1, 192, dtype=torch.int8)
    cc = torch.zeros(1, 32, 1, 128, dtype=torch.int8)
    out = na.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, torch.tensor([7]), kc, cc,
                                       k_rope_scale=torch.full((1, 192), 2.0),
                                       c_kv_scale=torch.full((1, 128), 2.0), v=v,
                                       epsilon=0.0, cache_mode="PA", is_output_kv=True)
    # y * 2 = +-1.5: de-interleaved first 64 = 32 x (+1.5) then 32 x (-1.5); ties -> +-2
    assert kc[0, 7, 0, :64].tolist() == [2] * 32 + [-2] * 32
    assert kc[0, 7, 0, 64:].tolist() == [2, -2] * 64
    assert cc[0, 7, 0].tolist() == [0, 2, 2, 0, -2, -2, 127, -128] * 16
    assert out[2][0, 0, 0, :64].tolist() == [0.75] * 32 + [-0.75] * 32
    assert torch.equal(out[3], v)


def test_v2_norm_outputs_only_with_quantization():
    args, v = make_v2(mode="Norm")
    out = na.npu_kv_rmsnorm_rope_cache(*args, v=v, cache_mode="Norm", is_output_kv=True)
    assert not out[2].any() and not out[3].any()
    args, v = make_v2(mode="PA")
    out = na.npu_kv_rmsnorm_rope_cache(*args, v=v, cache_mode="PA", is_output_kv=False)
    assert out[2].shape == (2, 2, 3, 192) and not out[2].any() and not out[3].any()


def test_v2_inplace_and_functional():
    args, v = make_v2(mode="PA_BLK_NZ", s=19)
    run_v2_and_check(args, v, "PA_BLK_NZ", fn=na.npu_kv_rmsnorm_rope_cache_v2)
    fresh, v = make_v2(mode="PA_BLK_NZ", s=19)
    before = [t.clone() for t in fresh[5:7]]
    f = na.npu_kv_rmsnorm_rope_cache_v2_functional(*fresh, v=v, cache_mode="PA_BLK_NZ",
                                                    is_output_kv=True)
    assert torch.equal(fresh[5], before[0]) and torch.equal(fresh[6], before[1])
    check_result(fresh[:5] + tuple(before), f[2:], f[:2], "PA_BLK_NZ", v=v)


def test_v2_5d_nz_cache_and_uint8_storage():
    args, v = make_v2(mode="PA_NZ", k_dtype=torch.int8, bs=32)
    kv, gamma, cos, sin, index, kc, cc = args
    ks = torch.rand(2, 192) + 1
    kc5 = kc.clone().view(kc.shape[0], 2, 6, 32, 32)
    na.npu_kv_rmsnorm_rope_cache(*args, k_rope_scale=ks, v=v, cache_mode="PA_NZ")
    raw = kc5.view(torch.uint8)
    # a 5-D NZ cache stored as uint8, read as int8 (ScalarType code 1)
    na.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, index, raw, cc.clone(), k_rope_scale=ks,
                                    v=v, cache_mode="PA_NZ", k_cache_dtype=1)
    assert torch.equal(kc5.reshape(kc.shape), kc)


@pytest.mark.parametrize("mode", ["Norm", "PA", "PA_BNSD"])
def test_v2_cos_broadcast_over_s_and_noncontiguous(mode):
    args, v = make_v2(mode=mode, cos_one=True, s=5)
    kv, gamma, cos, sin, index, kc, cc = args
    kv_nc = kv.transpose(2, 3).contiguous().transpose(2, 3)
    v_nc = v.transpose(0, 1).contiguous().transpose(0, 1)
    assert not kv_nc.is_contiguous() and not v_nc.is_contiguous()
    kc0, cc0 = kc.clone(), cc.clone()
    out = na.npu_kv_rmsnorm_rope_cache(kv_nc, gamma, cos, sin, index, kc, cc, v=v_nc,
                                       cache_mode=mode, is_output_kv=True)
    check_result((kv, gamma, cos.expand(-1, -1, 5, -1), sin.expand(-1, -1, 5, -1), index, kc0,
                  cc0), out[:2], out[2:], mode, is_output_kv=mode != "Norm", v=v)


def test_v2_strict_mode():
    args, v = make_v2(mode="PA_BNSD", k_dtype=torch.int8, bs=32)
    kw = dict(k_rope_scale=torch.ones(2, 192), k_rope_offset=torch.ones(2, 192), v=v,
              cache_mode="PA_BNSD")
    with targets.strict("950"):
        with pytest.raises(ValueError, match=f"{OP} v None on 950"):
            na.npu_kv_rmsnorm_rope_cache(*args, **kw)
    for product in ("A2", "A3"):          # offsets are supported in the V2 path on A2/A3
        with targets.strict(product):
            na.npu_kv_rmsnorm_rope_cache(*[t.clone() for t in args], **kw)
    with targets.strict("A2"):
        a32, v32 = make_v2(mode="PA_BNSD", dtype=torch.float32, bs=8)
        with pytest.raises(TypeError, match=f"{OP} kv dtype"):
            na.npu_kv_rmsnorm_rope_cache(*a32, v=v32, cache_mode="PA_BNSD")


def _v2_bad(name):
    """(args, kwargs, error, message) of one bad V2 call, built on valid PA_BNSD inputs."""
    mode = "PA_BNSD"
    k8 = name in ("scale_1d_n2", "ranks_differ", "cos_bcast_quant", "k_scale_missing")
    args, v = make_v2(n=1 if name == "ranks_differ" else 2, mode=mode, bs=32,
                      k_dtype=torch.int8 if k8 else None,
                      c_dtype=torch.int8 if name == "ranks_differ" else None,
                      cos_one=name in ("cos_bcast_nz", "cos_bcast_quant"))
    args = list(args)
    kw = dict(v=v, cache_mode=mode)
    if k8 and name != "k_scale_missing":
        kw["k_rope_scale"] = torch.ones(2, 192)
    b, n, s = args[0].shape[:3]
    if name == "v_dv_64":
        kw["v"] = v[..., :64]
        return args, kw, ValueError, "v a last dim of 128"
    if name == "v_dtype":
        kw["v"] = v.bfloat16()
        return args, kw, TypeError, "v the same dtype as kv"
    if name == "v_3d":
        kw["v"] = v[0]
        return args, kw, ValueError, "v a 4-D tensor"
    if name == "v_tokens":
        kw["v"] = torch.cat([v, v], 2)
        return args, kw, RuntimeError, "v kv's \\[B, N, S\\]"
    if name == "heads_3":
        args[0] = torch.cat([args[0], args[0][:, :1]], 1)
        return args, kw, ValueError, "kv a head number \\(dim 1\\) of 1, 2, 4 or 8"
    if name == "kv_576":
        args[0] = torch.cat([args[0], args[0], args[0][..., :192]], -1)
        return args, kw, ValueError, "kv a last dim of 192"
    if name == "gamma_128":
        args[1] = args[1][:128]
        return args, kw, RuntimeError, "gamma kv's last dim \\(192\\)"
    if name == "cos_32":
        args[2], args[3] = args[2][..., :32], args[3][..., :32]
        return args, kw, ValueError, "cos a last dim of 64"
    if name == "cos_one_head":
        args[2], args[3] = args[2][:, :1], args[3][:, :1]
        return args, kw, RuntimeError, "cos shape \\(2, 2, 3, 64\\)"
    if name == "float8_cache":
        args[5] = args[5].to(torch.float8_e4m3fn)
        kw["k_rope_scale"] = torch.ones(2, 192)
        return args, kw, TypeError, "k_cache dtype float16 \\(kv's\\) or a quantized dtype in " \
            "\\['int8'\\]"
    if name == "scale_for_float_cache":
        kw["c_kv_scale"] = torch.ones(2, 128)
        return args, kw, ValueError, "c_kv_scale None when ckv_cache is not quantized"
    if name == "offset_without_scale":
        kw["c_kv_offset"] = torch.ones(2, 128)
        return args, kw, ValueError, "c_kv_offset None without c_kv_scale"
    if name == "k_scale_missing":
        return args, kw, ValueError, "k_rope_scale a float32 tensor"
    if name == "scale_1d_n2":
        kw["k_rope_scale"] = torch.ones(192)
        return args, kw, RuntimeError, "k_rope_scale shape \\(2, 192\\) \\(\\[N, D\\]"
    if name == "ranks_differ":
        kw.update(k_rope_scale=torch.ones(192), c_kv_scale=torch.ones(1, 128))
        return args, kw, RuntimeError, "c_kv_scale k_rope_scale's number of dims"
    if name == "cos_bcast_nz":
        kw["cache_mode"] = "PA_NZ"
        return args, kw, RuntimeError, "cos shape \\(2, 2, 3, 64\\) with cache_mode 'PA_NZ'"
    if name == "cos_bcast_quant":
        return args, kw, RuntimeError, "cos shape \\(2, 2, 3, 64\\) with cache_mode " \
            "'PA_BNSD' and a quantized cache"
    if name == "index_out_of_range":
        args[4][2] = 10 ** 6
        return args, kw, IndexError, "index values in"
    if name == "index_repeat":
        args[4][2] = int(args[4][3])
        return args, kw, ValueError, "index values that do not repeat"
    raise AssertionError(name)


V2_BAD = ["v_dv_64", "v_dtype", "v_3d", "v_tokens", "heads_3", "kv_576", "gamma_128", "cos_32",
          "cos_one_head", "float8_cache", "scale_for_float_cache", "offset_without_scale",
          "k_scale_missing", "scale_1d_n2", "ranks_differ", "cos_bcast_nz", "cos_bcast_quant",
          "index_out_of_range", "index_repeat"]


@pytest.mark.parametrize("name", V2_BAD)
def test_v2_bad_inputs_raise_and_modify_nothing(name):
    args, kw, err, msg = _v2_bad(name)
    kc0, cc0 = bits(args[5]).clone(), bits(args[6]).clone()
    for fn, op in ((na.npu_kv_rmsnorm_rope_cache, OP),
                   (na.npu_kv_rmsnorm_rope_cache_v2, "npu_kv_rmsnorm_rope_cache_v2: expected")):
        with pytest.raises(err, match=f"{op} {msg}"):
            fn(*args, **kw)
        assert torch.equal(bits(args[5]), kc0) and torch.equal(bits(args[6]), cc0)


# -- the compiled provider ---------------------------------------------------------------------

COMPILED_CASES = [("Norm", False, False), ("PA_NZ", True, False), ("PA_BLK_BNSD", False, False),
                  ("PA_BNSD", True, True), ("PA_NZ", False, True), ("PA_NZ", "hifloat8", False)]


@pytest.mark.parametrize("mode,quant,v2", COMPILED_CASES)
def test_compiled_provider_matches_the_reference_bit_for_bit(mode, quant, v2):
    """Calls without a skipped token run compiled code; it writes the same bits as the eager
    reference (emulate_precision_casts keeps the roundings), and skipped tokens stay eager."""
    _compiled_matches_reference(mode, quant, v2)


@pytest.mark.slow
@pytest.mark.parametrize("mode,quant,v2",
                         [c for c in COMPILED_CASES if c[2] or c[1] == "hifloat8"])
def test_compiled_provider_bit_for_bit_in_avx2_code(mode, quant, v2):
    """The same with Inductor's AVX2 code (``cpp.simdlen = 256``), what an x86 CPU without
    AVX-512 (AMD Zen3) runs whatever this machine has: the eager arithmetic uses no op whose
    rounding depends on the CPU (ATen reductions, addcmul's FMA, MKL's float32 sqrt), so the
    bits still agree; hifloat8 caches are declined where Inductor's int32 select is wrong."""
    with torch._inductor.config.patch({"cpp.simdlen": 256}):
        _compiled_matches_reference(mode, quant, v2)


def _compiled_matches_reference(mode, quant, v2):
    from npu_anywhere import dispatch
    from npu_anywhere.kernels import compiled
    from npu_anywhere.ops.kv_rope_cache import kv_rmsnorm_rope_cache as module

    def call(args, v):
        kw = dict(v=v, cache_mode=mode, is_output_kv=True)
        if quant:
            width = 192 if v2 else 32
            kw.update(k_rope_scale=torch.full((args[0].shape[1], width), 3.0),
                      k_rope_offset=torch.full((args[0].shape[1], width), 0.5) if v2 else None)
        if quant == "hifloat8":     # both caches hifloat8 (uint8 codes), through the v2 API
            kw.update(c_kv_scale=torch.full((32,), 700.0), c_kv_offset=torch.full((1,), -0.25),
                      k_cache_dtype=HIF8, ckv_cache_dtype=HIF8)
            return tuple(args[5:7]) + na.npu_kv_rmsnorm_rope_cache_v2(*args, **kw)
        return na.npu_kv_rmsnorm_rope_cache(*args, **kw)

    def inputs(skip):
        kc_dtype = {True: torch.int8, "hifloat8": torch.uint8}.get(quant)
        if v2:
            return make_v2(mode=mode, k_dtype=kc_dtype, skip=skip, bs=32)
        return make(mode=mode, k_dtype=kc_dtype, c_dtype=torch.uint8 if kc_dtype ==
                    torch.uint8 else None, dk=32, bs=32, skip=skip,
                    s=37 if "BLK" in mode else 3), None

    module._compiled_compute._compiled.clear()
    torch._dynamo.reset()
    for skip in (False, True, False):
        (args, v), (twin, v_twin) = inputs(skip), inputs(skip)
        with dispatch.use_providers("reference"):
            want = call(twin, v_twin)
        with compiled.compiling_after(0), dispatch.use_providers("compiled"):
            got = call(args, v)
        for a, b in zip(got, want):
            assert torch.equal(bits(a), bits(b))
    declined = quant == "hifloat8" and not module.int32_select_compiles_exactly()
    # the compiled code did run (unless declined, when nothing may have compiled) ...
    assert len(module._compiled_compute._compiled) == (0 if declined else 1)
    assert module._compiled_compute._disabled is None         # ... and did not fail to compile


# -- A2/A3 strict-mode rules of the V1 path (aclnnKvRmsNormRopeCacheV2 doc: quantization-mode
# constraints and the A2/A3 input-combination table; hicann/ops-transformer
# op_host/kv_rms_norm_rope_cache_ds_tiling.cpp) --------------------------------------------

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


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_norm_no_quantization_on_a2_a3(product):
    int8 = make(mode="Norm", k_dtype=torch.int8, dk=32)
    _raises_before_write(product, int8, dict(k_rope_scale=torch.ones(32), cache_mode="Norm"),
                         TypeError, f"{OP} k_cache dtype float16 \\(kv's\\) on {product} with "
                         "cache_mode 'Norm'")
    flt = make(mode="Norm")
    for kw, param in ((dict(k_rope_scale=torch.ones(16)), "k_rope_scale"),
                      (dict(c_kv_scale=torch.ones(32)), "c_kv_scale"),
                      (dict(c_kv_offset=torch.ones(32)), "c_kv_offset")):
        _raises_before_write(product, flt, dict(kw, cache_mode="Norm"), ValueError,
                             f"{OP} {param} None on {product} with cache_mode 'Norm'")
    # the same calls run in default mode and on the 950; A2/A3 quantize outside 'Norm'
    for target in (None, "950"):
        with targets.strict(target) if target else _null():
            a = make(mode="Norm", k_dtype=torch.int8, dk=32)
            kc0, cc0 = a[5].clone(), a[6].clone()
            out = na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.full((32,), 4.0),
                                               cache_mode="Norm", is_output_kv=True)
            check_result(a[:5] + (kc0, cc0), out[:2], out[2:], "Norm",
                         scales=(torch.full((32,), 4.0), None))
    with targets.strict(product):
        na.npu_kv_rmsnorm_rope_cache(*make(mode="Norm"), cache_mode="Norm")
        na.npu_kv_rmsnorm_rope_cache(*make(mode="PA_BNSD", k_dtype=torch.int8, dk=32, bs=32),
                                     k_rope_scale=torch.ones(32), cache_mode="PA_BNSD")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_cos_broadcast_on_a2_a3(product):
    bcast = RuntimeError
    msg = f"{OP} cos shape \\(2, 1, 3, 32\\) on {product} with cache_mode"
    for mode in ("PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"):
        a = make(mode=mode, cos_one=True, dk=32, bs=16)
        _raises_before_write(product, a, dict(cache_mode=mode), bcast, msg)
    # PA/PA_BNSD: only without quantization (a scale, even for a float cache, selects the
    # quant kernel)
    for mode in ("PA", "PA_BNSD"):
        a = make(mode=mode, cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
        _raises_before_write(product, a, dict(k_rope_scale=torch.ones(32), cache_mode=mode),
                             bcast, msg + f" '{mode}' and a quant scale")
        a = make(mode=mode, cos_one=True, dk=32, bs=32)
        _raises_before_write(product, a, dict(c_kv_scale=torch.ones(32), cache_mode=mode),
                             bcast, msg)
    # accepted: Norm, PA/PA_BNSD without quantization, and S = 1 (nothing to broadcast)
    with targets.strict(product):
        for mode in ("Norm", "PA", "PA_BNSD"):
            a = make(mode=mode, cos_one=True, dk=32, bs=16)
            kc0, cc0 = a[5].clone(), a[6].clone()
            out = na.npu_kv_rmsnorm_rope_cache(*a, cache_mode=mode, is_output_kv=True)
            check_result((a[0], a[1], a[2].expand(-1, -1, 3, -1), a[3].expand(-1, -1, 3, -1),
                          a[4], kc0, cc0), out[:2], out[2:], mode)
        a = make(mode="PA_NZ", s=1, cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
        na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.ones(32), cache_mode="PA_NZ")
    # default mode and the 950 broadcast in every cache mode
    for target in (None, "950"):
        with targets.strict(target) if target else _null():
            a = make(mode="PA_NZ", cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
            kc0, cc0 = a[5].clone(), a[6].clone()
            ks = torch.full((32,), 2.0)
            out = na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=ks, cache_mode="PA_NZ",
                                               is_output_kv=True)
            check_result((a[0], a[1], a[2].expand(-1, -1, 3, -1), a[3].expand(-1, -1, 3, -1),
                          a[4], kc0, cc0), out[:2], out[2:], "PA_NZ", scales=(ks, None))


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_scalar_scale_shape_on_a2_a3(product):
    a = make(mode="PA_BNSD", k_dtype=torch.int8, dk=32, bs=32)
    _raises_before_write(product, a, dict(k_rope_scale=torch.ones(1), cache_mode="PA_BNSD"),
                         RuntimeError, f"{OP} k_rope_scale shape \\(1, 32\\) or \\(32,\\) on "
                         f"{product}, but got shape \\(1,\\)")
    with targets.strict("950"):
        na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.ones(1), cache_mode="PA_BNSD")
