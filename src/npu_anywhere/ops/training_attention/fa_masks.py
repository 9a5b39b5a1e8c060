"""What npu_fusion_attention hides and drops: the sparse modes and the dropout keep-mask.

Masks are built a block of query rows at a time (``rows(i0, i1)``) so that no ``[Sq, Skv]``
matrix is ever needed whole.  Positions follow seed 004's table (i: query row, j: key column,
per batch; ``Sq``/``Skv`` are that batch's lengths):

* atten_mask None: nothing is masked, whatever sparse_mode / pre_tockens / next_tockens say.
* 0 defaultMask: the given mask, and outside the band ``-pre <= j - i <= next`` (origin top-left).
* 1 allMask, 5 prefix uncompressed: the given full mask only.
* 2 leftUpCausal: ``j > i``.   3 rightDownCausal: ``j > i + Skv - Sq``.
* 4 band (origin bottom-right): outside ``-pre <= j - i - (Skv - Sq) <= next``.
* 6 prefix compressed: rightDownCausal, with the first ``prefix[b]`` columns always visible.
* 7 (varlen): rightDownCausal, the last batch a mode-4 band; 8 (varlen): leftUpCausal, the
  first batch a mode-4 band.
The compressed masks of modes 2/3/4/6/7/8 (2048x2048, 3072x2048) are checked for shape and
otherwise not read: their content is implied by the mode.  TND calls also mask the padding.

The dropout keep-mask is indexed by element (``mask_elements``: ``[B, N, Sq, Skv]`` order, TND
per sequence): a caller's bit-packed ``dropout_mask`` is read at those indices, and the op's own
mask draws them from a per-chunk generator stream (``uniform_stream``) that
``_npu_dropout_gen_mask`` packs with the same (seed, offset).
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks
from .fa_problem import FAProblem

COMPRESSED = {2: (2048, 2048), 3: (2048, 2048), 4: (2048, 2048), 6: (3072, 2048),
              7: (2048, 2048), 8: (2048, 2048)}
STREAM_CHUNK = 16384       # keep-mask elements per generator: the mask does not depend on blocking
_MASK64 = (1 << 63) - 1
ALL = "all"                # MaskPlan.tile: every position of the tile is masked
_VISIBLE, _CUT, _MASKED = 0, 1, 2


def _at_most(lo: int, hi: int, c: int) -> int:
    """State of ``x <= c`` over ``x in [lo, hi]``."""
    return _VISIBLE if hi <= c else _MASKED if lo > c else _CUT


def _at_least(lo: int, hi: int, c: int) -> int:
    return _VISIBLE if lo >= c else _MASKED if hi < c else _CUT


def _both(a: int, b: int) -> int:
    """Visible where both are."""
    return max(a, b)


def _either(a: int, b: int) -> int:
    """Visible where either is."""
    return min(a, b)


def check_sparse(op: str, p: FAProblem, atten_mask, pse, sparse_mode: int, pre: int, nxt: int,
                 prefix) -> None:
    checks.expect(0 <= sparse_mode <= 8, op, "sparse_mode", "in [0, 8]", sparse_mode, ValueError)
    if sparse_mode in (7, 8):
        checks.expect(p.packed, op, "sparse_mode", "7 or 8 only with input_layout TND",
                      sparse_mode, ValueError)
        checks.expect(pse is None, op, "pse", lambda: f"None with sparse_mode {sparse_mode}",
                      "a tensor", ValueError)
    if sparse_mode == 5:
        checks.expect(not p.packed, op, "sparse_mode", "not 5 with input_layout TND", 5,
                      ValueError)
    if atten_mask is None:
        return
    checks.expect_dtype(atten_mask, (torch.bool, torch.uint8), op, "atten_mask")
    shape = tuple(atten_mask.shape)
    if sparse_mode in COMPRESSED:
        want = COMPRESSED[sparse_mode]
        checks.expect(shape == want, op, "atten_mask",
                      lambda: f"the compressed {want[0]}x{want[1]} mask of sparse_mode "
                              f"{sparse_mode}", lambda: f"shape {shape}", RuntimeError)
    elif p.packed:
        checks.expect(not p.lengths_known or shape == (p.sq, p.skv), op, "atten_mask",
                      lambda: f"shape (max Sq, max Skv) = ({p.sq}, {p.skv}) for layout TND",
                      lambda: f"shape {shape}", RuntimeError)
    else:
        # BNSS, B1SS, 11SS (no 1NSS), SS
        ok = shape == (p.sq, p.skv) or (
            len(shape) == 4 and shape[2:] == (p.sq, p.skv)
            and ((shape[0] == p.batch and shape[1] in (1, p.heads)) or shape[:2] == (1, 1)))
        checks.expect(ok, op, "atten_mask",
                      lambda: f"a BNSS, B1SS, 11SS or SS mask for B={p.batch}, N={p.heads}, "
                              f"Sq={p.sq}, Skv={p.skv}", lambda: f"shape {shape}",
                      RuntimeError)
        if sparse_mode == 5:
            checks.expect(len(shape) == 4 and shape[0] == p.batch, op, "atten_mask",
                          "a BNSS or B1SS mask with sparse_mode 5", lambda: f"shape {shape}",
                          RuntimeError)
    if sparse_mode in (0, 4):
        if nxt < 0:
            checks.expect(pre >= -nxt, op, "pre_tockens",
                          lambda: f">= -next_tockens ({-nxt}) when next_tockens is negative",
                          pre, ValueError)
        if pre < 0:
            checks.expect(nxt >= -pre, op, "next_tockens",
                          lambda: f">= -pre_tockens ({-pre}) when pre_tockens is negative",
                          nxt, ValueError)
    if sparse_mode in (5, 6):
        checks.expect(prefix is not None and len(prefix) == p.batch, op, "prefix",
                      lambda: f"one value per batch ({p.batch}) with sparse_mode {sparse_mode}",
                      repr(prefix), ValueError)
        checks.expect(p.batch <= 32, op, "prefix", "a batch of at most 32", p.batch, ValueError)
        low = 0 if p.sq > p.skv else p.skv - p.sq
        for n in prefix:
            checks.expect(low <= n <= p.skv, op, "prefix", lambda: f"values in [{low}, {p.skv}]",
                          list(prefix), ValueError)


class MaskPlan:
    """The masked positions of one call, a block of query rows at a time (True = masked)."""

    def __init__(self, p: FAProblem, atten_mask, sparse_mode: int, pre: int, nxt: int,
                 prefix, device):
        self.p = p
        self.device = device
        self.active = atten_mask is not None
        self.mode = sparse_mode
        self.pre, self.nxt = pre, nxt
        self.user = None
        if self.active and sparse_mode in (0, 1, 5):
            m = atten_mask.bool()
            self.user = m.view(1, 1, *m.shape) if m.dim() == 2 else m
        b = p.batch
        if p.packed:
            q_lens, kv_lens = p.q_lens, p.kv_lens
        else:
            q_lens, kv_lens = [p.sq] * b, [p.skv] * b
        self.q_lens = torch.tensor(q_lens, device=device).view(b, 1, 1, 1)
        self.kv_lens = torch.tensor(kv_lens, device=device).view(b, 1, 1, 1)
        self.prefix = (torch.tensor(list(prefix), device=device).view(b, 1, 1, 1)
                       if self.active and sparse_mode == 6 else None)

    @property
    def trivial(self) -> bool:
        """Nothing is masked at all."""
        return not self.active and not self.p.packed

    def rows(self, i0: int, i1: int, j0: int = 0, j1: Optional[int] = None
             ) -> Optional[torch.Tensor]:
        """Bool ``[B|1, N|1, i1 - i0, j1 - j0]`` (True = masked; columns ``[j0, j1)``, all
        by default), or None when nothing is."""
        if self.trivial:
            return None
        p = self.p
        j1 = p.skv if j1 is None else j1
        if not p.packed:
            return self._dense_rows(i0, i1, j0, j1)
        i = torch.arange(i0, i1, device=self.device).view(1, 1, -1, 1)
        j = torch.arange(j0, j1, device=self.device).view(1, 1, 1, -1)
        masked = (j >= self.kv_lens) | (i >= self.q_lens)       # TND padding
        if not self.active:
            return masked
        rel = j - i                               # offset from the top-left diagonal
        shift = self.kv_lens - self.q_lens        # bottom-right diagonal offset
        mode = self.mode
        if mode == 0:
            masked = masked | self.user[:, :, i0:i1, j0:j1] | (rel > self.nxt) | (rel < -self.pre)
        elif mode in (1, 5):
            masked = masked | self.user[:, :, i0:i1, j0:j1]
        elif mode == 2:
            masked = masked | (rel > 0)
        elif mode == 3:
            masked = masked | (rel > shift)
        elif mode == 4:
            masked = masked | (rel - shift > self.nxt) | (rel - shift < -self.pre)
        elif mode == 6:
            masked = masked | ((rel > shift) & (j >= self.prefix))
        else:
            band = (rel - shift > self.nxt) | (rel - shift < -self.pre)
            causal = rel > shift if mode == 7 else rel > 0
            which = self._band_batch()
            masked = masked | torch.where(which, band, causal)
        return masked

    def _dense_rows(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """:meth:`rows` without padding (all batches share Sq, Skv): the diagonal bounds as
        ``triu`` / ``tril`` of the tile, one pass each instead of index arithmetic."""
        r, c, off = i1 - i0, j1 - j0, j0 - i0
        shift = self.p.skv - self.p.sq

        def above(cst):            # j - i > cst
            return torch.ones(r, c, dtype=torch.bool, device=self.device).triu_(cst - off + 1)

        def below(cst):            # j - i < cst
            return torch.ones(r, c, dtype=torch.bool, device=self.device).tril_(cst - off - 1)

        mode = self.mode
        if mode in (1, 5):
            return self.user[:, :, i0:i1, j0:j1]
        if mode == 0:
            masked = above(self.nxt) | below(-self.pre)
            return self.user[:, :, i0:i1, j0:j1] | masked
        if mode == 2:
            masked = above(0)
        elif mode == 3:
            masked = above(shift)
        elif mode == 4:
            masked = above(shift + self.nxt) | below(shift - self.pre)
        else:                      # 6: the first prefix[b] columns stay visible
            j = torch.arange(j0, j1, device=self.device).view(1, 1, 1, -1)
            return above(shift) & (j >= self.prefix)
        return masked.view(1, 1, r, c)

    def tile(self, i0: int, i1: int, j0: int, j1: int):
        """Masked positions of the tile ``[i0, i1) x [j0, j1)``: None when nothing is masked,
        :data:`ALL` when everything is (the tile can be skipped), else a bool tensor.

        The mode's own shape (band, causal, padding) is classified from the tile's corners,
        so only tiles it cuts through and tiles of a caller's full mask build a tensor."""
        if self.trivial:
            return None
        states = [self._shape_state(b, i0, i1, j0, j1) for b in range(self.p.batch)]
        if all(st == _MASKED for st in states):
            return ALL
        if all(st == _VISIBLE for st in states):
            if self.user is None:
                return None
            masked = self.user[:, :, i0:i1, j0:j1]
        else:
            masked = self.rows(i0, i1, j0, j1)
        if not bool(masked.any()):
            return None
        if bool(masked.all()):
            return ALL
        return masked

    def _shape_state(self, b: int, i0: int, i1: int, j0: int, j1: int) -> int:
        """Whether batch ``b``'s mode shape leaves the tile all visible, all masked or cut."""
        p = self.p
        qb, kb = (p.q_lens[b], p.kv_lens[b]) if p.packed else (p.sq, p.skv)
        if i0 >= qb or j0 >= kb:
            return _MASKED
        state = _VISIBLE if i1 <= qb and j1 <= kb else _CUT
        if not self.active:
            return state
        lo, hi = j0 - (i1 - 1), (j1 - 1) - i0          # range of j - i over the tile
        shift = kb - qb
        mode = self.mode

        def band(c_lo, c_hi):
            return _both(_at_least(lo, hi, c_lo), _at_most(lo, hi, c_hi))

        if mode == 0:
            shape = band(-self.pre, self.nxt)
        elif mode in (1, 5):
            shape = _VISIBLE
        elif mode == 2:
            shape = _at_most(lo, hi, 0)
        elif mode == 3:
            shape = _at_most(lo, hi, shift)
        elif mode == 4:
            shape = band(shift - self.pre, shift + self.nxt)
        elif mode == 6:
            n = int(self.prefix[b].item())
            prefix = _VISIBLE if j1 <= n else _MASKED if j0 >= n else _CUT
            shape = _either(_at_most(lo, hi, shift), prefix)
        else:
            is_band = bool(self._band_batch()[b].item())
            shape = band(shift - self.pre, shift + self.nxt) if is_band else \
                _at_most(lo, hi, shift if mode == 7 else 0)
        return _both(state, shape)

    def _band_batch(self) -> torch.Tensor:
        """Modes 7/8: the batch that is the band-shaped piece of a split sequence."""
        b = self.p.batch
        nonempty = [k for k in range(b) if self.p.q_lens[k] > 0] or [0]
        k = nonempty[-1] if self.mode == 7 else nonempty[0]
        flag = torch.zeros(b, 1, 1, 1, dtype=torch.bool, device=self.device)
        flag[k] = True
        return flag


