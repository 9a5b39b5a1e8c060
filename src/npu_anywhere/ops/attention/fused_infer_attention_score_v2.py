"""torch_npu.npu_fused_infer_attention_score_v2, its ``.out`` overload and its two graph helpers.

v1 renamed and extended (seed 004 ``npu_fused_infer_attention_score_v2``)::

    attention_out = softmax(softmax_scale * query @ key^T + pse_shift [masked], sink) @ value

Parameter map onto v1 (same semantics, same core): ``num_query_heads`` -> num_heads,
``softmax_scale`` -> scale, ``actual_seq_qlen`` / ``actual_seq_kvlen`` -> actual_seq_lengths(_kv),
``dequant_scale_key`` / ``dequant_offset_key`` (and value) with ``key_quant_mode`` /
``value_quant_mode`` -> the separate KV antiquant parameters, ``quant_scale_out`` /
``quant_offset_out`` -> quant_scale2 / quant_offset2, ``return_softmax_lse`` -> softmax_lse_flag.
New: ``learnable_sink`` ``(Q_N,)`` -- one extra logit per head in every row's softmax denominator
that carries no value -- and the output layouts ``*_NBSD``.  ``quant_scale_p`` /
``dequant_scale_key_rope`` are reserved on the page and ignored.  The ``*_dtype`` arguments
(reserved on the page; op-plugin reads a tensor's bytes as that format) are accepted when they
name the tensor's own dtype; an NPU-only format (hifloat8, float4_e2m1, float8_e8m0 scales)
raises NotImplementedError naming it, as does v2's full quantization (``dequant_scale_query``)
and an ``out_dtype`` other than int8 where it chooses the output (with ``quant_scale_out``).  Shapes: op-plugin meta
``npu_fused_infer_attention_score_v2_forward``.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, params
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import fused_infer_attention_score as v1
from .fia_normalize import FLOAT_QUERY
from .formatting import empty_outputs
from .out_overload import define_out

OP = "npu_fused_infer_attention_score_v2"
_ARGS = (
    "Tensor query, Tensor key, Tensor value, *, Tensor? query_rope=None, Tensor? key_rope=None, "
    "Tensor? pse_shift=None, Tensor? atten_mask=None, SymInt[]? actual_seq_qlen=None, "
    "SymInt[]? actual_seq_kvlen=None, Tensor? block_table=None, "
    "Tensor? dequant_scale_query=None, Tensor? dequant_scale_key=None, "
    "Tensor? dequant_offset_key=None, Tensor? dequant_scale_value=None, "
    "Tensor? dequant_offset_value=None, Tensor? dequant_scale_key_rope=None, "
    "Tensor? quant_scale_out=None, Tensor? quant_offset_out=None, Tensor? quant_scale_p=None, "
    "Tensor? learnable_sink=None, int num_query_heads=1, int num_key_value_heads=0, "
    "float softmax_scale=1.0, int pre_tokens=2147483647, int next_tokens=2147483647, "
    "str input_layout=\"BSH\", int sparse_mode=0, int block_size=0, int query_quant_mode=0, "
    "int key_quant_mode=0, int value_quant_mode=0, int inner_precise=0, "
    "bool return_softmax_lse=False, int? query_dtype=None, int? key_dtype=None, "
    "int? value_dtype=None, int? query_rope_dtype=None, int? key_rope_dtype=None, "
    "int? key_shared_prefix_dtype=None, int? value_shared_prefix_dtype=None, "
    "int? dequant_scale_query_dtype=None, int? dequant_scale_key_dtype=None, "
    "int? dequant_scale_value_dtype=None, int? dequant_scale_key_rope_dtype=None, "
    "int? out_dtype=None")
SCHEMA = f"{OP}({_ARGS}) -> (Tensor, Tensor)"
WORKSPACE_OP = "_npu_fused_infer_attention_score_v2_get_max_workspace"
WORKSPACE_SCHEMA = f"{WORKSPACE_OP}({_ARGS}) -> Tensor"
INFER_OUTPUT_OP = "_npu_fused_infer_attention_score_v2_infer_output"
INFER_OUTPUT_SCHEMA = (
    f"{INFER_OUTPUT_OP}(Tensor query, Tensor value, *, int? query_dtype=None, "
    "int? value_dtype=None, str input_layout=\"BSH\", Tensor? quant_scale_out=None, "
    "Tensor? block_table=None, int num_query_heads=1, int num_key_value_heads=0, "
    "bool return_softmax_lse=False, Tensor? query_rope=None, int? out_dtype=None) "
    "-> (Tensor, Tensor)")
LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND", "BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "NSD", "TND",
           "TND_NTD", "NTD_TND")
DEFAULTS = {a.name: a.default_value for a in torch._C.parse_schema(SCHEMA).arguments
            if a.kwarg_only}


# The *_dtype codes reinterpret a tensor's bytes as an NPU-only format (op-plugin
# FusedInferAttentionScoreV2KernelNpuOpApi.cpp: make_wrapper(tensor, dtype); e.g. a uint8 query
# as hifloat8, uint8 keys as float4_e2m1 with float8_e8m0 scales).  The seed page calls them
# reserved.  A code naming the tensor's own dtype changes nothing and is accepted; any other
# is a format this emulation does not decode.
_TENSOR_OF_CODE = {"query_dtype": "query", "key_dtype": "key", "value_dtype": "value",
                   "query_rope_dtype": "query_rope", "key_rope_dtype": "key_rope",
                   "dequant_scale_query_dtype": "dequant_scale_query",
                   "dequant_scale_key_dtype": "dequant_scale_key",
                   "dequant_scale_value_dtype": "dequant_scale_value",
                   "dequant_scale_key_rope_dtype": "dequant_scale_key_rope"}
_OUTPUT_CODES = (None, 1)                         # int8: ScalarType code 1


def _check_dtype_codes(p: dict, inputs: dict) -> None:
    """The *_dtype arguments (see ``_TENSOR_OF_CODE``) and ``out_dtype``.

    ``out_dtype`` chooses the output dtype only with ``quant_scale_out`` or non-floating
    inputs (op-plugin ``construct_fia_output_tensor_v2``); there only int8 is reproduced.  For
    floating inputs without ``quant_scale_out`` op-plugin ignores it, and so do we.
    ``key_shared_prefix_dtype`` / ``value_shared_prefix_dtype`` name tensors v2 does not take:
    ignored (reserved)."""
    for arg, tensor_name in _TENSOR_OF_CODE.items():
        code = p[arg]
        if code is None:
            continue
        tensor = inputs[tensor_name] if tensor_name in inputs else p.get(tensor_name)
        own = None if tensor is None else tensor.dtype
        checks.expect(own is not None and dtypes.code_to_dtype(code) == own, OP, arg,
                      lambda: f"None or the dtype of {tensor_name} ({dtypes.name(own)}): "
                              f"reading it as {dtypes.name(code)} is not reproduced",
                      code, NotImplementedError)
    out_code = p["out_dtype"]
    query = inputs["query"]
    if p["quant_scale_out"] is not None or query.dtype not in FLOAT_QUERY:
        checks.expect(out_code in _OUTPUT_CODES, OP, "out_dtype",
                      lambda: f"None or int8 (1): a {dtypes.name(out_code)} output is not "
                              "reproduced", out_code, NotImplementedError)


def _v1_params(query, key, value, kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise params.unexpected_keywords(OP, sorted(unknown), tuple(DEFAULTS))
    p = {**DEFAULTS, **kwargs}
    checks.expect(p["dequant_scale_query"] is None, OP, "dequant_scale_query",
                  "None (v2's full quantization -- query dequantized per token and head, "
                  "query_quant_mode 3, key/value per tensor -- is not reproduced)", "a tensor",
                  NotImplementedError)
    _check_dtype_codes(p, {"query": query, "key": key, "value": value})
    sink = p["learnable_sink"]
    if sink is not None:
        heads = p["num_query_heads"]
        checks.expect(tuple(sink.shape) == (heads,), OP, "learnable_sink",
                      lambda: f"shape (Q_N,) = ({heads},)", lambda: tuple(sink.shape),
                      RuntimeError)
    separate = p["dequant_scale_key"] is not None
    mapped = v1._params(dict(
        query_rope=p["query_rope"], key_rope=p["key_rope"], pse_shift=p["pse_shift"],
        atten_mask=p["atten_mask"], actual_seq_lengths=p["actual_seq_qlen"],
        actual_seq_lengths_kv=p["actual_seq_kvlen"], block_table=p["block_table"],
        key_antiquant_scale=p["dequant_scale_key"], key_antiquant_offset=p["dequant_offset_key"],
        value_antiquant_scale=p["dequant_scale_value"],
        value_antiquant_offset=p["dequant_offset_value"], quant_scale2=p["quant_scale_out"],
        quant_offset2=p["quant_offset_out"], num_heads=p["num_query_heads"],
        scale=p["softmax_scale"], pre_tokens=p["pre_tokens"], next_tokens=p["next_tokens"],
        input_layout=p["input_layout"], num_key_value_heads=p["num_key_value_heads"],
        sparse_mode=p["sparse_mode"], inner_precise=p["inner_precise"],
        block_size=p["block_size"], softmax_lse_flag=p["return_softmax_lse"],
        key_antiquant_mode=p["key_quant_mode"] if separate else 0,
        value_antiquant_mode=p["value_quant_mode"] if separate else 0))
    mapped["_layouts"] = LAYOUTS
    mapped["_sink"] = sink
    return mapped


def check_fused_infer_attention_score_v2(query, key, value, **kwargs) -> None:
    v1.parse(OP, query, key, value, _v1_params(query, key, value, kwargs), build=False)


def _reference(query, key, value, **kwargs):
    return v1.run(query, key, value, _v1_params(query, key, value, kwargs), use_fast=False,
                  op=OP)


def _fake(query, key, value, **kwargs):
    _, plan = v1.parse(OP, query, key, value, _v1_params(query, key, value, kwargs),
                       build=False)
    return empty_outputs(query, plan)


fia_v2_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_fused_infer_attention_score_v2,
                  reference=_reference, fake=_fake, metadata_check=True,
                  info=OpInfo(api="torch_npu", notes=["inference only: no backward on the NPU"]))
fia_v2_op.forbid_autograd("npu_fused_infer_attention_score_v2 is inference-only")
fia_v2_op.add_provider(
    "attention-fast",
    lambda q, k, v, **kw: v1.run(q, k, v, _v1_params(q, k, v, kw), use_fast=True, op=OP),
    v1._fast_supports)

# -- .out ----------------------------------------------------------------------------------

def _plan(query, key, value, **kwargs):
    return v1.parse(OP, query, key, value, _v1_params(query, key, value, kwargs), build=False)[1]


out_overload = define_out(OP, _ARGS, TORCH_NPU_NS, plan=_plan,
                          compute=lambda q, k, v, **kw: fia_v2_op(q, k, v, **kw))

# -- graph helpers ---------------------------------------------------------------------------

workspace_op = NpuOp(WORKSPACE_SCHEMA, namespace=TORCH_NPU_NS,
                     check=check_fused_infer_attention_score_v2,
                     reference=lambda query, key, value, **kw: query.new_zeros(1),
                     metadata_check=True, info=OpInfo(api="torch_npu"))
workspace_op.forbid_autograd("a workspace query has no gradient")


def _infer_plan(query, value, input_layout, quant_scale_out, block_table, num_query_heads,
                num_key_value_heads, return_softmax_lse, query_rope):
    checks.expect(num_query_heads > 0, INFER_OUTPUT_OP, "num_query_heads",
                  "a positive head count", num_query_heads, ValueError)
    checks.expect(input_layout in LAYOUTS, INFER_OUTPUT_OP, "input_layout",
                  f"one of {list(LAYOUTS)}", repr(input_layout), ValueError)
    p = v1._params(dict(input_layout=input_layout, quant_scale2=quant_scale_out,
                        block_table=block_table, num_heads=num_query_heads,
                        num_key_value_heads=num_key_value_heads,
                        softmax_lse_flag=return_softmax_lse, query_rope=query_rope))
    return v1._plan_from_query_value(query, value, p, LAYOUTS)


def _infer_output_check(query, value, *, query_dtype=None, value_dtype=None, input_layout="BSH",
                        quant_scale_out=None, block_table=None, num_query_heads=1,
                        num_key_value_heads=0, return_softmax_lse=False, query_rope=None,
                        out_dtype=None):
    _infer_plan(query, value, input_layout, quant_scale_out, block_table, num_query_heads,
                num_key_value_heads, return_softmax_lse, query_rope)


def _infer_output_reference(query, value, *, query_dtype=None, value_dtype=None,
                            input_layout="BSH", quant_scale_out=None, block_table=None,
                            num_query_heads=1, num_key_value_heads=0, return_softmax_lse=False,
                            query_rope=None, out_dtype=None):
    plan = _infer_plan(query, value, input_layout, quant_scale_out, block_table, num_query_heads,
                       num_key_value_heads, return_softmax_lse, query_rope)
    out, lse = empty_outputs(query, plan)
    return out.zero_(), lse.zero_()


infer_output_op = NpuOp(INFER_OUTPUT_SCHEMA, namespace=TORCH_NPU_NS, check=_infer_output_check,
                        reference=_infer_output_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
infer_output_op.forbid_autograd("an output-shape query has no gradient")

# -- Python functions --------------------------------------------------------------------------


def _normalize(kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:       # before the dispatcher's terser error, with a "did you mean" hint
        raise params.unexpected_keywords(OP, sorted(unknown), tuple(DEFAULTS))
    for name in ("actual_seq_qlen", "actual_seq_kvlen"):
        if name in kwargs:
            kwargs[name] = v1._lengths(kwargs[name])
    return kwargs


class _FusedInferAttentionScoreV2:
    """``torch_npu.npu_fused_infer_attention_score_v2``, with ``.out`` as an attribute."""

    __name__ = OP

    def __call__(self, query, key, value, *, out=None, workspace=None, **kwargs):
        """Fused inference attention v2 (seed 004 ``npu_fused_infer_attention_score_v2``).

        ``attention_out = softmax(softmax_scale * query @ key^T + pse_shift [masked]) @ value``;
        with ``learnable_sink`` (Q_N,) each head's softmax denominator gains ``exp(sink)``.
        Semantics and parameters are v1's under the v2 names (see the module docstring and
        ``npu_fused_infer_attention_score``); ``actual_seq_qlen`` / ``actual_seq_kvlen`` may be
        tensors.  Returns ``(attention_out, softmax_lse)``; softmax_lse is float32
        [B, N, Q_S, 1] ([T, N, 1] packed) with return_softmax_lse, else empty.
        ``out=[attention_out, softmax_lse]`` writes into those tensors (the ``.out`` overload).
        """
        kwargs = _normalize(kwargs)
        if out is not None:
            return self.out(query, key, value, workspace=workspace, out=out, **kwargs)
        return fia_v2_op(query, key, value, **kwargs)

    def out(self, query, key, value, *, out=None, workspace=None, attention_out=None,
            softmax_lse=None, **kwargs):
        """The ``.out`` overload (``out=[attention_out, softmax_lse]`` or keywords)."""
        if out is not None:
            attention_out, softmax_lse = out
        return out_overload(query, key, value, workspace=workspace, attention_out=attention_out,
                            softmax_lse=softmax_lse, **_normalize(kwargs))


npu_fused_infer_attention_score_v2 = _FusedInferAttentionScoreV2()


def _npu_fused_infer_attention_score_v2_get_max_workspace(query, key, value, **kwargs):
    """A workspace tensor for the ``.out`` overload (1-D, query's dtype; we need none)."""
    return workspace_op(query, key, value, **_normalize(kwargs))


def _npu_fused_infer_attention_score_v2_infer_output(query, *args, **kwargs):
    """Zero ``(attention_out, softmax_lse)`` of the op's output shapes; ``(query, value)``, or
    ``(q, k, v)`` as some examples pass it (the middle tensor is ignored)."""
    value = args[-1] if args else kwargs.pop("value")
    return infer_output_op(query, value, **kwargs)


TORCH_NPU_FUNCTIONS = {
    OP: npu_fused_infer_attention_score_v2,
    WORKSPACE_OP: _npu_fused_infer_attention_score_v2_get_max_workspace,
    INFER_OUTPUT_OP: _npu_fused_infer_attention_score_v2_infer_output,
}
