"""torch_npu.npu_fused_infer_attention_score (FIA v1), its ``.out`` overload and the two graph
helpers ``_npu_fused_infer_attention_score_get_max_workspace`` / ``_..._infer_output``.

Formula (seed 004)::

    attention_out = softmax(scale * query @ key^T + pse_shift, masked) @ value
    softmax_lse   = max + log(sum(exp(s - max)))        (float32, when softmax_lse_flag)

with GQA (query head h reads KV head ``h // (num_heads / num_key_value_heads)``), per-batch
actual lengths, ``atten_mask`` (True / 1 = masked) and ``sparse_mode`` 0-4 and 9 (the MLA tree
mask of speculative decoding, ``tree_mask.py``), paged KV, MLA rope,
KV antiquant, shared prefix, left padding and int8 output quantization.  The call is parsed and
checked (``fia_normalize``), normalized into an :class:`~.problem.AttentionProblem`, solved
(``core``: float32; fast kernels when present) and formatted (``formatting``).

Sources: shapes of the outputs follow op-plugin ``op_plugin/python/meta/_meta_registrations.py``
(``npu_fused_infer_attention_score_forward``) and ``op_plugin/ops/opapi/
FusedInferAttentionScoreKernelNpuOpApi.cpp`` (the empty lse placeholder); the sparse modes, mask
shapes, paged-KV length rules (per batch with a block table, also for TND) and antiquant modes the
seed-004 page and op-plugin
``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md``;
the lse of a row with no visible key the incremental kernel of ops-transformer
(``incre_flash_attention``, ``InitAllZeroOutput``: ``-3.40e38``).  Strict mode: A2, A3 and
Ascend 950 (ops-transformer ``attention/fused_infer_attention_score/README.md``; the 950 rules
from ``docs/aclnnFusedInferAttentionScoreV5.md``, which op-plugin calls on that chip).
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks, params
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import core, layouts
from .fia_normalize import FIA_LAYOUTS, OutputPlan, _kv_heads, parse
from .formatting import empty_outputs, format_outputs
from .out_overload import define_out

OP = "npu_fused_infer_attention_score"

_ARGS = (
    "Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, Tensor? atten_mask=None, "
    "SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
    "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
    "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
    "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, "
    "Tensor? key_antiquant_offset=None, Tensor? value_antiquant_scale=None, "
    "Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
    "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, "
    "Tensor? key_shared_prefix=None, Tensor? value_shared_prefix=None, "
    "SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, Tensor? key_rope=None, "
    "Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
    "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
    "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
    "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
    "bool softmax_lse_flag=False")
SCHEMA = f"{OP}({_ARGS}) -> (Tensor, Tensor)"
WORKSPACE_OP = "_npu_fused_infer_attention_score_get_max_workspace"
WORKSPACE_SCHEMA = f"{WORKSPACE_OP}({_ARGS}) -> Tensor"
INFER_OUTPUT_OP = "_npu_fused_infer_attention_score_infer_output"
INFER_OUTPUT_SCHEMA = (
    f"{INFER_OUTPUT_OP}(Tensor query, Tensor value, *, str input_layout=\"BSH\", "
    "Tensor? quant_scale2=None, Tensor? block_table=None, int num_heads=1, "
    "int num_key_value_heads=0, bool softmax_lse_flag=False, Tensor? query_rope=None) "
    "-> (Tensor, Tensor)")

DEFAULTS = {a.name: a.default_value for a in torch._C.parse_schema(SCHEMA).arguments
            if a.kwarg_only}


def _params(kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise params.unexpected_keywords(OP, sorted(unknown), tuple(DEFAULTS))
    return {**DEFAULTS, **kwargs}


def check_fused_infer_attention_score(query, key, value, **kwargs) -> None:
    parse(OP, query, key, value, _params(kwargs), build=False)


def run(query, key, value, p: dict, *, use_fast: bool, op: str = OP):
    """Parse, normalize, solve and format one call (every FIA-family op ends here)."""
    if query.numel() == 0:
        _, plan = parse(op, query, key, value, p, build=False)
        out, lse = empty_outputs(query, plan)
        return out.zero_(), lse.zero_()
    problem, plan = parse(op, query, key, value, p, build=True)
    out, lse = core.solve(problem, use_fast=use_fast)
    return format_outputs(out, lse, plan)


def fused_infer_attention_score_reference(query, key, value, **kwargs):
    return run(query, key, value, _params(kwargs), use_fast=False)


def _fake(query, key, value, **kwargs):
    _, plan = parse(OP, query, key, value, _params(kwargs), build=False)
    return empty_outputs(query, plan)


fused_infer_attention_score_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_fused_infer_attention_score,
    reference=fused_infer_attention_score_reference, fake=_fake, metadata_check=True,
    info=OpInfo(api="torch_npu", notes=["inference only: no backward on the NPU"]))
fused_infer_attention_score_op.forbid_autograd("npu_fused_infer_attention_score is inference-only")


def _fast_supports(*args, **kwargs) -> Optional[str]:
    return None if core.fast_kernels_available() else "no fast attention kernels installed"


fused_infer_attention_score_op.add_provider(
    "attention-fast", lambda q, k, v, **kw: run(q, k, v, _params(kw), use_fast=True),
    _fast_supports)


# -- .out ----------------------------------------------------------------------------------

def _plan(query, key, value, **kwargs):
    return parse(OP, query, key, value, _params(kwargs), build=False)[1]


out_overload = define_out(OP, _ARGS, TORCH_NPU_NS, plan=_plan,
                          compute=lambda q, k, v, **kw: fused_infer_attention_score_op(q, k, v,
                                                                                       **kw))


# -- graph helpers ---------------------------------------------------------------------------

def _workspace_reference(query, key, value, **kwargs):
    """A zero workspace of query's dtype: the emulation needs none, so one element suffices."""
    return query.new_zeros(1)


