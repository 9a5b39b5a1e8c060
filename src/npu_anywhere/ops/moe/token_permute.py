"""torch_npu.npu_moe_token_permute / npu_moe_token_unpermute and their backward ops.

Formula (seed 004; op-plugin test/test_custom_ops/test_npu_moe_token_permute_and_unpermute.py,
Megatron's ``permute`` / ``unpermute`` with the index the NPU returns)::

    K = indices.size(1) (1 for 1-D indices);  perm = stable argsort(indices.flat)
    R = num_out_tokens rows: NK if None or 0, min(n, NK) if n > 0, NK + n if n < 0
    permuted_tokens[i] = tokens[perm[i] // K]               i < R
    sorted_indices = argsort(perm) = the inverse permutation: the row of flat choice n*K + k
    unpermuted[n] = sum_k probs[n, k] * permuted_tokens[sorted_indices[n*K + k]]
                    (a row index >= permuted_tokens.size(0), i.e. a dropped choice, adds 0)

Backward (derivatives.yaml): d tokens = unpermute of the gradient without probs;
d permuted_tokens[sorted_indices[n*K+k]] = probs[n, k] * g[n];
d probs[n, k] = <g[n], permuted_tokens[sorted_indices[n*K+k]]>.
Sums run in float32 (float64 kept) and round once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...kernels.cpu_memory import gather_rows
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import (compute_dtype, expect_float, inverse_permutation, stable_sort,
                       weighted_row_sum)

PERMUTE = "npu_moe_token_permute"
PERMUTE_SCHEMA = ("npu_moe_token_permute(Tensor tokens, Tensor indices, int? num_out_tokens=None, "
                  "bool padded_mode=False) -> (Tensor, Tensor)")
PERMUTE_GRAD = "npu_moe_token_permute_grad"
PERMUTE_GRAD_SCHEMA = ("npu_moe_token_permute_grad(Tensor tokens, Tensor grad_permuted_tokens, "
                       "Tensor indices, Tensor sorted_indices, bool padded_mode=False) -> Tensor")
UNPERMUTE = "npu_moe_token_unpermute"
UNPERMUTE_SCHEMA = ("npu_moe_token_unpermute(Tensor permuted_tokens, Tensor sorted_indices, "
                    "Tensor? probs=None, bool padded_mode=False, int[]? restore_shape=None) "
                    "-> Tensor")
UNPERMUTE_GRAD = "npu_moe_token_unpermute_grad"
UNPERMUTE_GRAD_SCHEMA = ("npu_moe_token_unpermute_grad(Tensor permuted_tokens, "
                         "Tensor grad_unpermuted_tokens, Tensor sorted_indices, Tensor? probs=None, "
                         "bool padded_mode=False, int[]? restore_shape=None) -> (Tensor, Tensor)")
UNPERMUTE_GRAD_V2 = "npu_moe_token_unpermute_grad_v2"
UNPERMUTE_GRAD_V2_SCHEMA = ("npu_moe_token_unpermute_grad_v2(Tensor grad_unpermuted_tokens, "
                            "Tensor sorted_indices, int permuted_tokens_size_0, "
                            "ScalarType permuted_tokens_dtype, Tensor? probs=None, "
                            "bool padded_mode=False, int[]? restore_shape=None, "
                            "Tensor? permuted_tokens=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_INDEX_DTYPES = (torch.int32, torch.int64)
_MAX_INDICES = 16777215
_MAX_TOPK = 512


def _out_rows(num_out_tokens, total: int) -> int:
    n = 0 if num_out_tokens is None else num_out_tokens
    if n > 0:
        return min(n, total)
    return max(total + n, 0)


def _topk(indices) -> int:
    return 1 if indices.dim() == 1 else indices.shape[1]


def _expect_not_padded(op, padded_mode):
    checks.expect(not padded_mode, op, "padded_mode", "False (the only mode the NPU kernel has)",
                  repr(padded_mode), ValueError)


def _expect_floats(op, named):
    for name, t in named.items():
        expect_float(op, name, t)
        checks.expect_dim(t, 2, op, name)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None:
        for name, t in named.items():
            checks.expect_dtype(t, (torch.bfloat16,), op, name)   # seed 004: bfloat16 only


def _check_indices(op, indices):
    checks.expect(indices.dim() in (1, 2), op, "indices", "a 1-D or 2-D tensor",
                  lambda: f"shape {tuple(indices.shape)}", ValueError)
    checks.expect_dtype(indices, _INDEX_DTYPES, op, "indices")
    checks.expect(indices.numel() < _MAX_INDICES, op, "indices", "fewer than 16777215 elements",
                  lambda: f"{indices.numel()}", ValueError)
    checks.expect(_topk(indices) <= _MAX_TOPK, op, "indices", "at most 512 columns (topK)",
                  lambda: f"{_topk(indices)}", ValueError)


def _check_sorted(op, sorted_indices):
    checks.expect_dim(sorted_indices, 1, op, "sorted_indices")
    checks.expect_dtype(sorted_indices, _INDEX_DTYPES, op, "sorted_indices")


def check_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    _expect_not_padded(PERMUTE, padded_mode)
    _check_indices(PERMUTE, indices)
    _expect_floats(PERMUTE, {"tokens": tokens})
    checks.expect(indices.shape[0] == tokens.shape[0], PERMUTE, "indices",
                  lambda: f"tokens.size(0) = {tokens.shape[0]} rows",
                  lambda: f"{indices.shape[0]} rows", RuntimeError)


def permute_reference(tokens, indices, num_out_tokens=None, padded_mode=False):
    k = _topk(indices)
    _, perm = stable_sort(indices.reshape(-1).to(torch.int64))
    rows = _out_rows(num_out_tokens, perm.numel())
    permuted = gather_rows(tokens, perm[:rows] // k)
    return permuted, inverse_permutation(perm).to(torch.int32)


def _gather_rows(table, sorted_indices, k):
    """``table[sorted_indices]`` as (N, K, H) in the compute dtype; rows past the table are 0."""
    rows, hidden = table.shape
    idx = sorted_indices.to(torch.int64)
    ct = compute_dtype(table.dtype)
    padded = torch.cat([table.to(ct), table.new_zeros(1, hidden, dtype=ct)])
    safe = torch.where((idx >= 0) & (idx < rows), idx, rows)
    return padded.index_select(0, safe).view(-1, k, hidden)


def check_permute_grad(tokens, grad_permuted_tokens, indices, sorted_indices, padded_mode=False):
    op = PERMUTE_GRAD
    _expect_not_padded(op, padded_mode)
    _check_indices(op, indices)
    _check_sorted(op, sorted_indices)
    _expect_floats(op, {"tokens": tokens, "grad_permuted_tokens": grad_permuted_tokens})
    checks.expect(sorted_indices.numel() == indices.numel(), op, "sorted_indices",
                  lambda: f"indices.numel() = {indices.numel()} elements",
                  lambda: f"{sorted_indices.numel()}", RuntimeError)


def permute_grad_reference(tokens, grad_permuted_tokens, indices, sorted_indices,
                           padded_mode=False):
    picked = _gather_rows(grad_permuted_tokens, sorted_indices, _topk(indices))
    return picked.sum(dim=1).to(tokens.dtype)


def _check_top_k(op, sorted_indices, probs) -> int:
    """topK (probs' second dim, else 1), with probs and sorted_indices consistent with it."""
    k = 1 if probs is None else probs.shape[1]
    checks.expect(probs is None or probs.numel() == sorted_indices.numel(), op, "probs",
                  lambda: f"sorted_indices.numel() = {sorted_indices.numel()} elements",
                  lambda: f"shape {tuple(probs.shape)}", RuntimeError)
    checks.expect(sorted_indices.numel() % k == 0, op, "sorted_indices",
                  f"a length divisible by topK = {k}", lambda: f"{sorted_indices.numel()}",
                  RuntimeError)
    return k


def check_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                    restore_shape=None):
    _check_unpermute(UNPERMUTE, permuted_tokens, sorted_indices, probs, padded_mode)


