"""torch_npu.npu_mla_prolog and npu_mla_prolog_v2: the earlier MLA prolog interfaces.

Same arithmetic as :mod:`npu_anywhere.ops.attention.mla_prolog_v3` (see its docstring for the
formulas and the precision order); the scenario comes from the dtypes (op-plugin
``docs/zh/custom_APIs/torch_npu/torch_npu-npu_mla_prolog.md`` / ``_v2.md``, seed 004): an int8
``weight_uq_qr`` is the partial quant (an int8 ``kv_cache`` then quantizes both caches per
channel), an int8 ``token_x`` (v2 only) the full quant (an int8 ``kv_cache`` then quantizes it per
tensor and the query per token and head).  Cache modes ``PA_BSND`` and ``PA_NZ``.

op-plugin's yaml declares no mutation, but both write ``kv_cache`` and ``kr_cache`` in place and
return them (the docs: "本质in-place更新", "kv_cache和kr_cache进行原地计算，未按in-place算子实现
接口"); the schemas here say so, as npu_kv_rmsnorm_rope_cache's does.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _mla_prolog_core as core

OP = "npu_mla_prolog"
V2_OP = "npu_mla_prolog_v2"

_ARGS = ("Tensor token_x, Tensor weight_dq, Tensor weight_uq_qr, Tensor weight_uk, "
         "Tensor weight_dkv_kr, Tensor rmsnorm_gamma_cq, Tensor rmsnorm_gamma_ckv, "
         "Tensor rope_sin, Tensor rope_cos, Tensor cache_index, Tensor(a!) kv_cache, "
         "Tensor(b!) kr_cache, *, Tensor? dequant_scale_x=None, Tensor? dequant_scale_w_dq=None, "
         "Tensor? dequant_scale_w_uq_qr=None, Tensor? dequant_scale_w_dkv_kr=None, "
         "Tensor? quant_scale_ckv=None, Tensor? quant_scale_ckr=None, "
         "Tensor? smooth_scales_cq=None, float rmsnorm_epsilon_cq=1e-05, "
         "float rmsnorm_epsilon_ckv=1e-05, str cache_mode=\"PA_BSND\")")
SCHEMA = f"{OP}({_ARGS} -> (Tensor, Tensor, Tensor(a!), Tensor(b!))"
V2_SCHEMA = f"{V2_OP}({_ARGS} -> (Tensor, Tensor, Tensor(a!), Tensor(b!), Tensor)"
_INTERNAL = {OP: f"_npu_mla_prolog_inplace({_ARGS} -> (Tensor, Tensor)",
             V2_OP: f"_npu_mla_prolog_v2_inplace({_ARGS} -> (Tensor, Tensor, Tensor)"}

_SUPPORTED = frozenset({Product.A2, Product.A3})    # op-plugin's meta: soc < 950
_NO_GRAD = "an inference op (op-plugin's derivatives.yaml defines no backward)"


def _check(op, version, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
           rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache,
           kr_cache, *, dequant_scale_x=None, dequant_scale_w_dq=None,
           dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None, quant_scale_ckv=None,
           quant_scale_ckr=None, smooth_scales_cq=None, cache_mode="PA_BSND", **_):
    if version == 1:
        checks.expect_dtype(token_x, (torch.bfloat16,), op, "token_x")
    sc = core.v1v2_scenario(token_x, weight_uq_qr, kv_cache)
    core.check(op, version, sc, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
               rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache,
               cache_index, dequant_scale_x=dequant_scale_x if version != 1 else None,
               dequant_scale_w_dq=dequant_scale_w_dq if version != 1 else None,
               dequant_scale_w_uq_qr=dequant_scale_w_uq_qr,
               dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr if version != 1 else None,
               quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
               smooth_scales_cq=smooth_scales_cq, cache_mode=cache_mode,
               modes=core.PAGED_MODES, supported=_SUPPORTED)


def check_mla_prolog(*args, **kwargs):
    _check(OP, 1, *args, **kwargs)


def check_mla_prolog_v2(*args, **kwargs):
    _check(V2_OP, 2, *args, **kwargs)


def _run(op, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
         rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache, kr_cache, *,
         dequant_scale_x=None, dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
         dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
         smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05,
         cache_mode="PA_BSND"):
    sc = core.v1v2_scenario(token_x, weight_uq_qr, kv_cache)
    dims = core.dims_of(token_x, weight_dq, weight_uk, rope_sin)
    keep, slots = core.plan_writes(op, dims, kv_cache, cache_index, None, cache_mode)
    query, q_rope, scale_q_nope, _, _, kv_rows, kr_rows = core.compute(
        sc, dims, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, dequant_scale_x=dequant_scale_x,
        dequant_scale_w_dq=dequant_scale_w_dq, dequant_scale_w_uq_qr=dequant_scale_w_uq_qr,
        dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr, quant_scale_ckv=quant_scale_ckv,
        quant_scale_ckr=quant_scale_ckr, smooth_scales_cq=smooth_scales_cq,
        eps_cq=rmsnorm_epsilon_cq, eps_ckv=rmsnorm_epsilon_ckv)
    core.write_caches(kv_cache, kr_cache, kv_rows, kr_rows, keep, slots, cache_mode)
    if scale_q_nope is None:
        # op-plugin's meta: a [1] float32 tensor when the query is not quantized
        scale_q_nope = token_x.new_zeros((1,), dtype=torch.float32)
    return query, q_rope, scale_q_nope


def _v1_reference(*args, **kwargs):
    return _run(OP, *args, **kwargs)[:2]


def _v2_reference(*args, **kwargs):
    return _run(V2_OP, *args, **kwargs)


def _fake_v2(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
             rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache, kr_cache, **_):
    sc = core.v1v2_scenario(token_x, weight_uq_qr, kv_cache)
    dims = core.dims_of(token_x, weight_dq, weight_uk, rope_sin)
    query, q_rope, scale_q_nope, _, _ = core.outputs_meta(sc, dims, token_x, weight_uq_qr)
    if scale_q_nope is None:
        scale_q_nope = token_x.new_empty((1,), dtype=torch.float32)
    return query, q_rope, scale_q_nope


def _fake_v1(*args, **kwargs):
    return _fake_v2(*args, **kwargs)[:2]


_inplace_v1 = NpuOp(_INTERNAL[OP], namespace=INTERNAL_NS, check=check_mla_prolog,
                    reference=_v1_reference, fake=_fake_v1, metadata_check=True,
                    info=OpInfo(api="internal", public=False))
_inplace_v1.forbid_autograd(_NO_GRAD, public_name=OP)
_inplace_v2 = NpuOp(_INTERNAL[V2_OP], namespace=INTERNAL_NS, check=check_mla_prolog_v2,
                    reference=_v2_reference, fake=_fake_v2, metadata_check=True,
                    info=OpInfo(api="internal", public=False))
_inplace_v2.forbid_autograd(_NO_GRAD, public_name=V2_OP)


def _composite_v1(*args, **kwargs):
    query, q_rope = _inplace_v1(*args, **kwargs)
    return query, q_rope, args[10], args[11]


def _composite_v2(*args, **kwargs):
    query, q_rope, scale = _inplace_v2(*args, **kwargs)
    return query, q_rope, args[10], args[11], scale


mla_prolog_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mla_prolog,
                      composite=_composite_v1, info=OpInfo(api="torch_npu"))
mla_prolog_op.autograd = "no (raises)"
mla_prolog_v2_op = NpuOp(V2_SCHEMA, namespace=TORCH_NPU_NS, check=check_mla_prolog_v2,
                         composite=_composite_v2, info=OpInfo(api="torch_npu"))
mla_prolog_v2_op.autograd = "no (raises)"


def npu_mla_prolog(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
                   rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache, kr_cache, *,
                   dequant_scale_x=None, dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
                   dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
                   smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05,
                   cache_mode="PA_BSND"):
    """MLA prolog (v1): query, query_rope, and kv_cache / kr_cache written in place.

    Formula: :func:`npu_anywhere.npu_mla_prolog_v3`'s (c^Q = RmsNorm(x W^DQ), q^N = (c^Q W^UQ)
    W^UK, q^R = ROPE(c^Q W^QR), kv_cache <- RmsNorm(x W^DKV), kr_cache <- ROPE(x W^KR)), same
    precision order, without qc_qr_scale / kc_scale.

    Parameters
    ----------
    token_x : ``[T, He]`` / ``[B, S, He]`` bfloat16.  weight_dq ``[He, Hcq]``, weight_uq_qr
        ``[Hcq, N*(D+Dr)]`` (bfloat16, or int8 with ``dequant_scale_w_uq_qr [1, N*(D+Dr)]`` and
        optional ``smooth_scales_cq [1, Hcq]``: the partial quant), weight_uk ``[N, D, Hckv]``,
        weight_dkv_kr ``[He, Hckv+Dr]``, gammas ``[Hcq]`` / ``[Hckv]``, rope_sin / rope_cos
        tokens + ``[Dr]``, all bfloat16 otherwise.
    cache_index : int64 tokens-shaped slots ``block * BlockSize + offset`` (negative: skipped).
    kv_cache, kr_cache : ``[BlockNum, BlockSize, Nkv, Hckv]`` / ``[..., Dr]``, bfloat16, or int8
        (partial quant only) with ``quant_scale_ckv [1, Hckv]`` and ``quant_scale_ckr [1, Dr]``:
        ``cache = rint(value * scale)`` saturated.  ``cache_mode`` ``PA_BSND`` or ``PA_NZ``
        (the memory of the same-shaped cache holds the FRACTAL_NZ rows).
    dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_dkv_kr : reserved (ignored; the doc:
        预留参数，暂未使用).

    Returns
    -------
    (query, query_rope, kv_cache, kr_cache) : ``query`` tokens + ``[N, Hckv]`` and
    ``query_rope`` tokens + ``[N, Dr]`` bfloat16; the caches are the input tensors, updated.

    Constraints
    -----------
    Strict mode (A2, A3): He = 7168, Hcq = 1536, N in {1, ..., 128}, Hckv = 512, D = 128,
    Dr = 64, Nkv = 1, BlockSize 16 or 128.  Inference only.
    """
    return mla_prolog_op(
        token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache, kr_cache,
        dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
        dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
        quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
        smooth_scales_cq=smooth_scales_cq, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode)


def npu_mla_prolog_v2(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
                      rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index,
                      kv_cache, kr_cache, *, dequant_scale_x=None, dequant_scale_w_dq=None,
                      dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None,
                      quant_scale_ckv=None, quant_scale_ckr=None, smooth_scales_cq=None,
                      rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05, cache_mode="PA_BSND"):
    """MLA prolog v2: v1 plus the int8 full quant and the query's dequant scale.

    Formula and precision: :func:`npu_anywhere.npu_mla_prolog_v3`'s.  Beyond v1 (see
    :func:`npu_anywhere.npu_mla_prolog`): an int8 ``token_x`` with int8 weight_dq, weight_uq_qr,
    weight_dkv_kr and float32 ``dequant_scale_x [T, 1]``, ``dequant_scale_w_dq [1, Hcq]``,
    ``dequant_scale_w_uq_qr [1, N*(D+Dr)]``, ``dequant_scale_w_dkv_kr [1, Hckv+Dr]`` is the full
    quant; with a bfloat16 kv_cache all outputs are bfloat16, with an int8 kv_cache and a
    ``quant_scale_ckv`` (one value, or ``(1, Hckv)`` of which the first is used, as op-plugin's
    golden test_mla_prolog_v2.py reads it) the kv_cache is quantized per tensor, the query per
    token and head (``s = max|q^N| / 127``, ``query = rint(q^N / s)``) and ``query_rope``
    becomes ``q^R * quant_scale_ckv / s`` (the goldens of test_mla_prolog_v2/_v3.py); kr_cache
    stays bfloat16.

    Returns
    -------
    (query, query_rope, kv_cache, kr_cache, dequant_scale_q_nope) : ``dequant_scale_q_nope`` is
    ``[T, N, 1]`` float32 with an int8 query, else a ``[1]`` float32 tensor (op-plugin's meta).

    Constraints
    -----------
    As v1; strict mode A2 and A3.  Inference only.
    """
    return mla_prolog_v2_op(
        token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, cache_index, kv_cache, kr_cache,
        dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
        dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
        quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
        smooth_scales_cq=smooth_scales_cq, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode)


TORCH_NPU_FUNCTIONS = {
    OP: npu_mla_prolog,
    V2_OP: npu_mla_prolog_v2,
}
