"""Checks, forward and grad of npu_fusion_attention, shared by the v1 and v3 ops.

The ops hand their arguments over as a dict keyed by torch_npu's parameter names (the grad's
``scale_value`` becomes ``scale``); ``seed`` / ``offset`` arrive as Python ints.
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks
from . import fa_math, fa_tiled
from .fa_masks import MaskPlan, check_sparse
from .fa_pse import PseSource, check_pse
from .fa_problem import (FAProblem, check_dtypes, expect_stats, from_bnsd, parse, seq_total,
                         stats_from_layout, stats_shape, stats_to_layout, to_bnsd)


def check_forward(op: str, a: dict, lengths_known: bool = True) -> FAProblem:
    """``lengths_known=False``: TND lengths are placeholders (FakeTensor calls of v3)."""
    q, k, v = a["query"], a["key"], a["value"]
    check_dtypes(op, {"query": q, "key": k, "value": v, "pse": a["pse"]})
    p = parse(op, q, k, v, a["head_num"], a["input_layout"], a["actual_seq_qlen"],
              a["actual_seq_kvlen"])
    p.lengths_known = lengths_known
    checks.expect(a["padding_mask"] is None, op, "padding_mask", "None (not supported yet by "
                  "the op)", "a tensor", ValueError)
    kp = a["keep_prob"]
    checks.expect(0.0 < kp <= 1.0, op, "keep_prob", "in (0, 1]", kp, ValueError)
    checks.expect(a["inner_precise"] in (0, 1, 2), op, "inner_precise", "0, 1 or 2",
                  a["inner_precise"], ValueError)
    layout = a["softmax_layout"]
    checks.expect(layout == "" or (layout == "TND" and p.packed), op, "softmax_layout",
                  '"" (or "TND" with input_layout TND)', repr(layout), ValueError)
    check_pse(op, p, a["pse"], a["atten_mask"], a["sparse_mode"], a["pre_tockens"],
              a["next_tockens"])
    check_sparse(op, p, a["atten_mask"], a["pse"], a["sparse_mode"], a["pre_tockens"],
                 a["next_tockens"], a["prefix"])
    sink = a.get("sink")
    if sink is not None:
        checks.expect(tuple(sink.shape) == (p.heads,), op, "sink",
                      lambda: f"shape ({p.heads},) (one logit per query head)",
                      lambda: f"shape {tuple(sink.shape)}", RuntimeError)
        checks.expect(sink.dtype.is_floating_point, op, "sink", "a floating-point tensor",
                      str(sink.dtype), TypeError)
    _check_dropout_mask(op, p, a.get("dropout_mask"))
    return p


def _check_dropout_mask(op: str, p: FAProblem, mask) -> None:
    """The bit-packed keep-mask of ``_npu_dropout_gen_mask``: uint8, at least one bit per
    element of [B, N, Sq, Skv] (TND: N sum_b Sq_b Skv_b)."""
    if mask is None:
        return
    checks.expect_dtype(mask, (torch.uint8,), op, "dropout_mask")
    if p.lengths_known:
        need = (numels(p) + 7) // 8
        checks.expect(mask.numel() >= need, op, "dropout_mask",
                      lambda: f"at least {need} bytes (one bit per element of the "
                              f"{numels(p)}-element keep-mask)",
                      lambda: f"{mask.numel()} bytes", RuntimeError)


def check_grad(op: str, a: dict, lengths_known: bool = True) -> FAProblem:
    p = check_forward(op, a, lengths_known)
    q, dy = a["query"], a["dy"]
    total_q = seq_total(p.q_lens) if p.packed else 0
    out_shape = _out_shape(q, p)
    checks.expect(list(dy.shape) == out_shape, op, "dy", lambda: f"shape {out_shape}",
                  lambda: f"shape {tuple(dy.shape)}", RuntimeError)
    checks.expect(dy.dtype == q.dtype, op, "dy", lambda: f"the dtype of query ({q.dtype})",
                  str(dy.dtype), TypeError)
    att = a["attention_in"]
    checks.expect(att is not None, op, "attention_in", "a tensor (the forward's output)",
                  "None", ValueError)
    checks.expect(list(att.shape) == out_shape, op, "attention_in",
                  lambda: f"shape {out_shape}", lambda: f"shape {tuple(att.shape)}",
                  RuntimeError)
    for name in ("softmax_max", "softmax_sum"):
        expect_stats(op, name, a[name], p, total_q)
    return p


def _out_shape(q: torch.Tensor, p: FAProblem) -> list:
    shape = list(q.shape)
    if p.layout in ("BSH", "SBH"):
        shape[2] = p.heads * p.dv
    else:
        shape[-1] = p.dv
    return shape


def _inputs(p: FAProblem, a: dict):
    q = to_bnsd(a["query"], p, p.heads, p.sq, p.q_cum)
    k = to_bnsd(a["key"], p, p.kv_heads, p.skv, p.kv_cum)
    v = to_bnsd(a["value"], p, p.kv_heads, p.skv, p.kv_cum)
    plan = MaskPlan(p, a["atten_mask"], a["sparse_mode"], a["pre_tockens"], a["next_tockens"],
                    a["prefix"], a["query"].device)
    return q, k, v, plan


def flash_reason(p: FAProblem, a: dict) -> Optional[str]:
    """None when the fused flash kernels compute this call exactly, else why not."""
    if a["query"].device.type != "cpu":
        return "the fused flash kernels used here are the CPU ones"
    if p.packed:
        return "TND calls are ragged"
    if a["pse"] is not None or a.get("sink") is not None:
        return "pse / sink are not flash-kernel inputs"
    if a["keep_prob"] < 1.0:
        return "dropout must follow the op's own keep-mask"
    if p.dv != p.d:
        return "Dv != Dk"
    if fa_math.flash_causal(p, a["atten_mask"], a["sparse_mode"]) is None:
        return "the mask is neither absent nor a top-left causal one"
    return None


def _pse(p: FAProblem, a: dict):
    pse = a["pse"]
    return None if pse is None else PseSource(p, pse, fa_math.compute_dtype(a["query"].dtype))


def _dropout(p: FAProblem, a: dict, seed: int, offset: int) -> fa_math.Dropout:
    return fa_math.Dropout(a["keep_prob"], seed, offset, bits=a.get("dropout_mask"), problem=p)


def forward(p: FAProblem, a: dict, seed: int, offset: int, *, use_flash: bool,
            tiled: bool = True):
    """``(attention_out, softmax_max, softmax_sum, softmax_out)`` in the documented layouts.

    ``use_flash``: the fused CPU kernels (only for calls :func:`flash_reason` accepts); else
    ``tiled``: the online-softmax tiles of :mod:`.fa_tiled` (the default, so that every op
    built on this module computes a call the same way), or the row-blocked reference of
    :mod:`.fa_math` (``tiled=False``)."""
    query = a["query"]
    q, k, v, plan = _inputs(p, a)
    if use_flash:
        causal = fa_math.flash_causal(p, a["atten_mask"], a["sparse_mode"])
        out, lse = fa_math.flash_forward(q, k, v, a["scale"], causal)
        m, l = lse.float(), torch.ones_like(lse, dtype=torch.float32)
    else:
        engine = fa_tiled if tiled else fa_math
        out, m, l = engine.forward(q, k, v, scale=a["scale"], pse=_pse(p, a),
                                   sink=a.get("sink"), plan=plan,
                                   dropout=_dropout(p, a, seed, offset))
    total_q = query.shape[0] if p.packed else 0
    stat_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    attention = from_bnsd(out.to(query.dtype), p, p.q_cum, total_q)
    softmax_max = stats_to_layout(m.to(stat_dtype), p, a["softmax_layout"])
    softmax_sum = stats_to_layout(l.to(stat_dtype), p, a["softmax_layout"])
    return attention, softmax_max, softmax_sum, query.new_empty(0)


def grad(p: FAProblem, a: dict, seed: int, offset: int, *, use_flash: bool,
         tiled: bool = True):
    """``(dq, dk, dv, dpse, dsink)`` in the inputs' layouts."""
    query = a["query"]
    q, k, v, plan = _inputs(p, a)
    dy = to_bnsd(a["dy"], p, p.heads, p.sq, p.q_cum)
    out = to_bnsd(a["attention_in"], p, p.heads, p.sq, p.q_cum)
    m = stats_from_layout(a["softmax_max"], p, a["softmax_layout"])
    l = stats_from_layout(a["softmax_sum"], p, a["softmax_layout"])
    pse, sink = a["pse"], a.get("sink")
    if use_flash:
        causal = fa_math.flash_causal(p, a["atten_mask"], a["sparse_mode"])
        lse = m.float() + torch.log(l.float())
        dq, dk, dv = fa_math.flash_backward(q, k, v, dy, out, lse, a["scale"], causal)
        dpse = dsink = None
    else:
        engine = fa_tiled if tiled else fa_math
        dq, dk, dv, dpse, dsink = engine.backward(q, k, v, dy, out, m, l, scale=a["scale"],
                                                  pse=_pse(p, a), sink=sink, plan=plan,
                                                  dropout=_dropout(p, a, seed, offset))
    dt = query.dtype
    dq = from_bnsd(dq.to(dt), p, p.q_cum, query.shape[0] if p.packed else 0)
    dk = from_bnsd(dk.to(dt), p, p.kv_cum, a["key"].shape[0] if p.packed else 0)
    dv = from_bnsd(dv.to(dt), p, p.kv_cum, a["value"].shape[0] if p.packed else 0)
    dpse = query.new_empty(0) if dpse is None else dpse.to(pse.dtype)
    if sink is None:
        dsink = torch.empty(0, device=query.device)
    elif dsink is None:
        dsink = sink.new_zeros(sink.shape)
    else:
        dsink = dsink.to(sink.dtype)
    return dq, dk, dv, dpse, dsink


