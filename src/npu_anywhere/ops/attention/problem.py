"""The one internal form of an inference-attention call.

Every inference-attention op (``npu_fused_infer_attention_score`` v1/v2,
``npu_prompt_flash_attention``, ``npu_incre_flash_attention``) parses and checks its own
arguments, then normalizes them into an :class:`AttentionProblem`; a solver (the float32
reference in ``core.py``, or a fast provider from ``npu_anywhere.kernels.attention``) turns the
problem into ``(out, lse)``; the op formats those back into its documented layout and dtype.

What is resolved *before* the problem is built, so that solvers stay small:

- the layout (BSH, BSND, BNSD, TND, ...): the query is always ``[B, Nq, Sq, D]``, zero-padded past
  ``q_lens[b]`` (TND packs are split per batch by their cumulative lengths);
- KV antiquant (int8 / int4 caches): key and value are dequantized to float32;
- MLA rope (``query_rope`` / ``key_rope``): concatenated onto the last dim of query and key, so the
  score ``q.k^T + q_rope.k_rope^T`` is one dot product; the value keeps its own width ``Dv``;
- shared prefix: prepended to every batch's key/value;
- left padding (``query_padding_size`` / ``kv_padding_size``): valid rows are shifted to the top;
- masks: ``atten_mask`` of any documented shape, dtype and sparse mode becomes either a boolean
  ``mask`` broadcastable to ``[B, Nq, Sq, Skv]`` or a band (``pre_tokens``/``next_tokens`` with a
  per-batch ``diag_offset``), or both.

Visibility rule.  Query row ``i`` of batch ``b`` may attend key ``j`` iff all of

- ``i < q_lens[b]`` and ``j < kv_lens[b]``;
- ``-pre_tokens <= j - (i + diag_offset[b]) <= next_tokens`` (the band; ``diag_offset[b]`` is
  ``kv_lens[b] - q_lens[b]`` for the bottom-right sparse modes 3/4, 0 for top-left);
- ``mask`` is ``None`` or ``mask[b, h, i, j]`` is False (True = masked, as on the NPU).

Score and output (float32)::

    s[b,h,i,j] = scale * q[b,h,i,:] . k[b,h//g,j,:] + pse[b,h,i,j]      g = Nq // Nkv
    p[b,h,i,j] = exp(s - max_j s)                                          (visible j only)
    out[b,h,i] = (round(p) @ v[b,h//g]) / sum_j p                         0 if no j is visible
    lse[b,h,i] = max_j s + log(sum_j p)                                   -inf if no j is visible

``round`` is the NPU's cast of the unnormalized probabilities to the query dtype before the
second matmul when the query is float16 / bfloat16 (:func:`probs_dtype`; identity otherwise):
the sum is taken before the cast, the matmul accumulates in float32.

Solvers return ``-inf`` (the log of an empty sum) for a fully masked row; the op turns it into
what the NPU writes there (``-3.40e38``, see ``formatting.py``).

Rows that only ``mask`` empties.  The NPU does not drop masked keys: it overwrites their scores
with a finite value (a select), so a row whose every key left by the lengths and the band is
masked is not empty for the kernel.  ``masked_rows`` says what such a row yields (after any
solver, ``core.solve``):

- ``"zero"``: out 0, lse ``-inf`` (the formula's reading; what every other empty row yields);
- ``"uniform"``: every such key scores ``mask_fill``, so the softmax is uniform: out is the mean
  of ``v`` over the keys the lengths and band leave, lse ``mask_fill + log(count)``;
- ``"invalid"``: the row-invalid correction of the prompt kernel: out 0, lse ``+inf``.
Rows ``i >= q_lens[b]`` are not computed: solvers return 0 in out and may return anything in lse,
since the op never formats them out (TND drops them, the padded layouts zero them).

KV storage is either dense (``key``/``value`` ``[B, Nkv, Skv, D]``) or paged
(``key_cache``/``value_cache`` ``[num_blocks, block_size, Nkv, D]`` with ``block_table``
``[B, max_blocks]`` int32: token ``j`` of batch ``b`` lives at row ``j % block_size`` of block
``block_table[b, j // block_size]``).  A paged cache may have a different dtype than float32 (it is
not dequantized eagerly because that would copy the whole cache); its values are exact in float32.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

UNBOUNDED = 2147483647
"""``pre_tokens`` / ``next_tokens`` value meaning "no limit" (the schema default, INT32_MAX)."""


@dataclasses.dataclass
class AttentionProblem:
    """Normalized inference attention: see the module docstring for the exact semantics.

    Attributes
    ----------
    query : Tensor ``[B, Nq, Sq, Dk]``, floating (float16/bfloat16/float32/float64).
    key, value : dense KV ``[B, Nkv, Skv, Dk]`` / ``[B, Nkv, Skv, Dv]``, or None when paged.
    key_cache, value_cache : paged KV ``[num_blocks, block_size, Nkv, Dk]`` / ``[..., Dv]``, or
        None.
    block_table : int32 ``[B, max_blocks]`` when paged, else None.
    block_size : rows per block when paged, else 0.
    q_lens, kv_lens : per-batch valid lengths (python ints), ``q_lens[b] <= Sq``,
        ``kv_lens[b] <= kv_capacity``.
    scale : score multiplier.
    pre_tokens, next_tokens : band limits (``UNBOUNDED`` = none).
    diag_offset : per-batch shift of the band's diagonal (see module docstring).
    mask : optional bool tensor broadcastable to ``[B, Nq, Sq, kv_capacity]``, True = masked.
    pse : optional float tensor broadcastable to ``[B, Nq, Sq, kv_capacity]``, added after scaling.
    return_lse : whether the caller needs lse (solvers may skip it otherwise and return None).
    sink : optional float ``[Nq]`` learnable sink logits (FIA v2 ``learnable_sink``): one extra
        score per head that joins every row's softmax denominator and carries no value,
        ``out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m))``,
        ``m = max(max_j s_j, sink)``; the lse includes it.  Fast kernels that do not handle it
        must decline (``solve`` only offers them problems without a sink).
    out_dtype : the dtype the op will round ``out`` to (informative: solvers return float32).
    masked_rows, mask_fill : what a row that only ``mask`` empties yields (module docstring).
    full_quant : the scales of the full-int8 path (``full_quant.FullQuant``), or None.  Then
        query, key and value are int8 and only ``full_quant.solve`` solves the problem.
    """

    query: torch.Tensor
    q_lens: list
    kv_lens: list
    scale: float
    key: Optional[torch.Tensor] = None
    value: Optional[torch.Tensor] = None
    key_cache: Optional[torch.Tensor] = None
    value_cache: Optional[torch.Tensor] = None
    block_table: Optional[torch.Tensor] = None
    block_size: int = 0
    pre_tokens: int = UNBOUNDED
    next_tokens: int = UNBOUNDED
    diag_offset: Optional[list] = None
    mask: Optional[torch.Tensor] = None
    pse: Optional[torch.Tensor] = None
    return_lse: bool = False
    sink: Optional[torch.Tensor] = None
    out_dtype: Optional[torch.dtype] = None
    masked_rows: str = "zero"
    mask_fill: float = 0.0
    full_quant: Optional[object] = None

    def __post_init__(self) -> None:
        if self.diag_offset is None:
            self.diag_offset = [0] * self.batch

    # -- shape facts -------------------------------------------------------------------------
    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def batch(self) -> int:
        return self.query.shape[0]

    @property
    def num_heads(self) -> int:
        return self.query.shape[1]

    @property
    def q_capacity(self) -> int:
        return self.query.shape[2]

    @property
    def num_kv_heads(self) -> int:
        return (self.key_cache if self.paged else self.key).shape[2 if self.paged else 1]

    @property
    def group(self) -> int:
        """Query heads per KV head: query head ``h`` reads KV head ``h // group``."""
        return self.num_heads // self.num_kv_heads

    @property
    def head_dim_k(self) -> int:
        return self.query.shape[3]

    @property
    def head_dim_v(self) -> int:
        return (self.value_cache if self.paged else self.value).shape[-1]

    @property
    def kv_capacity(self) -> int:
        """Length of the KV axis the mask / pse are indexed by (Skv, or max_blocks*block_size)."""
        if self.paged:
            return self.block_table.shape[1] * self.block_size
        return self.key.shape[2]

    @property
    def banded(self) -> bool:
        """Whether the band can exclude anything (otherwise only lengths and mask decide)."""
        return self.pre_tokens < UNBOUNDED or self.next_tokens < UNBOUNDED


