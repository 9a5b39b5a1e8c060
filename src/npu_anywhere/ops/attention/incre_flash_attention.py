"""torch_npu.npu_incre_flash_attention (IFA): the incremental (decode) branch of FIA.

Formula (seed 004)::

    atten_out = softmax(scale_value * query @ key^T + pse_shift [masked]) @ value

The query has one token per batch (Q_S = 1); ``actual_seq_lengths`` are the *KV* lengths;
there is no sparse_mode and no band; layouts BSH, BSND, BNSD; paged KV with ``block_table`` /
``block_size`` (caches ``[blocknum, blocksize, H]`` or ``[blocknum, N, blocksize, D]``); int8 KV
dequantized per channel with ``antiquant_scale`` / ``antiquant_offset`` of shape (2, ...);
kv left padding with ``kv_padding_size``; int8 output with ``quant_scale2``.  Returns
attention_out only.  Schema from op-plugin ``op_plugin_functions.yaml``.
"""

from __future__ import annotations

import torch

from ... import checks, params
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import fused_infer_attention_score as fia

OP = "npu_incre_flash_attention"
SCHEMA = (
    "npu_incre_flash_attention(Tensor query, Tensor key, Tensor value, *, "
    "Tensor? padding_mask=None, Tensor? atten_mask=None, Tensor? pse_shift=None, "
    "SymInt[]? actual_seq_lengths=None, Tensor? antiquant_scale=None, "
    "Tensor? antiquant_offset=None, Tensor? block_table=None, Tensor? dequant_scale1=None, "
    "Tensor? quant_scale1=None, Tensor? dequant_scale2=None, Tensor? quant_scale2=None, "
    "Tensor? quant_offset2=None, Tensor? kv_padding_size=None, int num_heads=1, "
    "float scale_value=1.0, str input_layout=\"BSH\", int num_key_value_heads=0, "
    "int block_size=0, int inner_precise=1) -> Tensor")
LAYOUTS = ("BSH", "BSND", "BNSD")
# Products the page lists.
_PRODUCTS = frozenset({Product.A2, Product.ATLAS_INFERENCE})
DEFAULTS = {a.name: a.default_value for a in torch._C.parse_schema(SCHEMA).arguments
            if a.kwarg_only}


def _fia_params(query, kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise params.unexpected_keywords(OP, sorted(unknown), tuple(DEFAULTS))
    p = {**DEFAULTS, **kwargs}
    layout = p["input_layout"]
    checks.expect(layout in LAYOUTS, OP, "input_layout", f"one of {list(LAYOUTS)}", repr(layout),
                  ValueError)
    s = query.shape[1] if layout in ("BSH", "BSND") else (query.shape[2] if query.dim() == 4
                                                          else -1)
    checks.expect(s == 1, OP, "query", "one token per batch (Q_S == 1)",
                  lambda: f"shape {tuple(query.shape)}", ValueError)
    return fia._params(dict(
        atten_mask=p["atten_mask"], pse_shift=p["pse_shift"],
        actual_seq_lengths_kv=p["actual_seq_lengths"], antiquant_scale=p["antiquant_scale"],
        antiquant_offset=p["antiquant_offset"], block_table=p["block_table"],
        dequant_scale1=p["dequant_scale1"], quant_scale1=p["quant_scale1"],
        dequant_scale2=p["dequant_scale2"], quant_scale2=p["quant_scale2"],
        quant_offset2=p["quant_offset2"], kv_padding_size=p["kv_padding_size"],
        num_heads=p["num_heads"], scale=p["scale_value"], input_layout=layout,
        num_key_value_heads=p["num_key_value_heads"], block_size=p["block_size"],
        inner_precise=p["inner_precise"])) | {"_branch": "decode", "_products": _PRODUCTS}


def check_incre_flash_attention(query, key, value, **kwargs) -> None:
    fia.parse(OP, query, key, value, _fia_params(query, kwargs), build=False)


def incre_flash_attention_reference(query, key, value, **kwargs):
    return fia.run(query, key, value, _fia_params(query, kwargs), use_fast=False, op=OP)[0]


def _fake(query, key, value, **kwargs):
    _, plan = fia.parse(OP, query, key, value, _fia_params(query, kwargs), build=False)
    return fia.empty_outputs(query, plan)[0]


incre_flash_attention_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_incre_flash_attention,
    reference=incre_flash_attention_reference, fake=_fake, metadata_check=True,
    info=OpInfo(api="torch_npu", notes=["inference only: no backward on the NPU"]))
incre_flash_attention_op.forbid_autograd("npu_incre_flash_attention is inference-only")
incre_flash_attention_op.add_provider(
    "attention-fast",
    lambda q, k, v, **kw: fia.run(q, k, v, _fia_params(q, kw), use_fast=True, op=OP)[0],
    fia._fast_supports)


def npu_incre_flash_attention(query, key, value, **kwargs):
    """Incremental flash attention (seed 004 ``npu_incre_flash_attention``).

    ``atten_out = softmax(scale_value * query @ key^T + pse_shift [masked]) @ value`` for one
    query token per batch, computed in float32 and rounded once (int8 with ``quant_scale2``).

    Parameters are those of the page (``padding_mask`` is reserved and ignored);
    ``actual_seq_lengths`` are the KV lengths (a list or a tensor), required with a block table.
    ``atten_mask`` (True / 1 = masked) is (B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S).

    Returns
    -------
    Tensor
        attention_out, shaped like the query.
    """
    return incre_flash_attention_op(query, key, value, **fia._normalize_kwargs(kwargs, OP, DEFAULTS))


TORCH_NPU_FUNCTIONS = {OP: npu_incre_flash_attention}