def functional_grad(outs: tuple, a: dict) -> tuple:
    """The functional grad ops' result: dpse is None (an undefined tensor) without pse, as
    op-plugin's kernel and meta function return it; dsink stays an empty float32 ``[0]``.
    (The ``.out`` overloads keep their written dpse.)"""
    if a["pse"] is None:
        return (*outs[:3], None, *outs[4:])
    return outs


def fake_forward(p: FAProblem, a: dict):
    query = a["query"]
    total_q = query.shape[0] if p.packed else 0
    stat_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    shape = stats_shape(p, total_q)
    return (query.new_empty(_out_shape(query, p)), query.new_empty(shape, dtype=stat_dtype),
            query.new_empty(shape, dtype=stat_dtype), query.new_empty(0))


def fake_grad(p: FAProblem, a: dict):
    q, k, v, pse, sink = a["query"], a["key"], a["value"], a["pse"], a.get("sink")
    dpse = q.new_empty(0) if pse is None else pse.new_empty(pse.shape)
    dsink = torch.empty(0, device=q.device) if sink is None else sink.new_empty(sink.shape)
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dpse, dsink)


def numels(p: FAProblem) -> int:
    """The dropout keep-mask's element count (B N Sq Skv; TND: N sum_b Sq_b Skv_b)."""
    if p.packed:
        return p.heads * sum(a * b for a, b in zip(p.q_lens, p.kv_lens))
    return p.batch * p.heads * p.sq * p.skv
