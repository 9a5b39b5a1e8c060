"""The pse of npu_fusion_attention: its accepted forms, read a tile of scores at a time.

Forms (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fusion_attention.md; shape rules
of hicann/ops-transformer attention/flash_attention_score/op_host/
flash_attention_score_tiling_general.cpp, offsets of common/include/kernel/pse.h)::

    dense layouts   [B, N, Sq, Skv]  [B, N, 1, Skv]  [1, N, Sq, Skv]
    alibi-compressed, Sq > 1024: [B|1, N, 1024, Skv] = ori_pse[:, :, -1024:, :]
        (Sq == Skv and a lower-triangle mask: sparse_mode 2 / 3, or 0 with
        next_tockens = 0 and pre_tockens >= Sq)
    TND             a flat tensor: N * sum_b Skv_b values (per batch [N, 1, Skv_b], batches
                    one after the other) or N * sum_b Sq_b Skv_b (per batch [N, Sq_b, Skv_b]);
                    or the alibi-compressed [B|1, N, 1024, max Skv] (Sq_b == Skv_b, lower
                    triangle)

An alibi pse is constant along its diagonals (it depends on ``i - j`` only), so the last 1024
rows hold every value the visible lower triangle needs.  The kernel reads row ``i`` of the
last 1024 rows directly and any earlier row from the stored element on the same diagonal
(which stored row it picks depends on its tiling); here an earlier row ``i`` reads the last
stored row: ``pse[i, j] = C[1023, j + Skv - 1 - i]`` (TND: every row, per sequence, with Skv the
max length).  For a pse that really is constant along diagonals this is the kernel's value;
entries above the diagonal are masked.  The grad of a compressed pse is the adjoint of that
read (the gradient summed onto the stored elements read).
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks
from .fa_problem import FAProblem

ALIBI_ROWS = 1024


def _lower_triangle(p: FAProblem, atten_mask, sparse_mode: int, pre: int, nxt: int) -> bool:
    if atten_mask is None:
        return False
    if sparse_mode == 2 or sparse_mode == 3:
        return True
    return sparse_mode == 0 and nxt == 0 and pre >= p.sq


def _tnd_sizes(p: FAProblem) -> tuple[int, int]:
    return (p.heads * sum(p.kv_lens),
            p.heads * sum(a * b for a, b in zip(p.q_lens, p.kv_lens)))


def classify(p: FAProblem, pse) -> Optional[str]:
    """"dense", "alibi", "tnd_1s", "tnd_ss" or None (not an accepted form); no checks."""
    shape = tuple(pse.shape)
    four = len(shape) == 4
    if four and shape[1] == p.heads and shape[2] == ALIBI_ROWS and shape[3] == p.skv and \
            shape[0] in (1, p.batch) and (p.packed or p.sq > ALIBI_ROWS):
        return "alibi"
    if p.packed:
        if not p.lengths_known:
            return "tnd_ss" if pse.dim() >= 1 else None
        flat = pse.dim() >= 1 and pse.numel() == shape[0]
        one_s, full = _tnd_sizes(p)
        if flat and shape[0] == one_s:
            return "tnd_1s"
        if flat and shape[0] == full:
            return "tnd_ss"
        return None
    ok = four and shape[1] == p.heads and shape[3] == p.skv and (
        (shape[0] == p.batch and shape[2] in (p.sq, 1)) or (shape[0] == 1 and shape[2] == p.sq))
    return "dense" if ok else None


def check_pse(op: str, p: FAProblem, pse, atten_mask, sparse_mode: int, pre: int,
              nxt: int) -> None:
    if pse is None:
        return
    kind = classify(p, pse)
    shape = tuple(pse.shape)
    if p.packed:
        one_s, full = _tnd_sizes(p) if p.lengths_known else (0, 0)
        checks.expect(kind is not None, op, "pse",
                      lambda: f"for layout TND a flat tensor of N*sum(Skv) = {one_s} or "
                              f"N*sum(Sq*Skv) = {full} values, or the alibi-compressed "
                              f"[B|1, {p.heads}, {ALIBI_ROWS}, {p.skv}] form",
                      lambda: f"shape {shape}", RuntimeError)
        if p.lengths_known:
            checks.expect(all(n > 0 for n in p.q_lens), op, "pse",
                          "None when a sequence of actual_seq_qlen has length 0",
                          "a tensor", ValueError)
    else:
        checks.expect(kind is not None, op, "pse",
                      lambda: f"a BNSS, BN1Skv or 1NSS tensor for B={p.batch}, N={p.heads}, "
                              f"Sq={p.sq}, Skv={p.skv} (or, for Sq > {ALIBI_ROWS}, the "
                              f"alibi-compressed [B|1, N, {ALIBI_ROWS}, Skv] form)",
                      lambda: f"shape {shape}", RuntimeError)
    if kind != "alibi":
        return
    if p.packed:
        if p.lengths_known:
            checks.expect(p.q_lens == p.kv_lens, op, "pse",
                          "the alibi-compressed form only when every sequence has Sq == Skv",
                          lambda: f"Sq {p.q_lens}, Skv {p.kv_lens}", ValueError)
    else:
        checks.expect(p.sq == p.skv, op, "pse",
                      "the alibi-compressed form only with Sq == Skv",
                      lambda: f"Sq={p.sq}, Skv={p.skv}", ValueError)
    checks.expect(_lower_triangle(p, atten_mask, sparse_mode, pre, nxt), op, "pse",
                  "the alibi-compressed form only with a lower-triangle mask (sparse_mode 2 "
                  "or 3, or 0 with next_tockens 0 and pre_tockens >= Sq)",
                  lambda: f"sparse_mode {sparse_mode}, atten_mask "
                          f"{'None' if atten_mask is None else 'given'}", ValueError)


class PseSource:
    """One call's pse as ``[B|1, N, rows|1, cols]`` tiles of the compute dtype, and its grad."""

    def __init__(self, p: FAProblem, pse: torch.Tensor, ct: torch.dtype):
        self.p, self.ct, self.orig = p, ct, pse
        self.kind = classify(p, pse)
        if self.kind in ("tnd_1s", "tnd_ss"):
            self.t = self._unpack(pse.to(ct))
        else:
            self.t = pse.to(ct)
        self.broadcast_rows = self.t.shape[2] == 1
        if self.kind == "alibi":
            # the last stored row, padded on the right so that every diagonal of a tile is
            # a window of it; above the main diagonal (masked by the lower-triangle mask the
            # form requires) the padding is -inf, so that the pse masks those scores itself
            last = self.t[:, :, ALIBI_ROWS - 1]
            pad = last.new_full((*last.shape[:2], p.skv), float("-inf"))
            self.diagonals = torch.cat([last, pad], dim=-1)

    # -- TND flat forms <-> zero-padded [B, N, max Sq | 1, max Skv] ----------------------

    def _segments(self):
        p, off = self.p, 0
        rows_of = (lambda b: 1) if self.kind == "tnd_1s" else (lambda b: p.q_lens[b])
        for b in range(p.batch):
            r, c = rows_of(b), p.kv_lens[b]
            yield b, off, r, c
            off += p.heads * r * c

    def _unpack(self, flat: torch.Tensor) -> torch.Tensor:
        p = self.p
        rows = 1 if self.kind == "tnd_1s" else p.sq
        out = flat.new_zeros(p.batch, p.heads, rows, p.skv)
        flat = flat.reshape(-1)
        for b, off, r, c in self._segments():
            out[b, :, :r, :c] = flat[off:off + p.heads * r * c].view(p.heads, r, c)
        return out

    def _pack(self, padded: torch.Tensor) -> torch.Tensor:
        pieces = [padded[b, :, :r, :c].reshape(-1) for b, _, r, c in self._segments()]
        return torch.cat(pieces).view(self.orig.shape)

    # -- reading ---------------------------------------------------------------------------

    def _diagonal_index(self, i0, i1, j0, j1) -> torch.Tensor:
        """Column of the last stored row on the diagonal of each ``(i, j)`` (clamped above
        the diagonal, which is masked)."""
        dev = self.t.device
        i = torch.arange(i0, i1, device=dev).view(-1, 1)
        j = torch.arange(j0, j1, device=dev).view(1, -1)
        skv = self.p.skv
        return (j - i + skv - 1).clamp_(0, skv - 1)

    def _diagonal_tile(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """``diagonals[j - i + Skv - 1]`` over the tile (a copy: see :meth:`tile_reversed`)."""
        return self.tile_reversed(i0, i1, j0, j1).flip(2)

    def _reversed_start(self, i0: int, i1: int, j0: int) -> int:
        """Diagonal index at the tile's last row and first column."""
        return j0 - (i1 - 1) + self.p.skv - 1

    def reads_diagonals(self, i0: int, i1: int) -> bool:
        """Whether every row of ``[i0, i1)`` reads the diagonals of the last stored row."""
        return self.kind == "alibi" and self._alibi_split(i0, i1) == i1

    def first_direct_row(self) -> Optional[int]:
        """The first row an alibi-compressed pse stores directly (non-TND), else None: a
        block of rows should not straddle it (only blocks of diagonal rows read in reverse)."""
        if self.kind != "alibi" or self.p.packed:
            return None
        return max(0, self.p.sq - ALIBI_ROWS)

    def tile_reversed(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """``tile(i0, i1, j0, j1).flip(2)`` for a block that :meth:`reads_diagonals`, as a
        view: counted from the last row up, ``j - i + Skv - 1`` grows by one along both axes,
        so the tile is a window of the diagonals with unit strides (no copy per tile).
        Entries above the main diagonal (``j > i``) are -inf."""
        d = self.diagonals
        start = self._reversed_start(i0, i1, j0)
        return d.as_strided((d.shape[0], d.shape[1], i1 - i0, j1 - j0),
                            (d.stride(0), d.stride(1), d.stride(2), d.stride(2)),
                            d.storage_offset() + start * d.stride(2))

    def _alibi_split(self, i0: int, i1: int) -> int:
        """First row read directly (non-TND: the last 1024 rows; TND: none)."""
        if self.p.packed:
            return i1
        return min(i1, max(i0, self.p.sq - ALIBI_ROWS))

    def tile(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        if self.kind != "alibi":
            t = self.t if self.broadcast_rows else self.t[:, :, i0:i1]
            return t[..., j0:j1]
        split = self._alibi_split(i0, i1)
        parts = []
        if split > i0:
            parts.append(self._diagonal_tile(i0, split, j0, j1))
        if i1 > split:
            base = self.p.sq - ALIBI_ROWS
            parts.append(self.t[:, :, split - base:i1 - base, j0:j1])
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def rows(self, i0: int, i1: int) -> torch.Tensor:
        return self.tile(i0, i1, 0, self.p.skv)

    # -- grad ------------------------------------------------------------------------------

    def grad_buffer(self) -> torch.Tensor:
        return torch.zeros(self.t.shape, dtype=self.ct, device=self.t.device)

    def accumulate(self, buf: torch.Tensor, g: torch.Tensor, i0: int, i1: int, j0: int,
                   j1: int) -> None:
        """Add the score-tile gradient ``g`` ``[B, N, rows, cols]`` onto what the tile read."""
        if buf.shape[0] == 1 and g.shape[0] != 1:
            g = g.sum(dim=0, keepdim=True)
        if self.kind != "alibi":
            if self.broadcast_rows:
                buf[..., j0:j1] += g.sum(dim=2, keepdim=True)
            else:
                buf[:, :, i0:i1, j0:j1] += g
            return
        split = self._alibi_split(i0, i1)
        if split > i0:
            idx = self._diagonal_index(i0, split, j0, j1).reshape(-1)
            self._add_diagonals(buf, idx, g[:, :, :split - i0])
        if i1 > split:
            base = self.p.sq - ALIBI_ROWS
            buf[:, :, split - base:i1 - base, j0:j1] += g[:, :, split - i0:]

    def accumulate_reversed(self, buf: torch.Tensor, g: torch.Tensor, i0: int, i1: int,
                            j0: int, j1: int) -> None:
        """:meth:`accumulate` of a gradient tile whose rows run from ``i1 - 1`` down to ``i0``
        (a block that :meth:`reads_diagonals`, read through :meth:`tile_reversed`)."""
        if buf.shape[0] == 1 and g.shape[0] != 1:
            g = g.sum(dim=0, keepdim=True)
        dev = buf.device
        start = self._reversed_start(i0, i1, j0)
        idx = (torch.arange(start, start + i1 - i0, device=dev).view(-1, 1)
               + torch.arange(j1 - j0, device=dev).view(1, -1))
        # above the main diagonal (masked: a zero gradient) the index runs past the row
        self._add_diagonals(buf, idx.clamp_(max=self.p.skv - 1).reshape(-1), g)

    @staticmethod
    def _add_diagonals(buf: torch.Tensor, idx: torch.Tensor, g: torch.Tensor) -> None:
        last = buf[:, :, ALIBI_ROWS - 1]
        last.index_add_(-1, idx, g.reshape(*g.shape[:2], -1))

    def finish(self, buf: torch.Tensor) -> torch.Tensor:
        """The grad in the pse's own shape."""
        if self.kind in ("tnd_1s", "tnd_ss"):
            return self._pack(buf)
        return buf
