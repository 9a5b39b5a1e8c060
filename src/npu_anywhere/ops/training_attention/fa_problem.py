"""Inputs of npu_fusion_attention and its grad: layouts, lengths and the documented constraints.

Everything is computed in an internal ``[B, N, S, D]`` form.  Packed TND inputs are unpacked to
zero-padded ``[B, N, max S, D]`` tensors; the padding columns are masked and the padding rows
dropped again on the way out.  ``actual_seq_qlen`` / ``actual_seq_kvlen`` are cumulative ends
without a leading 0 (``[2, 4, 6]`` for three sequences of 2); trailing zeros mark batches that
take no part (seed 004: ``[2, 5, 9, 0, 0]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ... import checks, targets
from ...targets import Product
from ..attention import layouts as fia_layouts

LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
MAX_D = 768
MAX_HEADS = 256
# Seed 004 lists the Atlas A2 training series; the same aclnnFlashAttentionScore kernel runs on
# the A3 parts MindSpeed trains on.
SUPPORTED = frozenset({Product.A2, Product.A3})


@dataclass
class FAProblem:
    """Sizes of one call in the internal ``[B, N, S, D]`` form."""
    layout: str
    batch: int
    heads: int             # Nq
    kv_heads: int          # Nkv
    sq: int                # (max) query length
    skv: int               # (max) key/value length
    d: int
    dv: int
    q_lens: Optional[list]     # TND: per-batch lengths
    kv_lens: Optional[list]
    q_cum: Optional[list]      # TND: cumulative ends (trailing zeros made repeats)
    kv_cum: Optional[list]
    lengths_known: bool = True     # False: TND lengths are tensors seen only as metadata

    @property
    def packed(self) -> bool:
        return self.layout == "TND"


def _dims(op: str, name: str, x: torch.Tensor, layout: str) -> None:
    want = 4 if layout in ("BSND", "BNSD") else 3
    checks.expect(x.dim() == want, op, name, lambda: f"a {want}-D tensor for layout {layout}",
                  lambda: f"shape {tuple(x.shape)}", ValueError)


def _cumulative(op: str, name: str, values, total: int) -> tuple[list, list]:
    checks.expect(values is not None and len(values) >= 1, op, name,
                  "a list of cumulative lengths for layout TND", repr(values), ValueError)
    ends = [int(v) for v in values]
    lens, prev, done = [], 0, False
    for e in ends:
        if e == 0 and prev > 0:
            done = True            # trailing batches that take no part
        if done:
            checks.expect(e == 0, op, name, "only zeros after the first trailing 0", ends,
                          ValueError)
            lens.append(0)
            continue
        checks.expect(e >= prev, op, name, "non-decreasing cumulative lengths", ends,
                      ValueError)
        lens.append(e - prev)
        prev = e
    checks.expect(prev == total, op, name, lambda: f"to end at the token count T ({total})",
                  ends, ValueError)
    # Trailing zeros become repeats of the last end, so every batch owns an (empty) row range.
    running, acc = [], 0
    for n in lens:
        acc += n
        running.append(acc)
    return running, lens


def _seq_list(values) -> Optional[list]:
    """Lengths as ints (v3 passes int64 tensors)."""
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        return [int(v) for v in values.tolist()]
    return [int(v) for v in values]


def parse(op: str, query, key, value, head_num: int, input_layout: str, actual_seq_qlen,
          actual_seq_kvlen) -> FAProblem:
    checks.expect(input_layout in LAYOUTS, op, "input_layout", lambda: f"one of {list(LAYOUTS)}",
                  repr(input_layout), ValueError)
    layout = input_layout
    for name, x in (("query", query), ("key", key), ("value", value)):
        _dims(op, name, x, layout)
    checks.expect(head_num >= 1, op, "head_num", "a positive integer", head_num, ValueError)
    q_lens = kv_lens = q_cum = kv_cum = None
    if layout in ("BSH", "SBH"):
        h = query.shape[2]
        checks.expect(h % head_num == 0, op, "query",
                      lambda: f"a hidden size divisible by head_num ({head_num})", h, ValueError)
        d = h // head_num
        checks.expect(d > 0 and key.shape[2] % d == 0, op, "key",
                      lambda: f"a hidden size that is a multiple of D ({d})", key.shape[2],
                      ValueError)
        kv_heads = key.shape[2] // d
        checks.expect(kv_heads > 0 and value.shape[2] % kv_heads == 0, op, "value",
                      lambda: f"a hidden size that is a multiple of Nkv ({kv_heads})",
                      value.shape[2], ValueError)
        dv = value.shape[2] // kv_heads
        bdim, sdim = (0, 1) if layout == "BSH" else (1, 0)
        batch, sq, skv = query.shape[bdim], query.shape[sdim], key.shape[sdim]
        kv_other = (key.shape[bdim], key.shape[sdim])
        v_other = (value.shape[bdim], value.shape[sdim])
        heads = head_num
    elif layout == "TND":
        t, heads, d = query.shape
        kv_heads, dv = key.shape[1], value.shape[2]
        q_cum, q_lens = _cumulative(op, "actual_seq_qlen", _seq_list(actual_seq_qlen), t)
        kv_cum, kv_lens = _cumulative(op, "actual_seq_kvlen", _seq_list(actual_seq_kvlen),
                                      key.shape[0])
        checks.expect(len(q_cum) == len(kv_cum), op, "actual_seq_kvlen",
                      lambda: f"as many entries as actual_seq_qlen ({len(q_cum)})", len(kv_cum),
                      ValueError)
        batch, sq, skv = len(q_cum), max(q_lens), max(kv_lens)
        kv_other = (key.shape[0], key.shape[1])
        v_other = (value.shape[0], value.shape[1])
    else:
        n_dim, s_dim = (1, 2) if layout == "BNSD" else (2, 1)
        batch, heads, sq, d = query.shape[0], query.shape[n_dim], query.shape[s_dim], query.shape[3]
        kv_heads, skv, dv = key.shape[n_dim], key.shape[s_dim], value.shape[3]
        kv_other = (key.shape[0], key.shape[n_dim], key.shape[s_dim])
        v_other = (value.shape[0], value.shape[n_dim], value.shape[s_dim])
        checks.expect(key.shape[0] == batch, op, "key",
                      lambda: f"the batch size of query ({batch})", key.shape[0], RuntimeError)
    if layout not in ("BSH", "SBH"):
        checks.expect(heads == head_num, op, "head_num",
                      lambda: f"the query's head count ({heads})", head_num, ValueError)
        checks.expect(key.shape[-1] == d, op, "key", lambda: f"the query's head dim D ({d})",
                      key.shape[-1], RuntimeError)
    else:
        checks.expect(key.shape[bdim] == batch, op, "key",
                      lambda: f"the batch size of query ({batch})", key.shape[bdim],
                      RuntimeError)
    checks.expect(v_other == kv_other, op, "value",
                  lambda: f"the shape of key but for D (key {tuple(key.shape)})",
                  lambda: f"shape {tuple(value.shape)}", RuntimeError)
    checks.expect(kv_heads >= 1 and heads % kv_heads == 0, op, "key",
                  lambda: f"a head count Nkv dividing Nq ({heads})", kv_heads, ValueError)
    checks.expect(heads <= MAX_HEADS, op, "head_num", f"at most {MAX_HEADS}", heads, ValueError)
    checks.expect(1 <= d <= MAX_D, op, "query", f"a head dim D in [1, {MAX_D}]", d, ValueError)
    checks.expect(dv <= d, op, "value", lambda: f"a head dim Dv <= Dk ({d})", dv, ValueError)
    return FAProblem(layout, batch, heads, kv_heads, sq, skv, d, dv, q_lens, kv_lens, q_cum,
                     kv_cum)


def check_dtypes(op: str, tensors: dict) -> None:
    product = targets.expect_supported(op, SUPPORTED)
    allowed = FLOATS if product is not None else FLOATS + (torch.float64,)
    checks.expect_dtype(tensors["query"], allowed, op, "query")
    present = {k: t for k, t in tensors.items() if t is not None}
    checks.expect_same_dtype(present, op)
    checks.expect_same_device(present, op)


# -- layout conversion ------------------------------------------------------------------------

def to_bnsd(x: torch.Tensor, p: FAProblem, heads: int, capacity: int, cum) -> torch.Tensor:
    """``x`` in the call's layout as ``[B, heads, S, D]`` (TND: zero-padded to ``capacity``)."""
    if p.layout == "TND":
        return fia_layouts.unpack(x, "TND", cum, capacity)
    if p.layout == "SBH":
        x = x.transpose(0, 1)
        return fia_layouts.to_bnsd(x, "BSH", heads)
    return fia_layouts.to_bnsd(x, p.layout, heads)


