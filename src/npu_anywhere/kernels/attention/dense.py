"""Dense-KV attention: PyTorch's fused flash kernel where the problem maps onto it.

``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (the kernel behind
``F.scaled_dot_product_attention`` on CPU) takes GQA key/value heads directly and returns the
log-sum-exp, so a problem without a mask, pse or window band is one call per batch group:

- no band, or top-left causal (``next_tokens == 0``, ``diag_offset == 0``): ``is_causal`` as is;
- bottom-right causal with ``kv_len > q_len`` (offset ``o = kv_len - q_len``): the first ``o``
  keys are visible to every row and the last ``q_len`` form a top-left causal square, so two calls
  (prefix without mask, square with ``is_causal``) are merged by their lse -- exact, and without
  the ``[Sq, Skv]`` mask that would disable the kernel's block skipping (1.8x slower measured);
- bottom-right causal with ``kv_len < q_len``: the first ``q_len - kv_len`` rows see nothing, the
  rest are a top-left causal call.

Batches of equal lengths are one call; varying lengths run one call per batch on views.  Masks,
pse and window bands go to the tiled online-softmax engine (:mod:`.online`), which never forms
a full score matrix.  On CUDA ``F.scaled_dot_product_attention`` has no lse output, so the same
split runs through the online engine there (device-agnostic torch code).

Numerics: float32 / float64 queries take the flash path as they are.  The NPU rounds the
probabilities of float16 / bfloat16 queries to that dtype before ``P @ V``; the kernel run in
that dtype does the same (see :func:`_low_precision_flash`), so those queries take it where the
CPU has bfloat16 matmul instructions, and the tiled engine, which rounds them too, elsewhere
(the kernel's bf16 / fp16 matmuls are 15-100x slower there).  A bottom-right causal prefix
also takes the tiled engine for them: the split's two outputs would each be rounded.  Fully masked rows return out 0 and lse ``-inf`` (the flash kernel returns 0/0).
"""

from __future__ import annotations

from typing import Optional

import torch

from ...ops.attention.problem import UNBOUNDED, AttentionProblem, probs_dtype
from . import online

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

TILE_KEYS = 256
"""Keys per chunk of the tiled engine on dense KV (K/V upcast once, then sliced as views).
256 rather than 512: finer chunks skip more of a causal square (bf16 prefill 4 x 1024, GQA
32/8, D 128, measured side by side: 6.2 s at 256 against 9.8 s at 512; the flash path, which
cannot round the probabilities, 2.5 s on the same loaded machine)."""


def _causal_kind(problem: AttentionProblem) -> Optional[str]:
    """"none", "top_left" or "bottom_right" for the bands the flash path handles, else None."""
    if not problem.banded:
        return "none"
    if problem.next_tokens != 0 or problem.pre_tokens < UNBOUNDED:
        return None
    if all(d == 0 for d in problem.diag_offset):
        return "top_left"
    if all(d == kv - q for d, q, kv in zip(problem.diag_offset, problem.q_lens, problem.kv_lens)):
        return "bottom_right"
    return None


def flash_supports(problem: AttentionProblem) -> Optional[str]:
    """Reason the fused flash path declines, or None."""
    if problem.paged:
        return "paged KV (see paged.py)"
    if problem.query.device.type != "cpu":
        return "the flash kernel with lse output is the CPU one"
    if problem.mask is not None:
        return "a boolean mask"
    if problem.pse is not None:
        return "a pse"
    if _causal_kind(problem) is None:
        return "a band other than none / causal"
    if problem.query.shape[-1] != problem.head_dim_v:
        return "value head dim differs from query head dim"
    if probs_dtype(problem) is not None and _causal_kind(problem) == "bottom_right" and any(
            kv > q for q, kv in zip(problem.q_lens, problem.kv_lens)):
        return "float16 / bfloat16 queries with a causal prefix (the split's two outputs " \
               "would each be rounded)"
    if probs_dtype(problem) is not None and (problem.key.dtype != problem.query.dtype
                                             or problem.value.dtype != problem.query.dtype):
        return "float16 / bfloat16 queries over dequantized (float32) keys / values"
    if probs_dtype(problem) is not None and not _low_precision_flash():
        # Run in float32 it cannot round the probabilities as the NPU does; run in the input
        # dtype it does, but CPUs without bf16 instructions run its matmuls 15-100x slower.
        return "float16 / bfloat16 queries round the probabilities before P @ V (this CPU " \
               "has no bfloat16 matmul instructions for the flash kernel's input-dtype run)"
    return None


def _low_precision_flash() -> bool:
    """Whether the flash kernel runs float16 / bfloat16 inputs at float32 speed here.

    Run in the input dtype, the kernel does what the NPU does: the row sum over float32
    ``exp(s - max)``, the probabilities cast to the input dtype for ``P @ V``, float32
    accumulation, one rounding of the output (``cpu_flash_attention``'s
    ``_exp_reduce_sum_fusion_kernel``).  Measured with torch 2.13 on an AVX-512-BF16 CPU, causal
    GQA 32/8 heads x 1024 x 128: float32 0.17 s, bfloat16 0.16 s, float16 0.23 s.  oneDNN's bf16
    support is the proxy for such a CPU.
    """
    global _LOW_PRECISION_FLASH
    if _LOW_PRECISION_FLASH is None:
        try:
            _LOW_PRECISION_FLASH = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            _LOW_PRECISION_FLASH = False
    return _LOW_PRECISION_FLASH


