"""npu_kv_rmsnorm_rope_cache, the V2 path (v given: aclnnKvRmsNormRopeCacheV2), against the
float64 goldens of kv_cache_golden.py.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

from kv_cache_golden import (
    MODES,
    OP,
    bits,
    check_result,
    make_v2,
)


# -- the V2 path (v given) ---------------------------------------------------------------------


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
