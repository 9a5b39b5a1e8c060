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

This module holds the schemas, the registration, the compiled provider and the Python API;
the argument checks live in :mod:`._kv_checks` and the arithmetic and writes in
:mod:`._kv_writes`.
"""

from __future__ import annotations

import functools
import logging
import types

import torch

from ... import dtypes
from ...kernels import compiled
from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ._kv_checks import (BLK_MODES, CACHE_MODES, FUNCTIONAL_OP, HIFLOAT8, KV_DTYPES,  # noqa: F401
                         NZ_MODES, OP, PAGED, QUANT_DTYPES, QUANT_FORMATS, V2_DK, V2_DV,
                         V2_HEADS, V2_OP, V2_ROPE, check_kv_rmsnorm_rope_cache,
                         check_kv_rmsnorm_rope_cache_v2,
                         check_kv_rmsnorm_rope_cache_v2_functional)
from ._kv_writes import (compute_and_write, interleave_rope, norm_and_rope,  # noqa: F401
                         norm_then_rope, outputs_fake, prepare, run_into)

INPLACE_OP = "_npu_kv_rmsnorm_rope_cache_inplace"

log = logging.getLogger(__name__)

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


# -- registration ------------------------------------------------------------------------------

def _inplace_reference(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
                       c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None,
                       epsilon=1e-05, cache_mode="Norm", is_output_kv=False):
    return run_into(OP, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale,
                    c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv,
                    None, None, v)


def _inplace_fake(kv, gamma, cos, sin, index, k_cache, ckv_cache, **kwargs):
    return outputs_fake(kv, gamma, cos, kwargs.get("v"))


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
    return outputs_fake(kv, gamma, cos, kwargs.get("v")) + (torch.empty_like(k_cache),
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
# The compiled code writes the reference's bits on every CPU: the arithmetic avoids every op
# whose eager rounding depends on the CPU (see :mod:`._kv_writes`), and hifloat8 caches, whose
# encoder selects int32 values with ``torch.where``, are declined where Inductor's vector code
# gets such a select wrong (its AVX2 int32 blend, as this torch release generates it).

def _op_key(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, v=None, cache_mode="Norm",
            is_output_kv=False, k_cache_dtype=None, ckv_cache_dtype=None, **_):
    return (cache_mode, kv.dtype, k_cache.dtype, ckv_cache.dtype, k_cache_dtype,
            ckv_cache_dtype, v is None, is_output_kv, kv.device.type)


_compiled_compute = compiled.CompiledProvider(compute_and_write, key=_op_key)


@functools.lru_cache(maxsize=None)
def _int32_select_probe(isa_settings):
    # isa_settings is the cache key: one probe per Inductor vector-ISA setting, each with a code
    # object of its own (dynamo would otherwise reuse the first setting's compiled code)
    code = _select_small.__code__
    fresh = types.FunctionType(code.replace(co_name=f"{code.co_name}_{abs(hash(isa_settings))}"),
                               globals())
    values = torch.arange(-20, 20, dtype=torch.int32)      # several vectors wide, any ISA
    try:
        got = torch.compile(fresh, fullgraph=True, dynamic=False)(values)
    except Exception as exc:                                # no compiler: nothing compiles
        log.info("int32 select probe failed to compile: %s", exc)
        return False
    return torch.equal(got, _select_small(values))


def _select_small(t):
    return torch.where(t <= 3, 3, t)


def int32_select_compiles_exactly() -> bool:
    """Whether Inductor's CPU code selects int32 values as eager does (probed once per vector
    ISA setting: the AVX2 code of torch 2.13's Inductor blends ``torch.where(t <= 3, 3, t)``
    the wrong way round)."""
    config = torch._inductor.config.cpp
    return _int32_select_probe((config.simdlen, config.vec_isa_ok))


def _writes_hifloat8(k_cache_dtype, ckv_cache_dtype):
    return any(code is not None and dtypes.code_to_dtype(int(code)) == HIFLOAT8
               for code in (k_cache_dtype, ckv_cache_dtype))


def _compiled_supports(kv, gamma, cos, sin, index, k_cache, ckv_cache, *args, **kwargs):
    declined = _compiled_compute.supports(kv, gamma, cos, sin, index, k_cache, ckv_cache,
                                          *args, **kwargs)
    # probed only once a call would compile: calls that stay eager never pay for the probe
    if (declined is None and kv.device.type == "cpu"
            and _writes_hifloat8(kwargs.get("k_cache_dtype"), kwargs.get("ckv_cache_dtype"))
            and not int32_select_compiles_exactly()):
        return ("hifloat8 cache on a CPU whose Inductor vector code selects int32 values "
                "wrongly (the hifloat8 encoder would write other codes than the reference)")
    return declined


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
                             _compiled_run(_public, _functional), _compiled_supports)


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
        ``[B, 1, S, Dv + Dk]``, float16 or bfloat16 (every product; float64 also outside
        strict mode, for float64 goldens).
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
    Rounding (float32, bit-identical between the eager reference and the compiled provider on
    every CPU): the sum of squares adds 64-float blocks pairwise, then the 64 lanes by halving
    (the A2/A3 kernel ``op_kernel/kv_rms_norm_rope_cache_b16_b1sd.h``, ``RmsNorm``), the mean is
    that sum times ``1 / D``, and ``y = x * rsqrt(mean + epsilon) * gamma`` (the kernel takes
    ``Sqrt`` and divides; CPU float32 ``sqrt`` is not correctly rounded in eager PyTorch);
    RoPE multiplies and adds without fusing (the kernel's ``Mul``, ``Mul``, ``Add``).

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
