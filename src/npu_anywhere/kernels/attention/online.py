"""Tiled online-softmax attention: the general engine behind the dense and paged kernels.

It solves an :class:`~npu_anywhere.ops.attention.problem.AttentionProblem` for a range of batches
without ever forming a ``[Sq, Skv]`` score matrix: queries are cut into row blocks, keys into
chunks that a *reader* supplies (slices of a dense tensor, or blocks gathered from a paged cache),
and each row keeps the running maximum ``m``, the running sum ``l`` and the unnormalized output
``acc`` (the FlashAttention recurrence, Dao et al. 2022)::

    s     = scale * q @ k_chunk^T + pse_chunk          (invisible entries -> -inf)
    m'    = max(m, max_j s)
    acc   = acc * exp(m - m') + exp(s - m') @ v_chunk
    l     = l * exp(m - m') + sum_j exp(s - m')
    out   = acc / l                                    (0 where l == 0)
    lse   = m + log(l)                                 (-inf where l == 0)

All arithmetic is float32 (float64 for float64 queries), except that the probabilities of a
float16 / bfloat16 query are rounded to that dtype before their matmul with ``v`` (after the
row sum), as the NPU's kernels do (``problem.probs_dtype``).  GQA needs no copy of K/V: the
``g = Nq / Nkv`` query heads sharing a KV head are stacked as ``g * rows`` rows of one matmul.
Chunks that the lengths and the band leave entirely invisible are skipped, so a causal prefill
does about half the work, and chunks that are entirely visible are not masked at all.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from ...ops.attention.problem import UNBOUNDED, AttentionProblem, probs_dtype, round_probs

Reader = Callable[[int, int, int, int], tuple[torch.Tensor, torch.Tensor]]
"""``reader(b0, b1, j0, j1) -> (key, value)``: keys ``j0:j1`` of batches ``b0:b1`` as
``[b1 - b0, Nkv, j1 - j0, D]`` tensors of the compute dtype (any strides)."""

SCORE_BUDGET_BYTES = 32 * 2**20
"""Score tile size the engine aims for (float32 scores of one row block x one key chunk)."""


def compute_dtype(problem: AttentionProblem) -> torch.dtype:
    return torch.float64 if problem.query.dtype == torch.float64 else torch.float32


def _as4d(t: torch.Tensor) -> torch.Tensor:
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


def _tile(t: Optional[torch.Tensor], b0: int, b1: int, i0: int, i1: int, j0: int, j1: int,
          groups: tuple[int, int]) -> Optional[torch.Tensor]:
    """The ``[b, kv heads, g, rows, keys]`` window of a mask / pse broadcastable to
    ``[B, Nq, Sq, Skv]`` (size-1 dims stay size 1 and broadcast)."""
    if t is None:
        return None
    t = _as4d(t)
    if t.shape[0] != 1:
        t = t[b0:b1]
    if t.shape[2] != 1:
        t = t[:, :, i0:i1]
    if t.shape[3] != 1:
        t = t[:, :, :, j0:j1]
    n_kv, g = groups
    if t.shape[1] == 1:
        return t.unsqueeze(1)                                   # [b, 1, 1, rows, keys]
    return t.reshape(t.shape[0], n_kv, g, t.shape[2], t.shape[3])


class _Band:
    """Lengths and band of a batch range, as Python ints, to classify tiles cheaply."""

    def __init__(self, problem: AttentionProblem, b0: int, b1: int):
        self.q_lens = problem.q_lens[b0:b1]
        self.kv_lens = problem.kv_lens[b0:b1]
        self.offsets = problem.diag_offset[b0:b1]
        self.pre = problem.pre_tokens if problem.banded else UNBOUNDED
        self.next = problem.next_tokens if problem.banded else UNBOUNDED
        self.banded = problem.banded

    def classify(self, i0: int, i1: int, j0: int, j1: int) -> tuple[bool, bool]:
        """(any entry of the tile visible, every entry of the valid rows visible)."""
        any_visible, all_visible = False, True
        for q_len, kv_len, d in zip(self.q_lens, self.kv_lens, self.offsets):
            r1, k1 = min(i1, q_len), min(j1, kv_len)
            if r1 <= i0 or k1 <= j0:
                all_visible = all_visible and r1 <= i0   # rows past q_len need no mask
                continue
            if k1 < j1:
                all_visible = False
            if not self.banded:
                any_visible = True
                continue
            lo = max(j0, i0 + d - self.pre)
            hi = min(k1 - 1, r1 - 1 + d + self.next)
            if lo <= hi and self.pre + self.next >= 0:
                any_visible = True
            # every (i, j) in the tile inside the band: both corners inside
            if not (j0 - (r1 - 1 + d) >= -self.pre and (k1 - 1) - (i0 + d) <= self.next):
                all_visible = False
        return any_visible, all_visible

    def visible(self, i0: int, i1: int, j0: int, j1: int, device) -> torch.Tensor:
        """Boolean ``[b, 1, 1, rows, keys]``: lengths and band for the tile."""
        i = torch.arange(i0, i1, device=device).view(1, -1, 1)
        j = torch.arange(j0, j1, device=device).view(1, 1, -1)
        q_lens = torch.tensor(self.q_lens, device=device).view(-1, 1, 1)
        kv_lens = torch.tensor(self.kv_lens, device=device).view(-1, 1, 1)
        ok = (i < q_lens) & (j < kv_lens)
        if self.banded:
            rel = j - i - torch.tensor(self.offsets, device=device).view(-1, 1, 1)
            ok &= (rel >= -self.pre) & (rel <= self.next)
        return ok.view(ok.shape[0], 1, 1, i1 - i0, j1 - j0)


def attend(problem: AttentionProblem, reader: Reader, b0: int, b1: int, *,
           out: torch.Tensor, lse: Optional[torch.Tensor], chunk: int,
           granule: int = 1, q_block: Optional[int] = None) -> None:
    """Solve batches ``b0:b1`` into ``out[b0:b1]`` (and ``lse[b0:b1]``) in place.

    ``chunk`` keys per reader call (a multiple of ``granule``, the reader's alignment, e.g. the
    paged block size); ``q_block`` query rows per tile (default: as many as the score budget
    allows for one chunk).  ``out`` rows past ``q_lens`` are left as they are (callers pass
    zeros).
    """
    dtype = compute_dtype(problem)
    nb = b1 - b0
    n_q, n_kv = problem.num_heads, problem.num_kv_heads
    g = n_q // n_kv
    dv = problem.head_dim_v
    rows = max(problem.q_lens[b0:b1], default=0)
    keys = max(problem.kv_lens[b0:b1], default=0)
    if rows == 0:
        return
    if q_block is None:
        per_row = nb * n_q * chunk * torch.finfo(dtype).bits // 8
        q_block = max(1, min(rows, SCORE_BUDGET_BYTES // max(per_row, 1)))
    band = _Band(problem, b0, b1)
    rounding = probs_dtype(problem)
    query = problem.query[b0:b1]
    device = query.device
    for i0 in range(0, rows, q_block):
        i1 = min(rows, i0 + q_block)
        r = i1 - i0
        q = query[:, :, i0:i1].to(dtype).reshape(nb, n_kv, g * r, -1)
        m = torch.full((nb, n_kv, g, r), float("-inf"), dtype=dtype, device=device)
        l = torch.zeros((nb, n_kv, g, r), dtype=dtype, device=device)
        acc = torch.zeros((nb, n_kv, g, r, dv), dtype=dtype, device=device)
        for j0 in range(0, keys, chunk):
            j1 = min(keys, j0 + chunk)
            any_visible, all_visible = band.classify(i0, i1, j0, j1)
            if not any_visible:
                continue
            r1 = -(-j1 // granule) * granule            # the reader works in whole granules
            k, v = reader(b0, b1, j0, min(r1, j0 + chunk))
            k, v = k[:, :, :j1 - j0], v[:, :, :j1 - j0]
            s = torch.matmul(q, k.transpose(-1, -2)).view(nb, n_kv, g, r, j1 - j0)
            s.mul_(problem.scale)
            pse = _tile(problem.pse, b0, b1, i0, i1, j0, j1, (n_kv, g))
            if pse is not None:
                s.add_(pse.to(dtype))
            hidden = None if all_visible else ~band.visible(i0, i1, j0, j1, device)
            user = _tile(problem.mask, b0, b1, i0, i1, j0, j1, (n_kv, g))
            if user is not None:
                user = user.to(torch.bool)
                hidden = user if hidden is None else hidden | user
            if hidden is not None:
                s.masked_fill_(hidden, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
            s.sub_(m_safe.unsqueeze(-1)).exp_()
            alpha = torch.exp(m - m_safe)
            l.mul_(alpha).add_(s.sum(-1))
            p = round_probs(s, rounding)                 # the NPU's cast before P @ V
            pv = torch.matmul(p.view(nb, n_kv, g * r, j1 - j0), v)
            acc.mul_(alpha.unsqueeze(-1)).add_(pv.view(nb, n_kv, g, r, dv))
            m = m_new
        empty = l == 0
        acc.div_(l.masked_fill(empty, 1.0).unsqueeze(-1))
        _store(out, acc, b0, b1, i0, i1, problem, n_q, dv)
        if lse is not None:
            value = (m + torch.log(l)).masked_fill(empty, float("-inf"))
            lse[b0:b1, :, i0:i1] = value.reshape(nb, n_q, r).to(lse.dtype)


def _store(out, acc, b0, b1, i0, i1, problem, n_q, dv):
    """Write the rows that exist (``i < q_lens[b]``); padded rows keep out's zeros."""
    result = acc.reshape(b1 - b0, n_q, i1 - i0, dv)
    lens = problem.q_lens[b0:b1]
    if all(q_len >= i1 for q_len in lens):
        out[b0:b1, :, i0:i1] = result.to(out.dtype)
        return
    for b, q_len in enumerate(lens):
        stop = min(i1, q_len)
        if stop > i0:
            out[b0 + b, :, i0:stop] = result[b, :, :stop - i0].to(out.dtype)