def _check_unpermute(op, permuted_tokens, sorted_indices, probs, padded_mode):
    _expect_not_padded(op, padded_mode)
    _check_sorted(op, sorted_indices)
    named = {"permuted_tokens": permuted_tokens}
    if probs is not None:
        named["probs"] = probs
    _expect_floats(op, named)
    k = _check_top_k(op, sorted_indices, probs)


def unpermute_reference(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                        restore_shape=None):
    rows, hidden = permuted_tokens.shape
    k = 1 if probs is None else probs.shape[1]
    ct = compute_dtype(permuted_tokens.dtype)
    idx = sorted_indices.to(torch.int64).view(-1, k)
    weights = None if probs is None else probs.to(ct)
    if rows == 0 or k == 0:                  # every choice dropped: nothing to add
        return permuted_tokens.new_zeros((idx.shape[0], hidden))
    # One gathered (N, H) slice per k, summed in k order (:func:`weighted_row_sum`): no
    # (N, K, H) temporary, nor a widened copy of the table.
    valid = (idx >= 0) & (idx < rows)                       # False: a dropped choice adds 0
    # Eager calls skip the masking pass when nothing was dropped (a compiled graph cannot
    # branch on data, and there the mask fuses into the same loop for free).
    masked = torch.compiler.is_compiling() or not bool(valid.all())
    total = weighted_row_sum(permuted_tokens, idx.clamp(0, rows - 1),
                             ~valid if masked else None, weights, ct)
    return total.to(permuted_tokens.dtype)


