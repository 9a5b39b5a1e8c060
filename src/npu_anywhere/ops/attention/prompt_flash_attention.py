"""torch_npu.npu_prompt_flash_attention (PFA): the prompt (full) branch of FIA.

Formula (seed 004)::

    atten_out = softmax(scale_value * Q @ K^T + pse_shift [masked]) @ V

Same semantics as ``npu_fused_infer_attention_score`` on its prompt branch -- layouts BSH, BSND,
BNSD, BNSD_BSND, TND; actual lengths; atten_mask and sparse_mode 0-4; GQA; int8 output with
quant_scale2; full int8 inputs with deq_scale1 / quant_scale1 / deq_scale2; the kernel runs in
high performance (inner_precise 1), sparse_mode 10-14 meaning modes 0-4 in high precision, as
op-plugin passes them -- with two differences of the page: ``next_tokens`` defaults to 0, and a Q_S of 1
stays on the prompt branch (sparse_mode and the tokens still apply).  Returns attention_out only.
Schema from op-plugin ``op_plugin_functions.yaml`` (the length lists as ``SymInt[]?``).
"""

from __future__ import annotations

import torch

from ... import params
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import fused_infer_attention_score as fia

OP = "npu_prompt_flash_attention"
# op-plugin declares the two length lists ``int[]?``; ``SymInt[]?`` takes the same python ints
# and also the lengths of a tensor traced by torch.compile (unbacked SymInts), like FIA's schema.
SCHEMA = (
    "npu_prompt_flash_attention(Tensor query, Tensor key, Tensor value, *, "
    "Tensor? padding_mask=None, Tensor? atten_mask=None, Tensor? pse_shift=None, "
    "SymInt[]? actual_seq_lengths=None, Tensor? deq_scale1=None, Tensor? quant_scale1=None, "
    "Tensor? deq_scale2=None, Tensor? quant_scale2=None, Tensor? quant_offset2=None, "
    "int num_heads=1, float scale_value=1.0, int pre_tokens=2147483647, int next_tokens=0, "
    "str input_layout=\"BSH\", int num_key_value_heads=0, "
    "SymInt[]? actual_seq_lengths_kv=None, int sparse_mode=0) -> Tensor")
LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND")
HIGH_PRECISION_SPARSE = (10, 14)      # sparse_mode 10-14: modes 0-4 in high precision
# Products the page lists.
_PRODUCTS = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE})
DEFAULTS = {a.name: a.default_value for a in torch._C.parse_schema(SCHEMA).arguments
            if a.kwarg_only}


def _fia_params(kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise params.unexpected_keywords(OP, sorted(unknown), tuple(DEFAULTS))
    p = {**DEFAULTS, **kwargs}
    from ... import checks
    checks.expect(p["input_layout"] in LAYOUTS, OP, "input_layout", f"one of {list(LAYOUTS)}",
                  repr(p["input_layout"]), ValueError)
    # padding_mask is reserved on the page (unused).  op-plugin
    # (FlashAttentionKernelNpuOpApi.cpp, npu_prompt_flash_attention) runs the kernel in high
    # performance (inner_precise 1), or in high precision for sparse_mode 10-14, which it maps
    # onto 0-4.
    sparse_mode, inner_precise = p["sparse_mode"], 1
    if HIGH_PRECISION_SPARSE[0] <= sparse_mode <= HIGH_PRECISION_SPARSE[1]:
        sparse_mode, inner_precise = sparse_mode - HIGH_PRECISION_SPARSE[0], 0
    return fia._params(dict(
        atten_mask=p["atten_mask"], pse_shift=p["pse_shift"],
        actual_seq_lengths=p["actual_seq_lengths"],
        actual_seq_lengths_kv=p["actual_seq_lengths_kv"],
        dequant_scale1=p["deq_scale1"], quant_scale1=p["quant_scale1"],
        dequant_scale2=p["deq_scale2"], quant_scale2=p["quant_scale2"],
        quant_offset2=p["quant_offset2"], num_heads=p["num_heads"], scale=p["scale_value"],
        pre_tokens=p["pre_tokens"], next_tokens=p["next_tokens"], input_layout=p["input_layout"],
        num_key_value_heads=p["num_key_value_heads"], sparse_mode=sparse_mode,
        inner_precise=inner_precise)) | {
            "_branch": "prompt", "_products": _PRODUCTS}


def check_prompt_flash_attention(query, key, value, **kwargs) -> None:
    fia.parse(OP, query, key, value, _fia_params(kwargs), build=False)


def prompt_flash_attention_reference(query, key, value, **kwargs):
    return fia.run(query, key, value, _fia_params(kwargs), use_fast=False, op=OP)[0]


def _fake(query, key, value, **kwargs):
    _, plan = fia.parse(OP, query, key, value, _fia_params(kwargs), build=False)
    return fia.empty_outputs(query, plan)[0]


prompt_flash_attention_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_prompt_flash_attention,
    reference=prompt_flash_attention_reference, fake=_fake, metadata_check=True,
    info=OpInfo(api="torch_npu", notes=["inference only: no backward on the NPU"]))
prompt_flash_attention_op.forbid_autograd("npu_prompt_flash_attention is inference-only")
prompt_flash_attention_op.add_provider(
    "attention-fast",
    lambda q, k, v, **kw: fia.run(q, k, v, _fia_params(kw), use_fast=True, op=OP)[0],
    fia._fast_supports)


def npu_prompt_flash_attention(query, key, value, **kwargs):
    """Prompt flash attention (seed 004 ``npu_prompt_flash_attention``).

    ``atten_out = softmax(scale_value * Q @ K^T + pse_shift [masked]) @ V``, computed in float32
    and rounded once to the query dtype (int8 with ``quant_scale2``).

    Parameters are those of the page (``padding_mask`` is reserved and ignored); the semantics
    are ``npu_fused_infer_attention_score``'s prompt branch (see its docstring), with
    ``next_tokens`` defaulting to 0.  ``actual_seq_lengths(_kv)`` may be tensors (read on the
    host; traced without a graph break under torch.compile).  int8 query/key/value with
    ``deq_scale1`` / ``quant_scale1`` / ``deq_scale2`` follow the kernel's full-int8 steps
    (``full_quant.py``; float16 output, int8 with ``quant_scale2``).

    Returns
    -------
    Tensor
        attention_out, shaped like the query (BNSD_BSND: BSND).
    """
    return prompt_flash_attention_op(query, key, value, **fia._normalize_kwargs(kwargs, OP, DEFAULTS))


TORCH_NPU_FUNCTIONS = {OP: npu_prompt_flash_attention}
