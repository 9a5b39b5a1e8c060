"""torch_npu.npu_kv_rmsnorm_rope_cache, npu_kv_rmsnorm_rope_cache_v2 (in place) and
npu_kv_rmsnorm_rope_cache_v2_functional.

DeepSeek MLA's KV path in one op: the last dim of ``kv`` ``[B, N, S, D]`` is split into
``Dv = gamma.shape[0]`` values (RMSNorm with ``gamma`` -> ``ckv_cache``) and the following
``Dk = cos.shape[-1]`` values (interleaved RoPE -> ``k_cache``); both results are written into
their caches at the positions ``index`` names (``-1`` skips).  With ``v`` (the V2 path of
aclnnKvRmsNormRopeCacheV2, A2/A3): ``kv`` ``[B, N, S, 192]`` is all k -- RMSNorm over 192, RoPE of
its first 64 values -> ``k_cache`` -- and ``v`` ``[B, N, S, 128]`` goes to ``ckv_cache`` as is.
See the docstring of :func:`npu_kv_rmsnorm_rope_cache` for the formulas, cache modes and
quantization.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...kernels import compiled
from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import PRE_950, Product
from ..cache.paged import bitwise, nz_last_dim, writable, write_nd, write_nz
from ..norm.rms_core import rms_norm_fp32
from ..posembedding import rotation
from ..quant import core as qcore

OP = "npu_kv_rmsnorm_rope_cache"
V2_OP = "npu_kv_rmsnorm_rope_cache_v2"
FUNCTIONAL_OP = "npu_kv_rmsnorm_rope_cache_v2_functional"
INPLACE_OP = "_npu_kv_rmsnorm_rope_cache_inplace"

_ARGS = ("Tensor kv, Tensor gamma, Tensor cos, Tensor sin, Tensor index, {kc} k_cache, "
         "{ckv} ckv_cache, *, Tensor? k_rope_scale=None, Tensor? c_kv_scale=None, "
         "Tensor? k_rope_offset=None, Tensor? c_kv_offset=None, Tensor? v=None, "
         "float epsilon=1e-05, str cache_mode='Norm', bool is_output_kv=False")
_DTYPE_ARGS = ", int? k_cache_dtype=None, int? ckv_cache_dtype=None"
# op-plugin's yaml declares no mutation for v1 although it writes the caches in place and
# returns them (doc: "本质in-place更新"); the schema here says so.
SCHEMA = (f"{OP}({_ARGS.format(kc='Tensor(a!)', ckv='Tensor(b!)')}) "
          "-> (Tensor(a!), Tensor(b!), Tensor, Tensor)")
INPLACE_SCHEMA = (f"{INPLACE_OP}({_ARGS.format(kc='Tensor(a!)', ckv='Tensor(b!)')}) "
                  "-> (Tensor, Tensor)")
V2_SCHEMA = (f"{V2_OP}({_ARGS.format(kc='Tensor(a!)', ckv='Tensor(b!)')}{_DTYPE_ARGS}) "
             "-> (Tensor, Tensor)")
FUNCTIONAL_SCHEMA = (f"{FUNCTIONAL_OP}({_ARGS.format(kc='Tensor', ckv='Tensor')}{_DTYPE_ARGS})"
                     " -> (Tensor, Tensor, Tensor, Tensor)")

CACHE_MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")
PAGED = CACHE_MODES[1:]
NZ_MODES = ("PA_NZ", "PA_BLK_NZ")
BLK_MODES = ("PA_BLK_BNSD", "PA_BLK_NZ")
KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
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


def _cache_format(op, cache, code, param):
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
    k_eff, k_quant = _cache_format(op, k_cache, k_cache_dtype, "k_cache")
    c_eff, c_quant = _cache_format(op, ckv_cache, ckv_cache_dtype, "ckv_cache")
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
    num_blocks, block_size = k_cache.shape[0], _block_size(k_cache, nz)
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


def _block_size(cache, nz):
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


# -- math --------------------------------------------------------------------------------------

def interleave_rope(x, cos, sin):
    """RoPE of interleaved pairs, in x's (float32) dtype: de-interleave x to (x0, x2, x4, ...,
    x1, x3, ...), then ``xd * cos + cat(-xd2, xd1) * sin``."""
    xd = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
    c, signed_sin = rotation.prepare(cos, sin, "half", x.dtype)
    return rotation.rope(xd, c, signed_sin, "half")


def norm_and_rope(kv, gamma, cos, sin, epsilon):
    """(k_embed, y) in float32: interleaved RoPE of kv[..., Dv:] and RMSNorm of kv[..., :Dv]."""
    dv = gamma.shape[0]
    y, _ = rms_norm_fp32(kv[..., :dv], gamma, epsilon)
    return interleave_rope(kv[..., dv:].to(y.dtype), cos, sin), y


def norm_then_rope(kv, gamma, cos, sin, epsilon):
    """The V2 path's k in float32: RMSNorm of all of kv, then interleaved RoPE of its first
    ``cos.shape[-1]`` values, the rest kept: ``cat(rope(y[..., :64]), y[..., 64:])``."""
    y, _ = rms_norm_fp32(kv, gamma, epsilon)
    r = cos.shape[-1]
    return torch.cat((interleave_rope(y[..., :r], cos, sin), y[..., r:]), dim=-1)


def _quantize(values, eff, scale, offset, heads):
    """float32 values -> cache dtype: round(values * scale [+ offset]), saturated.

    int8 rounds half to even, float8 to nearest even, hifloat8 half away from zero (the 950
    kernel's ``CAST_FP32_TO_HIFLOAT8``: ``RoundMode::CAST_ROUND``, ``SatMode::SAT``)."""
    def shaped(t):
        return t.reshape(heads, 1, -1) if t.dim() == 2 else t
    q = values * shaped(scale)
    if offset is not None:
        q = q + shaped(offset)
    fmt = qcore.format_of(eff)
    mode = "round" if fmt.name == "hifloat8" else "rint"
    return qcore.cast_to(q, fmt, round_mode=mode, inplace=True)


def _cache_values(values, eff, scale, offset, heads, cache_dtype):
    if eff in QUANT_FORMATS:
        out = _quantize(values, eff, scale, offset, heads)
    else:
        out = values.to(eff)
    return out if out.dtype == cache_dtype else bitwise(out).view(cache_dtype)


# -- index plans (eager, before the first write) ---------------------------------------------

def _bad(op, flat, mask, requirement, error=IndexError):
    pos = int(mask.nonzero()[0, 0])
    checks.expect(False, op, "index", requirement, f"{int(flat[pos])} at flat position {pos}",
                  error)


def _expect_unique(op, keys, requirement):
    if keys.numel() < 2:
        return
    srt = torch.sort(keys).values
    dup = srt[1:] == srt[:-1]
    if bool(dup.any()):
        value = int(srt[1:][dup][0])
        checks.expect(False, op, "index", requirement, f"a repeated value {value}", ValueError)


def _plan(op, index, b, s, k_cache, cache_mode):
    """(token rows of the flattened [B*S] tokens, destinations) for the writes; raises on a bad
    index before anything is written."""
    flat = index.reshape(-1)
    if cache_mode == "Norm":
        scache = k_cache.shape[2]
        lo, hi = (int(x) for x in torch.aminmax(flat))
        if lo < -1 or hi >= scache:
            _bad(op, flat, (flat < -1) | (flat >= scache),
                 f"values in [-1, {scache - 1}] (-1 skips; Scache = {scache})")
        keep = None if lo >= 0 else (flat >= 0).nonzero().squeeze(1)
        if keep is None:             # no skipped token: no gather needed
            batch, pos = torch.div(torch.arange(b * s, device=index.device), s,
                                   rounding_mode="floor"), flat
        else:
            batch, pos = torch.div(keep, s, rounding_mode="floor"), flat[keep]
        # unique within a batch (different batches may repeat: they write different caches)
        _expect_unique(op, batch * scache + pos, "positions that do not repeat within a batch")
        return keep, (batch, pos)
    nz = cache_mode in NZ_MODES
    bs = _block_size(k_cache, nz)
    total = k_cache.shape[0] * bs
    lo, hi = (int(x) for x in torch.aminmax(flat))
    if lo < -1 or hi >= total:
        _bad(op, flat, (flat < -1) | (flat >= total),
             f"values in [-1, {total - 1}] (-1 skips; BlockNum * BlockSize = {total})")
    if cache_mode in BLK_MODES:
        pages = -(-s // bs)
        _expect_unique(op, torch.div(flat[flat >= 0], bs, rounding_mode="floor"),
                       "values whose value // BlockSize do not repeat")
        tok = torch.arange(b * s, device=index.device)
        seq = tok % s
        page_start = flat[torch.div(tok, s, rounding_mode="floor") * pages
                          + torch.div(seq, bs, rounding_mode="floor")]
        if lo >= 0:              # no skipped block: no gather needed
            return None, torch.div(page_start, bs, rounding_mode="floor") * bs + seq % bs
        keep = (page_start >= 0).nonzero().squeeze(1)
        block = torch.div(page_start[keep], bs, rounding_mode="floor")
        return keep, block * bs + seq[keep] % bs
    if lo >= 0:                  # no skipped token: no gather needed
        _expect_unique(op, flat, "values that do not repeat")
        return None, flat
    keep = (flat >= 0).nonzero().squeeze(1)
    _expect_unique(op, flat[keep], "values that do not repeat")
    return keep, flat[keep]


def _write(cache, rows, dest, cache_mode):
    if cache_mode == "Norm":        # cache[b, n, pos] for every head n
        batch, pos = dest
        writable(cache)[batch, :, pos] = writable(rows).reshape(batch.numel(), cache.shape[1],
                                                                -1)
    elif cache_mode in NZ_MODES:
        if cache.dim() == 4:    # [nb, bs, N, D] whose memory holds [nb, N*D//ld, bs, ld]
            nb, bs, n, d = cache.shape
            ld = 32 // cache.element_size()
            write_nz(cache.view(nb, n * d // ld, bs, ld), dest, rows)
        else:
            write_nz(cache, dest, rows)
    else:
        write_nd(cache, dest, rows)


def run_into(op, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
             k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv, k_cache_dtype,
             ckv_cache_dtype, v=None):
    """Validate the index values, compute, then write both caches; returns (k_rope, c_kv)."""
    k_eff, c_eff, keep, dest = prepare(op, kv, index, k_cache, ckv_cache, cache_mode,
                                       k_cache_dtype, ckv_cache_dtype)
    return compute_and_write(kv, gamma, cos, sin, k_cache, ckv_cache, keep, dest, k_rope_scale,
                             c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode,
                             is_output_kv, k_eff, c_eff, v)


def prepare(op, kv, index, k_cache, ckv_cache, cache_mode, k_cache_dtype, ckv_cache_dtype):
    """(k_eff, c_eff, keep, dest): the caches' value dtypes and the write plan (eager: it
    checks the index values, raising before anything is written)."""
    k_eff, _ = _cache_format(op, k_cache, k_cache_dtype, "k_cache")
    c_eff, _ = _cache_format(op, ckv_cache, ckv_cache_dtype, "ckv_cache")
    keep, dest = _plan(op, index, kv.shape[0], kv.shape[2], k_cache, cache_mode)
    return k_eff, c_eff, keep, dest


def compute_and_write(kv, gamma, cos, sin, k_cache, ckv_cache, keep, dest, k_rope_scale,
                      c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv,
                      k_eff, c_eff, v):
    """The arithmetic and the writes of a checked plan (no data-dependent control flow: the
    compiled provider compiles it when no token is skipped)."""
    b, n, s, _ = kv.shape
    if v is None:
        k, y = norm_and_rope(kv, gamma, cos, sin, epsilon)
        rows_k, rows_y = k.reshape(b * s, -1), y.reshape(b * s, -1)
        k_params, c_params = (k_rope_scale, k_rope_offset), (c_kv_scale, c_kv_offset)
    else:
        k, y = norm_then_rope(kv, gamma, cos, sin, epsilon), v
        # one row [N, D] per token (b, s); v is quantized from its float32 value (a float
        # scale promotes it), else copied
        rows_k, rows_y = (t.transpose(1, 2).reshape(b * s, n, -1) for t in (k, v))
        def per_head(t):        # [N, D] (or [D] for N = 1) -> [1, N, D] against [T, N, D]
            return None if t is None else t.reshape(1, n, -1)
        k_params = (per_head(k_rope_scale), per_head(k_rope_offset))
        c_params = (per_head(c_kv_scale), per_head(c_kv_offset))
    if keep is not None:
        rows_k, rows_y = rows_k[keep], rows_y[keep]
    k_rows = _cache_values(rows_k, k_eff, *k_params, n, k_cache.dtype)
    c_rows = _cache_values(rows_y, c_eff, *c_params, n, ckv_cache.dtype)
    _write(k_cache, k_rows, dest, cache_mode)
    _write(ckv_cache, c_rows, dest, cache_mode)
    if v is None:
        if is_output_kv:
            return k.to(kv.dtype), y.to(kv.dtype)
        return (kv.new_zeros((b, n, s, cos.shape[3])), kv.new_zeros((b, n, s, gamma.shape[0])))
    # V2: in 'Norm' without quantization the kernel does not write the outputs (tiling sets
    # isOutputKv = 0; aclnn doc: "Norm ... 仅在V2场景中开启量化模式时有效")
    quantized = k_eff in QUANT_FORMATS or c_eff in QUANT_FORMATS
    if is_output_kv and (cache_mode != "Norm" or quantized):
        return k.to(kv.dtype).contiguous(), v.clone(memory_format=torch.contiguous_format)
    return kv.new_zeros((b, n, s, V2_DK)), kv.new_zeros((b, n, s, V2_DV))


def _outputs_fake(kv, gamma, cos, v=None):
    """(k_rope, c_kv): [B, N, S, Dk] and [B, N, S, Dv] -- Dk = cos's last dim and Dv = gamma's
    length in V1, kv's and v's last dims in V2 (op-plugin's meta functions)."""
    b, n, s, d = kv.shape
    dk, dv = (cos.shape[3], gamma.shape[0]) if v is None else (d, v.shape[3])
    return kv.new_empty((b, n, s, dk)), kv.new_empty((b, n, s, dv))


# -- registration ------------------------------------------------------------------------------

def _inplace_reference(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
                       c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None,
                       epsilon=1e-05, cache_mode="Norm", is_output_kv=False):
    return run_into(OP, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale,
                    c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv,
                    None, None, v)


def _inplace_fake(kv, gamma, cos, sin, index, k_cache, ckv_cache, **kwargs):
    return _outputs_fake(kv, gamma, cos, kwargs.get("v"))


def _v2_reference(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
                  c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None, epsilon=1e-05,
                  cache_mode="Norm", is_output_kv=False, k_cache_dtype=None,
                  ckv_cache_dtype=None):
    return run_into(V2_OP, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale,
                    c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv,
                    k_cache_dtype, ckv_cache_dtype, v)


def _functional_reference(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
                          c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None,
                          epsilon=1e-05, cache_mode="Norm", is_output_kv=False,
                          k_cache_dtype=None, ckv_cache_dtype=None):
    # Clone both caches (at::clone keeps the strides) and write the clones.  op-plugin's
    # KvRmsNormRopeCacheNpuOpApi.cpp clones too, but hands the kernel the wrappers of the
    # *input* caches and returns the untouched clones; the functional schema (no mutation)
    # and the op's purpose say "new, updated caches", which is what this does.
    k_out, ckv_out = k_cache.clone(), ckv_cache.clone()
    k_rope, c_kv = run_into(FUNCTIONAL_OP, kv, gamma, cos, sin, index, k_out, ckv_out,
                            k_rope_scale, c_kv_scale, k_rope_offset, c_kv_offset, epsilon,
                            cache_mode, is_output_kv, k_cache_dtype, ckv_cache_dtype, v)
    return k_rope, c_kv, k_out, ckv_out


def _functional_fake(kv, gamma, cos, sin, index, k_cache, ckv_cache, **kwargs):
    return _outputs_fake(kv, gamma, cos, kwargs.get("v")) + (torch.empty_like(k_cache),
                                                             torch.empty_like(ckv_cache))


_NO_GRAD = "an inference cache write (no backward in op-plugin's derivatives.yaml)"

kv_rmsnorm_rope_cache_inplace_op = NpuOp(
    INPLACE_SCHEMA, namespace=INTERNAL_NS, check=check_kv_rmsnorm_rope_cache,
    reference=_inplace_reference, fake=_inplace_fake, metadata_check=True,
    info=OpInfo(api="internal", public=False))
kv_rmsnorm_rope_cache_inplace_op.forbid_autograd(_NO_GRAD, public_name=OP)


def _composite(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
               c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None, epsilon=1e-05,
               cache_mode="Norm", is_output_kv=False):
    k_rope, c_kv = kv_rmsnorm_rope_cache_inplace_op(
        kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=k_rope_scale,
        c_kv_scale=c_kv_scale, k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=v,
        epsilon=epsilon, cache_mode=cache_mode, is_output_kv=is_output_kv)
    return k_cache, ckv_cache, k_rope, c_kv


kv_rmsnorm_rope_cache_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_kv_rmsnorm_rope_cache, composite=_composite,
                                 info=OpInfo(api="torch_npu"))
kv_rmsnorm_rope_cache_op.autograd = "no (raises)"

kv_rmsnorm_rope_cache_v2_op = NpuOp(V2_SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_kv_rmsnorm_rope_cache_v2,
                                    reference=_v2_reference, fake=_inplace_fake,
                                    metadata_check=True, info=OpInfo(api="torch_npu"))
kv_rmsnorm_rope_cache_v2_op.forbid_autograd(_NO_GRAD)

kv_rmsnorm_rope_cache_v2_functional_op = NpuOp(
    FUNCTIONAL_SCHEMA, namespace=TORCH_NPU_NS, check=check_kv_rmsnorm_rope_cache_v2_functional,
    reference=_functional_reference, fake=_functional_fake, metadata_check=True,
    info=OpInfo(api="torch_npu"))
kv_rmsnorm_rope_cache_v2_functional_op.forbid_autograd(_NO_GRAD)


# -- the compiled provider -----------------------------------------------------------------------
# Decode calls are dominated by per-op overhead and prefill by temporaries; Inductor fuses the
# norm, the RoPE, the quantization and the writes into one pass.  The index plan is still
# checked eagerly first; calls that skip tokens (a gather of data-dependent size) stay eager.

def _op_key(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, v=None, cache_mode="Norm",
            is_output_kv=False, k_cache_dtype=None, ckv_cache_dtype=None, **_):
    return (cache_mode, kv.dtype, k_cache.dtype, ckv_cache.dtype, k_cache_dtype,
            ckv_cache_dtype, v is None, is_output_kv, kv.device.type)


_compiled_compute = compiled.CompiledProvider(compute_and_write, key=_op_key)


def _compiled_run(op_name, functional):
    def run(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
            c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None, epsilon=1e-05,
            cache_mode="Norm", is_output_kv=False, k_cache_dtype=None, ckv_cache_dtype=None):
        key = _op_key(kv, gamma, cos, sin, index, k_cache, ckv_cache, v=v,
                      cache_mode=cache_mode, is_output_kv=is_output_kv,
                      k_cache_dtype=k_cache_dtype, ckv_cache_dtype=ckv_cache_dtype)
        if functional:
            k_cache, ckv_cache = k_cache.clone(), ckv_cache.clone()
        k_eff, c_eff, keep, dest = prepare(op_name, kv, index, k_cache, ckv_cache, cache_mode,
                                           k_cache_dtype, ckv_cache_dtype)
        args = (kv, gamma, cos, sin, k_cache, ckv_cache, keep, dest, k_rope_scale, c_kv_scale,
                k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv, k_eff, c_eff, v)
        if keep is None:
            outputs = _compiled_compute.run_as(key, *args)
        else:
            outputs = compute_and_write(*args)
        return outputs + (k_cache, ckv_cache) if functional else outputs
    return run


for _registered, _public, _functional in (
        (kv_rmsnorm_rope_cache_inplace_op, OP, False),
        (kv_rmsnorm_rope_cache_v2_op, V2_OP, False),
        (kv_rmsnorm_rope_cache_v2_functional_op, FUNCTIONAL_OP, True)):
    _registered.add_provider(compiled.CompiledProvider.name,
                             _compiled_run(_public, _functional), _compiled_compute.supports)


# -- Python API --------------------------------------------------------------------------------

def npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *,
                              k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                              c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                              is_output_kv=False):
    return kv_rmsnorm_rope_cache_op(
        kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=k_rope_scale,
        c_kv_scale=c_kv_scale, k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=v,
        epsilon=epsilon, cache_mode=cache_mode, is_output_kv=is_output_kv)


def npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, index, k_cache, ckv_cache, *,
                                 k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                                 c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                                 is_output_kv=False, k_cache_dtype=None, ckv_cache_dtype=None):
    return kv_rmsnorm_rope_cache_v2_op(
        kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=k_rope_scale,
        c_kv_scale=c_kv_scale, k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=v,
        epsilon=epsilon, cache_mode=cache_mode, is_output_kv=is_output_kv,
        k_cache_dtype=k_cache_dtype, ckv_cache_dtype=ckv_cache_dtype)


def npu_kv_rmsnorm_rope_cache_v2_functional(kv, gamma, cos, sin, index, k_cache, ckv_cache, *,
                                            k_rope_scale=None, c_kv_scale=None,
                                            k_rope_offset=None, c_kv_offset=None, v=None,
                                            epsilon=1e-5, cache_mode="Norm", is_output_kv=False,
                                            k_cache_dtype=None, ckv_cache_dtype=None):
    return kv_rmsnorm_rope_cache_v2_functional_op(
        kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=k_rope_scale,
        c_kv_scale=c_kv_scale, k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=v,
        epsilon=epsilon, cache_mode=cache_mode, is_output_kv=is_output_kv,
        k_cache_dtype=k_cache_dtype, ckv_cache_dtype=ckv_cache_dtype)


npu_kv_rmsnorm_rope_cache.__doc__ = """RMSNorm + interleaved RoPE of MLA's kv, written into
    two caches in place (``torch_npu.npu_kv_rmsnorm_rope_cache``).

    With ``Dv = gamma.shape[0]`` and ``Dk = cos.shape[-1]`` (``Dv + Dk = D``)::

        rms_in = kv[..., :Dv]                                 (float32)
        y      = rms_in / sqrt(mean(rms_in ** 2, -1) + epsilon) * gamma
        x      = kv[..., Dv:]
        k      = cat(x[..., 0::2], x[..., 1::2])              (de-interleave)
        k_embed = k * cos + cat(-k2, k1) * sin                (k1, k2 = halves of k)

    ``k_embed`` goes to ``k_cache`` and ``y`` to ``ckv_cache``, one row per token
    ``(b, s)`` of kv, at the place ``index`` names:

    =============  ===================  =====================================================
    cache_mode     index                destination of token (b, s)
    =============  ===================  =====================================================
    Norm           [B, S]               cache[b, 0, index[b, s]]; caches [Bc, 1, Sc, D]
    PA, PA_BNSD    [B*S]                slot index[b*S+s] of an ND cache [nb, bs, 1, D]
    PA_NZ          [B*S]                same slot, FRACTAL_NZ cache
    PA_BLK_BNSD    [B*ceil(S/bs)]       block index[b*P + s//bs] // bs, offset s % bs (ND)
    PA_BLK_NZ      [B*ceil(S/bs)]       the same, FRACTAL_NZ cache
    =============  ===================  =====================================================

    ``-1`` skips the token (PA_BLK: the whole block).  NZ caches are given either as the
    documented 4-D ``[nb, bs, 1, D]`` tensor whose (contiguous) memory holds the NZ layout
    ``[nb, 1, D // ld, bs, ld]`` (what op-plugin's golden reshapes to) or as that 5-D tensor;
    ``ld = 32 // element size`` (16 for float16/bfloat16, 32 for int8/float8/hifloat8).

    Quantized caches (int8; float8_e5m2/float8_e4m3fn; hifloat8): ``cache = cast(value * scale
    + offset)`` from the float32 value (a float32 multiply, then a float32 add), with
    ``k_rope_scale``/``k_rope_offset`` for k_cache and ``c_kv_scale``/``c_kv_offset`` for
    ckv_cache (offset optional).  int8 rounds half to even and saturates to [-128, 127];
    float8 rounds to nearest even and saturates (NaN -> +0); hifloat8 rounds half away from
    zero (``CAST_ROUND``) and saturates to +-32768 (NaN -> 0), bit-exact as
    :mod:`npu_anywhere.ops.quant.hifloat8` documents.  Either cache may be quantized on its
    own.  A hifloat8 cache is a uint8 (or int8) tensor holding the codes, passed to
    ``npu_kv_rmsnorm_rope_cache_v2`` / ``_v2_functional`` with ``k_cache_dtype`` /
    ``ckv_cache_dtype = torch_npu.hifloat8`` (290); this function takes no dtype codes, so a
    uint8 cache raises TypeError here, as op-plugin's v1 (which hands the aclnn op a UINT8
    tensor) fails.

    **V2 path** (``v`` given; aclnnKvRmsNormRopeCacheV2's "kv separated" scene, A2/A3 only):
    ``kv`` ``[B, N, S, 192]`` holds only k and ``v`` ``[B, N, S, 128]`` the values,
    ``N in {1, 2, 4, 8}``, gamma ``[192]``, cos/sin ``[B, N, S, 64]`` (or ``[B, N, 1, 64]``)::

        y       = kv / sqrt(mean(kv ** 2, -1) + epsilon) * gamma       (float32, all 192)
        x       = y[..., :64]
        k_embed = cat(rope(cat(x[..., 0::2], x[..., 1::2])), y[..., 64:])  (192 values)

    ``k_embed`` goes to ``k_cache`` ``[.., N, 192]`` and ``v`` (unchanged, or quantized from
    its float32 value) to ``ckv_cache`` ``[.., N, 128]``; every head ``n`` of token ``(b, s)``
    goes to the slot the token's index names (Norm: ``cache[b, n, index[b, s]]``; paged:
    ``cache[block, offset, n]``; NZ: ``[nb, N, D // ld, bs, ld]``, head-major).  Quantization
    is int8 only, per head: ``scale``/``offset`` ``[N, D]`` (``[D]`` also taken when N = 1).

    Parameters
    ----------
    kv : Tensor
        ``[B, 1, S, Dv + Dk]``, float16 or bfloat16 (float32 accepted outside strict mode).
        With ``v``: ``[B, N, S, 192]``.
    gamma : Tensor
        ``[Dv]``, kv's dtype.  With ``v``: ``[192]``.
    cos, sin : Tensor
        ``[B, 1, S, Dk]`` or ``[B, 1, 1, Dk]``, kv's dtype.  With ``v``: ``[B, N, S, 64]`` or
        ``[B, N, 1, 64]`` (the S-broadcast form only with cache_mode 'Norm', or 'PA'/'PA_BNSD'
        without quantization).
    index : Tensor
        int64; shape and meaning per cache_mode (table above).
    k_cache, ckv_cache : Tensor
        Written in place.  kv's dtype, or int8 / float8 (quantized; float8 on the 950 only);
        hifloat8 (950 only) through the _v2 ops' dtype codes.
    k_rope_scale, c_kv_scale : Tensor, optional
        float32 ``[1, Dk]``/``[Dk]``/``[1]`` (resp. Dv; ``[1]`` not on A2/A3): required for a
        quantized cache, ignored for a float one (the torch_npu doc example passes both with
        one float cache).
        With ``v``: ``[N, 192]`` / ``[N, 128]`` (or ``[192]`` / ``[128]`` when N = 1), given
        exactly when the cache is int8; all quant parameters of one call have the same rank.
    k_rope_offset, c_kv_offset : Tensor, optional
        float32, same shapes: asymmetric quantization (950 only; A2/A3 do not support it).
        With ``v``: supported (A2/A3), only together with the matching scale.
    v : Tensor, optional
        ``[B, N, S, 128]``, kv's dtype: selects the V2 path (see above), written to
        ``ckv_cache``.
    epsilon : float
        Added to the mean of squares (default 1e-5).
    cache_mode : str
        'Norm' (default), 'PA', 'PA_BNSD', 'PA_NZ', 'PA_BLK_BNSD' or 'PA_BLK_NZ'.
    is_output_kv : bool
        Return ``k_embed`` and ``y`` (rounded to kv's dtype, not quantized); with ``v``,
        ``k_embed`` (192 values) and a copy of ``v``, except in cache_mode 'Norm' without a
        quantized cache, where the V2 kernel writes neither.  Without ``v``, 'Norm' returns
        them too, as the 950 does; the A2/A3 kernels write them only in the paged modes
        (see Notes).

    Returns
    -------
    (k_cache, ckv_cache, k_embed_out, y_out)
        The caches (the input tensors, updated in place), ``[B, 1, S, Dk]`` and
        ``[B, 1, S, Dv]`` in kv's dtype (with ``v``: ``[B, N, S, 192]`` and
        ``[B, N, S, 128]``).  Outputs that the NPU leaves uninitialized (``is_output_kv=False``;
        V2 in 'Norm' without quantization) are zeros here.

    Constraints
    -----------
    N = 1; Dk even; Dk + Dv = D; NZ modes: Dk and Dv multiples of 32 bytes of their cache
    dtype; paged modes: BlockSize a multiple of 32 bytes of each cache dtype; Norm:
    Scache >= S, Bcache >= B.  The torch_npu doc's ``block_num >= ceil(S / BlockSize) * B``
    is not enforced (the aclnn doc sets no limit; vllm-ascend's ``kv [T, 1, 1, D]`` calls
    would break it); the index range checks keep every write inside the cache.  index values in [-1, Scache)
    (Norm) or [-1, BlockNum * BlockSize) (paged), no repeats (Norm: within a batch; PA_BLK:
    value // BlockSize).  Index values are checked before anything is written (IndexError /
    ValueError) and a failed call leaves both caches untouched; the NPU does not check them.
    Strict mode: A2/A3 (torch_npu doc: float16/bfloat16, int8 caches, no offsets) and the 950
    (aclnn doc, seed 002: also float8 / hifloat8 caches and offsets; hifloat8 caches
    ``k_cache_dtype=torch_npu.hifloat8`` in v2, in every cache mode).  In every strict mode
    two quantized caches have one dtype (TypeError; seed 002's quantization cases 1-3, and no
    pair of the 950's dtype table in ``op_host/kv_rms_norm_rope_cache_def.cpp`` mixes two
    quantized dtypes); default mode also quantizes the two caches to different formats.

    Strict A2/A3, without ``v`` (aclnnKvRmsNormRopeCacheV2 doc: quantization-mode constraints
    and the A2/A3 input-combination table; the A2/A3 tiling ``op_host/
    kv_rms_norm_rope_cache_ds_tiling.cpp``): cache_mode 'Norm' takes no quantization -- no int8
    cache (TypeError) and no scale or offset (ValueError; the tiling's "CacheMode::Norm do not
    support quant!", where any scale means quantization); cos/sin ``[B, 1, 1, Dk]`` with S > 1
    only in 'Norm', or in 'PA'/'PA_BNSD' without a scale (RuntimeError; the doc's table asks
    Srope = Skv everywhere else; 'PA_BNSD' follows the rule of 'PA', as in the V2 path);
    scales/offsets ``[1, D]`` or ``[D]``, not ``[1]`` (RuntimeError).  The 950 and default mode
    accept all of these.

    With ``v`` (every product mode; the path exists on A2/A3 only, so their rules apply):
    N in {1, 2, 4, 8}; kv's last dim 192, gamma 192, cos 64, v 128 and v's [B, N, S] = kv's;
    caches kv's dtype or int8 (no float8); a scale exactly for each int8 cache, an offset only
    with its scale; parameter shapes ``[N, D]`` (``[D]`` when N = 1), one rank for all; cos
    broadcast over S only as above.  Strict mode on the 950 refuses ``v`` (ValueError: the
    950's aclnnKvRmsNormRopeCacheV2 does not process it).

    Notes
    -----
    Sources: seed 002 (aclnnKvRmsNormRopeCache: formulas, shapes, constraints, quantization
    cases); op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_rmsnorm_rope_cache.md``
    (cache modes, NZ arrangement, offsets unsupported on A2/A3) and
    ``test/test_custom_ops/test_npu_kv_rms_norm_rope_cache.py`` (the golden: norm and RoPE in
    float32, quantization ``clip(round(value * scale))`` from the unrounded float32 value --
    scale multiplies -- PA_BLK offsets ``s % BlockSize`` in page ``index // BlockSize``, the
    4-D NZ cache reinterpreted as ``[nb, 1, D // d0, bs, d0]``);
    ``op_plugin/ops/opapi/KvRmsNormRopeCacheNpuOpApi.cpp`` (v1 returns the cache tensors,
    v2 returns only the outputs, v2_functional clones the caches first).  Where the sources
    differ: the NZ row width follows each cache's own dtype (the golden picks 32 for both
    caches when quantizing; the aclnn doc ties alignment to each cache's dtype); quantization
    is accepted in every cache mode (aclnn doc; the torch_npu doc mentions the NZ case only);
    the asymmetric formula ``value * scale + offset``, spelled out by neither doc, is what the
    950 kernel computes (below).  RoPE here is "de-interleave, then rotate halves" (seed 002's
    formula), so the cached k is in de-interleaved order.

    The 950 kernel (hicann/ops-transformer ``posembedding/kv_rms_norm_rope_cache/op_kernel/
    arch35/kv_rms_norm_rope_cache_regbase_base.h`` and ``..._regbase_full_load.h``): both
    caches are quantized from the float32 value by a ``Mul`` with the scale and, when an offset
    is given, an ``Add`` of the offset, then one cast to the cache dtype -- int8 through int16
    (``CAST_RINT``, saturating), float8 with ``CAST_RINT`` + ``SatMode::SAT``, hifloat8 with
    ``CAST_FP32_TO_HIFLOAT8`` = ``CAST_ROUND`` + ``SatMode::SAT``, the same for int8, float8
    and hifloat8 caches in every cache mode; the entry ``op_kernel/kv_rms_norm_rope_cache_apt
    .cpp`` (yuanfang-chen mirror) sets CTRL[60] = 0 so that the trait's saturation applies.
    The NZ row of a 1-byte cache is ``32 / sizeof(T_K_CACHE)`` = 32 elements (``dk0`` /
    ``dv0``); the 950 tiling (``op_host/kv_rms_norm_rope_cache_regbase_full_load_tiling.cpp``)
    takes HIFLOAT8, FLOAT8_E4M3FN, FLOAT8_E5M2 and INT8 as quantized caches.

    A2/A3 facts not emulated as errors (aclnnKvRmsNormRopeCacheV2 doc, A2/A3 tiling and the
    kernel entry ``op_kernel/kv_rms_norm_rope_cache.cpp`` of the yuanfang-chen mirror): outside
    'Norm' the V1 kernels silently ignore an offset and quantize symmetrically -- strict A2/A3
    raises NotImplementedError instead, following the torch_npu doc ("暂不支持配置"); in 'Norm' the
    V1 kernels (tiling keys 1000/1001/3000) are not handed the output tensors, so
    ``is_output_kv`` has no effect there (torch_npu doc: it is valid only in the PA modes) and
    the outputs stay uninitialized, while the 950's tiling passes ``is_output_kv`` on in every
    cache mode; this function returns the values in every mode (also in strict A2/A3).  The
    torch_npu doc and the A2/A3 tiling also fix D = 576 (Dv 512, Dk 64) without ``v``; strict
    mode does not enforce that.

    The V2 path (``v``) follows hicann/ops-transformer ``posembedding/kv_rms_norm_rope_cache/
    docs/aclnnKvRmsNormRopeCacheV2.md`` (formulas (1)-(5), V2 scene, quant parameter shapes,
    A2/A3 input combinations, isOutputKv rules), plus, from the same tree as published in
    the yuanfang-chen/ops-transformer mirror (hicann's index lacks these files), its ST golden
    ``tests/st/aclnnKvRmsNormRopeCacheV2/executor_aclnnKvRmsNormRopeCacheV2.py`` (float32
    norm and RoPE, ``k_rope = cat(rope, y[64:])``, ``c_kv = v``, per-head ``[N, D]`` scales,
    ``round().clamp(-128, 127)``, NZ cache ``[nb, N, D // d0, bs, d0]``, Norm without
    quantization writes no outputs), the A2/A3 kernel ``op_kernel/
    kv_rms_norm_rope_cache_b16_pa_bnsd_quant.h`` (one cast to kv's dtype at the end, quant from
    the float32 value with the scale row of the token's head, all heads of a token to one slot)
    and the tiling (``op_host/kv_rms_norm_rope_cache_{base,ds}_tiling.cpp``: N, v 128, gamma
    192, cos 64, scale shapes; Norm without quantization: isOutputKv forced to 0); op-plugin's
    ``KvRmsNormRopeCacheNpuOpApi.cpp`` (V2 only for a 4-D v of last dim 128, outputs
    ``[B, N, S, 192]`` / ``[B, N, S, 128]``) and ``_meta_registrations.py`` (output dims
    kv's and v's last dims; v's dtype and [B, N, S] equal kv's).  Choices where they differ:
    a v whose last dim is not 128 raises (op-plugin would silently run V1 and ignore it, while
    its meta function sizes the outputs from v); 1-D scales are taken only for N = 1 (the doc
    says ``[N, D]``, the tiling also passes ``[D]``, whose per-head read would overrun it for
    N > 1); 'PA' and 'PA_BNSD' share the cos-broadcast rule (the doc's table lists it for 'PA'
    only, the tiling maps both names to one mode).  op-plugin's source comment
    ("Concat(Rope(RmsNorm(Dk=192)(-63:)), RmsNorm(Dk=192)(:-63))") contradicts every other
    source on which values are rotated; its own (skipped) golden in
    ``test/test_custom_ops/test_npu_kv_rms_norm_rope_cache.py`` rotates the first 64, as the doc,
    the ST golden and the kernel do, and so does this function.

    Examples
    --------
    >>> kv = torch.randn(2, 1, 1, 576, dtype=torch.float16)
    >>> gamma = torch.ones(512, dtype=torch.float16)
    >>> cos = torch.ones(2, 1, 1, 64, dtype=torch.float16); sin = torch.zeros_like(cos)
    >>> kc = torch.zeros(4, 16, 1, 64, dtype=torch.float16)
    >>> cc = torch.zeros(4, 16, 1, 512, dtype=torch.float16)
    >>> _ = npu_anywhere.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, torch.tensor([3, -1]),
    ...                                            kc, cc, cache_mode="PA_BNSD")
"""

npu_kv_rmsnorm_rope_cache_v2.__doc__ = """In-place :func:`npu_kv_rmsnorm_rope_cache` that
    returns only ``(k_embed_out, y_out)`` (``torch_npu.npu_kv_rmsnorm_rope_cache_v2``),
    ``v`` (the V2 path) included.

    ``k_cache_dtype`` / ``ckv_cache_dtype`` (torch_npu dtype codes) reinterpret a cache's
    storage, e.g. a uint8 cache holding float8_e4m3fn values, or ``torch_npu.hifloat8``
    (290): a uint8 (or int8) cache holding hifloat8 codes, written with round half away from
    zero and saturation to +-32768 (950 only; not with ``v``).  Everything else as
    :func:`npu_kv_rmsnorm_rope_cache`.
"""

npu_kv_rmsnorm_rope_cache_v2_functional.__doc__ = """Out-of-place
    :func:`npu_kv_rmsnorm_rope_cache_v2`: returns ``(k_embed_out, y_out, k_cache, ckv_cache)``
    with new caches (clones of the inputs, updated) and leaves the inputs untouched.
"""

TORCH_NPU_FUNCTIONS = {
    "npu_kv_rmsnorm_rope_cache": npu_kv_rmsnorm_rope_cache,
    "npu_kv_rmsnorm_rope_cache_v2": npu_kv_rmsnorm_rope_cache_v2,
    "npu_kv_rmsnorm_rope_cache_v2_functional": npu_kv_rmsnorm_rope_cache_v2_functional,
}