def check_unpermute_grad(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs=None,
                         padded_mode=False, restore_shape=None):
    op = UNPERMUTE_GRAD
    _check_unpermute(op, permuted_tokens, sorted_indices, probs, padded_mode)
    _expect_floats(op, {"grad_unpermuted_tokens": grad_unpermuted_tokens})
    k = 1 if probs is None else probs.shape[1]
    want = (sorted_indices.numel() // k, permuted_tokens.shape[1])
    checks.expect(tuple(grad_unpermuted_tokens.shape) == want, op, "grad_unpermuted_tokens",
                  f"shape {want}", lambda: f"shape {tuple(grad_unpermuted_tokens.shape)}",
                  RuntimeError)


def unpermute_grad_reference(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs=None,
                             padded_mode=False, restore_shape=None):
    return _unpermute_grad(grad_unpermuted_tokens, sorted_indices, permuted_tokens.shape[0],
                           permuted_tokens.dtype, probs, permuted_tokens)


def _unpermute_grad(grad_unpermuted_tokens, sorted_indices, rows, dtype, probs, permuted_tokens):
    """Both backward ops: the table is only read for ``d probs`` (so None without probs)."""
    hidden = grad_unpermuted_tokens.shape[1]
    k = 1 if probs is None else probs.shape[1]
    ct = compute_dtype(dtype)
    g = grad_unpermuted_tokens.to(ct)
    idx = sorted_indices.to(torch.int64)
    safe = torch.where((idx >= 0) & (idx < rows), idx, rows)
    contrib = g.unsqueeze(1).expand(-1, k, -1)
    if probs is not None:
        contrib = contrib * probs.to(ct).unsqueeze(-1)
    buf = torch.zeros(rows + 1, hidden, dtype=ct, device=g.device)
    buf.index_copy_(0, safe, contrib.reshape(-1, hidden))      # the spare row takes drops
    grad_permuted = buf[:rows].to(dtype)
    if probs is None:
        return grad_permuted, g.new_empty((0,), dtype=grad_unpermuted_tokens.dtype)
    picked = _gather_rows(permuted_tokens, sorted_indices, k)              # (N, K, H)
    grad_probs = torch.bmm(picked, g.unsqueeze(-1)).squeeze(-1)
    return grad_permuted, grad_probs.to(probs.dtype)


def check_unpermute_grad_v2(grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0,
                            permuted_tokens_dtype, probs=None, padded_mode=False,
                            restore_shape=None, permuted_tokens=None):
    op = UNPERMUTE_GRAD_V2
    _expect_not_padded(op, padded_mode)
    _check_sorted(op, sorted_indices)
    checks.expect(permuted_tokens_dtype.is_floating_point, op, "permuted_tokens_dtype",
                  "a floating dtype", str(permuted_tokens_dtype), TypeError)
    checks.expect(permuted_tokens_size_0 >= 0, op, "permuted_tokens_size_0", ">= 0",
                  str(permuted_tokens_size_0), ValueError)
    # d probs reads the expert outputs, so the forward keeps them only when probs is given.
    checks.expect(probs is None or permuted_tokens is not None, op, "permuted_tokens",
                  "a tensor when probs is given", "None", ValueError)
    named = {"grad_unpermuted_tokens": grad_unpermuted_tokens}
    if probs is not None:
        named["probs"] = probs
    _expect_floats(op, named)
    k = _check_top_k(op, sorted_indices, probs)
    checks.expect(grad_unpermuted_tokens.shape[0] == sorted_indices.numel() // k, op,
                  "grad_unpermuted_tokens", lambda: f"{sorted_indices.numel() // k} rows",
                  lambda: f"shape {tuple(grad_unpermuted_tokens.shape)}", RuntimeError)
    if permuted_tokens is not None:
        want = (permuted_tokens_size_0, grad_unpermuted_tokens.shape[1])
        checks.expect(tuple(permuted_tokens.shape) == want, op, "permuted_tokens",
                      f"shape {want}", lambda: f"shape {tuple(permuted_tokens.shape)}",
                      RuntimeError)


def unpermute_grad_v2_reference(grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0,
                                permuted_tokens_dtype, probs=None, padded_mode=False,
                                restore_shape=None, permuted_tokens=None):
    return _unpermute_grad(grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0,
                           permuted_tokens_dtype, probs, permuted_tokens)


permute_op = NpuOp(PERMUTE_SCHEMA, namespace=TORCH_NPU_NS, check=check_permute,
                   reference=permute_reference, metadata_check=True, info=OpInfo(api="torch_npu"))
permute_grad_op = NpuOp(PERMUTE_GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_permute_grad,
                        reference=permute_grad_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu", backward_of=PERMUTE))
def unpermute_fake(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                   restore_shape=None):
    k = 1 if probs is None else probs.shape[1]
    return permuted_tokens.new_empty((sorted_indices.shape[0] // k, permuted_tokens.shape[1]))


unpermute_op = NpuOp(UNPERMUTE_SCHEMA, namespace=TORCH_NPU_NS, check=check_unpermute,
                     reference=unpermute_reference, fake=unpermute_fake, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
unpermute_grad_op = NpuOp(UNPERMUTE_GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                          check=check_unpermute_grad, reference=unpermute_grad_reference,
                          metadata_check=True, info=OpInfo(api="torch_npu",
                                                           backward_of=UNPERMUTE))
unpermute_grad_v2_op = NpuOp(UNPERMUTE_GRAD_V2_SCHEMA, namespace=TORCH_NPU_NS,
                             check=check_unpermute_grad_v2, reference=unpermute_grad_v2_reference,
                             metadata_check=True,
                             info=OpInfo(api="torch_npu", backward_of=UNPERMUTE))


def _permute_setup(ctx, inputs, output):
    tokens, indices, _num_out, padded_mode = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(tokens, indices, output[1])
    ctx.padded_mode = padded_mode


def _permute_backward(ctx, grad_permuted, _grad_index):
    tokens, indices, sorted_indices = ctx.saved_tensors
    if grad_permuted is None:
        return None, None, None, None
    grad = permute_grad_op(tokens, grad_permuted.contiguous(), indices, sorted_indices,
                           ctx.padded_mode)
    return grad, None, None, None


def _unpermute_setup(ctx, inputs, output):
    permuted, sorted_indices, probs, padded_mode, restore_shape = inputs
    # As op-plugin's _npu_moe_token_unpermute on A2/A3: the expert outputs are kept for the
    # backward only when probs is given (d permuted_tokens needs just their row count and dtype).
    ctx.save_for_backward(permuted if probs is not None else None, sorted_indices, probs)
    ctx.table = (permuted.shape[0], permuted.dtype)
    ctx.args = (padded_mode, restore_shape)


def _unpermute_backward(ctx, grad):
    permuted, sorted_indices, probs = ctx.saved_tensors
    rows, dtype = ctx.table
    grad_permuted, grad_probs = unpermute_grad_v2_op(grad.contiguous(), sorted_indices, rows,
                                                     dtype, probs, *ctx.args, permuted)
    return grad_permuted, None, (grad_probs if probs is not None else None), None, None


permute_op.set_autograd(setup_context=_permute_setup, backward=_permute_backward)
unpermute_op.set_autograd(setup_context=_unpermute_setup, backward=_unpermute_backward)


def _unpermute_key(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                   restore_shape=None):
    return ("unpermute", permuted_tokens.dtype, None if probs is None else probs.dtype,
            1 if probs is None else probs.shape[1], permuted_tokens.shape[1],
            permuted_tokens.device.type)


# The reference's k loop fused into one pass over the output (the eager loop makes about four
# passes over (N, H) per k).
compiled.register(unpermute_op, key=_unpermute_key)


def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    """Group the tokens by expert: a stable sort of the flattened expert ids.

    Formula::

        perm = stable argsort(indices.flat);  K = indices.size(1)
        permuted_tokens = tokens[perm[:R] // K];   sorted_indices = argsort(perm)

    Parameters
    ----------
    tokens : Tensor
        ``(num_tokens, hidden)``; bfloat16 on the NPU (float16/float32 also accepted here
        outside strict mode).
    indices : Tensor
        ``(num_tokens, topK)`` or ``(num_tokens,)``, int64 or int32; topK <= 512.
    num_out_tokens : int, optional
        Rows kept: all for None or 0, the first ``n`` if positive, all but the last ``-n`` if
        negative.
    padded_mode : bool
        Only False (seed 004: "目前仅支持为False").

    Returns
    -------
    (permuted_tokens, sorted_indices) : ``(R, hidden)`` in ``tokens``' dtype, and int32
    ``(num_tokens * topK,)``: the row of ``permuted_tokens`` each flat choice ``n*K + k`` went
    to (the inverse of the sort), which :func:`npu_moe_token_unpermute` takes.

    Notes
    -----
    Differentiable in ``tokens`` through ``npu_moe_token_permute_grad``.  Strict mode: A2, A3,
    bfloat16 only.
    """
    return permute_op(tokens, indices, num_out_tokens, padded_mode)


def npu_moe_token_permute_grad(tokens, grad_permuted_tokens, indices, sorted_indices,
                               padded_mode=False):
    """Backward of :func:`npu_moe_token_permute`: ``d tokens[n] = sum_k g[sorted_indices[n*K+k]]``
    (choices dropped by ``num_out_tokens`` add nothing); ``tokens``' shape and dtype."""
    return permute_grad_op(tokens, grad_permuted_tokens, indices, sorted_indices, padded_mode)


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                            restore_shape=None):
    """Bring expert outputs back to token order and sum the top-k, weighted by ``probs``.

    Formula::

        unpermuted[n] = sum_k probs[n, k] * permuted_tokens[sorted_indices[n * K + k]]

    ``K`` is ``probs.size(1)`` (1 without probs); an index past ``permuted_tokens.size(0)``
    (a choice dropped by ``num_out_tokens``) adds 0.  Returns ``(len(sorted_indices) // K,
    hidden)`` in ``permuted_tokens``' dtype (float32 sums, one rounding).  ``restore_shape`` is
    only read by padded mode, which the NPU does not have (``padded_mode`` must be False: seed
    004 "目前仅支持padded_mode为False"; ops-transformer moe/moe_token_unpermute/README.md,
    paddedMode "目前仅支持false", restoreShapeOptional "目前仅支持nullptr"; its kernel never
    reads either attribute and its Ascend 950 path rejects paddedMode).  The padded
    unpermute with a restore shape is :func:`npu_moe_token_unpermute_with_routing_map`'s
    ``drop_and_pad=True``.
    Differentiable in ``permuted_tokens`` and ``probs`` through ``npu_moe_token_unpermute_grad_v2``
    (the expert outputs are kept for it only when ``probs`` is given).
    Strict mode: A2, A3, bfloat16 only.
    """
    return unpermute_op(permuted_tokens, sorted_indices, probs, padded_mode, restore_shape)


def npu_moe_token_unpermute_grad(permuted_tokens, grad_unpermuted_tokens, sorted_indices,
                                 probs=None, padded_mode=False, restore_shape=None):
    """Backward of :func:`npu_moe_token_unpermute`: ``(d permuted_tokens, d probs)``.

    ``d permuted_tokens[sorted_indices[n*K+k]] = probs[n, k] * g[n]`` (rows no choice maps to are
    0); ``d probs[n, k] = <g[n], permuted_tokens[sorted_indices[n*K+k]]>``, an empty ``(0,)``
    tensor when ``probs`` is None.
    """
    return unpermute_grad_op(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs,
                             padded_mode, restore_shape)


def npu_moe_token_unpermute_grad_v2(grad_unpermuted_tokens, sorted_indices,
                                    permuted_tokens_size_0, permuted_tokens_dtype, probs=None,
                                    padded_mode=False, restore_shape=None, permuted_tokens=None):
    """Backward of :func:`npu_moe_token_unpermute` from the table's row count and dtype.

    The same ``(d permuted_tokens, d probs)`` as :func:`npu_moe_token_unpermute_grad`, with
    ``d permuted_tokens`` of shape ``(permuted_tokens_size_0, hidden)`` and dtype
    ``permuted_tokens_dtype``; ``permuted_tokens`` is only read for ``d probs`` and may be None
    without probs (op-plugin's autograd then does not keep it alive).
    """
    return unpermute_grad_v2_op(grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0,
                                permuted_tokens_dtype, probs, padded_mode, restore_shape,
                                permuted_tokens)


TORCH_NPU_FUNCTIONS = {
    PERMUTE: npu_moe_token_permute,
    PERMUTE_GRAD: npu_moe_token_permute_grad,
    UNPERMUTE: npu_moe_token_unpermute,
    UNPERMUTE_GRAD: npu_moe_token_unpermute_grad,
    UNPERMUTE_GRAD_V2: npu_moe_token_unpermute_grad_v2,
}
