"""torch_npu.npu_mla_prolog_v3 and npu_mla_prolog_v3_functional: DeepSeek MLA's fused
pre-attention block (q/kv down-projections, RMSNorms, q up-projections, RoPE, cache writes).

Sources: seed 004 and op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_mla_prolog_v3.md``
(formulas, scenarios, shapes), ``op_plugin_functions.yaml`` (schemas: v3 writes ``kv_cache`` and
``kr_cache`` in place, the functional form returns updated copies), op-plugin's meta functions
(output shapes and dtypes, the empty ``[0]`` outputs of CANN >= 8.5), the goldens of
``test/test_custom_ops/test_mla_prolog.py`` and ``test_mla_prolog_v3.py`` (the precision order,
the int8 quant steps) and hicann/ops-transformer ``attention/mla_prolog/op_kernel/
service_scatter_cache.h`` (the cache writes: negative slots skip, the NZ row layout).
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _mla_prolog_core as core

OP = "npu_mla_prolog_v3"
FUNCTIONAL_OP = "npu_mla_prolog_v3_functional"

_ARGS = ("Tensor token_x, Tensor weight_dq, Tensor weight_uq_qr, Tensor weight_uk, "
         "Tensor weight_dkv_kr, Tensor rmsnorm_gamma_cq, Tensor rmsnorm_gamma_ckv, "
         "Tensor rope_sin, Tensor rope_cos, {kv} kv_cache, {kr} kr_cache, *, "
         "Tensor? cache_index=None, Tensor? dequant_scale_x=None, "
         "Tensor? dequant_scale_w_dq=None, Tensor? dequant_scale_w_uq_qr=None, "
         "Tensor? dequant_scale_w_dkv_kr=None, Tensor? quant_scale_ckv=None, "
         "Tensor? quant_scale_ckr=None, Tensor? smooth_scales_cq=None, "
         "Tensor? actual_seq_len=None, Tensor? k_nope_clip_alpha=None, "
         "float rmsnorm_epsilon_cq=1e-05, float rmsnorm_epsilon_ckv=1e-05, "
         "str cache_mode=\"PA_BSND\", bool query_norm_flag=False, int weight_quant_mode=0, "
         "int kv_cache_quant_mode=0, int query_quant_mode=0, int ckvkr_repo_mode=0, "
         "int quant_scale_repo_mode=0, int tile_size=128, float qc_qr_scale=1.0, "
         "float kc_scale=1.0, int? token_x_dtype=None, int? weight_dq_dtype=None, "
         "int? weight_uq_qr_dtype=None, int? weight_dkv_kr_dtype=None, int? kv_cache_dtype=None)")
SCHEMA = (f"{OP}({_ARGS.format(kv='Tensor(a!)', kr='Tensor(b!)')} "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")
FUNCTIONAL_SCHEMA = (f"{FUNCTIONAL_OP}({_ARGS.format(kv='Tensor', kr='Tensor')} "
                     "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_NO_GRAD = "an inference op (op-plugin's derivatives.yaml defines no backward)"


def _check(op, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
           rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index=None,
           dequant_scale_x=None, dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
           dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
           smooth_scales_cq=None, actual_seq_len=None, k_nope_clip_alpha=None,
           cache_mode="PA_BSND", weight_quant_mode=0, kv_cache_quant_mode=0,
           query_quant_mode=0, ckvkr_repo_mode=0, quant_scale_repo_mode=0, token_x_dtype=None,
           weight_dq_dtype=None, weight_uq_qr_dtype=None, weight_dkv_kr_dtype=None,
           kv_cache_dtype=None, **_):
    sc = core.Scenario(weight_quant_mode, kv_cache_quant_mode, query_quant_mode)
    core.check_scenario(op, sc)
    # what only the scenarios not implemented here use
    for name, value in (("ckvkr_repo_mode", ckvkr_repo_mode),
                        ("quant_scale_repo_mode", quant_scale_repo_mode)):
        checks.expect_one_of(value, (0, 1), op, name)
        checks.expect(value == 0, op, name, "0 (1, the combined storage, belongs to the "
                      "per-token-per-group kv_cache quant, not implemented)", value,
                      NotImplementedError)
    checks.expect(k_nope_clip_alpha is None, op, "k_nope_clip_alpha", "None (only the "
                  "per-token-per-group kv_cache quant uses it)", "a tensor", ValueError)
    for name, value in (("token_x_dtype", token_x_dtype), ("weight_dq_dtype", weight_dq_dtype),
                        ("weight_uq_qr_dtype", weight_uq_qr_dtype),
                        ("weight_dkv_kr_dtype", weight_dkv_kr_dtype),
                        ("kv_cache_dtype", kv_cache_dtype)):
        checks.expect(value is None, op, name, "None (only the hifloat8 scenarios, "
                      "weight_quant_mode=5, use it)", repr(value), ValueError)
    return sc, core.check(
        op, 3, sc, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index,
        dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
        dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
        quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
        smooth_scales_cq=smooth_scales_cq, actual_seq_len=actual_seq_len, cache_mode=cache_mode,
        modes=core.V3_CACHE_MODES, supported=_SUPPORTED)


def check_mla_prolog_v3(*args, **kwargs):
    _check(OP, *args, **kwargs)


def check_mla_prolog_v3_functional(*args, **kwargs):
    _check(FUNCTIONAL_OP, *args, **kwargs)


def _returns(sc, dims, token_x, weight_uq_qr, values, query_norm_flag):
    """The five v3 outputs; the absent ones are empty ``[0]`` tensors (op-plugin's meta for
    CANN >= 8.5.0: query_norm in weight_uq_qr's dtype, the scales float32)."""
    query, q_rope, scale_q_nope, query_norm, scale_q_norm = values
    empty = token_x.new_empty
    if scale_q_nope is None:
        scale_q_nope = empty((0,), dtype=torch.float32)
    if not query_norm_flag:
        query_norm = empty((0,), dtype=weight_uq_qr.dtype)
        scale_q_norm = None
    if scale_q_norm is None:
        scale_q_norm = empty((0,), dtype=torch.float32)
    return query, q_rope, scale_q_nope, query_norm, scale_q_norm


def run(op, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index=None,
        dequant_scale_x=None, dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
        dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
        smooth_scales_cq=None, actual_seq_len=None, k_nope_clip_alpha=None,
        rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05, cache_mode="PA_BSND",
        query_norm_flag=False, weight_quant_mode=0, kv_cache_quant_mode=0, query_quant_mode=0,
        qc_qr_scale=1.0, kc_scale=1.0, **_):
    """Compute, plan the writes (raising on bad index values), write both caches in place;
    returns the five v3 outputs."""
    sc = core.Scenario(weight_quant_mode, kv_cache_quant_mode, query_quant_mode)
    dims = core.dims_of(token_x, weight_dq, weight_uk, rope_sin)   # checked before the call
    keep, slots = core.plan_writes(op, dims, kv_cache, cache_index, actual_seq_len, cache_mode)
    *values, kv_rows, kr_rows = core.compute(
        sc, dims, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, dequant_scale_x=dequant_scale_x,
        dequant_scale_w_dq=dequant_scale_w_dq, dequant_scale_w_uq_qr=dequant_scale_w_uq_qr,
        dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr, quant_scale_ckv=quant_scale_ckv,
        quant_scale_ckr=quant_scale_ckr, smooth_scales_cq=smooth_scales_cq,
        eps_cq=rmsnorm_epsilon_cq, eps_ckv=rmsnorm_epsilon_ckv, qc_qr_scale=qc_qr_scale,
        kc_scale=kc_scale)
    core.write_caches(kv_cache, kr_cache, kv_rows, kr_rows, keep, slots, cache_mode)
    return _returns(sc, dims, token_x, weight_uq_qr, values, query_norm_flag)


def _v3_reference(*args, **kwargs):
    return run(OP, *args, **kwargs)


def _fake(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
          rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, *, query_norm_flag=False,
          weight_quant_mode=0, kv_cache_quant_mode=0, query_quant_mode=0, **_):
    sc = core.Scenario(weight_quant_mode, kv_cache_quant_mode, query_quant_mode)
    dims = core.dims_of(token_x, weight_dq, weight_uk, rope_sin)
    meta = core.outputs_meta(sc, dims, token_x, weight_uq_qr)
    return _returns(sc, dims, token_x, weight_uq_qr, meta, query_norm_flag)


def _functional_reference(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
                          rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache,
                          kr_cache, **kwargs):
    kv_out, kr_out = kv_cache.clone(), kr_cache.clone()
    outs = run(FUNCTIONAL_OP, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
               rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_out, kr_out, **kwargs)
    return outs + (kv_out, kr_out)


def _functional_fake(*args, **kwargs):
    return _fake(*args, **kwargs) + (torch.empty_like(args[9]), torch.empty_like(args[10]))


mla_prolog_v3_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mla_prolog_v3,
                         reference=_v3_reference, fake=_fake, metadata_check=True,
                         info=OpInfo(api="torch_npu"))