workspace_op = NpuOp(WORKSPACE_SCHEMA, namespace=TORCH_NPU_NS,
                     check=check_fused_infer_attention_score, reference=_workspace_reference,
                     metadata_check=True, info=OpInfo(api="torch_npu"))
workspace_op.forbid_autograd("a workspace query has no gradient")


def _infer_output_params(query, value, input_layout, quant_scale2, block_table, num_heads,
                         num_key_value_heads, softmax_lse_flag, query_rope):
    return _params(dict(input_layout=input_layout, quant_scale2=quant_scale2,
                        block_table=block_table, num_heads=num_heads,
                        num_key_value_heads=num_key_value_heads,
                        softmax_lse_flag=softmax_lse_flag, query_rope=query_rope))


def _plan_from_query_value(query, value, p, allowed=FIA_LAYOUTS):
    """Output plan from query and value alone (op-plugin ``construct_fia_output_tensor``)."""
    q_layout, out_layout = layouts.split_layout(INFER_OUTPUT_OP, p["input_layout"], allowed)
    n, _, d_q = layouts.query_dims(INFER_OUTPUT_OP, query, q_layout, p["num_heads"])
    kv_heads = _kv_heads(p["num_heads"], p["num_key_value_heads"])
    if p["block_table"] is not None:
        d_v = {3: lambda: value.shape[2] // kv_heads, 4: lambda: value.shape[3],
               5: lambda: value.shape[2] * value.shape[4]}.get(value.dim(), lambda: d_q)()
    elif q_layout == "BSH":
        d_v = value.shape[2] // kv_heads
    else:
        d_v = value.shape[-1]
    if value.dtype == torch.int32:
        d_v *= 8
    dtype = torch.int8 if p["quant_scale2"] is not None else (
        (p["query_rope"].dtype if p["query_rope"] is not None else torch.float16)
        if query.dtype == torch.int8 else query.dtype)
    return OutputPlan(q_layout, out_layout, tuple(query.shape), p["num_heads"], d_v or d_q, dtype,
                      bool(p["softmax_lse_flag"]))


