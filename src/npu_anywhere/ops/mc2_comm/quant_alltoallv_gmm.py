"""torch_npu.npu_alltoallv_quant_gmm and torch_npu.npu_quant_gmm_alltoallv: the quantized
(per-tensor hifloat8) forms of npu_alltoallv_gmm / npu_gmm_alltoallv.

Formulas (seed 004)::

    alltoallv_quant_gmm: permute_out = permute(alltoallv(gmm_x))       (hifloat8 codes travel)
                         gmm_y = (permute_out @ gmm_weight) * gmm_x_scale * gmm_weight_scale
    quant_gmm_alltoallv: y = alltoallv(unpermute((gmm_x @ gmm_weight) * gmm_x_scale
                                                 * gmm_weight_scale))   (rows in gmm_y_dtype)
    both:                mm_y = (mm_x @ mm_weight) * mm_x_scale * mm_weight_scale

Counts and permutation as the unquantized ops (``_ep.py``); arithmetic ``_ep_quant.py``.  Shapes
as op-plugin's meta functions; ``mm_y`` without mm_x and ``permute_out`` without
permute_out_flag are empty ``[0]`` tensors (undefined tensors on the NPU).
"""

from __future__ import annotations

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _comm, _ep, _ep_quant

ALLTOALLV_QUANT_GMM = "npu_alltoallv_quant_gmm"
QUANT_GMM_ALLTOALLV = "npu_quant_gmm_alltoallv"
ALLTOALLV_QUANT_GMM_SCHEMA = (
    "npu_alltoallv_quant_gmm(Tensor gmm_x, Tensor gmm_weight, Tensor gmm_x_scale, "
    "Tensor gmm_weight_scale, str hcom, int ep_world_size, int[] send_counts, "
    "int[] recv_counts, int gmm_y_dtype, *, Tensor? send_counts_tensor=None, "
    "Tensor? recv_counts_tensor=None, Tensor? mm_x=None, Tensor? mm_weight=None, "
    "Tensor? mm_x_scale=None, Tensor? mm_weight_scale=None, int? gmm_x_quant_mode=None, "
    "int? gmm_weight_quant_mode=None, int? mm_x_quant_mode=None, "
    "int? mm_weight_quant_mode=None, bool permute_out_flag=False, int[]? group_size=None, "
    "int? gmm_x_dtype=None, int? gmm_weight_dtype=None, int? gmm_x_scale_dtype=None, "
    "int? gmm_weight_scale_dtype=None, int? mm_x_dtype=None, int? mm_weight_dtype=None, "
    "int? mm_x_scale_dtype=None, int? mm_weight_scale_dtype=None, int? mm_y_dtype=None, "
    "str? comm_mode=None) -> (Tensor, Tensor, Tensor)")