mla_prolog_v3_op.forbid_autograd(_NO_GRAD)
mla_prolog_v3_functional_op = NpuOp(FUNCTIONAL_SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_mla_prolog_v3_functional,
                                    reference=_functional_reference, fake=_functional_fake,
                                    metadata_check=True, info=OpInfo(api="torch_npu"))
mla_prolog_v3_functional_op.forbid_autograd(_NO_GRAD)


_DOC = r"""

    Formula (seed 004, op-plugin torch_npu-npu_mla_prolog_v3.md)::

        RmsNorm(x) = gamma * x / sqrt(mean(x^2) + eps)
        c^Q  = RmsNorm_cq(x @ W^DQ) * qc_qr_scale         (query_norm)
        q^C, q^Rpre = split(c^Q @ W^UQQR -> [T, N, D + Dr])
        q^N  = q^C @ W^UK   (per head)                     (query)
        q^R  = ROPE(q^Rpre, cos, sin)                      (query_rope)
        c^KV = RmsNorm_ckv((x @ W^DKVKR)[:, :Hckv]) * kc_scale   -> kv_cache
        k^R  = ROPE((x @ W^DKVKR)[:, Hckv:])                     -> kr_cache
        ROPE(x) = cat(x[::2], x[1::2]) * cos + cat(-x[1::2], x[::2]) * sin   (interleave-half)

    Precision order (op-plugin's goldens test_mla_prolog.py / test_mla_prolog_v3.py): matmuls
    accumulate in float32 (int8 ones exactly, then dequantized by the per-token and per-channel
    scales); the bfloat16 results of the bf16 matmuls x @ W^DQ and c^Q @ W^UQQR are rounded to
    bfloat16, as are c^Q (non-quantized scenario), q^C before its matmul, q^N and q^R; the KV
    path is float32 until its one rounding into the caches.  RmsNorm is float32 with
    npu_kv_rmsnorm_rope_cache's sum order.

    Parameters
    ----------
    token_x : Tensor
        ``[T, He]`` or ``[B, S, He]``; bfloat16, int8 (weight_quant_mode=2).
    weight_dq, weight_uq_qr, weight_dkv_kr : Tensor
        ``[He, Hcq]``, ``[Hcq, N*(D+Dr)]``, ``[He, Hckv+Dr]``; bfloat16, or int8 as the
        scenario says (``npu_format_cast(w, 29)`` is an identity here: the values are the ND
        matrix).
    weight_uk : Tensor
        ``[N, D, Hckv]`` bfloat16.
    rmsnorm_gamma_cq, rmsnorm_gamma_ckv : Tensor
        ``[Hcq]``, ``[Hckv]`` bfloat16.
    rope_sin, rope_cos : Tensor
        ``[T, Dr]`` / ``[B, S, Dr]`` bfloat16.
    kv_cache, kr_cache : Tensor
        Written in place (v3) or copied and written (functional).  ``PA_BSND``: ``[BlockNum,
        BlockSize, Nkv, Hckv]`` (``Dr`` for kr_cache), slot ``cache_index[t]`` is block ``slot //
        BlockSize``, offset ``slot % BlockSize``.  ``PA_NZ``: same shape whose memory holds the
        FRACTAL_NZ form ``[BlockNum, Nkv*Hckv/ld, BlockSize, ld]``, ``ld = 32 bytes``.
        ``PA_BLK_BSND`` / ``PA_BLK_NZ``: ``cache_index`` is a block table (``[B,
        ceil(S/BlockSize)]``, or for a 2-D token_x ``[sum ceil(S_i/BlockSize)]`` with
        ``actual_seq_len`` the int32 prefix sums of S_i); token s of batch b goes to block
        ``table[b][s // BlockSize]``, offset ``s % BlockSize``.  ``BSND`` / ``TND``: caches
        ``[B, S, Nkv, D]`` / ``[T, Nkv, D]`` written token by token.  Negative slots or block
        ids skip the token (the kernel's ScatterCache).  Every Nkv head gets the same row.
    cache_index : Tensor, optional
        int64; required in the PA modes, unused in BSND / TND.
    dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr : Tensor
        float32 ``[T, 1]``, ``[1, Hcq]``, ``[1, N*(D+Dr)]``, ``[1, Hckv+Dr]``, the dequant
        scales of the int8 matmuls (the scenarios below say which are required).
    quant_scale_ckv, quant_scale_ckr : Tensor
        float32 ``[1, Hckv]`` / ``[1, Dr]`` (per-channel) or ``[1]`` (per-tensor, ckv only; a
        ``[1, Hckv]`` tensor there gives its first value, as op-plugin's v2 golden reads it):
        ``cache = rint(value * scale)`` saturated to int8.
    smooth_scales_cq : Tensor, optional
        float32 ``[1, Hcq]``, multiplied into c^Q before its dynamic int8 quant.
    weight_quant_mode, kv_cache_quant_mode, query_quant_mode : int
        Implemented scenarios: (0, 0, 0) not quantized; (1, 0, 0) / (1, 2, 0) int8 weight_uq_qr
        with bf16 / per-channel int8 caches; (2, 0, 0) / (2, 1, 1) int8 full quant with bf16
        caches / a per-tensor int8 kv_cache and a per-token-head int8 query.  In the quantized
        scenarios c^Q is quantized per token: ``s = max|c^Q * smooth| / 127``, ``q = rint(c^Q *
        smooth / s)``; an int8 query is ``rint(q^N / s_tn)`` with ``s_tn = max|q^N| / 127``
        per token and head, and q^R is then ``q^R * quant_scale_ckv / s_tn``.
    qc_qr_scale, kc_scale : float
        Multiply c^Q and c^KV after their RmsNorm.

    Returns
    -------
    (query, query_rope, dequant_scale_q_nope, query_norm, dequant_scale_q_norm) :
        ``query`` tokens + ``[N, Hckv]`` (bfloat16, int8 in the (2, 1, 1) scenario);
        ``query_rope`` tokens + ``[N, Dr]`` bfloat16; ``dequant_scale_q_nope`` ``[T, N, 1]``
        float32 with an int8 query, else empty; ``query_norm`` (query_norm_flag) c^Q, tokens +
        ``[Hcq]`` in weight_uq_qr's dtype (the int8 quant in the quantized scenarios), else
        empty; ``dequant_scale_q_norm`` its ``[T, 1]`` float32 scale in the quantized
        scenarios, else empty.  The empty outputs are ``[0]`` tensors (op-plugin's meta, CANN
        >= 8.5).

    Constraints
    -----------
    Shapes as above (checked); caches contiguous.  Strict mode (A2, A3, 950): He in {1024, ...,
    8192}, Hcq in {1536, 2048}, N in {1, 2, ..., 128}, Hckv = 512, D in {128, 192}, Dr = 64,
    Nkv = 1, BlockSize a multiple of 16 in [16, 1024].

    Notes
    -----
    Not implemented (NotImplementedError): the per-token-per-group kv_cache quant
    (kv_cache_quant_mode=3, with ckvkr_repo_mode / quant_scale_repo_mode / tile_size /
    k_nope_clip_alpha) and the fp8 / mxfp8 / hifloat8 full quant (weight_quant_mode 3-5, 950
    only).  Inputs other than the caches may be non-contiguous (the NPU refuses them).  Index
    values are checked (the NPU does not): slots in range; of tokens sharing a slot the last
    one's row is written (the goldens' order; the NPU leaves it unspecified).  Inference only.
"""