# -- dropout ---------------------------------------------------------------------------------

def _mix(seed: int, offset: int, chunk: int) -> int:
    """A 63-bit generator seed from (seed, offset, chunk): one independent stream per chunk."""
    x = (seed * 0x9E3779B97F4A7C15 + offset * 0xBF58476D1CE4E5B9 + chunk * 0x94D049BB133111EB)
    x &= (1 << 64) - 1
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & ((1 << 64) - 1)
    return (x ^ (x >> 29)) & _MASK64


def mask_elements(p: FAProblem, i0: int, i1: int, device):
    """The keep-mask element index ``e`` of each position of query rows ``[i0, i1)`` as int64
    ``[B, N, rows, Skv]``, and (TND) where a position exists (None for dense layouts).

    Elements are in ``[B, N, Sq, Skv]`` order (TND: the sequences one after the other, each
    ``[N, Sq_b, Skv_b]``), the order ``_npu_dropout_gen_mask(x, [B, N, Sq, Skv], ...)`` and the
    NPU's own mask generation use; positions past a sequence's lengths get ``e = 0``.
    """
    b, n = p.batch, p.heads
    i = torch.arange(i0, i1, device=device).view(1, 1, -1, 1)
    j = torch.arange(p.skv, device=device).view(1, 1, 1, -1)
    heads = torch.arange(n, device=device).view(1, n, 1, 1)
    if p.packed:
        sq = torch.tensor(p.q_lens, device=device).view(b, 1, 1, 1)
        skv = torch.tensor(p.kv_lens, device=device).view(b, 1, 1, 1)
        base = torch.tensor(_sequence_bases(p), device=device).view(b, 1, 1, 1)
        e = base + (heads * sq + i) * skv + j
        valid = (i < sq) & (j < skv)
        return torch.where(valid, e, torch.zeros_like(e)), valid
    batches = torch.arange(b, device=device).view(b, 1, 1, 1)
    return ((batches * n + heads) * p.sq + i) * p.skv + j, None


