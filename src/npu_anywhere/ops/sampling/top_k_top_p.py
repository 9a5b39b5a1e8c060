"""torch_npu.npu_top_k_top_p: top-k then top-p (nucleus) filtering of logits.

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_top_k_top_p.md and
hicann ops-nn index/apply_top_k_top_p_with_sorted/docs/aclnnApplyTopKTopP.md)::

    s, order = sort(logits, -1, ascending, stable)         # equal values: lower index first
    t = s[b, V - k[b]]                                     # the k-th largest value
    s[s < t] = -inf                                        # values equal to t all stay
    c = cumsum(softmax(s, -1), -1)                         # from the smallest probability up
    s[c <= 1 - p[b]] = -inf, except the last (largest) entry of each row
    out[b, order[b, v]] = s[b, v]

Numerics follow the kernel (ops-nn op_kernel/apply_top_k_top_p_with_sorted.h): the softmax and
its running sum are float32 for every input dtype, and the threshold ``1 - p`` is formed in
float32 from ``p`` converted to float32 (op-plugin's CPU golden forms it in ``p``'s dtype, which
differs for float16/bfloat16 ``p``).  Kept entries are the input values, bit for bit.

Per-row skip rule (aclnnApplyTopKTopP.md, the kernel's ``kValue <= 0 || kValue >= vocabSize``):
``k[b] <= 0`` or ``k[b] >= V`` filters nothing by top-k in that row.  With ``V == 1`` the input
is copied (the aclnn wrapper's ``isLastDimSizeOne`` branch).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_top_k_top_p"
SCHEMA = "npu_top_k_top_p(Tensor logits, Tensor? p=None, Tensor? k=None) -> Tensor"

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def check_top_k_top_p(logits, p=None, k=None) -> None:
    targets.expect_supported(OP, _SUPPORTED)
    checks.expect_dtype(logits, FLOATS, OP, "logits")
    checks.expect_dim(logits, 2, OP, "logits")
    checks.expect(p is not None or k is not None, OP, "p and k", "not both None",
                  "p=None and k=None", ValueError)
    rows = logits.shape[0]
    if p is not None:
        checks.expect_dtype(p, FLOATS, OP, "p")
        checks.expect_same_dtype({"logits": logits, "p": p}, OP)
        checks.expect(p.dim() == 1 and p.shape[0] == rows, OP, "p",
                      lambda: f"a 1-D tensor of logits.size(0) = {rows} values",
                      lambda: f"shape {tuple(p.shape)}", RuntimeError)
        checks.expect_same_device({"logits": logits, "p": p}, OP)
    if k is not None:
        checks.expect_dtype(k, (torch.int32,), OP, "k")
        checks.expect(k.dim() == 1 and k.shape[0] == rows, OP, "k",
                      lambda: f"a 1-D tensor of logits.size(0) = {rows} values",
                      lambda: f"shape {tuple(k.shape)}", RuntimeError)
        checks.expect_same_device({"logits": logits, "k": k}, OP)


def keep_mask_sorted(sorted_f32: torch.Tensor, p, k) -> torch.Tensor:
    """Which entries of the ascending-sorted float32 rows survive top-k, then top-p."""
    vocab = sorted_f32.shape[-1]
    keep = torch.ones_like(sorted_f32, dtype=torch.bool)
    if k is not None:
        kk = k.to(torch.int64)
        active = (kk > 0) & (kk < vocab)
        # A skipped row reads its threshold at position 0 (the row's minimum): nothing drops.
        pos = torch.where(active, vocab - kk, torch.zeros_like(kk))
        kth = sorted_f32.gather(1, pos.unsqueeze(1))
        keep = sorted_f32 >= kth
    if p is not None:
        masked = sorted_f32.masked_fill(~keep, float("-inf"))
        running = torch.softmax(masked, dim=-1).cumsum(dim=-1)
        limit = (1.0 - p.to(torch.float32)).unsqueeze(1)
        drop = running <= limit
        drop[:, -1] = False
        keep = keep & ~drop
    return keep


def top_k_top_p_reference(logits, p=None, k=None):
    vocab = logits.shape[-1]
    if vocab <= 1 or logits.numel() == 0:
        return logits.clone()
    values, order = torch.sort(logits, dim=-1, stable=True)
    keep = keep_mask_sorted(values.to(torch.float32), p, k)
    filtered = values.masked_fill(~keep, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, filtered)


def _fake(logits, p=None, k=None):
    return torch.empty_like(logits)


top_k_top_p_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_top_k_top_p,
                       reference=top_k_top_p_reference, fake=_fake, metadata_check=True,
                       info=OpInfo(api="torch_npu"))
top_k_top_p_op.forbid_autograd("torch_npu defines no backward for it (op-plugin's "
                               "derivatives.yaml lists none)")


# -- the partial-sort provider -----------------------------------------------------------------
#
# With a top-k in every row only the k largest entries can survive, so a ``topk`` of the
# largest k replaces the full sort of the row (V = 150k against k <= 1024 in vLLM's decode
# step).  The survivors are ordered by (value, index) -- a sort of the few by index, then a
# stable sort by value -- which is the reference's stable order restricted to them; the
# softmax over the survivors equals the reference's masked softmax up to the order of its sum.

PARTIAL_MIN_VOCAB = 4096


def _partial_supports(logits, p=None, k=None):
    if k is None:
        return "top-p without top-k ranks the whole row"
    if logits.shape[-1] < PARTIAL_MIN_VOCAB:
        return f"vocab below {PARTIAL_MIN_VOCAB}: the full sort is as fast"
    return None


def _partial_top_k_top_p(logits, p=None, k=None):
    vocab = logits.shape[-1]
    kk = k.to(torch.int64)
    if logits.shape[0] == 0:
        return logits.clone()
    k_max = int(kk.max())
    if int(kk.min()) <= 0 or k_max >= vocab or 4 * k_max > vocab:
        return top_k_top_p_reference(logits, p, k)       # a row without top-k: full sort
    top_values, top_index = torch.topk(logits, k_max, dim=-1, sorted=True)
    kth = top_values.gather(1, (kk - 1).unsqueeze(1))
    if bool(((logits >= kth).sum(dim=-1) > k_max).any()):
        return top_k_top_p_reference(logits, p, k)       # ties at the threshold beyond k_max
    if p is None:
        return logits.masked_fill(logits < kth, float("-inf"))
    by_index, perm = torch.sort(top_index, dim=-1)
    values, perm2 = torch.sort(top_values.gather(1, perm), dim=-1, stable=True)
    index = by_index.gather(1, perm2)
    # Within the k_max survivors the k-th largest sits at k_max - k: the same rule applies.
    keep = keep_mask_sorted(values.to(torch.float32), p, k)
    out = torch.full_like(logits, float("-inf"))
    return out.scatter_(1, index, values.masked_fill(~keep, float("-inf")))


top_k_top_p_op.add_provider("partial_sort", _partial_top_k_top_p, _partial_supports)


def npu_top_k_top_p(logits, p=None, k=None):
    """Mask logits outside each row's top-k and then outside its top-p nucleus with ``-inf``.

    Formula (seed 004, aclnnApplyTopKTopP.md)::

        s, order = sort(logits[b], ascending, stable)
        s[s < s[V - k[b]]] = -inf                       # ties with the k-th largest stay
        c = cumsum(softmax(s))                          # smallest probability first
        s[c <= 1 - p[b]] = -inf  (the largest entry always stays)
        out[b, order] = s

    Parameters
    ----------
    logits : Tensor
        ``(B, V)``, float32, float16 or bfloat16; non-contiguous is fine.
    p : Tensor, optional
        ``(B,)`` top-p thresholds in ``[0, 1]``, logits' dtype.  None skips top-p.
    k : Tensor, optional
        ``(B,)`` int32 top-k values.  None skips top-k.  ``p`` and ``k`` may not both be None.
        The torch_npu doc gives ``[1, 1024]`` with ``max(k) <= V``; per the kernel, a row with
        ``k <= 0`` or ``k >= V`` is not top-k filtered.

    Returns
    -------
    Tensor
        logits' shape and dtype: kept entries are the input values unchanged, removed ones
        ``-inf``.

    Constraints
    -----------
    Values of ``p`` and ``k`` are not checked (nor on the NPU).  Strict mode: A2, A3, 950.

    Notes
    -----
    Ties: every value equal to the k-th largest survives top-k (so a row may keep more than
    ``k``); among equal values the lower index is summed first in the ascending running sum,
    so top-p removes it first.  Softmax, running sum and ``1 - p`` are float32, as in ops-nn
    op_kernel/apply_top_k_top_p_with_sorted.h.  No backward.

    Speed: when every row has a top-k and ``V >= 4096`` the ``partial_sort`` provider ranks
    only the ``max(k)`` largest entries of each row (``torch.topk``) instead of sorting whole
    rows; rows without a top-k, or ties at the threshold beyond ``max(k)``, take the reference.

    Examples
    --------
    >>> logits = torch.tensor([[1.0, 3.0, 2.0, 3.0]])
    >>> npu_anywhere.npu_top_k_top_p(logits, k=torch.tensor([2], dtype=torch.int32))
    tensor([[-inf, 3., -inf, 3.]])
    """
    return top_k_top_p_op(logits, p, k)


TORCH_NPU_FUNCTIONS = {OP: npu_top_k_top_p}
