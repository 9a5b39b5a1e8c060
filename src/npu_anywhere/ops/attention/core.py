"""The float32 reference solver of an :class:`~.problem.AttentionProblem`, and solver choice.

:func:`reference_attention` is written for clarity: it is the oracle the fast providers are tested
against.  It materializes the score matrix ``[B, Nq, Sq, Skv]`` in float32 (float64 when the
query is float64, so fp64 goldens and gradcheck-style checks can run through the ops), applies the
visibility rule of ``problem.py`` and the softmax in one pass::

    s   = scale * q @ k^T + pse           (invisible entries -> -inf)
    m   = max_j s                         (rows with nothing visible: m = 0 so exp stays finite)
    p   = exp(s - m);   l = sum_j p
    out = (round(p) @ v) / l              (0 where l == 0; round: problem.probs_dtype)
    lse = m + log(l)                      (-inf where l == 0)

A learnable sink (``problem.sink``) adds ``exp(sink - m)`` to ``l`` (and joins the max).

:func:`solve` tries the fast kernels of ``npu_anywhere.kernels.attention`` first (when that package
exists and its ``supports`` accepts the problem) and falls back to the reference; then
:func:`apply_masked_rows` gives the rows that only the mask empties what the NPU writes there
(``problem.masked_rows``), whichever solver ran.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional

import torch

from .problem import AttentionProblem, dense_kv, probs_dtype, round_probs, visible

MASKED_ROWS = ("zero", "uniform", "invalid")


def _compute_dtype(problem: AttentionProblem) -> torch.dtype:
    return torch.float64 if problem.query.dtype == torch.float64 else torch.float32


def reference_attention(problem: AttentionProblem) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(out [B, Nq, Sq, Dv], lse [B, Nq, Sq])`` in float32 (float64 for float64 queries)."""
    dtype = _compute_dtype(problem)
    q = problem.query.to(dtype)
    key, value = dense_kv(problem)
    k, v = key.to(dtype).contiguous(), value.to(dtype).contiguous()
    b, n_q, s_q, _ = q.shape
    n_kv, g = k.shape[1], problem.group
    # Query head h reads KV head h // g: the g query heads of a KV head are stacked on the row
    # axis ([B, Nkv, g*Sq, D]), so each KV head is read once and never copied.
    qg = q.reshape(b, n_kv, g * s_q, q.shape[-1])
    s = torch.matmul(qg, k.transpose(-1, -2)).reshape(b, n_q, s_q, -1)
    s = s * problem.scale
    if problem.pse is not None:
        s = s + problem.pse.to(dtype)
    ok = visible(problem, q.device)
    s = s.masked_fill(~ok, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    sink = None
    if problem.sink is not None:                     # one extra logit per head, no value
        sink = problem.sink.to(dtype).reshape(1, -1, 1, 1)
        m = torch.maximum(m, sink)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    if sink is not None:
        l = l + torch.exp(sink - m)
    p_mm = round_probs(p, probs_dtype(problem))     # the NPU's cast before P @ V
    pv = torch.matmul(p_mm.reshape(b, n_kv, g * s_q, -1), v).reshape(b, n_q, s_q, -1)
    out = pv / torch.where(l > 0, l, torch.ones_like(l))
    lse = None
    if problem.return_lse:
        lse = (m + torch.log(l)).squeeze(-1)       # log(0) = -inf for fully masked rows
    return out, lse


Solver = Callable[[AttentionProblem], tuple[torch.Tensor, Optional[torch.Tensor]]]


def _fast_kernels() -> list[tuple[str, Solver, Callable[[AttentionProblem], Optional[str]]]]:
    """The fast solvers that exist, as (name, solve, supports); empty when none are installed."""
    try:
        module = importlib.import_module("npu_anywhere.kernels.attention")
    except ImportError:
        return []
    found = []
    for name in ("paged_attention", "dense_attention"):
        fn = getattr(module, name, None)
        if fn is None:
            continue
        supports = getattr(fn, "supports", None) or getattr(module, f"{name}_supports", None)
        if supports is None:
            continue
        found.append((name, fn, supports))
    return found


_KERNELS: Optional[list] = None


def apply_masked_rows(problem: AttentionProblem, out: torch.Tensor, lse: Optional[torch.Tensor]
                      ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Rows that ``mask`` alone empties (keys left by lengths and band, all of them masked).

    Solvers treat masked keys as absent (out 0, lse -inf there).  ``"uniform"``: the NPU gave
    each masked key the finite score ``mask_fill``, so such a row is the plain mean of the
    values of those keys and its lse ``mask_fill + log(count)``; ``"invalid"``: out 0 and lse
    ``+inf`` (the prompt kernel's ``AdjustSoftMaxRes(lse, max, min, 3e+99)``).  A learnable sink
    needs nothing: its logit dominates ``mask_fill``, which leaves out 0 and lse = sink either
    way.  Every other row is untouched.
    """
    if problem.mask is None or problem.masked_rows == "zero" or problem.sink is not None:
        return out, lse
    base = visible(problem, out.device, use_mask=False)             # lengths and band
    hidden = problem.mask.to(device=out.device, dtype=torch.bool)
    count = base.sum(-1)
    rows = (count > 0) & ~(base & ~hidden).any(-1)                 # [B, 1 or Nq, Sq]
    if not bool(rows.any()):
        return out, lse
    if problem.masked_rows == "invalid":
        if lse is not None:
            lse = lse.masked_fill(rows.expand(lse.shape), float("inf"))
        return out, lse
    _, value = dense_kv(problem)
    v = value.to(out.dtype).repeat_interleave(problem.group, dim=1)  # [B, Nq, Skv, Dv]
    base = base.expand(*rows.shape, base.shape[-1])
    weights = base.to(out.dtype) / count.clamp(min=1).unsqueeze(-1).to(out.dtype)
    mean = torch.matmul(weights, v)                                  # [B, Nq, Sq, Dv]
    out = torch.where(rows.unsqueeze(-1), mean, out)
    if lse is not None:
        fill = torch.tensor(problem.mask_fill, dtype=torch.float32, device=out.device)
        value_lse = (fill + torch.log(count.to(torch.float32))).to(lse.dtype)
        lse = torch.where(rows, value_lse.expand(rows.shape), lse)
    return out, lse


def solve(problem: AttentionProblem, *, use_fast: bool = True
          ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Solve with the first fast kernel that accepts the problem, else the reference, then
    :func:`apply_masked_rows`.

    ``use_fast=False`` (the ``reference`` provider, fake tensors) always runs the reference.
    """
    global _KERNELS
    if problem.masked_rows not in MASKED_ROWS:
        raise ValueError(f"masked_rows must be one of {MASKED_ROWS}, got {problem.masked_rows!r}")
    if problem.full_quant is not None:            # int8 inputs: its own solver, masks included
        from . import full_quant
        return full_quant.solve(problem)
    if use_fast and problem.sink is None:
        if _KERNELS is None:
            _KERNELS = _fast_kernels()
        for _name, fn, supports in _KERNELS:
            if supports(problem) is None:
                return apply_masked_rows(problem, *fn(problem))
    return apply_masked_rows(problem, *reference_attention(problem))


def fast_kernels_available() -> bool:
    """Whether ``npu_anywhere.kernels.attention`` provides at least one fast solver."""
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _fast_kernels()
    return bool(_KERNELS)