def npu_mla_prolog_v3(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
                      rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache,
                      kr_cache, *, cache_index=None, dequant_scale_x=None,
                      dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
                      dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
                      smooth_scales_cq=None, actual_seq_len=None, k_nope_clip_alpha=None,
                      rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05, cache_mode="PA_BSND",
                      query_norm_flag=False, weight_quant_mode=0, kv_cache_quant_mode=0,
                      query_quant_mode=0, ckvkr_repo_mode=0, quant_scale_repo_mode=0,
                      tile_size=128, qc_qr_scale=1.0, kc_scale=1.0, token_x_dtype=None,
                      weight_dq_dtype=None, weight_uq_qr_dtype=None, weight_dkv_kr_dtype=None,
                      kv_cache_dtype=None):
    return mla_prolog_v3_op(
        token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index,
        dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
        dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
        quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
        smooth_scales_cq=smooth_scales_cq, actual_seq_len=actual_seq_len,
        k_nope_clip_alpha=k_nope_clip_alpha, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode,
        query_norm_flag=query_norm_flag, weight_quant_mode=weight_quant_mode,
        kv_cache_quant_mode=kv_cache_quant_mode, query_quant_mode=query_quant_mode,
        ckvkr_repo_mode=ckvkr_repo_mode, quant_scale_repo_mode=quant_scale_repo_mode,
        tile_size=tile_size, qc_qr_scale=qc_qr_scale, kc_scale=kc_scale,
        token_x_dtype=token_x_dtype, weight_dq_dtype=weight_dq_dtype,
        weight_uq_qr_dtype=weight_uq_qr_dtype, weight_dkv_kr_dtype=weight_dkv_kr_dtype,
        kv_cache_dtype=kv_cache_dtype)


