"""Strict mode's per-product rules for the inference-attention ops (FIA v1/v2, PFA, IFA).

Only :func:`check` is called (from ``fia_normalize.parse``, after the layout and the lengths are
known); it does nothing outside strict mode.  The rules are the pages' per-product constraints.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...targets import Product
from .problem import UNBOUNDED

# ops-transformer attention/fused_infer_attention_score/README.md lists Ascend 950PR/950DT next
# to A2/A3 (the torch_npu page predates it); op-plugin's FusedInferAttentionScoreKernelNpuOpApi.cpp
# calls aclnnFusedInferAttentionScoreV5 on Ascend950, whose page gives the 950 rules below.
_FIA_PRODUCTS = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def check(op: str, query: torch.Tensor, key: torch.Tensor, d: int, heads: int, kv_heads: int,
          p: dict, decode: bool) -> None:
    """Per-product rules of the pages (strict mode only).

    FIA v1/v2: Atlas A2, A3 and 950 (:func:`_strict_950`).  PFA: A2, A3 and the Atlas
    inference series (310P); IFA: A2 and 310P (``p["_products"]``).  310P: float16 queries, no pse_shift / output quantization; for
    PFA also no actual lengths, no GQA, sparse_mode 0 and default tokens.  A2/A3: D <= 512 and
    the head-dim alignment rules (:func:`_strict_head_dim`), N <= 256, N / N_kv <= 64; paged
    block_size a multiple of 128 in [128, 512] on the prompt branch, 16-aligned (32 for int8 KV)
    and <= 512 on the incremental one; inner_precise 0/1 on the incremental branch.
    """
    product = targets.expect_supported(op, p.get("_products", _FIA_PRODUCTS))
    if product is None:
        return
    name = product.value
    if product == Product.ASCEND_950:
        _strict_950(op, query, d, p)
        return
    # NSD is known only from op-plugin's layout table and its Ascend950 tests.
    checks.expect(p["input_layout"] != "NSD", op, "input_layout", lambda: f"not NSD on {name}",
                  "'NSD'", ValueError)
    if product == Product.ATLAS_INFERENCE:
        checks.expect_dtype(query, (torch.float16,), op, "query")
        for arg in ("pse_shift", "quant_scale2"):
            checks.expect(p[arg] is None, op, arg, f"None on {name}", "a tensor", ValueError)
        if p.get("_branch") == "prompt":
            for arg in ("actual_seq_lengths", "actual_seq_lengths_kv"):
                checks.expect(p[arg] is None, op, arg, f"None on {name}", p[arg], ValueError)
            checks.expect(p["num_key_value_heads"] == 0, op, "num_key_value_heads",
                          f"0 on {name}", p["num_key_value_heads"], ValueError)
            checks.expect(p["sparse_mode"] == 0, op, "sparse_mode", f"0 on {name}",
                          p["sparse_mode"], ValueError)
            checks.expect(p["pre_tokens"] == UNBOUNDED, op, "pre_tokens",
                          f"2147483647 on {name}", p["pre_tokens"], ValueError)
            checks.expect(p["next_tokens"] in (0, UNBOUNDED), op, "next_tokens",
                          f"0 or 2147483647 on {name}", p["next_tokens"], ValueError)
    else:
        checks.expect_dtype(query, (torch.float16, torch.bfloat16, torch.int8), op, "query")
    checks.expect(d <= 512, op, "query", lambda: f"D <= 512 on {name}", d, ValueError)
    if product != Product.ATLAS_INFERENCE:
        _strict_head_dim(op, name, query, key, d, kv_heads, p, decode)
    checks.expect(heads <= 256, op, "num_heads", lambda: f"N <= 256 on {name}", heads,
                  ValueError)
    checks.expect(heads // kv_heads <= 64, op, "num_key_value_heads",
                  lambda: f"num_heads / num_key_value_heads <= 64 on {name}",
                  heads // kv_heads, ValueError)
    if p["block_table"] is not None:
        bs = p["block_size"]
        if decode:
            align = 32 if key.dtype == torch.int8 else 16
            checks.expect(bs <= 512 and bs % align == 0, op, "block_size",
                          lambda: f"a multiple of {align} up to 512 on {name}", bs, ValueError)
        else:
            checks.expect(128 <= bs <= 512 and bs % 128 == 0, op, "block_size",
                          lambda: f"a multiple of 128 in [128, 512] on {name} (Q_S > 1)", bs,
                          ValueError)
    if decode:
        checks.expect(p["inner_precise"] in (0, 1), op, "inner_precise",
                      lambda: f"0 or 1 when Q_S is 1 on {name}", p["inner_precise"], ValueError)


def _strict_head_dim(op: str, name: str, query: torch.Tensor, key: torch.Tensor, d: int,
                     kv_heads: int, p: dict, decode: bool) -> None:
    """The A2 / A3 head-dim rules (seed 004 FIA / PFA / IFA 约束说明; op-plugin
    ``torch_npu-npu_fused_infer_attention_score.md`` / ``..._v2.md`` "D轴限制" for int4):

    - Q_S > 1: D a multiple of 16 elements, of 32 when int8 is involved (query, key / value or
      the output: ops-transformer ``fused_infer_attention_score_tiling.cpp``, "D should be 32
      elements aligned when int8 is involved"), of 64 with int4 (int32-packed) KV;
    - Q_S = 1: int4 KV only with D a multiple of 64; pse_shift only with D a multiple of 16;
    - MLA (query_rope): query D 512 or 128 (the newer pages), rope D 64, one KV head when D
      is 512.

    The seed's "N * D < 65535 for BSH / BSND" is a recommendation on the newer pages and is not
    enforced.
    """
    int4 = key.dtype == torch.int32
    if p["query_rope"] is not None:
        allowed = (512, 128)
        checks.expect(d in allowed, op, "query",
                      lambda: f"D in {list(allowed)} with query_rope on {name}", d, ValueError)
        d_rope = p["query_rope"].shape[-1]
        checks.expect(d_rope == 64, op, "query_rope", lambda: f"D 64 on {name}", d_rope,
                      ValueError)
        checks.expect(d != 512 or kv_heads == 1, op, "num_key_value_heads",
                      lambda: f"1 with query_rope and D 512 on {name}", kv_heads, ValueError)
        return
    if decode:
        if int4:
            checks.expect(d % 64 == 0, op, "key",
                          lambda: f"int4 KV only with D a multiple of 64 on {name}", d,
                          ValueError)
        if p["pse_shift"] is not None:
            checks.expect(d % 16 == 0, op, "pse_shift",
                          lambda: f"None unless D is a multiple of 16 on {name}", d, ValueError)
        return
    int8 = torch.int8 in (query.dtype, key.dtype) or p["quant_scale2"] is not None
    align = 64 if int4 else 32 if int8 else 16
    checks.expect(d % align == 0, op, "query",
                  lambda: f"D a multiple of {align} on {name} (Q_S > 1)", d, ValueError)


def _strict_950(op: str, query: torch.Tensor, d: int, p: dict) -> None:
    """Ascend 950 rules (ops-transformer ``docs/aclnnFusedInferAttentionScoreV5.md``, common,
    mask and dequant parameter groups): float16 / bfloat16 (int8) queries, D <= 512, any
    num_heads / num_key_value_heads ratio (no N <= 256 or ratio <= 64 bound there), a 2-D
    atten_mask only with sparse_mode 2/3/4, and no legacy antiquant_scale / antiquant_offset
    (the key_/value_antiquant_* pair instead).  No tree mask (sparse_mode 9): the tiling
    rejects it on that architecture (ops-transformer ``fused_infer_attention_score_tiling_info_
    parser.cpp``, ``GetAttenMaskInfo``: DAV_3510 "does not support sparse9")."""
    checks.expect_dtype(query, (torch.float16, torch.bfloat16, torch.int8), op, "query")
    checks.expect(d <= 512, op, "query", "D <= 512 on 950", d, ValueError)
    checks.expect(p["sparse_mode"] != 9 or p["atten_mask"] is None, op, "sparse_mode",
                  "not 9 (treeMask) with an atten_mask on 950", p["sparse_mode"], ValueError)
    mask = p["atten_mask"]
    if mask is not None and mask.dim() == 2:
        checks.expect(p["sparse_mode"] not in (0, 1), op, "sparse_mode",
                      "2, 3 or 4 with a 2-D atten_mask on 950", p["sparse_mode"], ValueError)
    for arg in ("antiquant_scale", "antiquant_offset"):
        checks.expect(p.get(arg) is None, op, arg,
                      "None on 950 (key_antiquant_* / value_antiquant_* instead)", "a tensor",
                      ValueError)
