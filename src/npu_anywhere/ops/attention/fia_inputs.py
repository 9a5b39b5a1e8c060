"""From the arguments of ``npu_fused_infer_attention_score`` to an :class:`AttentionProblem`.

One function per concern, each following the seed-004 page of the op (parameter descriptions and
约束说明) and op-plugin's meta registration for shapes:

- :func:`lengths`: ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` (length 1 broadcasts, longer
  lists are cut to B, packed layouts give cumulative ends; with a block table the KV lengths of a
  TND call are per batch, as vllm-ascend passes them);
- :func:`mask_and_band`: ``atten_mask`` shapes and ``sparse_mode`` 0-4 with ``pre_tokens`` /
  ``next_tokens`` (and FIA's tree mask, sparse_mode 9: ``tree_mask.py``); a decode call
  (Q_S = 1, no rope) ignores sparse_mode and the tokens;
- :func:`dequantize_kv`: the KV antiquant modes (``k = (k_int8 + offset) * scale``);
- :func:`paged_cache`: the three cache layouts ``[nb, bs, H]``, ``[nb, N, bs, D]`` and NZ
  ``[nb, N, D/16, bs, 16]`` as ``[nb, bs, N, D]``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ... import checks
from ..quant.core import unpack_int4
from . import layouts, tree_mask
from .problem import UNBOUNDED, gather_paged

COMPRESSED = 2048          # side of the compressed causal mask of sparse modes 2/3/4
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)


def known(values: Optional[Sequence]) -> Optional[list[int]]:
    """``values`` as python ints, or None when one of them is not known yet.

    Lengths given as a tensor reach the op, under ``torch.compile``, as unbacked SymInts (the
    tensor's ``tolist()``): their values exist only when the compiled graph runs, where the
    eager kernel checks them.  Checking a traced call (the fake kernel) therefore skips the
    value checks and uses the most permissive stand-in lengths; shapes never depend on them.
    """
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, torch.SymInt) and not v.node.has_hint():
            return None
        out.append(int(v))
    return out


def per_batch(op: str, name: str, values: Optional[Sequence[int]], batch: int,
              default: int) -> list[int]:
    """Lengths given for every batch: None -> ``default``, one value broadcasts, >= B cut to B.

    Lengths not known yet (see :func:`known`) are checked for their count only and stand in as
    ``default``."""
    if values is None:
        return [default] * batch
    checks.expect(len(values) == 1 or len(values) >= batch, op, name,
                  lambda: f"1 or at least B ({batch}) values", len(values), ValueError)
    concrete = known(values)
    if concrete is None:
        return [default] * batch
    values = concrete * batch if len(concrete) == 1 else concrete[:batch]
    checks.expect(all(v >= 0 for v in values), op, name, "non-negative lengths", values, ValueError)
    return values


def cumulative(op: str, name: str, values: Optional[Sequence[int]], total: int) -> list[int]:
    """Cumulative ends of a packed layout: required, non-decreasing, the last <= T.

    Ends not known yet (see :func:`known`) stand in as all zeros (every batch empty), which
    no length-dependent shape check can reject."""
    checks.expect(values is not None and len(values) > 0, op, name,
                  "cumulative lengths (required for TND / NTD)", values, ValueError)
    ends = known(values)
    if ends is None:
        return [0] * len(values)
    ok = all(a <= b for a, b in zip([0] + ends[:-1], ends))
    checks.expect(ok, op, name, "non-negative, non-decreasing cumulative lengths", ends, ValueError)
    checks.expect(ends[-1] <= total, op, name, lambda: f"a last value <= T ({total})", ends[-1],
                  ValueError)
    return ends


def diffs(ends: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip([0, *ends[:-1]], ends)]


def paged_cache(op: str, name: str, cache: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """A paged cache as ``[num_blocks, block_size, N, D]`` (a view for 3-D / 4-D caches)."""
    checks.expect(cache.dim() in (3, 4, 5), op, name,
                  "a paged cache [num_blocks, block_size, H], [num_blocks, N, block_size, D] or "
                  "NZ [num_blocks, N, D/16, block_size, 16]", lambda: f"shape {tuple(cache.shape)}",
                  ValueError)
    if cache.dim() == 3:
        nb, bs, h = cache.shape
        checks.expect(h % kv_heads == 0, op, name,
                      lambda: f"H divisible by num_key_value_heads ({kv_heads})", h, ValueError)
        return cache.reshape(nb, bs, kv_heads, h // kv_heads)
    checks.expect(cache.shape[1] == kv_heads, op, name,
                  lambda: f"dim 1 equal to num_key_value_heads ({kv_heads})",
                  lambda: f"shape {tuple(cache.shape)}", RuntimeError)
    if cache.dim() == 4:
        return cache.transpose(1, 2)
    # NZ: element (blk, n, row, d) lives at [blk, n, d // c0, row, d % c0] (c0 = 16, or 32 for int8)
    nb, n, d16, bs, c0 = cache.shape
    return cache.permute(0, 3, 1, 2, 4).reshape(nb, bs, n, d16 * c0)


def unpack_int4_kv(x: torch.Tensor) -> torch.Tensor:
    """int4 values packed eight to an int32 (low nibble first) -> int8 with a last dim 8x longer."""
    return unpack_int4(x) if x.dtype == torch.int32 else x


# -- masks ------------------------------------------------------------------------------------

def _mask_4d(op: str, mask: torch.Tensor, batch: int, sq: int, skv: int, decode: bool,
             allow_2d: bool) -> torch.Tensor:
    """A user mask of any documented shape as bool ``[B or 1, 1, Sq, Skv]`` (larger, aligned S
    axes are cut)."""
    checks.expect_dtype(mask, MASK_DTYPES, op, "atten_mask")
    shape = tuple(mask.shape)
    if mask.dim() == 2:
        checks.expect(allow_2d, op, "atten_mask",
                      "a 3-D or 4-D shape when rope inputs or unequal D are used", shape,
                      ValueError)
        m = mask.reshape(shape[0], 1, 1, shape[1]) if decode else mask.reshape(1, 1, *shape)
    elif mask.dim() == 3:
        m = mask.unsqueeze(1)
    else:
        checks.expect(mask.dim() == 4 and shape[1] == 1, op, "atten_mask",
                      "a shape (Q_S, KV_S), (B, KV_S), (1, Q_S, KV_S), (B, 1, Q_S, KV_S) or "
                      "(1, 1, Q_S, KV_S)", shape, ValueError)
        m = mask
    ok = m.shape[0] in (1, batch) and m.shape[2] >= sq and m.shape[3] >= skv
    checks.expect(ok, op, "atten_mask",
                  lambda: f"batch 1 or {batch}, at least Q_S={sq} rows and KV_S={skv} columns",
                  shape, RuntimeError)
    return m[:, :, :sq, :skv].to(torch.bool)


def _check_compressed(op: str, mask: Optional[torch.Tensor], mode: int) -> None:
    shape = None if mask is None else tuple(mask.shape)
    ok = shape in ((COMPRESSED, COMPRESSED), (1, COMPRESSED, COMPRESSED),
                   (1, 1, COMPRESSED, COMPRESSED))
    checks.expect(ok, op, "atten_mask",
                  lambda: f"the compressed (2048, 2048) causal mask for sparse_mode {mode}", shape,
                  ValueError)
    checks.expect_dtype(mask, MASK_DTYPES, op, "atten_mask")


def mask_and_band(op: str, atten_mask: Optional[torch.Tensor], sparse_mode: int, pre_tokens: int,
                  next_tokens: int, *, batch: int, sq: int, skv: int, q_lens: list, kv_lens: list,
                  decode: bool, allow_2d: bool, left_padding: bool = False,
                  tree: Optional[dict] = None) -> dict:
    """``mask`` / band fields of the problem.

    sparse_mode (seed 004):
      0  defaultMask: no mask -> nothing masked, tokens ignored; a mask -> mask plus the band
         ``-pre_tokens <= j - i <= next_tokens`` (top-left; ignored with left padding);
      1  allMask: the full mask, tokens ignored;
      2  leftUpCausal: ``j <= i``;  3  rightDownCausal: ``j <= i + kv_len - q_len``;
      4  band from the bottom-right corner: ``-pre <= j - (i + kv_len - q_len) <= next``.
      9  treeMask (FIA with rope only; ``tree`` carries ``packed`` and ``lengths_known``):
         the bottom-right causal band refined by the ``[Q_S, Q_S]`` tree mask on the last keys
         (``tree_mask.py``).
    Modes 2-4 take the compressed 2048x2048 mask, whose values are not read (the rule is exact).
    A decode call ignores sparse_mode and the tokens: only the mask and the lengths count (a
    compressed template passed with modes 2-4 is ignored too).
    """
    fields = {"mask": None, "pre_tokens": UNBOUNDED, "next_tokens": UNBOUNDED,
              "diag_offset": [0] * batch}
    if decode:
        # The compressed causal template of modes 2-4 carries nothing for one query row (the
        # branch ignores sparse_mode); any other mask is a per-batch (B, KV_S)-style mask.
        compressed = atten_mask is not None and sparse_mode in (2, 3, 4) and \
            tuple(atten_mask.shape[-2:]) == (COMPRESSED, COMPRESSED)
        if atten_mask is not None and not compressed:
            fields["mask"] = _mask_4d(op, atten_mask, batch, sq, skv, True, allow_2d)
        return fields
    if sparse_mode == tree_mask.SPARSE_MODE_TREE and tree is not None:
        return tree_mask.band_and_mask(op, atten_mask, batch=batch, sq=sq, skv=skv,
                                       q_lens=q_lens, kv_lens=kv_lens, **tree)
    allowed = (0, 1, 2, 3, 4) if tree is None else (0, 1, 2, 3, 4, 9)
    checks.expect(sparse_mode in allowed, op, "sparse_mode",
                  lambda: f"one of {list(allowed)} (5-8 are not implemented on the NPU either)",
                  sparse_mode, ValueError)
    if sparse_mode in (0, 1):
        if sparse_mode == 1:
            checks.expect(atten_mask is not None, op, "atten_mask",
                          "a full mask for sparse_mode 1", None, ValueError)
        if atten_mask is not None:
            fields["mask"] = _mask_4d(op, atten_mask, batch, sq, skv, False, allow_2d)
            if sparse_mode == 0 and not left_padding:
                fields["pre_tokens"], fields["next_tokens"] = pre_tokens, next_tokens
        return fields
    _check_compressed(op, atten_mask, sparse_mode)
    if sparse_mode == 2:
        fields["next_tokens"] = 0
    elif sparse_mode == 3:
        fields["next_tokens"] = 0
        fields["diag_offset"] = [k - q for q, k in zip(q_lens, kv_lens)]
    else:
        fields["pre_tokens"], fields["next_tokens"] = pre_tokens, next_tokens
        fields["diag_offset"] = [k - q for q, k in zip(q_lens, kv_lens)]
    return fields


# -- KV antiquant -----------------------------------------------------------------------------

def _scale_bnsd(op: str, name: str, t: torch.Tensor, mode: int, *, batch: int, heads: int,
                skv: int, d: int) -> torch.Tensor:
    """An antiquant scale / offset of ``mode`` (key_antiquant_mode numbering) broadcastable to
    dense ``[B, N, Skv, D]``."""
    t = t.to(torch.float32)
    shape = tuple(t.shape)
    if mode == 0:                                      # per-channel (or per-tensor when 1 value)
        if t.numel() == 1:
            return t.reshape(1, 1, 1, 1)
        checks.expect(t.numel() == heads * d, op, name,
                      lambda: f"N*D = {heads * d} values (per-channel) or 1 (per-tensor)", shape,
                      RuntimeError)
        return t.reshape(1, heads, 1, d)
    if mode == 1:                                      # per-token: (1, B, S) or (B, S)
        checks.expect(t.numel() % batch == 0 and t.shape[-1] >= skv, op, name,
                      lambda: f"per-token shape (1, B, KV_S) or (B, KV_S) with B={batch}", shape,
                      RuntimeError)
        return t.reshape(batch, 1, -1, 1)[:, :, :skv]
    if mode == 2:                                      # per-tensor + per-head: (N,)
        checks.expect(t.numel() == heads, op, name, lambda: f"shape (KV_N,) = ({heads},)", shape,
                      RuntimeError)
        return t.reshape(1, heads, 1, 1)
    if mode == 3:                                      # per-token + per-head: (B, N, S)
        checks.expect(t.dim() == 3 and t.shape[:2] == (batch, heads) and t.shape[2] >= skv, op,
                      name, lambda: f"shape (B, KV_N, KV_S) = ({batch}, {heads}, >= {skv})", shape,
                      RuntimeError)
        return t[:, :, :skv].unsqueeze(-1)
    raise AssertionError(mode)


def _scale_cache(op: str, name: str, t: torch.Tensor, mode: int,
                 cache: torch.Tensor) -> torch.Tensor:
    """Modes 4 / 5 (scales managed like the paged cache): broadcastable to ``[nb, bs, N, D]``."""
    nb, bs, n, _ = cache.shape
    t = t.to(torch.float32)
    if mode == 4:
        checks.expect(tuple(t.shape) == (nb, bs), op, name,
                      lambda: f"shape (blocknum, blocksize) = ({nb}, {bs})", tuple(t.shape),
                      RuntimeError)
        return t.reshape(nb, bs, 1, 1)
    checks.expect(tuple(t.shape) == (nb, n, bs), op, name,
                  lambda: f"shape (blocknum, KV_N, blocksize) = ({nb}, {n}, {bs})", tuple(t.shape),
                  RuntimeError)
    return t.transpose(1, 2).unsqueeze(-1)


def dequantize(op: str, which: str, x: torch.Tensor, scale: Optional[torch.Tensor],
               offset: Optional[torch.Tensor], mode: int, *, paged: bool, batch: int,
               heads: int) -> torch.Tensor:
    """``(x + offset) * scale`` in float32; ``x`` is dense ``[B, N, S, D]`` or, for modes 4/5, a
    paged cache ``[nb, bs, N, D]``."""
    name = f"{which}_antiquant_scale"
    checks.expect(scale is not None, op, name, lambda: f"a scale for an int8/int4 {which}", None,
                  ValueError)
    checks.expect_one_of(mode, (0, 1, 2, 3, 4, 5), op, f"{which}_antiquant_mode")
    xf = x.to(torch.float32)
    if mode in (4, 5):
        checks.expect(paged, op, f"{which}_antiquant_mode",
                      "modes 4/5 only with a block table", mode, ValueError)
        s = _scale_cache(op, name, scale, mode, xf)
        o = None if offset is None else \
            _scale_cache(op, f"{which}_antiquant_offset", offset, mode, xf)
    else:
        b, n, skv, d = xf.shape
        s = _scale_bnsd(op, name, scale, mode, batch=b, heads=n, skv=skv, d=d)
        o = None if offset is None else _scale_bnsd(op, f"{which}_antiquant_offset", offset, mode,
                                                   batch=b, heads=n, skv=skv, d=d)
    return (xf if o is None else xf + o) * s


def split_legacy_antiquant(scale: Optional[torch.Tensor], offset: Optional[torch.Tensor],
                           antiquant_mode: int) -> tuple:
    """The combined ``antiquant_scale`` / ``antiquant_offset`` (index 0 key, 1 value) as separate
    key / value parameters: ``(k_scale, k_offset, v_scale, v_offset, mode)``; shapes (2, ...),
    antiquant_mode 0 per-channel / per-tensor, 1 per-token (2, B, KV_S)."""
    if scale is None:
        return None, None, None, None, 0
    ks, vs = scale[0], scale[1]
    ko, vo = (None, None) if offset is None else (offset[0], offset[1])
    return ks, ko, vs, vo, 1 if antiquant_mode == 1 else 0


def gathered(cache: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    return gather_paged(cache, block_table, block_size)
