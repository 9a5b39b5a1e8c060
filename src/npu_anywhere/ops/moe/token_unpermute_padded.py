"""The ``levels`` provider: a fast path for the padded mode (``drop_and_pad=True``) of
torch_npu.npu_moe_token_unpermute_with_routing_map.

The op itself (schema, checks, reference, autograd) lives in ``token_unpermute_routing_map``;
this module only adds a provider for its padded form, which that module's compiled provider
declines.

Padded mode sums rows into tokens (ops-transformer moe_token_unpermute_with_routing_map, the pad
kernel op_kernel/moe_token_unpermute_with_routing_map_pad.h; op-plugin's golden is Megatron's
``unpermute(drop_and_pad=True)``)::

    E = routing_map.size(1),  C = R // E,  row r belongs to expert r // C
    out[sorted_indices[r]] += probs[sorted_indices[r], r // C] * permuted_tokens[r]

with float32 products and each token's rows added in ascending ``r`` onto 0, one rounding at
the end: the reference's ``index_add_``.  On CPU ``index_add_`` pays a per-row cost (about 4 us
for a 2048-wide row here), and a compiled scatter would add in a thread-dependent order.

This provider computes the same sums in the same order, by levels: level ``j`` holds the
``j``-th row (ascending ``r``) of every token that has one.  The dense levels (a quarter of the
tokens or more; about top-k of them) form a ``(levels, tokens_num)`` row table, summed in level
order by one fused gather-multiply-add pass (``dense_levels_sum``, compiled per (dtype, levels,
hidden) once hot like every compiled provider; before that, eager with reused buffers).  The few
rows past them (the tokens that padding slots point at many times) go through one ``index_add_``
in level order.  Results equal the reference's (tested bit for bit, eager and compiled).
"""

from __future__ import annotations

import torch

from ...kernels import compiled
from ._routing import compute_dtype
from .token_unpermute_routing_map import (OP, _expect_values, _padded_probs, unpermute_op)

# A level is summed densely when at least this share of the tokens has a row in it.
_DENSE_SHARE = 4          # n_j * _DENSE_SHARE >= tokens_num


def _levels(sorted_indices, tokens_num):
    """Each token's rows in ascending ``r``, grouped by level.

    Returns ``(level_sizes, rows, tokens)``: entries of level 0 first, tokens ascending inside a
    level; ``rows[i]`` is the permuted row that adds into ``tokens[i]``.
    """
    token = sorted_indices.to(torch.int64)
    token_sorted, row_sorted = torch.sort(token, stable=True)       # rows ascending per token
    counts = torch.bincount(token, minlength=tokens_num)
    first = counts.cumsum(0) - counts
    rank = torch.arange(token.numel(), device=token.device) - first[token_sorted]
    by_level = torch.argsort(rank * tokens_num + token_sorted)        # unique keys
    sizes = torch.bincount(rank).tolist() if rank.numel() else []
    return sizes, row_sorted[by_level], token_sorted[by_level]


def _dense_tables(sizes, rows, tokens, weights, tokens_num, dense):
    """``(dense, tokens_num)`` tables of the dense levels: the row each token adds at level
    ``j`` (-1: none) and its weight (0 where there is no row; None without probs)."""
    done = sum(sizes[:dense])
    device = rows.device
    level = torch.repeat_interleave(torch.arange(dense, device=device),
                                    torch.tensor(sizes[:dense], device=device))
    table = torch.full((dense, tokens_num), -1, dtype=torch.int64, device=device)
    table[level, tokens[:done]] = rows[:done]
    if weights is None:
        return table, None
    weight_table = torch.zeros((dense, tokens_num), dtype=weights.dtype, device=device)
    weight_table[level, tokens[:done]] = weights.index_select(0, rows[:done])
    return table, weight_table


