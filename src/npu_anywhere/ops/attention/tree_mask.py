"""sparse_mode 9 (treeMask): the tree attention mask of speculative decoding, MLA only.

A verification step scores ``Q_S`` draft tokens that form a tree; each draft token may attend
the whole accepted context and, among the drafts, only its ancestors and itself.  The drafts are
the last ``Q_S`` keys of each batch's KV, so the user passes only the ``[Q_S, Q_S]`` part::

    visible(i, j) = j <  kv_len - q_len                        (context: always)
                    or not tree[b, i, j - (kv_len - q_len)]    (drafts: the tree, True = masked)
                    and j <= i + kv_len - q_len                (never a later position)

Shapes (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md``,
sparse_mode table and 约束说明): ``(B, Q_S, Q_S)`` for BSH / BSND / BNSD (and their ``_NBSD``
outputs), ``(sum_b q_len_b**2,)`` for TND / NTD: batch ``b``'s ``[q_len_b, q_len_b]`` block
row-major after the blocks of the batches before it.  Restrictions (same page and
ops-transformer ``attention/fused_infer_attention_score/op_host/checkers/mask_checker.cpp``,
``CheckFeatureSparseMode`` / ``GetMaskInfo``): query_rope and key_rope required; no left
padding, pse_shift, shared prefix or int8 output; ``q_len <= kv_len`` per batch (batches with
``kv_len == 0`` are exempt); a mask of 3 dims (1 for TND / NTD).  The v2 page's "GQA伪量化+KV NZ
格式约束" also lists sparse_mode 9 for a call without rope; the host checker rejects any tree
mask without query_rope / key_rope, and so do we.

The alignment.  No public kernel source shows the offset at which the kernel reads the tree
mask; it follows from the host code: the tiling gives sparse_mode 9 the causal band of modes
2 / 3 (``fused_infer_attention_score_tiling_info_parser.cpp``, ``UpdatePreNextTokenBySparseMode``:
``nextToken = 0, preToken = INT_MAX``), strides the mask ``Q_S x Q_S`` per batch
(``GetAttenMaskSparse9Info``) and requires ``q_len <= kv_len`` -- which only the bottom-right
diagonal needs.  Under that band the keys before ``kv_len - q_len`` are visible to every row
and the last ``q_len`` keys form the triangle the tree refines, the layout other frameworks use
for the same compact tree mask (the draft-token block, context columns all visible).
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks
from .problem import UNBOUNDED

SPARSE_MODE_TREE = 9
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)


def check_features(op: str, p: dict, *, rope: bool, left_padding: bool, prefix: bool,
                   quant_out: bool) -> None:
    """The features sparse_mode 9 excludes, each named (``mask_checker.cpp`` order)."""
    checks.expect(rope, op, "sparse_mode",
                  "9 (treeMask) only with query_rope and key_rope (MLA)", SPARSE_MODE_TREE,
                  ValueError)
    checks.expect(not left_padding, op, "query_padding_size",
                  "None with sparse_mode 9 (no left padding)", "a tensor", ValueError)
    checks.expect(p["pse_shift"] is None, op, "pse_shift", "None with sparse_mode 9",
                  "a tensor", ValueError)
    checks.expect(not prefix, op, "key_shared_prefix", "None with sparse_mode 9",
                  "a tensor", ValueError)
    checks.expect(not quant_out, op, "quant_scale2",
                  "None with sparse_mode 9 (no int8 output)", "a tensor", ValueError)


def band_and_mask(op: str, atten_mask: Optional[torch.Tensor], *, batch: int, sq: int, skv: int,
                  q_lens: list, kv_lens: list, packed: bool, lengths_known: bool) -> dict:
    """The problem's band and mask fields for sparse_mode 9 (see the module docstring).

    ``lengths_known`` is False while a traced call's lengths are not known yet: the checks that
    need their values wait for the eager kernel (the tiling skips them likewise)."""
    checks.expect(atten_mask is not None, op, "atten_mask",
                  "a tree mask for sparse_mode 9", None, ValueError)
    checks.expect_dtype(atten_mask, MASK_DTYPES, op, "atten_mask")
    shape = tuple(atten_mask.shape)
    if packed:
        want = sum(n * n for n in q_lens)
        checks.expect(atten_mask.dim() == 1 and (not lengths_known or shape[0] == want), op,
                      "atten_mask",
                      lambda: f"shape (sum of q_len**2,) = ({want},) for sparse_mode 9 with a "
                              "TND / NTD layout", shape, RuntimeError)
    else:
        checks.expect(shape == (batch, sq, sq), op, "atten_mask",
                      lambda: f"shape (B, Q_S, Q_S) = ({batch}, {sq}, {sq}) for sparse_mode 9",
                      shape, RuntimeError)
    if lengths_known:
        bad = [b for b, (q, k) in enumerate(zip(q_lens, kv_lens)) if k > 0 and q > k]
        checks.expect(not bad, op, "actual_seq_lengths_kv",
                      lambda: "kv lengths >= query lengths in every batch for sparse_mode 9 "
                              f"(batch {bad[0]}: {q_lens[bad[0]]} queries)",
                      lambda: kv_lens[bad[0]], ValueError)
    offsets = [k - q for q, k in zip(q_lens, kv_lens)]
    mask = torch.zeros(batch, 1, sq, skv, dtype=torch.bool, device=atten_mask.device)
    if lengths_known:
        tree = atten_mask.to(torch.bool)
        start = 0
        for b, (q, off) in enumerate(zip(q_lens, offsets)):
            if packed:
                block = tree[start:start + q * q].reshape(q, q)
                start += q * q
            else:
                block = tree[b, :q, :q]
            if q > 0 and off >= 0:
                mask[b, 0, :q, off:off + q] = block
    return {"mask": mask, "pre_tokens": UNBOUNDED, "next_tokens": 0, "diag_offset": offsets}