def npu_mla_prolog_v3_functional(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
                                 rmsnorm_gamma_cq, rmsnorm_gamma_ckv, rope_sin, rope_cos,
                                 kv_cache, kr_cache, *, cache_index=None, dequant_scale_x=None,
                                 dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None,
                                 dequant_scale_w_dkv_kr=None, quant_scale_ckv=None,
                                 quant_scale_ckr=None, smooth_scales_cq=None,
                                 actual_seq_len=None, k_nope_clip_alpha=None,
                                 rmsnorm_epsilon_cq=1e-05, rmsnorm_epsilon_ckv=1e-05,
                                 cache_mode="PA_BSND", query_norm_flag=False,
                                 weight_quant_mode=0, kv_cache_quant_mode=0, query_quant_mode=0,
                                 ckvkr_repo_mode=0, quant_scale_repo_mode=0, tile_size=128,
                                 qc_qr_scale=1.0, kc_scale=1.0, token_x_dtype=None,
                                 weight_dq_dtype=None, weight_uq_qr_dtype=None,
                                 weight_dkv_kr_dtype=None, kv_cache_dtype=None):
    return mla_prolog_v3_functional_op(
        token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
        rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index,
        dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
        dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
        quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
        smooth_scales_cq=smooth_scales_cq, actual_seq_len=actual_seq_len,
        k_nope_clip_alpha=k_nope_clip_alpha, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
        rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode,
        query_norm_flag=query_norm_flag, weight_quant_mode=weight_quant_mode,
        kv_cache_quant_mode=kv_cache_quant_mode, query_quant_mode=query_quant_mode,
        ckvkr_repo_mode=ckvkr_repo_mode, quant_scale_repo_mode=quant_scale_repo_mode,
        tile_size=tile_size, qc_qr_scale=qc_qr_scale, kc_scale=kc_scale,
        token_x_dtype=token_x_dtype, weight_dq_dtype=weight_dq_dtype,
        weight_uq_qr_dtype=weight_uq_qr_dtype, weight_dkv_kr_dtype=weight_dkv_kr_dtype,
        kv_cache_dtype=kv_cache_dtype)


npu_mla_prolog_v3.__doc__ = ("MLA prolog: q/kv projections, RMSNorms and RoPE; writes "
                             "kv_cache and kr_cache in place." + _DOC)
npu_mla_prolog_v3_functional.__doc__ = (
    "npu_mla_prolog_v3 without the in-place writes: returns updated copies of the caches as "
    "two more outputs, (query, query_rope, dequant_scale_q_nope, query_norm, "
    "dequant_scale_q_norm, kv_cache_out, kr_cache_out); the inputs are not modified." + _DOC)

TORCH_NPU_FUNCTIONS = {
    OP: npu_mla_prolog_v3,
    FUNCTIONAL_OP: npu_mla_prolog_v3_functional,
}