def dense_levels_sum(permuted_tokens, table, weight_table):
    """``sum_j w[j, t] * permuted_tokens[table[j, t]]`` in ``j`` order (float32 products, no
    rounding), rows of ``-1`` adding 0: the dense levels, as one fused pass when compiled."""
    ct = compute_dtype(permuted_tokens.dtype)
    has_row = table >= 0
    safe = table.clamp(min=0)
    total = torch.zeros(table.shape[1], permuted_tokens.shape[1], dtype=ct,
                        device=permuted_tokens.device)
    for j in range(table.shape[0]):
        term = permuted_tokens.index_select(0, safe[j]).to(ct)
        term = torch.where(has_row[j].unsqueeze(1), term, 0)
        if weight_table is not None:
            term = term * weight_table[j].unsqueeze(1)
        total = total + term
    return total


def _dense_levels_eager(permuted_tokens, table, weight_table):
    """:func:`dense_levels_sum` in eager PyTorch with two reused ``(tokens_num, H)`` buffers
    (fresh large tensors cost page faults on CPU); the same float32 operations in the same
    order."""
    ct = compute_dtype(permuted_tokens.dtype)
    tokens_num, hidden = table.shape[1], permuted_tokens.shape[1]
    total = torch.zeros(tokens_num, hidden, dtype=ct, device=permuted_tokens.device)
    gathered = permuted_tokens.new_empty((tokens_num, hidden))
    widened = None if ct == permuted_tokens.dtype else total.new_empty((tokens_num, hidden))
    for j in range(table.shape[0]):
        missing = (table[j] < 0).nonzero().squeeze(1)
        torch.index_select(permuted_tokens, 0, table[j].clamp(min=0), out=gathered)
        term = gathered if widened is None else widened.copy_(gathered)
        if missing.numel():
            term.index_fill_(0, missing, 0)
        if weight_table is not None:
            term.mul_(weight_table[j].unsqueeze(1))
        total.add_(term)
    return total


def _dense_key(permuted_tokens, table, weight_table):
    return ("unpermute_map_padded_levels", permuted_tokens.dtype,
            None if weight_table is None else weight_table.dtype, table.shape[0],
            permuted_tokens.shape[1], permuted_tokens.device.type)


_compiled_dense = compiled.CompiledProvider(dense_levels_sum, _dense_key, op_name=OP)


def unpermute_padded_by_levels(permuted_tokens, sorted_indices, tokens_num, probs, routing_map):
    """The padded-mode sums (see the module docstring), level by level."""
    hidden = permuted_tokens.shape[1]
    ct = compute_dtype(permuted_tokens.dtype)
    weights = None
    if probs is not None:
        weights = _padded_probs(probs, sorted_indices, routing_map.shape[1]).to(ct)
    sizes, rows, tokens = _levels(sorted_indices, tokens_num)
    dense = sum(1 for n in sizes if n * _DENSE_SHARE >= tokens_num)
    if dense:
        table, weight_table = _dense_tables(sizes, rows, tokens, weights, tokens_num, dense)
        if _compiled_dense.supports(permuted_tokens, table, weight_table) is None:
            total = _compiled_dense.run(permuted_tokens, table, weight_table)
        else:
            total = _dense_levels_eager(permuted_tokens, table, weight_table)
    else:
        total = torch.zeros(tokens_num, hidden, dtype=ct, device=permuted_tokens.device)
    done = sum(sizes[:dense])
    if done < rows.numel():
        rest_rows, rest_tokens = rows[done:], tokens[done:]
        contrib = permuted_tokens.index_select(0, rest_rows).to(ct)
        if weights is not None:
            contrib.mul_(weights.index_select(0, rest_rows).unsqueeze(1))
        total.index_add_(0, rest_tokens, contrib)          # level order: ascending r per token
    return total.to(permuted_tokens.dtype)


def _supports(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
              drop_and_pad=False):
    if not drop_and_pad:
        return "only the padded mode (drop_and_pad=True)"
    if torch.compiler.is_compiling():
        return "eager only (data-dependent level sizes)"
    return None


def _run(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
         drop_and_pad=False):
    _expect_values(OP, sorted_indices, routing_map, sorted_indices.shape[0], restore_shape[0],
                   drop_and_pad)
    return unpermute_padded_by_levels(permuted_tokens, sorted_indices, restore_shape[0], probs,
                                      routing_map)


unpermute_op.add_provider("levels", _run, _supports)