QUANT_GMM_ALLTOALLV_SCHEMA = (
    "npu_quant_gmm_alltoallv(Tensor gmm_x, Tensor gmm_weight, Tensor gmm_x_scale, "
    "Tensor gmm_weight_scale, str hcom, int ep_world_size, int[] send_counts, "
    "int[] recv_counts, int gmm_y_dtype, *, Tensor? send_counts_tensor=None, "
    "Tensor? recv_counts_tensor=None, Tensor? mm_x=None, Tensor? mm_weight=None, "
    "Tensor? mm_x_scale=None, Tensor? mm_weight_scale=None, Tensor? comm_quant_scale=None, "
    "int? gmm_x_quant_mode=None, int? gmm_weight_quant_mode=None, int? mm_x_quant_mode=None, "
    "int? mm_weight_quant_mode=None, int? comm_quant_mode=None, int[]? group_size=None, "
    "int? gmm_x_dtype=None, int? gmm_weight_dtype=None, int? gmm_x_scale_dtype=None, "
    "int? gmm_weight_scale_dtype=None, int? mm_x_dtype=None, int? mm_weight_dtype=None, "
    "int? mm_x_scale_dtype=None, int? mm_weight_scale_dtype=None, int? comm_quant_dtype=None, "
    "int? mm_y_dtype=None, str? comm_mode=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.ASCEND_950})


def _check(op, gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom, ep_world_size,
           send_counts, recv_counts, gmm_y_dtype, kw) -> None:
    _ep.check(op, gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
              kw.get("send_counts_tensor"), kw.get("recv_counts_tensor"), kw.get("mm_x"),
              kw.get("mm_weight"), False, False, dtypes=_ep_quant.CARRIERS)
    checks.expect(kw.get("group_size") is None, op, "group_size", "None (reserved)",
                  kw.get("group_size"), ValueError)
    for name in ("comm_quant_scale", "comm_quant_mode", "comm_quant_dtype"):
        checks.expect(kw.get(name) in (None, 0) if name == "comm_quant_mode"
                      else kw.get(name) is None, op, name,
                      "None (communication quantization is not emulated)", "a value",
                      NotImplementedError)
    _ep_quant.out_dtype(op, "gmm_y_dtype", gmm_y_dtype)
    _ep_quant.check_operands(op, "gmm", kw.get("gmm_x_dtype"), kw.get("gmm_weight_dtype"),
                             kw.get("gmm_x_quant_mode"), kw.get("gmm_weight_quant_mode"),
                             gmm_x_scale, gmm_weight_scale, kw.get("gmm_x_scale_dtype"),
                             kw.get("gmm_weight_scale_dtype"))
    if kw.get("mm_x") is not None:
        _ep_quant.check_operands(op, "mm", kw.get("mm_x_dtype"), kw.get("mm_weight_dtype"),
                                 kw.get("mm_x_quant_mode"), kw.get("mm_weight_quant_mode"),
                                 kw.get("mm_x_scale"), kw.get("mm_weight_scale"),
                                 kw.get("mm_x_scale_dtype"), kw.get("mm_weight_scale_dtype"))
        if kw.get("mm_y_dtype") is not None:
            _ep_quant.out_dtype(op, "mm_y_dtype", kw.get("mm_y_dtype"))
    targets.expect_supported(op, _SUPPORTED)


def check_alltoallv_quant_gmm(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                              ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    _check(ALLTOALLV_QUANT_GMM, gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
           ep_world_size, send_counts, recv_counts, gmm_y_dtype, kw)


def check_quant_gmm_alltoallv(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                              ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    _check(QUANT_GMM_ALLTOALLV, gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
           ep_world_size, send_counts, recv_counts, gmm_y_dtype, kw)


def _mm_y(op, gmm_x, gmm_y_dtype, kw):
    if kw.get("mm_x") is None:
        return gmm_x.new_empty((0,))
    out = _ep_quant.out_dtype(op, "mm_y_dtype", kw.get("mm_y_dtype") or gmm_y_dtype)
    return _ep_quant.quant_mm(kw["mm_x"], kw["mm_weight"], kw["mm_x_scale"],
                              kw["mm_weight_scale"], out)


def alltoallv_quant_gmm_reference(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                                  ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    op, e = ALLTOALLV_QUANT_GMM, gmm_weight.shape[0]
    arrived = _comm.all_to_all_rows(gmm_x, hcom, _ep.per_rank(send_counts, e),
                                    _ep.per_rank(recv_counts, e))
    permuted = _ep.rank_major_to_expert_major(arrived, recv_counts, e)
    gmm_y = _ep_quant.grouped_quant_mm(permuted, gmm_weight, _ep.per_expert(recv_counts, e),
                                       gmm_x_scale, gmm_weight_scale,
                                       _ep_quant.out_dtype(op, "gmm_y_dtype", gmm_y_dtype))
    permute_out = permuted if kw.get("permute_out_flag") else gmm_x.new_empty((0,))
    return gmm_y, _mm_y(op, gmm_x, gmm_y_dtype, kw), permute_out


def quant_gmm_alltoallv_reference(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                                  ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    op, e = QUANT_GMM_ALLTOALLV, gmm_weight.shape[0]
    gmm_y = _ep_quant.grouped_quant_mm(gmm_x, gmm_weight, _ep.per_expert(send_counts, e),
                                       gmm_x_scale, gmm_weight_scale,
                                       _ep_quant.out_dtype(op, "gmm_y_dtype", gmm_y_dtype))
    outgoing = _ep.expert_major_to_rank_major(gmm_y, send_counts, e)
    y = _comm.all_to_all_rows(outgoing, hcom, _ep.per_rank(send_counts, e),
                              _ep.per_rank(recv_counts, e))
    return y, _mm_y(op, gmm_x, gmm_y_dtype, kw)


def _fake_outputs(op, gmm_x, gmm_weight, recv_counts, gmm_y_dtype, kw):
    rows = sum(recv_counts)
    y = gmm_x.new_empty((rows, gmm_weight.shape[2]),
                        dtype=_ep_quant.out_dtype(op, "gmm_y_dtype", gmm_y_dtype))
    mm_x = kw.get("mm_x")
    if mm_x is None:
        return y, gmm_x.new_empty((0,))
    out = _ep_quant.out_dtype(op, "mm_y_dtype", kw.get("mm_y_dtype") or gmm_y_dtype)
    return y, mm_x.new_empty((mm_x.shape[0], kw["mm_weight"].shape[1]), dtype=out)


def alltoallv_quant_gmm_fake(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                             ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    y, mm_y = _fake_outputs(ALLTOALLV_QUANT_GMM, gmm_x, gmm_weight, recv_counts, gmm_y_dtype, kw)
    permuted = gmm_x.new_empty((sum(recv_counts), gmm_x.shape[1])
                               if kw.get("permute_out_flag") else (0,))
    return y, mm_y, permuted


def quant_gmm_alltoallv_fake(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                             ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kw):
    return _fake_outputs(QUANT_GMM_ALLTOALLV, gmm_x, gmm_weight, recv_counts, gmm_y_dtype, kw)


alltoallv_quant_gmm_op = NpuOp(ALLTOALLV_QUANT_GMM_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_alltoallv_quant_gmm,
                               reference=alltoallv_quant_gmm_reference,
                               fake=alltoallv_quant_gmm_fake, info=OpInfo(api="torch_npu"))
quant_gmm_alltoallv_op = NpuOp(QUANT_GMM_ALLTOALLV_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_quant_gmm_alltoallv,
                               reference=quant_gmm_alltoallv_reference,
                               fake=quant_gmm_alltoallv_fake, info=OpInfo(api="torch_npu"))
for _op in (alltoallv_quant_gmm_op, quant_gmm_alltoallv_op):
    _op.forbid_autograd(f"{_op.name} has no backward (op-plugin's derivatives.yaml defines none)")


_DOC = """{what}

    Formula (seed 004)::

{formula}
        mm_y  = (mm_x @ mm_weight) * mm_x_scale * mm_weight_scale

    Parameters
    ----------
    gmm_x, gmm_weight : Tensor
        ``[sum(send_counts), H1]`` and ``[e, H1, N1]`` hifloat8 codes in uint8 / int8 tensors,
        with ``gmm_x_dtype`` / ``gmm_weight_dtype`` ``torch_npu.hifloat8``.
    gmm_x_scale, gmm_weight_scale : Tensor
        float32 ``[1]`` per-tensor scales (``gmm_*_quant_mode=1``).
    hcom, ep_world_size, send_counts, recv_counts
        As :func:`npu_{base}` (an unknown ``hcom`` means one rank).
    gmm_y_dtype : int
        The output dtype: torch.float16 or torch.bfloat16 (or their codes 5 / 15).
    mm_x, mm_weight, mm_x_scale, mm_weight_scale : Tensor, optional
        The shared expert, quantized like the routed one (``mm_*_dtype`` hifloat8,
        ``mm_*_quant_mode=1``); ``mm_y_dtype`` defaults to ``gmm_y_dtype``.
    *_quant_mode : int
        1 (per-tensor); the MX mode (6) and the others raise NotImplementedError.
    group_size : list of int, optional
        Reserved: None.{extra}

    Returns
    -------
    {returns}

    Constraints
    -----------
    Strict mode: Ascend 950.

    Notes
    -----
    hifloat8 values are exact in float32; the products are summed in float32, scaled and
    rounded once.  No backward.
"""


def npu_alltoallv_quant_gmm(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                            ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kwargs):
    return alltoallv_quant_gmm_op(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                                  ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kwargs)


def npu_quant_gmm_alltoallv(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                            ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kwargs):
    return quant_gmm_alltoallv_op(gmm_x, gmm_weight, gmm_x_scale, gmm_weight_scale, hcom,
                                  ep_world_size, send_counts, recv_counts, gmm_y_dtype, **kwargs)


npu_alltoallv_quant_gmm.__doc__ = _DOC.format(
    what="All-to-all-v of hifloat8 token rows, then the per-tensor quantized grouped matmul "
         "of the local experts.",
    formula="        permute_out = permute(alltoallv(gmm_x))\n"
            "        gmm_y = (permute_out @ gmm_weight) * gmm_x_scale * gmm_weight_scale",
    base="alltoallv_gmm",
    extra="\n    permute_out_flag : bool\n        Also return permute_out (hifloat8 codes).",
    returns="(gmm_y, mm_y, permute_out)\n        ``[sum(recv_counts), N1]`` in gmm_y_dtype; "
            "``[BS, N2]`` (``[0]`` without mm_x);\n        ``[sum(recv_counts), H1]`` "
            "(``[0]`` unless permute_out_flag).")
npu_quant_gmm_alltoallv.__doc__ = _DOC.format(
    what="The per-tensor quantized grouped matmul of the local experts, then the all-to-all-v "
         "of the result rows back to the tokens' ranks.",
    formula="        gmm_y = (gmm_x @ gmm_weight) * gmm_x_scale * gmm_weight_scale\n"
            "        y = alltoallv(unpermute(gmm_y))",
    base="gmm_alltoallv",
    extra="\n    comm_quant_scale, comm_quant_mode, comm_quant_dtype\n        Communication "
          "quantization is not emulated: None.",
    returns="(y, mm_y)\n        ``[sum(recv_counts), N1]`` in gmm_y_dtype; ``[BS, N2]`` "
            "(``[0]`` without mm_x).")

TORCH_NPU_FUNCTIONS = {ALLTOALLV_QUANT_GMM: npu_alltoallv_quant_gmm,
                       QUANT_GMM_ALLTOALLV: npu_quant_gmm_alltoallv}
