"""Parse and check one ``npu_fused_infer_attention_score`` call, and normalize it into an
:class:`AttentionProblem` plus what the output formatting needs (:class:`OutputPlan`).

:func:`parse` runs in two modes: ``build=False`` only checks (metadata and the non-tensor
arguments: it is the op's ``_check`` and runs under FakeTensor), ``build=True`` also builds the
problem, which reads tensor values (padding sizes, a shared-prefix length given as a tensor).
The order of the steps follows the page's semantics: layout -> lengths -> KV form (paged or
dense) -> antiquant -> shared prefix -> rope concat -> left padding -> mask/band -> pse.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ... import checks
from . import fia_inputs as inputs
from . import fia_strict, full_quant, layouts, tree_mask
from .problem import AttentionProblem, gather_paged

FLOAT_QUERY = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
KV_QUANT = (torch.int8, torch.int32)            # int32 = eight packed int4 values
FIA_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND", "NTD", "TND_NTD", "NTD_TND", "NSD")


@dataclasses.dataclass
class OutputPlan:
    """How to turn the solver's ``[B, N, Sq, Dv]`` float32 result into the op's outputs."""
    q_layout: str
    out_layout: str
    query_shape: tuple
    num_heads: int
    d_out: int
    out_dtype: torch.dtype
    lse_flag: bool
    q_cum: Optional[list] = None          # packed layouts: cumulative query ends
    q_start: Optional[list] = None        # left padding: first valid query row per batch
    q_capacity: int = 0
    quant_scale2: Optional[torch.Tensor] = None
    quant_offset2: Optional[torch.Tensor] = None


def _kv_heads(num_heads: int, num_key_value_heads: int) -> int:
    return num_heads if num_key_value_heads == 0 else num_key_value_heads


def _dense_kv(op, name, x, q_layout, kv_heads, kv_cum, capacity):
    """Check a dense KV-like tensor in the query's layout; return it as ``[B, N, S, D]`` (packed
    layouts: zero-padded to ``capacity``; None when ``kv_cum`` is None, i.e. checking only)."""
    if q_layout in layouts.PACKED:
        dims = 3
        checks.expect(x.dim() == dims, op, name, f"a 3-D tensor for layout {q_layout}",
                      lambda: f"shape {tuple(x.shape)}", ValueError)
        n = x.shape[1] if q_layout == "TND" else x.shape[0]
        checks.expect(n == kv_heads, op, name,
                      lambda: f"N equal to num_key_value_heads ({kv_heads})", n, RuntimeError)
        return None if kv_cum is None else layouts.unpack(x, q_layout, kv_cum, capacity)
    n, _, _ = layouts.query_dims(op, x, q_layout, kv_heads)
    checks.expect(n == kv_heads, op, name,
                  lambda: f"N equal to num_key_value_heads ({kv_heads})", n, RuntimeError)
    return layouts.to_bnsd(x, q_layout, kv_heads)


def parse(op: str, query, key, value, p: dict, *, build: bool):
    """Check the call; with ``build`` return ``(problem, plan)``, else ``(None, plan)``."""
    num_heads = p["num_heads"]
    checks.expect(num_heads > 0, op, "num_heads", "a positive head count", num_heads, ValueError)
    kv_heads = _kv_heads(num_heads, p["num_key_value_heads"])
    checks.expect(kv_heads > 0 and num_heads % kv_heads == 0, op, "num_key_value_heads",
                  lambda: f"a divisor of num_heads ({num_heads})", kv_heads, ValueError)
    q_layout, out_layout = layouts.split_layout(op, p["input_layout"],
                                                p.get("_layouts", FIA_LAYOUTS))
    checks.expect_dtype(query, FLOAT_QUERY + (torch.int8,), op, "query")
    n_q, s_or_t, d_q = layouts.query_dims(op, query, q_layout, num_heads)
    checks.expect(n_q == num_heads, op, "query", lambda: f"N equal to num_heads ({num_heads})",
                  n_q, RuntimeError)
    packed = q_layout in layouts.PACKED
    paged = p["block_table"] is not None

    # -- query lengths ---------------------------------------------------------------------
    q_cum = None
    if packed:
        q_cum = inputs.cumulative(op, "actual_seq_lengths", p["actual_seq_lengths"], s_or_t)
        batch = len(q_cum)
        q_lens = inputs.diffs(q_cum)
        sq = max(q_lens) if q_lens else 0
    else:
        batch, sq = 1 if q_layout == "NSD" else query.shape[0], s_or_t
    # The incremental branch (FIA with Q_S == 1 and no rope; IFA always; PFA never).
    branch = p.get("_branch")
    decode = (not packed and sq == 1 and p["query_rope"] is None) if branch is None \
        else branch == "decode"
    if decode:                                  # actual_seq_lengths is ignored there
        q_lens = [1] * batch
    elif not packed:
        q_lens = inputs.per_batch(op, "actual_seq_lengths", p["actual_seq_lengths"], batch, sq)
        checks.expect(all(v <= sq for v in q_lens), op, "actual_seq_lengths",
                      lambda: f"lengths <= Q_S ({sq})", q_lens, ValueError)
    checks.expect_one_of(p["inner_precise"], (0, 1, 2, 3), op, "inner_precise")
    fia_strict.check(op, query, key, d_q, num_heads, kv_heads, p, decode)
    full_int8 = query.dtype == torch.int8
    full_quant.check(op, query, key, p, decode=decode, paged=paged,
                     rope=p["query_rope"] is not None)

    # -- KV storage ------------------------------------------------------------------------
    checks.expect(key.dtype == value.dtype, op, "value", lambda: f"the dtype of key ({key.dtype})",
                  value.dtype, TypeError)
    kv_quant = key.dtype in KV_QUANT and not full_int8     # antiquant: int8 / int4 KV
    checks.expect(kv_quant or key.dtype == query.dtype, op, "key",
                  lambda: f"the dtype of query ({query.dtype}), int8 or int4 packed in int32",
                  key.dtype, TypeError)
    block_size = p["block_size"]
    if paged:
        bt = p["block_table"]
        checks.expect_dtype(bt, (torch.int32, torch.int64), op, "block_table")
        checks.expect(bt.dim() == 2 and bt.shape[0] == batch, op, "block_table",
                      lambda: f"a 2-D [B={batch}, max_blocks] table", lambda: tuple(bt.shape),
                      RuntimeError)
        checks.expect(block_size > 0, op, "block_size", "a positive block size with a block table",
                      block_size, ValueError)
        key_cache = inputs.paged_cache(op, "key", key, kv_heads)
        value_cache = inputs.paged_cache(op, "value", value, kv_heads)
        checks.expect(key_cache.shape[1] == block_size, op, "key",
                      lambda: f"blocks of block_size ({block_size}) rows",
                      lambda: tuple(key.shape), RuntimeError)
        checks.expect(value_cache.shape[:3] == key_cache.shape[:3], op, "value",
                      lambda: f"the blocks, block size and heads of key {tuple(key.shape)}",
                      lambda: tuple(value.shape), RuntimeError)
        capacity = bt.shape[1] * block_size
        checks.expect(p["actual_seq_lengths_kv"] is not None, op, "actual_seq_lengths_kv",
                      "lengths (required with a block table)", None, ValueError)
        # Per batch even for TND queries (the paged form has no packed KV axis).
        kv_lens = inputs.per_batch(op, "actual_seq_lengths_kv", p["actual_seq_lengths_kv"], batch,
                                   capacity)
        checks.expect(all(v <= capacity for v in kv_lens), op, "actual_seq_lengths_kv",
                      lambda: f"lengths <= max_blocks * block_size ({capacity})", kv_lens,
                      ValueError)
        k_dense = v_dense = None
        d_k, d_v = key_cache.shape[3], value_cache.shape[3]
    else:
        key_cache = value_cache = None
        kv_cum = None
        if packed:
            t_kv = key.shape[0] if q_layout == "TND" else key.shape[1]
            kv_cum = inputs.cumulative(op, "actual_seq_lengths_kv", p["actual_seq_lengths_kv"],
                                       t_kv)
            checks.expect(len(kv_cum) == batch, op, "actual_seq_lengths_kv",
                          lambda: f"B ({batch}) cumulative lengths", len(kv_cum), ValueError)
            kv_lens = inputs.diffs(kv_cum)
            capacity = max(kv_lens) if kv_lens else 0
        # Packed KV is unpacked only when building (the check needs only the shapes).
        cum = kv_cum if build else None
        k_dense = _dense_kv(op, "key", key, q_layout, kv_heads, cum, capacity if packed else 0)
        v_dense = _dense_kv(op, "value", value, q_layout, kv_heads, cum, capacity if packed else 0)
        if not packed:
            checks.expect(k_dense.shape[0] == batch and v_dense.shape[0] == batch, op, "key",
                          lambda: f"batch B={batch}", lambda: tuple(key.shape), RuntimeError)
            capacity = k_dense.shape[2]
            checks.expect(v_dense.shape[2] == capacity, op, "value",
                          lambda: f"the S of key ({capacity})", lambda: tuple(value.shape),
                          RuntimeError)
            kv_lens = inputs.per_batch(op, "actual_seq_lengths_kv", p["actual_seq_lengths_kv"],
                                       batch, capacity)
            checks.expect(all(v <= capacity for v in kv_lens), op, "actual_seq_lengths_kv",
                          lambda: f"lengths <= KV_S ({capacity})", kv_lens, ValueError)
            d_k, d_v = k_dense.shape[3], v_dense.shape[3]
        else:
            d_k = key.shape[2]
            d_v = value.shape[2]
    if key.dtype == torch.int32:                     # int4 x 8 per word: D is 8x the stored width
        d_k, d_v = d_k * 8, d_v * 8
    rope = p["query_rope"] is not None
    checks.expect(rope == (p["key_rope"] is not None), op, "key_rope",
                  "to be given together with query_rope", "only one of them", ValueError)
    if not rope:
        checks.expect(d_k == d_q, op, "key", lambda: f"the D of query ({d_q})", d_k, RuntimeError)
    else:
        qr = p["query_rope"]
        checks.expect(qr.dim() == query.dim() and qr.shape[:-1] == query.shape[:-1]
                      and qr.dtype == query.dtype, op, "query_rope",
                      lambda: f"the shape of query but the last dim, and its dtype {query.dtype}",
                      lambda: f"{tuple(qr.shape)} {qr.dtype}", RuntimeError)

    # -- output plan -----------------------------------------------------------------------
    quant_out = p["quant_scale2"] is not None
    # int8 inputs without output quantization give float16 (page: "输入为int8, 输出为float16").
    out_dtype = torch.int8 if quant_out else (torch.float16 if full_int8 else query.dtype)
    checks.expect(p["quant_offset2"] is None or quant_out, op, "quant_offset2",
                  "None unless quant_scale2 is given", "a tensor", ValueError)
    if quant_out:
        qs = p["quant_scale2"]
        checks.expect_dtype(qs, (torch.float32, torch.bfloat16), op, "quant_scale2")
        checks.expect(qs.numel() in (1, num_heads * d_v), op, "quant_scale2",
                      lambda: f"1 value (per-tensor) or N*D = {num_heads * d_v} (per-channel)",
                      lambda: tuple(qs.shape), RuntimeError)
    plan = OutputPlan(q_layout, out_layout, tuple(query.shape), num_heads, d_v, out_dtype,
                      bool(p["softmax_lse_flag"]), q_cum=q_cum, q_capacity=sq,
                      quant_scale2=p["quant_scale2"], quant_offset2=p["quant_offset2"])
    left_pad = p["query_padding_size"] is not None or p["kv_padding_size"] is not None
    if left_pad:
        checks.expect(not paged and not packed, op, "query_padding_size",
                      "None with a block table or a packed layout (left padding is BSH/BSND/BNSD "
                      "only)", "a tensor", ValueError)
    prefix = p["key_shared_prefix"] is not None
    checks.expect(prefix == (p["value_shared_prefix"] is not None), op, "value_shared_prefix",
                  "to be given together with key_shared_prefix", "only one of them", ValueError)
    if prefix:
        checks.expect(not paged and not left_pad, op, "key_shared_prefix",
                      "None with page attention or left padding", "a tensor", ValueError)
    mask_skv = capacity + (_prefix_capacity(op, p, q_layout, kv_heads) if prefix else 0)
    tree = _tree_options(op, p, packed=packed, decode=decode, rope=rope, left_pad=left_pad,
                         prefix=prefix, quant_out=quant_out)
    band = inputs.mask_and_band(op, p["atten_mask"], p["sparse_mode"], p["pre_tokens"],
                                p["next_tokens"], batch=batch, sq=sq, skv=mask_skv,
                                q_lens=q_lens, kv_lens=kv_lens, decode=decode,
                                allow_2d=(not rope and d_k == d_v and not packed),
                                left_padding=left_pad, tree=tree) if not build else None
    if p["pse_shift"] is not None:
        pse = p["pse_shift"]
        checks.expect(pse.dim() == 4 and pse.shape[0] in (1, batch) and pse.shape[1] == num_heads
                      and pse.shape[2] >= sq and pse.shape[3] >= mask_skv, op, "pse_shift",
                      lambda: f"shape (B or 1, Q_N={num_heads}, >= Q_S={sq}, >= KV_S={mask_skv})",
                      lambda: tuple(pse.shape), RuntimeError)
    if not build:
        return None, plan

    # -- build -----------------------------------------------------------------------------
    k_scale, k_off, v_scale, v_off, legacy_mode = inputs.split_legacy_antiquant(
        p["antiquant_scale"], p["antiquant_offset"], p["antiquant_mode"])
    if p["key_antiquant_scale"] is not None:      # separate key/value parameters win
        k_scale, k_off = p["key_antiquant_scale"], p["key_antiquant_offset"]
        v_scale, v_off = p["value_antiquant_scale"], p["value_antiquant_offset"]
        k_mode, v_mode = p["key_antiquant_mode"], p["value_antiquant_mode"]
    else:
        k_mode = v_mode = legacy_mode
    if kv_quant:
        if paged and (k_mode not in (4, 5) or v_mode not in (4, 5)):
            k_dense = gather_paged(key_cache, bt, block_size)
            v_dense = gather_paged(value_cache, bt, block_size)
            paged = False
        if paged:
            key_cache = inputs.dequantize(op, "key", inputs.unpack_int4_kv(key_cache), k_scale,
                                          k_off, k_mode, paged=True, batch=batch, heads=kv_heads)
            value_cache = inputs.dequantize(op, "value", inputs.unpack_int4_kv(value_cache),
                                            v_scale, v_off, v_mode, paged=True, batch=batch,
                                            heads=kv_heads)
        else:
            k_dense = inputs.dequantize(op, "key", inputs.unpack_int4_kv(k_dense), k_scale, k_off,
                                        k_mode, paged=False, batch=batch, heads=kv_heads)
            v_dense = inputs.dequantize(op, "value", inputs.unpack_int4_kv(v_dense), v_scale,
                                        v_off, v_mode, paged=False, batch=batch, heads=kv_heads)
    if prefix:
        k_dense, v_dense, kv_lens = _prepend_prefix(op, p, q_layout, kv_heads, k_dense, v_dense,
                                                    kv_lens)
    q = layouts.unpack(query, q_layout, q_cum, sq) if packed else layouts.to_bnsd(query, q_layout,
                                                                                   num_heads)
    if rope:
        q_rope = p["query_rope"]
        q_rope = layouts.unpack(q_rope, q_layout, q_cum, sq) if packed else \
            layouts.to_bnsd(q_rope, q_layout, num_heads)
        q = torch.cat([q, q_rope.to(q.dtype)], dim=-1)
        if paged:
            kr = inputs.paged_cache(op, "key_rope", p["key_rope"], kv_heads)
            key_cache = torch.cat([key_cache.to(torch.float32), kr.to(torch.float32)], dim=-1)
        else:
            kr = _dense_kv(op, "key_rope", p["key_rope"], q_layout, kv_heads,
                           kv_cum if packed else None, capacity)
            k_dense = torch.cat([k_dense.to(torch.float32), kr.to(torch.float32)], dim=-1)
    if left_pad:
        q, k_dense, v_dense, plan.q_start, kv_start, kv_lens = _left_padding(
            op, p, q, k_dense, v_dense, q_lens, kv_lens)
    band = inputs.mask_and_band(op, p["atten_mask"], p["sparse_mode"], p["pre_tokens"],
                                p["next_tokens"], batch=batch, sq=sq, skv=mask_skv,
                                q_lens=q_lens, kv_lens=kv_lens, decode=decode,
                                allow_2d=(not rope and d_k == d_v and not packed),
                                left_padding=left_pad, tree=tree)
    pse = p["pse_shift"]
    if pse is not None:
        pse = pse[:, :, :sq, :mask_skv]
    if left_pad:
        band["mask"] = _shift_rows(band["mask"], plan.q_start, kv_start)
        pse = _shift_rows(pse, plan.q_start, kv_start)
    problem = AttentionProblem(
        query=q, q_lens=q_lens, kv_lens=kv_lens, scale=float(p["scale"]),
        key=k_dense if not paged else None, value=v_dense if not paged else None,
        key_cache=key_cache if paged else None, value_cache=value_cache if paged else None,
        block_table=bt if paged else None, block_size=block_size if paged else 0,
        pse=pse, return_lse=plan.lse_flag, out_dtype=out_dtype, sink=p.get("_sink"), **band)
    problem.masked_rows, problem.mask_fill = masked_rows_rule(decode, p["inner_precise"],
                                                              query.dtype)
    if full_int8:
        problem.full_quant = full_quant.scales(p)
    return problem, plan


def _tree_options(op, p, *, packed, decode, rope, left_pad, prefix, quant_out
                  ) -> Optional[dict]:
    """What ``mask_and_band`` needs for sparse_mode 9, which only FIA (not PFA / IFA) takes:
    None for those ops; for FIA the layout and whether the lengths are known, after checking
    the features the tree mask excludes (a decode call ignores sparse_mode altogether)."""
    if p.get("_branch") is not None:
        return None
    if p["sparse_mode"] == tree_mask.SPARSE_MODE_TREE and not decode:
        tree_mask.check_features(op, p, rope=rope, left_padding=left_pad, prefix=prefix,
                                 quant_out=quant_out)
    known = all(v is None or inputs.known(v) is not None
                for v in (p["actual_seq_lengths"], p["actual_seq_lengths_kv"]))
    return {"packed": packed, "lengths_known": known}


FP32_LOWEST = -3.4028234663852886e38
FP16_LOWEST = -65504.0
DECODE_MASK_FILL = -1e12


def masked_rows_rule(decode: bool, inner_precise: int, query_dtype: torch.dtype
                     ) -> tuple[str, float]:
    """``(masked_rows, mask_fill)`` of the problem: what a row that only atten_mask empties
    yields on the NPU (see ``problem.py``).

    The kernels overwrite the scores of masked keys with a finite value instead of dropping
    them (ops-transformer ``SelectWithBytesMask``), so such a row is a uniform softmax over its
    keys -- the mean of their values -- unless the row-invalid correction (inner_precise bit 1,
    2 / 3) zeroes it:

    - decode (``incre_flash_attention_split_Bbn2s2_Us2.h``, ``BOOL_ATTEN_MASK_SCALAR_VALUE``):
      -1e12, float32 softmax; the branch has no row-invalid correction (inner_precise 0 / 1);
    - prompt (``prompt_flash_attention_s1s2_bns1_x910_base.h``, ``ElewiseCompute``): the float32
      lowest, or the float16 lowest -65504 when a float16 query runs in high performance
      (bit 0 set; bfloat16 always computes in float32); with bit 1 set, ``AdjustSoftMaxRes``
      writes 0 to the probabilities of rows whose max is that lowest value, and 3e+99 (+inf in
      float32) to their lse.

    Rows that the lengths or the band leave empty are not affected (out 0, lse -3.40e38).
    """
    if decode:
        return "uniform", DECODE_MASK_FILL
    if inner_precise & 2:
        return "invalid", 0.0
    if query_dtype == torch.int8 or (inner_precise & 1 and query_dtype == torch.float16):
        return "uniform", FP16_LOWEST           # int8 inputs: softmax in half (full_quant.py)
    return "uniform", FP32_LOWEST


def _prefix_capacity(op, p, q_layout, kv_heads) -> int:
    kp = p["key_shared_prefix"]
    checks.expect(q_layout not in layouts.PACKED and kp.dim() in (3, 4) and kp.shape[0] == 1, op,
                  "key_shared_prefix", "batch 1 in the layout of key (BSH/BSND/BNSD)",
                  lambda: tuple(kp.shape), RuntimeError)
    return layouts.to_bnsd(kp, q_layout, kv_heads).shape[2]


def _prepend_prefix(op, p, q_layout, kv_heads, k, v, kv_lens):
    """Every batch's KV becomes ``prefix[:len] ++ kv[:kv_len]`` (shared system prefix)."""
    kp = layouts.to_bnsd(p["key_shared_prefix"], q_layout, kv_heads)
    vp = layouts.to_bnsd(p["value_shared_prefix"], q_layout, kv_heads)
    plen = p["actual_shared_prefix_len"]
    plen = kp.shape[2] if plen is None else int(plen[0])
    checks.expect(0 <= plen <= kp.shape[2], op, "actual_shared_prefix_len",
                  lambda: f"a length <= the prefix S ({kp.shape[2]})", plen, ValueError)
    b = k.shape[0]
    k = torch.cat([kp[:, :, :plen].expand(b, -1, -1, -1).to(k.dtype), k], dim=2)
    v = torch.cat([vp[:, :, :plen].expand(b, -1, -1, -1).to(v.dtype), v], dim=2)
    return k, v, [plen + n for n in kv_lens]