def _fresh(x: torch.Tensor) -> torch.Tensor:
    """A new tensor with the canonical contiguous strides (``contiguous()`` may keep a view
    whose size-1 axes have other strides; the fake kernel promises canonical ones)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return out.copy_(x)


def from_bnsd(x: torch.Tensor, p: FAProblem, cum, total: int) -> torch.Tensor:
    """Inverse of :func:`to_bnsd` (a new contiguous tensor in the call's layout)."""
    if p.layout == "TND":
        return fia_layouts.pack(x, "TND", cum, total)
    if p.layout == "BNSD":
        return _fresh(x)
    bsnd = x.transpose(1, 2)
    if p.layout == "BSND":
        return _fresh(bsnd)
    b, s, n, d = bsnd.shape
    bsh = bsnd.reshape(b, s, n * d)
    return _fresh(bsh.transpose(0, 1) if p.layout == "SBH" else bsh)


def stats_to_layout(stat: torch.Tensor, p: FAProblem, softmax_layout: str) -> torch.Tensor:
    """Row statistics ``[B, N, Sq]`` as the documented ``[B, N, Sq, 8]`` (TND: ``[T, N, 8]``).

    TND rows: with softmax_layout "TND" token-major (row ``t``, head ``n``); by default (NTD)
    head-major within each sequence -- the ``len_b * N`` rows of batch ``b`` hold head 0's
    tokens, then head 1's... (the order npu_ring_attention_update reads for "" / "SBH").
    """
    if p.packed:
        pieces, start = [], 0
        for b, n_tok in enumerate(p.q_lens):
            seg = stat[b, :, :n_tok]                                    # [N, len]
            if softmax_layout == "TND":
                pieces.append(seg.transpose(0, 1))
            else:
                pieces.append(seg.reshape(n_tok, p.heads))
        rows = torch.cat(pieces, dim=0) if pieces else stat.new_empty(0, p.heads)
        return rows.unsqueeze(-1).expand(*rows.shape, 8).contiguous()
    return stat.unsqueeze(-1).expand(*stat.shape, 8).contiguous()


def stats_from_layout(stat: torch.Tensor, p: FAProblem, softmax_layout: str) -> torch.Tensor:
    """Inverse of :func:`stats_to_layout`: the first of the 8 copies as ``[B, N, Sq]``."""
    first = stat[..., 0]
    if not p.packed:
        return first
    out = first.new_zeros(p.batch, p.heads, p.sq)
    start = 0
    for b, n_tok in enumerate(p.q_lens):
        seg = first[start:start + n_tok]                                # [len, N]
        out[b, :, :n_tok] = seg.transpose(0, 1) if softmax_layout == "TND" else \
            seg.reshape(p.heads, n_tok)
        start += n_tok
    return out


def stats_shape(p: FAProblem, total_q: int) -> list:
    return [total_q, p.heads, 8] if p.packed else [p.batch, p.heads, p.sq, 8]


def expect_stats(op: str, name: str, stat, p: FAProblem, total_q: int) -> None:
    want = stats_shape(p, total_q)
    checks.expect(stat is not None, op, name, "a tensor (the forward's softmax statistics)",
                  "None", ValueError)
    checks.expect(list(stat.shape) == want, op, name, lambda: f"shape {want}",
                  lambda: f"shape {tuple(stat.shape)}", RuntimeError)


def seq_total(lens: Optional[Sequence[int]]) -> int:
    return sum(lens) if lens is not None else 0