def _infer_output_check(query, value, *, input_layout="BSH", quant_scale2=None, block_table=None,
                        num_heads=1, num_key_value_heads=0, softmax_lse_flag=False,
                        query_rope=None):
    checks.expect(num_heads > 0, INFER_OUTPUT_OP, "num_heads", "a positive head count", num_heads,
                  ValueError)
    _plan_from_query_value(query, value, _infer_output_params(
        query, value, input_layout, quant_scale2, block_table, num_heads, num_key_value_heads,
        softmax_lse_flag, query_rope))


def _infer_output_reference(query, value, *, input_layout="BSH", quant_scale2=None,
                            block_table=None, num_heads=1, num_key_value_heads=0,
                            softmax_lse_flag=False, query_rope=None):
    plan = _plan_from_query_value(query, value, _infer_output_params(
        query, value, input_layout, quant_scale2, block_table, num_heads, num_key_value_heads,
        softmax_lse_flag, query_rope))
    out, lse = empty_outputs(query, plan)
    return out.zero_(), lse.zero_()


infer_output_op = NpuOp(INFER_OUTPUT_SCHEMA, namespace=TORCH_NPU_NS, check=_infer_output_check,
                        reference=_infer_output_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
infer_output_op.forbid_autograd("an output-shape query has no gradient")


# -- Python functions --------------------------------------------------------------------------

def _lengths(value):
    """Lengths given as a tensor become a list of ints; under torch.compile ``tolist()`` traces
    into unbacked SymInts, which the ``SymInt[]`` schema takes and the op reads when it runs."""
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return value


def _normalize_kwargs(kwargs: dict, op: str = OP, accepted=None) -> dict:
    """Reject unknown keywords (with a "did you mean" hint) before the dispatcher's terser
    error; lengths given as tensors become lists."""
    accepted = DEFAULTS if accepted is None else accepted
    unknown = set(kwargs) - set(accepted)
    if unknown:
        raise params.unexpected_keywords(op, sorted(unknown), tuple(accepted))
    for name in ("actual_seq_lengths", "actual_seq_lengths_kv", "actual_shared_prefix_len"):
        if name in kwargs:
            kwargs[name] = _lengths(kwargs[name])
    return kwargs


class _FusedInferAttentionScore:
    """``torch_npu.npu_fused_infer_attention_score``: callable, with the ``.out`` overload as
    an attribute (the page's ``npu_fused_infer_attention_score.out(..., out=[o, lse])``)."""

    __name__ = OP

    def __call__(self, query, key, value, *, out=None, workspace=None, **kwargs):
        """Fused inference attention (seed 004 ``npu_fused_infer_attention_score``).

        Formula: ``attention_out = softmax(scale * query @ key^T + pse_shift [masked]) @ value``;
        ``softmax_lse = max + log(sum(exp(s - max)))`` (float32).

        Parameters
        ----------
        query, key, value : Tensor
            In ``input_layout`` (BSH, BSND, BNSD, BNSD_BSND, TND, NTD, TND_NTD, NTD_TND, or NSD:
            one batch as ``[N, S, D]``, out ``[N, S, Dv]``, lse ``[1, N, S, 1]``).  With
            ``block_table`` the KV are paged caches ``[num_blocks, block_size, H]``,
            ``[num_blocks, N, block_size, D]`` or NZ ``[num_blocks, N, D/16, block_size, 16]``.
            int8 KV (and int4 packed eight to an int32) are dequantized with the antiquant
            parameters: ``k = (k_int + offset) * scale``.
        actual_seq_lengths, actual_seq_lengths_kv : list of int or Tensor
            Valid lengths per batch (one value broadcasts); cumulative ends for TND / NTD (the KV
            lengths stay per batch with a block table).  Tensors are read on the host (under
            ``torch.compile(fullgraph=True)`` inside the graph: no break).
        atten_mask : bool / int8 / uint8 Tensor, True (1) = masked.  (Q_S, KV_S), (B, KV_S)
            decode, (1, Q_S, KV_S), (B, 1, Q_S, KV_S), (1, 1, Q_S, KV_S); the compressed
            (2048, 2048) mask for sparse_mode 2/3/4.
        sparse_mode, pre_tokens, next_tokens : see ``fia_inputs.mask_and_band``.  A decode call
            (Q_S == 1, no rope) ignores them.  sparse_mode 9 (treeMask, MLA only): atten_mask
            is the ``(B, Q_S, Q_S)`` tree mask (``(sum q_len**2,)`` for TND) of the last Q_S
            keys of each batch, earlier keys all visible (``tree_mask.py``).
        num_heads, num_key_value_heads, scale, softmax_lse_flag, block_size, query_rope,
        key_rope, key/value_antiquant_*, quant_scale2, quant_offset2, pse_shift,
        key/value_shared_prefix, actual_shared_prefix_len, query/kv_padding_size : as documented.
        out : [attention_out, softmax_lse], optional
            Write into these (the ``.out`` overload); ``workspace`` is accepted and unused.

        Returns
        -------
        (attention_out, softmax_lse) : attention_out in the query's layout (BNSD_BSND: BSND) and
            dtype (int8 with quant_scale2); softmax_lse float32 [B, N, Q_S, 1] ([T, N, 1] for
            TND) when softmax_lse_flag, else an empty float32 tensor.

        Notes
        -----
        Computed in float32 and rounded once, except that, as on the NPU, the unnormalized
        softmax probabilities of float16 / bfloat16 queries are rounded to that dtype before
        ``P @ V`` (after their row sum; ``problem.probs_dtype``).  A query row that the lengths
        or the band leave without keys returns 0 and lse -3.40e38.  A row that ``atten_mask``
        alone hides entirely follows the kernels, which score masked keys with a finite lowest
        value: with inner_precise 0 / 1 (and always on the decode branch) it is the mean of the
        values of its keys, lse ``lowest + log(count)`` (lowest: float32's; -65504 for float16
        in high performance and for int8 inputs; -1e12 on decode); with 2 / 3 (row-invalid
        correction) 0 and lse +inf.  int8 query/key/value with ``dequant_scale1`` /
        ``quant_scale1`` / ``dequant_scale2`` (per-tensor; float32 or npu_trans_quant_param
        words) run the prompt kernel's full-int8 steps, untiled (``full_quant.py``); output
        float16, or int8 with ``quant_scale2``; the page does not support all-int8 inputs at
        Q_S == 1 (ValueError).  Not reproduced (NotImplementedError): MLA full quantization
        (int8 with rope).  No backward (inference only).
        """
        kwargs = _normalize_kwargs(kwargs)
        if out is not None:
            return self.out(query, key, value, workspace=workspace, out=out, **kwargs)
        return fused_infer_attention_score_op(query, key, value, **kwargs)

    def out(self, query, key, value, *, out=None, workspace=None, attention_out=None,
            softmax_lse=None, **kwargs):
        """The ``.out`` overload: writes attention_out (and softmax_lse when flagged and shaped
        like the lse) and returns both; ``out=[attention_out, softmax_lse]`` or keywords."""
        if out is not None:
            attention_out, softmax_lse = out
        kwargs = _normalize_kwargs(kwargs)
        return out_overload(query, key, value, workspace=workspace, attention_out=attention_out,
                            softmax_lse=softmax_lse, **kwargs)


npu_fused_infer_attention_score = _FusedInferAttentionScore()


def _npu_fused_infer_attention_score_get_max_workspace(query, key, value, **kwargs):
    """A workspace tensor for the ``.out`` overload (1-D, query's dtype; we need none)."""
    return workspace_op(query, key, value, **_normalize_kwargs(kwargs))


def _npu_fused_infer_attention_score_infer_output(query, *args, **kwargs):
    """Zero ``(attention_out, softmax_lse)`` of the shapes the op would return.

    The schema takes ``(query, value)``; the page's example passes ``(q, k, v)``, so a third
    positional tensor is taken as value and the middle one ignored.
    """
    value = args[-1] if args else kwargs.pop("value")
    return infer_output_op(query, value, **kwargs)


TORCH_NPU_FUNCTIONS = {
    OP: npu_fused_infer_attention_score,
    WORKSPACE_OP: _npu_fused_infer_attention_score_get_max_workspace,
    INFER_OUTPUT_OP: _npu_fused_infer_attention_score_infer_output,
}