def _starts(pad: Optional[torch.Tensor], s: int, lens: list) -> Optional[list]:
    """First valid row per batch, ``S - pad - len`` (a negative padding counts as 0)."""
    if pad is None:
        return None
    value = max(int(pad.reshape(-1)[0]), 0)
    return [s - value - n for n in lens]


def _shift(x: torch.Tensor, starts: Optional[list], dim: int) -> torch.Tensor:
    """Move rows ``starts[b]:`` of each batch to the top of ``dim`` (zeros fill the bottom)."""
    if starts is None or x is None:
        return x
    out = torch.zeros_like(x)
    for b, st in enumerate(starts):
        src = x[b if x.shape[0] > 1 else 0].narrow(dim - 1, st, x.shape[dim] - st)
        out[b if x.shape[0] > 1 else 0].narrow(dim - 1, 0, x.shape[dim] - st).copy_(src)
    return out


def _left_padding(op, p, q, k, v, q_lens, kv_lens):
    """Left padding: batch b's valid rows are ``S - pad - len : S - pad``; shift them to row 0.

    A KV window starting before row 0 gives an all-zero output (the page's rule); a query window
    starting before row 0 is rejected (the page calls its result unspecified).
    """
    q_start = _starts(p["query_padding_size"], q.shape[2], q_lens) if p["actual_seq_lengths"] \
        is not None else None
    kv_start = _starts(p["kv_padding_size"], k.shape[2], kv_lens) if p["actual_seq_lengths_kv"] \
        is not None else None
    if q_start is not None:
        checks.expect(min(q_start) >= 0, op, "query_padding_size",
                      "Q_S - query_padding_size - actual_seq_lengths >= 0 for every batch",
                      q_start, ValueError)
    if kv_start is not None:
        kv_lens = [0 if st < 0 else n for st, n in zip(kv_start, kv_lens)]
        kv_start = [max(st, 0) for st in kv_start]
    return (_shift(q, q_start, 2), _shift(k, kv_start, 2), _shift(v, kv_start, 2), q_start,
            kv_start, kv_lens)


def _shift_rows(t, q_start, kv_start):
    """A mask / pse indexed like the padded data, re-indexed like the shifted data.

    The kernel reads both at padded positions: its mask and pse offsets add the query and KV
    left padding sizes to the row and column (ops-transformer
    ``prompt_flash_attention_s1s2_bns1_x910_base.h``, ``LoopSOuterOffsetInit`` and
    ``CalPseShiftOffset``)."""
    if t is None:
        return None
    b = max(len(q_start or []), len(kv_start or []))
    if q_start is not None or kv_start is not None:
        t = t.expand(b, *t.shape[1:]).clone()
    if q_start is not None:
        t = _shift(t, q_start, 2)
    if kv_start is not None:
        t = _shift(t, kv_start, 3)
    return t
