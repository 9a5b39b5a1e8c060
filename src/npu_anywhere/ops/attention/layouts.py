"""Layouts of the inference-attention ops: parsing ``input_layout`` and moving tensors between the
documented layouts and the internal ``[B, N, S, D]`` form.

``input_layout`` names the query (and dense KV) layout, optionally followed by ``_<out layout>``
(``BNSD_BSND``: BNSD inputs, a BSND output; ``TND_NTD``, ``NTD_TND``).  Packed layouts (TND, NTD)
hold ``T`` tokens of ``B`` batches; batch ``b`` owns rows ``cum[b-1] : cum[b]`` of the cumulative
lengths (op-plugin ``op_plugin/python/meta/_meta_registrations.py``, ``get_query_t_n_d``).
``NSD`` is BNSD without the batch axis (B = 1): op-plugin's ``get_query_b_n_s_d`` and its
Ascend950 tests (``test_npu_fused_infer_attention_score_nsd_d_unequal``).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ... import checks

QUERY_LAYOUTS = ("BSH", "BSND", "BNSD", "TND", "NTD", "NSD")
PACKED = ("TND", "NTD")
COMBINED = {"BNSD_BSND": ("BNSD", "BSND"), "TND_NTD": ("TND", "NTD"), "NTD_TND": ("NTD", "TND"),
            "BSH_BNSD": ("BSH", "BNSD"), "BSND_BNSD": ("BSND", "BNSD"),
            "BNSD_NBSD": ("BNSD", "NBSD"), "BSND_NBSD": ("BSND", "NBSD"),
            "BSH_NBSD": ("BSH", "NBSD")}


def split_layout(op: str, layout: str, allowed: Sequence[str]) -> tuple[str, str]:
    """``(query layout, output layout)`` of an ``input_layout`` string the op documents."""
    checks.expect(layout in allowed, op, "input_layout", lambda: f"one of {list(allowed)}",
                  repr(layout), ValueError)
    if layout in COMBINED:
        return COMBINED[layout]
    return layout, layout


def query_dims(op: str, query: torch.Tensor, layout: str, num_heads: int) -> tuple[int, int, int]:
    """``(N, S or T, D)`` of a query tensor in ``layout`` (BSH splits H by ``num_heads``)."""
    dims = 3 if layout in ("BSH", "TND", "NTD", "NSD") else 4
    checks.expect(query.dim() == dims, op, "query",
                  lambda: f"a {dims}-D tensor for layout {layout}",
                  lambda: f"shape {tuple(query.shape)}", ValueError)
    if layout == "BSH":
        h = query.shape[2]
        checks.expect(h % num_heads == 0, op, "query",
                      lambda: f"a hidden size H divisible by num_heads ({num_heads})", h,
                      ValueError)
        return num_heads, query.shape[1], h // num_heads
    if layout == "BSND":
        return query.shape[2], query.shape[1], query.shape[3]
    if layout == "BNSD":
        return query.shape[1], query.shape[2], query.shape[3]
    if layout == "TND":
        return query.shape[1], query.shape[0], query.shape[2]
    return query.shape[0], query.shape[1], query.shape[2]            # NTD, NSD


def to_bnsd(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """A dense (unpacked) tensor in BSH / BSND / BNSD as ``[B, N, S, D]`` (a view)."""
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).transpose(1, 2)
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "NSD":
        return x.unsqueeze(0)
    return x


def unpack(x: torch.Tensor, layout: str, cum: Sequence[int], capacity: int) -> torch.Tensor:
    """A packed TND / NTD tensor as zero-padded ``[B, N, capacity, D]``."""
    if layout == "NTD":
        x = x.transpose(0, 1)
    t, n, d = x.shape
    out = x.new_zeros(len(cum), n, capacity, d)
    start = 0
    for b, end in enumerate(cum):
        out[b, :, :end - start] = x[start:end].transpose(0, 1)
        start = end
    return out


def pack(x: torch.Tensor, layout: str, cum: Sequence[int], total: int) -> torch.Tensor:
    """Inverse of :func:`unpack`: ``[B, N, S, D]`` -> ``[total, N, D]`` (TND) or ``[N, total, D]``
    (NTD); rows past the last cumulative length are 0."""
    _, n, _, d = x.shape
    out = x.new_zeros(total, n, d)
    start = 0
    for b, end in enumerate(cum):
        out[start:end] = x[b, :, :end - start].transpose(0, 1)
        start = end
    return out.transpose(0, 1) if layout == "NTD" else out


def from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``[B, N, S, D]`` -> an unpacked output layout (BSH, BSND, BNSD, NBSD), contiguous."""
    if layout == "BSH":
        b, n, s, d = x.shape
        return x.transpose(1, 2).reshape(b, s, n * d)
    if layout == "BSND":
        return x.transpose(1, 2).contiguous()
    if layout == "NBSD":
        return x.transpose(0, 1).contiguous()
    if layout == "NSD":
        return x[0].contiguous()
    return x.contiguous()


def output_shape(query_shape: Sequence[int], q_layout: str, out_layout: str, num_heads: int,
                 d_out: int) -> list[int]:
    """The attention_out shape (op-plugin meta ``infer_attention_out_shape``)."""
    if q_layout in PACKED:
        t = query_shape[0] if q_layout == "TND" else query_shape[1]
        n = query_shape[1] if q_layout == "TND" else query_shape[0]
        return [t, n, d_out] if out_layout == "TND" else [n, t, d_out]
    if q_layout == "NSD":
        return [query_shape[0], query_shape[1], d_out]
    b = query_shape[0]
    if q_layout == "BSH":
        s, n = query_shape[1], num_heads
    elif q_layout == "BSND":
        s, n = query_shape[1], query_shape[2]
    else:
        s, n = query_shape[2], query_shape[1]
    return {"BSH": [b, s, n * d_out], "BSND": [b, s, n, d_out], "BNSD": [b, n, s, d_out],
            "NBSD": [n, b, s, d_out]}[out_layout]


def lse_shape(query_shape: Sequence[int], q_layout: str, num_heads: int) -> list[int]:
    """softmax_lse shape: ``[B, N, S, 1]``, or ``[T, N, 1]`` for packed queries."""
    if q_layout in PACKED:
        t = query_shape[0] if q_layout == "TND" else query_shape[1]
        n = query_shape[1] if q_layout == "TND" else query_shape[0]
        return [t, n, 1]
    if q_layout == "NSD":
        return [1, query_shape[0], query_shape[1], 1]
    b = query_shape[0]
    if q_layout == "BSH":
        return [b, num_heads, query_shape[1], 1]
    if q_layout == "BSND":
        return [b, query_shape[2], query_shape[1], 1]
    return [b, query_shape[1], query_shape[2], 1]
