"""npu_kv_rmsnorm_rope_cache (+ _v2 in place, + _v2_functional), the V1 path: every cache mode,
quantized and hifloat8 caches, bad inputs and strict mode, against the float64 goldens of
kv_cache_golden.py (formulas in its docstring).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import npu_anywhere as na
from npu_anywhere import dtypes as npu_dtypes
from npu_anywhere import targets

from kv_cache_golden import (
    HIF8,
    MODES,
    OP,
    V2,
    _raises_before_write,
    bits,
    check_result,
    golden_rows,
    hifloat8_golden,
    make,
    make_v2,
    quant_golden,
)


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
