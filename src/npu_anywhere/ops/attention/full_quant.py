"""Full int8 inference attention: int8 query, key and value with ``dequant_scale1`` /
``quant_scale1`` / ``dequant_scale2`` (the page's "输入为int8" scenarios), prompt branch.

The kernel followed is ops-transformer ``attention/prompt_flash_attention/op_kernel/
prompt_flash_attention_s1s2_bns1_x910.h`` (its int8 instantiation: ``mmOutputType`` and
``softmaxType`` half in ``prompt_flash_attention_base.h``)::

    S   = fp16(int32(q_i8 @ k_i8^T) * dequant_scale1)      bmm1, dequantized by the fixpipe
    s   = fp16(S * scale) [+ pse_shift]                    masked keys: see ``masked_rows``
    P   = fp16(exp(s - max_j s));   l = sum_j P
    P8  = int8(sat(round(P * quant_scale1)))               AscendQuant before bmm2
    O   = fp16(int32(P8 @ v_i8) * dequant_scale2) / l      bmm2, dequantized by the fixpipe
    out = fp16(O), or int8(round(O * quant_scale2 + quant_offset2)) with quant_scale2
    lse = max_j s + log(l)

The kernel works per KV tile: ``max`` is the maximum over the tiles seen so far and earlier
partial outputs are rescaled by ``exp(old - new)``, so where a row's maximum moves between tiles
its ``P`` -- and the int8 step ``P8`` -- are taken against a smaller maximum and the result can
differ from this untiled form by about one quantization step of P.  No public golden pins the
tiling down (op-plugin's ``test_npu_fused_infer_attention_score_v3_fullquant`` uses all-ones
inputs), so this module computes the untiled formula, which is the kernel's result whenever the
KV fits one tile (the tiling picks the tile width) and otherwise its value up to that step;
strict mode warns.

Dequant scales are per-tensor: float32 values, or the uint64 / int64 words of
``npu_trans_quant_param`` (the fixpipe reads their fp19 scale field); ``quant_scale1`` is a
float32 value.  Rounding: ``round`` is half to even (AscendQuant's CAST_RINT), float -> fp16
casts round to nearest.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional

import torch

from ... import checks, targets
from ..matmul import integer
from .problem import AttentionProblem, dense_kv, visible

DEQUANT_DTYPES = (torch.float32, torch.int64, torch.uint64)
FULL_QUANT_ARGS = ("dequant_scale1", "quant_scale1", "dequant_scale2")


@dataclasses.dataclass(frozen=True)
class FullQuant:
    """The three per-tensor scales of the full-int8 path, as python floats."""
    dequant1: float
    quant1: float
    dequant2: float


def check(op: str, query: torch.Tensor, key: torch.Tensor, p: dict, *, decode: bool,
          paged: bool, rope: bool) -> None:
    """The page's rules for the int8 scenarios (``int8量化相关入参数量与输入、输出数据格式的综合
    限制``); the three scales must be None for floating queries."""
    given = [name for name in FULL_QUANT_ARGS if p.get(name) is not None]
    if query.dtype != torch.int8:
        checks.expect(not given, op, given[0] if given else "dequant_scale1",
                      "None for a float16 / bfloat16 query (they belong to int8 inputs)",
                      "a tensor", ValueError)
        return
    checks.expect(key.dtype == torch.int8, op, "key", "int8 with an int8 query", key.dtype,
                  TypeError)
    checks.expect(not paged, op, "block_table",
                  "None with an int8 query (page attention does not take int8 queries)",
                  "a tensor", ValueError)
    # The pages' Q_S = 1 constraints: "query、key、value输入类型均为int8的场景暂不支持" (FIA v1/v2;
    # IFA likewise), so the incremental branch has no full-int8 path to reproduce.
    checks.expect(not decode, op, "query",
                  "Q_S > 1 for int8 query, key and value (all-int8 inputs are not supported "
                  "when Q_S is 1)", "Q_S == 1", ValueError)
    # MLA full quantization (v2 page, D = 512 with rope: int8 query/key/value, bfloat16 rope,
    # query dequantized per token and head, key/value per tensor) runs a kernel of its own whose
    # dequantization steps are not in the public A2/A3 kernel sources.
    checks.expect(not rope, op, "query_rope",
                  "None with an int8 query (MLA full quantization is not reproduced)",
                  "a tensor", NotImplementedError)
    for name in FULL_QUANT_ARGS:
        checks.expect(p.get(name) is not None, op, name,
                      "a tensor with an int8 query (dequant_scale1, quant_scale1 and "
                      "dequant_scale2 go together)", None, ValueError)
        t = p[name]
        allowed = (torch.float32,) if name == "quant_scale1" else DEQUANT_DTYPES
        checks.expect_dtype(t, allowed, op, name)
        checks.expect(t.numel() == 1, op, name, "one value (per-tensor)",
                      lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)


def _scalar(t: torch.Tensor) -> float:
    if t.dtype == torch.float32:
        return float(t.reshape(-1)[0])
    word = t.reshape(-1)[:1]
    word = word.view(torch.int64) if word.dtype == torch.uint64 else word
    return float(integer.unpack_scale_word(word)[0][0])


def scales(p: dict) -> FullQuant:
    return FullQuant(*(_scalar(p[name]) for name in FULL_QUANT_ARGS))


def _fp16(x: torch.Tensor) -> torch.Tensor:
    """Round to float16 and back (the kernel's half intermediates)."""
    return x.to(torch.float16).to(x.dtype)


def solve(problem: AttentionProblem) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(out [B, Nq, Sq, Dv] float32 holding fp16 values, lse [B, Nq, Sq])`` of a full-int8
    problem (see the module docstring); the integer matmuls are exact (float64)."""
    fq: FullQuant = problem.full_quant
    if targets.current() is not None:
        warnings.warn("full-int8 attention: the NPU quantizes the probabilities per KV tile; "
                      "beyond one tile its result may differ from this untiled emulation by "
                      "one int8 step of P", UserWarning, stacklevel=2)
    key, value = dense_kv(problem)
    q = problem.query.to(torch.float64)
    k, v = key.to(torch.float64), value.to(torch.float64)
    b, n_q, s_q, d = q.shape
    n_kv, g = k.shape[1], problem.group
    acc1 = torch.matmul(q.reshape(b, n_kv, g * s_q, d), k.transpose(-1, -2))
    s = _fp16((acc1.reshape(b, n_q, s_q, -1) * fq.dequant1).to(torch.float32))
    s = _fp16(s * problem.scale)
    if problem.pse is not None:
        s = _fp16(s + problem.pse.to(torch.float16).to(torch.float32))
    base = visible(problem, q.device, use_mask=False)
    shown = visible(problem, q.device)
    s = s.masked_fill(~base, float("-inf"))
    if problem.masked_rows == "uniform":          # the kernel's select with a finite value
        s = torch.where(base & ~shown, torch.full_like(s, problem.mask_fill), s)
    else:
        s = s.masked_fill(~shown, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = _fp16(torch.exp(s - m))
    l = p.sum(dim=-1, keepdim=True)
    p8 = torch.round(p * fq.quant1).clamp_(-128, 127)
    acc2 = torch.matmul(p8.to(torch.float64).reshape(b, n_kv, g * s_q, -1), v)
    o = _fp16((acc2.reshape(b, n_q, s_q, -1) * fq.dequant2).to(torch.float32))
    out = o / torch.where(l > 0, l, torch.ones_like(l))
    lse = None
    if problem.return_lse:
        lse = (m + torch.log(l)).squeeze(-1)
        if problem.masked_rows == "invalid":      # row-invalid correction: lse +inf
            emptied = base.any(-1) & ~shown.any(-1)
            lse = lse.masked_fill(emptied.expand(lse.shape), math.inf)
    return out, lse