_LOW_PRECISION_FLASH: Optional[bool] = None


def supports(problem: AttentionProblem) -> Optional[str]:
    """Dense attention accepts every dense-KV problem (flash where possible, else tiled)."""
    if problem.paged:
        return "paged KV (see paged.py)"
    return None


def dense_attention(problem: AttentionProblem) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(out [B, Nq, Sq, Dv], lse [B, Nq, Sq] or None)`` of a dense-KV problem."""
    dtype = online.compute_dtype(problem)
    b, n_q, s_q, _ = problem.query.shape
    out = torch.zeros((b, n_q, s_q, problem.head_dim_v), dtype=dtype,
                      device=problem.query.device)
    lse = None
    if problem.return_lse:
        lse = torch.full((b, n_q, s_q), float("-inf"), dtype=dtype, device=out.device)
    if flash_supports(problem) is None:
        _flash(problem, out, lse, dtype)
    else:
        _tiled(problem, out, lse)
    return out, lse


dense_attention.supports = supports


def _tiled(problem: AttentionProblem, out, lse) -> None:
    dtype = out.dtype
    # Upcast once (as the flash path does): converting each key chunk again for every query
    # row block cost a quarter of a bf16 prefill (measured: 1.3 s of copies in 4.6 s).
    key = problem.key if problem.key.dtype == dtype else _rows_contiguous(problem.key.to(dtype))
    value = problem.value if problem.value.dtype == dtype else \
        _rows_contiguous(problem.value.to(dtype))

    def reader(b0, b1, j0, j1):
        return key[b0:b1, :, j0:j1].to(dtype), value[b0:b1, :, j0:j1].to(dtype)

    online.attend(problem, reader, 0, problem.batch, out=out, lse=lse, chunk=TILE_KEYS)


def _flash(problem: AttentionProblem, out, lse, dtype) -> None:
    kind = _causal_kind(problem)
    if probs_dtype(problem) is not None:
        dtype = problem.query.dtype          # see _low_precision_flash: the NPU's roundings
    q_all, k_all, v_all = (_rows_contiguous(t.to(dtype))
                           for t in (problem.query, problem.key, problem.value))
    s_q, s_kv = q_all.shape[2], k_all.shape[2]
    full = all(q == s_q for q in problem.q_lens) and all(kv == s_kv for kv in problem.kv_lens)
    if full and (kind != "bottom_right" or s_q == s_kv):
        _flash_block(q_all, k_all, v_all, "none" if kind == "none" else "top_left",
                     problem.scale, out, lse, slice(None))
        return
    for bi, (q_len, kv_len) in enumerate(zip(problem.q_lens, problem.kv_lens)):
        if q_len == 0 or kv_len == 0:
            continue                                      # zeros and -inf already there
        q = q_all[bi:bi + 1, :, :q_len]
        k, v = k_all[bi:bi + 1, :, :kv_len], v_all[bi:bi + 1, :, :kv_len]
        rows = slice(0, q_len)
        if kind != "bottom_right" or q_len == kv_len:
            _flash_block(q, k, v, "none" if kind == "none" else "top_left", problem.scale,
                         out[bi:bi + 1], None if lse is None else lse[bi:bi + 1], rows)
        elif kv_len < q_len:
            skip = q_len - kv_len                         # these rows see no key
            _flash_block(q[:, :, skip:], k, v, "top_left", problem.scale, out[bi:bi + 1],
                         None if lse is None else lse[bi:bi + 1], slice(skip, q_len))
        else:
            _flash_prefix_square(q, k, v, kv_len - q_len, problem.scale, out[bi:bi + 1],
                                 None if lse is None else lse[bi:bi + 1], rows)


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    # The CPU flash kernel reads garbage when the head dim is not the unit-stride one
    # (measured with torch 2.13: a transposed query gives values of 1e7).
    return t if t.stride(-1) == 1 else t.contiguous()


def _flash_block(q, k, v, kind, scale, out, lse, rows) -> None:
    # Top-left causal: row i sees keys 0..i, so no row is empty (kv_len >= 1 here).
    o, l = _FLASH(q, k, v, 0.0, kind == "top_left", scale=scale)
    out[:, :, rows] = o
    if lse is not None:
        lse[:, :, rows] = l


def _flash_prefix_square(q, k, v, prefix, scale, out, lse, rows) -> None:
    """Bottom-right causal, kv_len > q_len: a full prefix call and a causal square call merged
    by their lse (the ``npu_attention_update`` formula)."""
    o1, l1 = _FLASH(q, k[:, :, :prefix], v[:, :, :prefix], 0.0, False, scale=scale)
    o2, l2 = _FLASH(q, k[:, :, prefix:], v[:, :, prefix:], 0.0, True, scale=scale)
    m = torch.maximum(l1, l2)
    w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
    total = w1 + w2
    merged = o1 * (w1 / total).unsqueeze(-1) + o2 * (w2 / total).unsqueeze(-1)
    out[:, :, rows] = merged
    if lse is not None:
        lse[:, :, rows] = m + torch.log(total)