def probs_dtype(problem: AttentionProblem) -> Optional[torch.dtype]:
    """The dtype the probabilities are rounded to before ``P @ V``, or None (no rounding).

    The kernels cast ``exp(s - max)`` (float32) to the input dtype for the second matmul,
    after the row sum (ops-transformer ``prompt_flash_attention_s1s2_bns1_x910.h``
    ``SoftmaxResCopyOut``: ``Cast(..., CAST_ROUND)`` to ``T``; ``incre_flash_attention_split_
    Bbn2s2_Us2.h``: ``Cast(tmpMMResCastTensor, mmResUb, CAST_ROUND)`` to ``KV_T``).  The
    kernels take ``max`` over the key tiles seen so far and rescale earlier tiles in float32,
    which changes a product only in its last bit; ties round away from zero there and to
    even here, which exp values practically never meet.
    """
    dtype = problem.query.dtype
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def round_probs(p: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """``p`` rounded to ``dtype`` and back (``p`` itself when ``dtype`` is None)."""
    return p if dtype is None else p.to(dtype).to(p.dtype)


def gather_paged(cache: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Dense ``[B, Nkv, max_blocks*block_size, D]`` view-copy of a paged cache.

    Block ids past a batch's length may be anything in ``[0, num_blocks)`` or negative padding
    (vllm pads with 0 or -1); they are clamped so the gather stays in bounds -- those rows are
    masked out by ``kv_lens`` anyway.
    """
    ids = block_table.long().clamp(0, cache.shape[0] - 1)
    batch, blocks = ids.shape
    rows = cache[ids.reshape(-1)]                                     # [B*mb, bs, Nkv, D]
    rows = rows.reshape(batch, blocks * block_size, cache.shape[2], cache.shape[3])
    return rows.transpose(1, 2)


def dense_kv(problem: AttentionProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """Key and value as dense ``[B, Nkv, kv_capacity, D]`` tensors (a gather when paged)."""
    if not problem.paged:
        return problem.key, problem.value
    return (gather_paged(problem.key_cache, problem.block_table, problem.block_size),
            gather_paged(problem.value_cache, problem.block_table, problem.block_size))


def visible(problem: AttentionProblem, device: Optional[torch.device] = None, *,
            use_mask: bool = True) -> torch.Tensor:
    """Boolean ``[B, 1 or Nq, Sq, kv_capacity]``: True where query row i may attend key j.

    Combines the lengths, the band and (unless ``use_mask`` is False) ``mask`` exactly as the
    module docstring states.
    """
    device = problem.query.device if device is None else device
    sq, skv = problem.q_capacity, problem.kv_capacity
    i = torch.arange(sq, device=device).view(1, 1, sq, 1)
    j = torch.arange(skv, device=device).view(1, 1, 1, skv)
    q_lens = torch.tensor(problem.q_lens, device=device).view(-1, 1, 1, 1)
    kv_lens = torch.tensor(problem.kv_lens, device=device).view(-1, 1, 1, 1)
    ok = (i < q_lens) & (j < kv_lens)
    if problem.banded:
        offset = torch.tensor(problem.diag_offset, device=device).view(-1, 1, 1, 1)
        rel = j - (i + offset)
        ok = ok & (rel >= -problem.pre_tokens) & (rel <= problem.next_tokens)
    if use_mask and problem.mask is not None:
        ok = ok & ~problem.mask.to(device=device, dtype=torch.bool)
    return ok
