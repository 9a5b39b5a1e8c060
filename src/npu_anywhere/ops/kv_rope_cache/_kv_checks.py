"""Argument checks of npu_kv_rmsnorm_rope_cache (+ _v2, _v2_functional): dtypes, shapes,
quantization parameters and cache layouts, per product.

Everything here looks at metadata only (the index *values* are checked by the write plan in
:mod:`._kv_writes`), so the same functions serve eager calls and FakeTensor.  The rules and
their sources are listed in the docstring of
:func:`npu_anywhere.ops.kv_rope_cache.kv_rmsnorm_rope_cache.npu_kv_rmsnorm_rope_cache`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...targets import PRE_950, Product
from ..cache.paged import nz_last_dim
from ..quant import core as qcore

OP = "npu_kv_rmsnorm_rope_cache"
V2_OP = "npu_kv_rmsnorm_rope_cache_v2"
FUNCTIONAL_OP = "npu_kv_rmsnorm_rope_cache_v2_functional"

CACHE_MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")
PAGED = CACHE_MODES[1:]
NZ_MODES = ("PA_NZ", "PA_BLK_NZ")
BLK_MODES = ("PA_BLK_BNSD", "PA_BLK_NZ")
# Every product takes float16 / bfloat16 kv (seed 002, op-plugin's torch_npu doc, the aclnn V2
# doc); default mode adds float64 only, for float64 goldens -- no product documents float32.
KV_DTYPES = (torch.float16, torch.bfloat16, torch.float64)
_STRICT_KV = (torch.float16, torch.bfloat16)
QUANT_DTYPES = (torch.int8, torch.float8_e5m2, torch.float8_e4m3fn)
# torch has no hifloat8 dtype: a cache read as hifloat8 (k_cache_dtype / ckv_cache_dtype =
# torch_npu.hifloat8 in the _v2 ops) holds uint8 codes, and its effective dtype is the code.
HIFLOAT8 = dtypes.HIFLOAT8
QUANT_FORMATS = QUANT_DTYPES + (HIFLOAT8,)
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
# The V2 path (v given; aclnnKvRmsNormRopeCacheV2's "kv separated" scene): fixed sizes, A2/A3.
V2_DK, V2_DV, V2_ROPE = 192, 128, 64
V2_HEADS = (1, 2, 4, 8)
V2_UNSUPPORTED = frozenset({Product.ASCEND_950})


def _name(dtype) -> str:
    return dtypes.name(dtype)


def _shape(t):
    return lambda: f"shape {tuple(t.shape)}"


def _storage(eff):
    """The torch dtype of one stored cache value: ``eff`` itself, uint8 for hifloat8."""
    return qcore.FORMATS["hifloat8"].storage if eff == HIFLOAT8 else eff


def cache_format(op, cache, code, param):
    """(effective dtype of the cache values, quantized?) from the cache and its dtype override.

    The effective dtype is a torch dtype of the cache's element size, or :data:`HIFLOAT8` (the
    torch_npu code) for a 1-byte cache read as hifloat8."""
    if code is None:
        eff = cache.dtype
    else:
        eff = dtypes.code_to_dtype(int(code))
        known = isinstance(eff, torch.dtype) or eff == HIFLOAT8
        checks.expect(known and _storage(eff).itemsize == cache.element_size(),
                      op, f"{param}_dtype", lambda: f"a dtype code of {cache.element_size()}-byte"
                      f" elements like {param} ({_name(cache.dtype)})",
                      qcore.describe_code(code), TypeError)
    return eff, eff in QUANT_FORMATS


def _check(op, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
           k_rope_offset, c_kv_offset, v, epsilon, cache_mode, is_output_kv,
           k_cache_dtype=None, ckv_cache_dtype=None):
    product = targets.expect_supported(op, _SUPPORTED)
    checks.expect_one_of(cache_mode, CACHE_MODES, op, "cache_mode")
    if v is not None:
        checks.expect(product not in V2_UNSUPPORTED, op, "v", lambda: f"None on {product.value} "
                      "(aclnnKvRmsNormRopeCacheV2 doc: the V2 path is A2/A3 only; the 950 does "
                      "not process v)", "a tensor", ValueError)
    checks.expect_dim(kv, 4, op, "kv")
    checks.expect_dim(gamma, 1, op, "gamma")
    checks.expect_dim(cos, 4, op, "cos")
    checks.expect_dim(sin, 4, op, "sin")
    same = {"kv": kv, "gamma": gamma, "cos": cos, "sin": sin}
    if v is not None:
        checks.expect_dim(v, 4, op, "v")
        same["v"] = v
    allowed = _STRICT_KV if product is not None else KV_DTYPES
    checks.expect_dtype(kv, allowed, op, "kv")
    checks.expect_same_dtype(same, op)
    checks.expect_dtype(index, (torch.int64,), op, "index")
    named = {"kv": kv, "gamma": gamma, "cos": cos, "sin": sin, "index": index,
             "k_cache": k_cache, "ckv_cache": ckv_cache}
    if v is not None:
        named["v"] = v
    optional = {n: t for n, t in (("k_rope_scale", k_rope_scale), ("c_kv_scale", c_kv_scale),
                                  ("k_rope_offset", k_rope_offset),
                                  ("c_kv_offset", c_kv_offset)) if t is not None}
    checks.expect_same_device({**named, **optional}, op)
    for n, t in {**named, **optional}.items():
        checks.expect_nonempty(t, op, n)
    if v is None:
        dk, dv = _check_v1_shapes(op, kv, gamma, cos, sin)
    else:
        dk, dv = _check_v2_shapes(op, kv, gamma, cos, sin, v)
    # caches: dtypes and quantization
    k_eff, k_quant = cache_format(op, k_cache, k_cache_dtype, "k_cache")
    c_eff, c_quant = cache_format(op, ckv_cache, ckv_cache_dtype, "ckv_cache")
    params = ((k_eff, k_quant, k_rope_scale, k_rope_offset),
              (c_eff, c_quant, c_kv_scale, c_kv_offset))
    if v is None:
        _check_v1_quant(op, product, kv, params, dk, dv, cache_mode)
        _check_v1_cos_broadcast(op, product, kv, cos, k_rope_scale, c_kv_scale, cache_mode)
    else:
        _check_v2_quant(op, kv, cos, params, cache_mode)
    _check_layout(op, kv, index, k_cache, ckv_cache, k_eff, c_eff, cache_mode, dk, dv)


def _rope_shape_check(op, cos, sin, rope_shapes):
    checks.expect(tuple(cos.shape) in rope_shapes, op, "cos",
                  lambda: f"shape {rope_shapes[0]} or {rope_shapes[1]}", _shape(cos),
                  RuntimeError)
    checks.expect(sin.shape == cos.shape, op, "sin", lambda: f"cos's shape {tuple(cos.shape)}",
                  _shape(sin), RuntimeError)


def _check_cache_dtype(op, kv, name, eff, quant_allowed, why=""):
    ok = eff == kv.dtype or eff in quant_allowed
    checks.expect(ok, op, name, lambda: f"dtype {_name(kv.dtype)} (kv's) or a quantized "
                  f"dtype in {[_name(q) for q in quant_allowed]}{why}", _name(eff), TypeError)


_NAMES = (("k_cache", "k_rope_scale", "k_rope_offset"), ("ckv_cache", "c_kv_scale", "c_kv_offset"))


def _check_v1_shapes(op, kv, gamma, cos, sin):
    """Shapes of the V1 path (v None): kv = [RMSNorm part Dv | RoPE part Dk]; (Dk, Dv)."""
    b, n, s, d = kv.shape
    dv, dk = gamma.shape[0], cos.shape[3]
    checks.expect(n == 1, op, "kv", "a head number (dim 1) of 1 (the op serves DeepSeek MLA: "
                  "N = 1 only)", _shape(kv), ValueError)
    checks.expect(dk % 2 == 0, op, "cos", "an even last dim Dk (RoPE rotates pairs)",
                  lambda: f"Dk = {dk}", ValueError)
    checks.expect(dk + dv == d, op, "kv", lambda: f"a last dim D = Dv + Dk = {dv} + {dk} "
                  "(gamma's length plus cos's last dim)", lambda: f"D = {d}", RuntimeError)
    _rope_shape_check(op, cos, sin, ((b, 1, s, dk), (b, 1, 1, dk)))
    return dk, dv


# op-plugin's npu_kv_rmsnorm_rope_cache passes a cache's own dtype on (uint8, which the aclnn
# op refuses); only the _v2 ops' dtype codes make a uint8 tensor a hifloat8 cache.
_UINT8_WHY = (" (a uint8 {0} holds hifloat8 only with {0}_dtype=torch_npu.hifloat8, an argument "
              "of npu_kv_rmsnorm_rope_cache_v2 / _v2_functional)")

_V1_NORM_WHY = ("the A2/A3 V1 kernels quantize in no 'Norm' call: aclnnKvRmsNormRopeCacheV2 "
                "doc, tiling 'CacheMode::Norm do not support quant!'")


def _check_v1_quant(op, product, kv, params, dk, dv, cache_mode):
    n = kv.shape[1]
    pre_950 = product in PRE_950
    quant_allowed = (torch.int8,) if pre_950 else QUANT_FORMATS
    for (name, sname, oname), (eff, quant, scale, offset), width in zip(_NAMES, params, (dk, dv)):
        if pre_950 and cache_mode == "Norm":
            checks.expect(not quant, op, name, lambda: f"dtype {_name(kv.dtype)} (kv's) on "
                          f"{product.value} with cache_mode 'Norm' ({_V1_NORM_WHY})", _name(eff),
                          TypeError)
            for pname, t in ((sname, scale), (oname, offset)):
                checks.expect(t is None, op, pname, lambda: f"None on {product.value} with "
                              f"cache_mode 'Norm' ({_V1_NORM_WHY})", "a tensor", ValueError)
        _check_cache_dtype(op, kv, name, eff, quant_allowed,
                           _UINT8_WHY.format(name) if eff == torch.uint8 and not pre_950
                           else "")
        if not quant:
            continue
        checks.expect(scale is not None, op, sname, lambda name=name: "a float32 tensor (required"
                      f" when {name} is quantized)", "None", ValueError)
        if product in PRE_950 and offset is not None:
            checks.expect(False, op, oname, f"None on {product.value} (the torch_npu doc: "
                          "asymmetric quantization is not supported yet)", "a tensor",
                          NotImplementedError)
        for pname, t in ((sname, scale), (oname, offset)):
            if t is None:
                continue
            checks.expect_dtype(t, (torch.float32,), op, pname)
            # A2/A3 take no [1] form (aclnnKvRmsNormRopeCacheV2 doc; the tiling's V1 check
            # wants [Dk] / [Dv] or [1, D])
            shapes = ((n, width), (width,)) if pre_950 else ((n, width), (width,), (1,))
            checks.expect(tuple(t.shape) in shapes, op, pname, lambda shapes=shapes: "shape "
                          + " or ".join(str(x) for x in shapes)
                          + (f" on {product.value}" if pre_950 else ""), _shape(t),
                          RuntimeError)
    (k_eff, k_quant, _, _), (c_eff, c_quant, _, _) = params
    if product is not None and k_quant and c_quant:
        checks.expect(k_eff == c_eff, op, "ckv_cache", lambda: f"k_cache's dtype "
                      f"({_name(k_eff)}) when both caches are quantized (aclnnKvRmsNormRopeCache "
                      "doc, quantization case 3; no dtype pair of the 950's op_host/"
                      "kv_rms_norm_rope_cache_def.cpp mixes two quantized dtypes)",
                      lambda: f"dtype {_name(c_eff)}", TypeError)


def _check_v1_cos_broadcast(op, product, kv, cos, k_rope_scale, c_kv_scale, cache_mode):
    """A2/A3, V1 path: cos/sin [B, 1, 1, Dk] broadcast over S > 1 only in 'Norm', or in
    'PA'/'PA_BNSD' without quantization (a scale given: the tiling's quant mode)."""
    b, n, s, _ = kv.shape
    if product not in PRE_950 or cos.shape[2] == s:
        return
    quantized = k_rope_scale is not None or c_kv_scale is not None
    ok = cache_mode == "Norm" or (cache_mode in ("PA", "PA_BNSD") and not quantized)
    checks.expect(ok, op, "cos", lambda: f"shape {(b, n, s, cos.shape[3])} on {product.value} "
                  f"with cache_mode {cache_mode!r}{' and a quant scale' if quantized else ''} "
                  "(A2/A3 broadcast cos/sin over S only in 'Norm', or in 'PA'/'PA_BNSD' without "
                  "quantization)", _shape(cos), RuntimeError)


def _check_v2_shapes(op, kv, gamma, cos, sin, v):
    """Shapes of the V2 path (v given): kv = k [B, N, S, 192], v [B, N, S, 128]; (Dk, Dv).

    Rules from hicann/ops-transformer ``posembedding/kv_rms_norm_rope_cache/docs/
    aclnnKvRmsNormRopeCacheV2.md`` (V2 scene, A2/A3 input combinations) and
    ``op_host/kv_rms_norm_rope_cache_{base,ds}_tiling.cpp`` (N in {1, 2, 4, 8}, v's last dim
    128, gamma 192, cos 64, quant parameter shapes)."""
    b, n, s, d = kv.shape
    checks.expect(n in V2_HEADS, op, "kv", "a head number (dim 1) of 1, 2, 4 or 8 (the V2 path "
                  "selected by v)", _shape(kv), ValueError)
    checks.expect(d == V2_DK, op, "kv", f"a last dim of {V2_DK} (the V2 path selected by v: kv "
                  "holds only k)", lambda: f"D = {d}", ValueError)
    checks.expect(gamma.shape[0] == d, op, "gamma", lambda: f"kv's last dim ({d}) as its length "
                  "(the V2 path normalizes all of kv)", lambda: f"length {gamma.shape[0]}",
                  RuntimeError)
    checks.expect(cos.shape[3] == V2_ROPE, op, "cos", f"a last dim of {V2_ROPE} (the V2 path "
                  f"rotates the first {V2_ROPE} normalized values)",
                  lambda: f"Dk = {cos.shape[3]}", ValueError)
    _rope_shape_check(op, cos, sin, ((b, n, s, V2_ROPE), (b, n, 1, V2_ROPE)))
    checks.expect(tuple(v.shape[:3]) == (b, n, s), op, "v", lambda: f"kv's [B, N, S] "
                  f"{(b, n, s)} as its first three dims", _shape(v), RuntimeError)
    checks.expect(v.shape[3] == V2_DV, op, "v", f"a last dim of {V2_DV} (op-plugin takes the "
                  f"V2 path only for Dv = {V2_DV})", lambda: f"Dv = {v.shape[3]}", ValueError)
    return V2_DK, V2_DV


def _check_v2_quant(op, kv, cos, params, cache_mode):
    """Cache dtypes and quantization parameters of the V2 path (A2/A3 rules: int8 only, a scale
    is given exactly for a quantized cache, shapes [N, D]), and its cos/sin S-broadcast rule."""
    b, n, s, _ = kv.shape
    quantized = False
    present = []
    for (name, sname, oname), (eff, quant, scale, offset), width in zip(
            _NAMES, params, (V2_DK, V2_DV)):
        _check_cache_dtype(op, kv, name, eff, (torch.int8,),
                           " (the V2 path runs on A2/A3 only, which quantize to int8 only)")
        if quant:
            checks.expect(scale is not None, op, sname, lambda name=name: "a float32 tensor "
                          f"(required when {name} is quantized)", "None", ValueError)
        else:
            checks.expect(scale is None, op, sname, lambda name=name: f"None when {name} is not "
                          "quantized (the V2 path treats a given scale as quantizing its cache)",
                          "a tensor", ValueError)
        checks.expect(offset is None or scale is not None, op, oname, lambda sname=sname:
                      f"None without {sname} (an offset needs its scale)", "a tensor",
                      ValueError)
        quantized = quantized or quant
        shapes = ((n, width), (width,)) if n == 1 else ((n, width),)
        for pname, t in ((sname, scale), (oname, offset)):
            if t is None:
                continue
            checks.expect_dtype(t, (torch.float32,), op, pname)
            checks.expect(tuple(t.shape) in shapes, op, pname, lambda shapes=shapes: "shape "
                          + " or ".join(str(x) for x in shapes) + " ([N, D] in the V2 path)",
                          _shape(t), RuntimeError)
            present.append((pname, t))
    for pname, t in present[1:]:
        checks.expect(t.dim() == present[0][1].dim(), op, pname, lambda: f"{present[0][0]}'s "
                      f"number of dims ({present[0][1].dim()}; the V2 path takes all quant "
                      "parameters with the same rank)", lambda t=t: f"{t.dim()} dims",
                      RuntimeError)
    if cos.shape[2] != s:
        ok = cache_mode == "Norm" or (cache_mode in ("PA", "PA_BNSD") and not quantized)
        checks.expect(ok, op, "cos", lambda: f"shape {(b, n, s, V2_ROPE)} with cache_mode "
                      f"{cache_mode!r}{' and a quantized cache' if quantized else ''} (the V2 "
                      "path broadcasts cos/sin over S only in 'Norm', or in 'PA'/'PA_BNSD' "
                      "without quantization)", _shape(cos), RuntimeError)


def _check_layout(op, kv, index, k_cache, ckv_cache, k_eff, c_eff, cache_mode, dk, dv):
    b, n, s, _ = kv.shape
    if cache_mode == "Norm":
        for name, cache, d in (("k_cache", k_cache, dk), ("ckv_cache", ckv_cache, dv)):
            ok = cache.dim() == 4 and cache.shape[1] == n and cache.shape[3] == d
            checks.expect(ok, op, name, lambda d=d: f"a cache [Bcache, {n}, Scache, {d}] "
                          "(cache_mode 'Norm')", _shape(cache), RuntimeError)
        checks.expect(ckv_cache.shape[0] == k_cache.shape[0] and
                      ckv_cache.shape[2] == k_cache.shape[2], op, "ckv_cache",
                      lambda: f"k_cache's Bcache and Scache {(k_cache.shape[0], k_cache.shape[2])}",
                      _shape(ckv_cache), RuntimeError)
        checks.expect(k_cache.shape[0] >= b, op, "k_cache", lambda: f"a batch dim >= kv's ({b})",
                      _shape(k_cache), RuntimeError)
        checks.expect(k_cache.shape[2] >= s, op, "k_cache",
                      lambda: f"a cache length (dim 2) >= seq_len ({s})", _shape(k_cache),
                      RuntimeError)
        checks.expect(tuple(index.shape) == (b, s), op, "index",
                      lambda: f"shape {(b, s)} [Bkv, Skv] (cache_mode 'Norm')", _shape(index),
                      RuntimeError)
        return
    nz = cache_mode in NZ_MODES
    num_blocks, block_size = k_cache.shape[0], cache_block_size(k_cache, nz)
    for name, cache, d, eff in (("k_cache", k_cache, dk, k_eff), ("ckv_cache", ckv_cache, dv, c_eff)):
        ld = nz_last_dim(_storage(eff))
        want = [(num_blocks, block_size, n, d)]
        if nz:
            want.append((num_blocks, n, d // ld, block_size, ld))
            checks.expect(d % ld == 0, op, name, lambda ld=ld, eff=eff: f"a last dim whose bytes "
                          f"are a multiple of 32 (a multiple of {ld} for {_name(eff)}) with "
                          f"cache_mode {cache_mode!r}", lambda d=d: f"{d}", ValueError)
        checks.expect(tuple(cache.shape) in want, op, name,
                      lambda want=want: " or ".join(str(w) for w in want) + " ([BlockNum, "
                      f"BlockSize, N, D] in cache_mode {cache_mode!r})", _shape(cache),
                      RuntimeError)
        if nz and cache.dim() == 4:
            checks.expect(cache.is_contiguous(), op, name, "a contiguous tensor (its memory "
                          "holds the FRACTAL_NZ layout)", "a non-contiguous tensor", RuntimeError)
        checks.expect(block_size % ld == 0, op, name, lambda ld=ld, eff=eff: f"a BlockSize that "
                      f"is a multiple of {ld} (32 bytes of {_name(eff)})",
                      lambda: f"BlockSize {block_size}", ValueError)
    pages = -(-s // block_size)
    # Not checked: the torch_npu doc's "block_num >= Ceil(seq_len/block_size)*batch_size" (a
    # sizing hint; the aclnn doc puts no limit on BlockNum, and vllm-ascend calls with
    # kv [tokens, 1, 1, D], for which it would demand a block per token).  The index checks
    # keep every write inside the cache.
    want = (b * pages,) if cache_mode in BLK_MODES else (b * s,)
    checks.expect(tuple(index.shape) == want, op, "index",
                  lambda: f"shape {want} (cache_mode {cache_mode!r})", _shape(index),
                  RuntimeError)


def cache_block_size(cache, nz):
    return cache.shape[-2] if (nz and cache.dim() == 5) else cache.shape[1]


def _make_check(op):
    def check(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
              c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None, epsilon=1e-05,
              cache_mode="Norm", is_output_kv=False, k_cache_dtype=None, ckv_cache_dtype=None):
        _check(op, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
               k_rope_offset, c_kv_offset, v, epsilon, cache_mode, is_output_kv,
               k_cache_dtype, ckv_cache_dtype)
    check.__name__ = f"check_{op}"
    return check


check_kv_rmsnorm_rope_cache = _make_check(OP)
check_kv_rmsnorm_rope_cache_v2 = _make_check(V2_OP)
check_kv_rmsnorm_rope_cache_v2_functional = _make_check(FUNCTIONAL_OP)