def _sequence_bases(p: FAProblem) -> list:
    sizes = [p.heads * a * c for a, c in zip(p.q_lens, p.kv_lens)]
    return [sum(sizes[:k]) for k in range(p.batch)]


def uniform_stream(seed: int, offset: int, lo: int, hi: int, device,
                   chunks: Optional[dict] = None) -> torch.Tensor:
    """The keep-mask stream's float32 uniforms of elements ``[lo, hi)``.

    Element ``e`` takes position ``e % STREAM_CHUNK`` of chunk ``e // STREAM_CHUNK``, each chunk
    drawn by a ``torch.Generator`` seeded with a hash of (seed, offset, chunk): a function of
    (seed, offset, e) alone, so the forward, the grad, any recomputation and
    ``_npu_dropout_gen_mask`` agree whatever their blocking.  ``chunks`` caches drawn chunks
    between calls (neighbouring ranges share their boundary chunks).
    """
    if hi <= lo:
        return torch.empty(0, dtype=torch.float32, device=device)
    chunks = {} if chunks is None else chunks
    c0, c1 = lo // STREAM_CHUNK, (hi - 1) // STREAM_CHUNK
    parts = []
    for c in range(c0, c1 + 1):
        if c not in chunks:
            gen = torch.Generator(device=device)
            gen.manual_seed(_mix(seed, offset, c))
            chunks[c] = torch.rand(STREAM_CHUNK, generator=gen, device=device,
                                   dtype=torch.float32)
        parts.append(chunks[c])
    u = parts[0] if len(parts) == 1 else torch.cat(parts)
    return u[lo - c0 * STREAM_CHUNK:hi - c0 * STREAM_CHUNK]


def keep_stream_rows(seed: int, offset: int, keep_prob: float, p: FAProblem, i0: int, i1: int,
                     device) -> torch.Tensor:
    """The op's own keep-mask (True = kept: ``u_e < keep_prob``) of query rows ``[i0, i1)`` as
    bool ``[B, N, rows, Skv]``, element ``e`` as :func:`mask_elements` numbers it (TND
    positions past a sequence's lengths: False).  Each (batch, head) reads one contiguous run
    of the stream, so no index tensor is built."""
    b, n, rows = p.batch, p.heads, i1 - i0
    chunks: dict = {}
    if not p.packed:
        u = torch.empty(b * n, rows * p.skv, dtype=torch.float32, device=device)
        step = p.sq * p.skv
        for bh in range(b * n):
            u[bh] = uniform_stream(seed, offset, bh * step + i0 * p.skv, bh * step + i1 * p.skv,
                                   device, chunks)
        return (u < keep_prob).view(b, n, rows, p.skv)
    keep = torch.zeros(b, n, rows, p.skv, dtype=torch.bool, device=device)
    for k, (base, sq, skv) in enumerate(zip(_sequence_bases(p), p.q_lens, p.kv_lens)):
        r = min(i1, sq) - i0
        if r <= 0 or skv == 0:
            continue
        for h in range(n):
            lo = base + (h * sq + i0) * skv
            u = uniform_stream(seed, offset, lo, lo + r * skv, device, chunks)
            keep[k, h, :r, :skv] = (u < keep_prob).view(r, skv)
    return keep


def keep_bits(bits: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """A caller-supplied bit-packed keep-mask (True = kept) at elements ``e``: element ``e`` is
    bit ``e % 8`` (least significant first) of byte ``e // 8``, as ``_npu_dropout_gen_mask``
    packs them."""
    byte = bits.reshape(-1)[e // 8].to(torch.int16)
    return ((byte >> (e % 8).to(torch.int16)) & 1).bool()


def pack_bits(keep: torch.Tensor) -> torch.Tensor:
    """bool elements -> uint8 bytes, least significant bit first, zero-padded to whole 128-bit
    blocks (the length ``_npu_dropout_gen_mask`` returns)."""
    flat = keep.reshape(-1).to(torch.uint8)
    flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % 128)]).view(-1, 8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=keep.device)
    return (flat * weights).sum(dim=1, dtype=torch.uint8)
