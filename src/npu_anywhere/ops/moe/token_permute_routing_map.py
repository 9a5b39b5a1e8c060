"""torch_npu.npu_moe_token_permute_with_routing_map and its backward op.

Formula (seed 004; ops-transformer moe/moe_token_permute_with_routing_map/README.md and
moe_token_permute_with_routing_map_grad/README.md with their op_host/op_api sources; op-plugin
test/test_custom_ops/test_npu_moe_token_permute_with_routing_map.py, which is Megatron's
``permute(tokens, routing_map, probs, num_out_tokens, drop_and_pad)``)::

    T, E = routing_map.shape;  n = num_out_tokens (T when None)
    drop_and_pad=False:  K = n // T, R = K * T; every row of routing_map holds K ones
        token_ids  = arange(T).expand(E, T).masked_select(routing_map.T)     (expert-major)
        permuted_tokens[r] = tokens[token_ids[r]];  permuted_probs = probs.T.masked_select(map.T)
        sorted_indices = stable argsort(token_ids): the row of choice t*K + k (the k-th expert
                         of token t, experts ascending)
    drop_and_pad=True:   C = n // E (capacity), R = C * E
        slots = stable descending argsort(routing_map.T, dim=1)[:, :C]   (E, C): each expert's
                routed tokens in token order, then (padding) its unrouted tokens in token order
        permuted_tokens = tokens[slots.flat];  permuted_probs[e*C + c] = probs[slots[e, c], e]
        sorted_indices = slots.flat (token ids)

Backward (derivatives.yaml -> npu_moe_token_permute_with_routing_map_grad, grad README):
d tokens[t] = sum of the gradient rows holding token t (drop_and_pad=False: the K rows
``sorted_indices[t*K:(t+1)*K]``; True: an index_add over ``sorted_indices``), summed in
float32 (float64 kept) and rounded once; d probs (T, E) = the permuted-probs gradient scattered
back to where it was read (False: masked_scatter over routing_map.T; True:
``[sorted_indices[i], i // C]``), zeros elsewhere.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels.cpu_memory import gather_rows
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float, inverse_permutation, stable_sort

PERMUTE = "npu_moe_token_permute_with_routing_map"
PERMUTE_SCHEMA = ("npu_moe_token_permute_with_routing_map(Tensor tokens, Tensor routing_map, *, "
                  "Tensor? probs=None, int? num_out_tokens=None, bool drop_and_pad=False) "
                  "-> (Tensor, Tensor, Tensor)")
GRAD = "npu_moe_token_permute_with_routing_map_grad"
GRAD_SCHEMA = ("npu_moe_token_permute_with_routing_map_grad(Tensor permuted_token_out_grad, "
               "Tensor? probs_grad, Tensor sorted_indices, Tensor routing_map, SymInt experts_num, "
               "SymInt tokens_num, bool drop_and_pad) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_MAP_DTYPES = (torch.int8, torch.bool)
_SORT_LIMIT = 16777215          # float-exact integer limit of the kernels' sorts
_MAX_TOPK = 512                 # tiling: numOutTokens / numTokens <= 512


def _num_out(tokens_num: int, num_out_tokens) -> int:
    return tokens_num if num_out_tokens is None else num_out_tokens


def _out_rows(routing_map, num_out_tokens, drop_and_pad) -> int:
    """op-plugin's rule: n rounded down to a multiple of E (drop_and_pad) or of T."""
    align = routing_map.shape[1 if drop_and_pad else 0]
    return _num_out(routing_map.shape[0], num_out_tokens) // align * align


def _check_routing_map(op, routing_map):
    checks.expect_dim(routing_map, 2, op, "routing_map")
    checks.expect_dtype(routing_map, _MAP_DTYPES, op, "routing_map")
    t, e = routing_map.shape
    checks.expect(t >= 1 and e >= 1, op, "routing_map",
                  "at least one token and one expert (shape (tokens_num, experts_num))",
                  lambda: f"shape {tuple(routing_map.shape)}", ValueError)
    checks.expect(t < _SORT_LIMIT and e < _SORT_LIMIT, op, "routing_map",
                  "tokens_num and experts_num below 16777215",
                  lambda: f"shape {tuple(routing_map.shape)}", ValueError)


def _expect_product(op, named):
    product = targets.expect_supported(op, _SUPPORTED)
    for name, t in named.items():
        expect_float(op, name, t)     # bfloat16, float16, float32 (and float64 outside strict)
    return product


def check_permute(tokens, routing_map, *, probs=None, num_out_tokens=None, drop_and_pad=False):
    op = PERMUTE
    _check_routing_map(op, routing_map)
    checks.expect_dim(tokens, 2, op, "tokens")
    named = {"tokens": tokens}
    if probs is not None:
        named["probs"] = probs
    _expect_product(op, named)
    t, e = routing_map.shape
    checks.expect(tokens.shape[0] == t, op, "tokens",
                  lambda: f"routing_map.size(0) = {t} rows",
                  lambda: f"{tokens.shape[0]} rows", RuntimeError)
    if probs is not None:
        checks.expect(tuple(probs.shape) == (t, e), op, "probs",
                      lambda: f"routing_map's shape {(t, e)}",
                      lambda: f"shape {tuple(probs.shape)}", RuntimeError)
        checks.expect(probs.dtype == tokens.dtype, op, "probs",
                      lambda: f"tokens' dtype ({str(tokens.dtype)[6:]})",
                      lambda: str(probs.dtype)[6:], TypeError)
    n = _num_out(t, num_out_tokens)
    checks.expect(0 <= n <= t * e, op, "num_out_tokens",
                  lambda: f"in [0, tokens_num * experts_num = {t * e}]", n, ValueError)
    checks.expect(n // t <= _MAX_TOPK, op, "num_out_tokens",
                  lambda: f"num_out_tokens // tokens_num <= 512 (tokens_num = {t})", n,
                  ValueError)
    if not drop_and_pad:
        checks.expect(n // t * t < _SORT_LIMIT, op, "num_out_tokens",
                      "tokens_num * (num_out_tokens // tokens_num) below 16777215", n,
                      ValueError)


def _expect_zero_one(op, routing_map):
    """int8 maps hold 0 or 1 (seed 004); a bool map cannot hold anything else."""
    if routing_map.dtype == torch.bool or routing_map.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(routing_map))
    checks.expect(lo >= 0 and hi <= 1, op, "routing_map", "values 0 or 1 (int8)",
                  lambda: f"values in [{lo}, {hi}]", ValueError)


def _expect_topk_per_row(op, routing_map, k):
    counts = routing_map.to(torch.bool).sum(dim=1)
    bad = counts != k
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        checks.expect(False, op, "routing_map",
                      f"num_out_tokens // tokens_num = {k} ones in every row "
                      "(drop_and_pad=False)", f"{int(counts[row])} in row {row}", ValueError)


def _empty_probs(tokens):
    # The NPU returns an undefined tensor (Python None); a schema output must be a tensor.
    return tokens.new_empty((0,))


def permute_reference(tokens, routing_map, *, probs=None, num_out_tokens=None,
                      drop_and_pad=False):
    op = PERMUTE
    t, e = routing_map.shape
    n = _num_out(t, num_out_tokens)
    _expect_zero_one(op, routing_map)
    mask = routing_map.to(torch.bool)
    if drop_and_pad:
        capacity = n // e
        # Descending and stable: each expert's routed tokens first, in token order, then its
        # unrouted ones (the padding rows), also in token order.
        slots = torch.sort(mask.t().to(torch.uint8), dim=1, descending=True,
                           stable=True).indices[:, :capacity]                     # (E, C)
        token_ids = slots.reshape(-1)
        permuted_probs = (_empty_probs(tokens) if probs is None
                          else probs.t().gather(1, slots).reshape(-1))
        return gather_rows(tokens, token_ids), permuted_probs, token_ids.to(torch.int32)
    k = n // t
    if k == 0:
        # No rows asked for: the kernel writes nothing and reads no map row counts.
        empty_ids = torch.empty(0, dtype=torch.int32, device=tokens.device)
        return (tokens.new_empty((0, tokens.shape[1])),
                _empty_probs(tokens) if probs is None else probs.new_empty((0,)), empty_ids)
    _expect_topk_per_row(op, routing_map, k)
    # Token-major choices (t, e) in row-major order are choice t*K + k; grouping them by expert
    # with a stable sort gives the expert-major rows (tokens ascending within an expert).
    experts = mask.nonzero()[:, 1]
    _, perm = stable_sort(experts)
    permuted_tokens = gather_rows(tokens, perm // k)
    permuted_probs = _empty_probs(tokens) if probs is None else probs[mask][perm]
    return permuted_tokens, permuted_probs, inverse_permutation(perm).to(torch.int32)


def permute_fake(tokens, routing_map, *, probs=None, num_out_tokens=None, drop_and_pad=False):
    rows = _out_rows(routing_map, num_out_tokens, drop_and_pad)
    permuted_probs = _empty_probs(tokens) if probs is None else probs.new_empty((rows,))
    return (tokens.new_empty((rows, tokens.shape[1])), permuted_probs,
            tokens.new_empty((rows,), dtype=torch.int32))


def check_grad(permuted_token_out_grad, probs_grad, sorted_indices, routing_map, experts_num,
               tokens_num, drop_and_pad):
    op = GRAD
    grad = permuted_token_out_grad
    checks.expect_dim(grad, 2, op, "permuted_token_out_grad")
    named = {"permuted_token_out_grad": grad}
    if probs_grad is not None:
        named["probs_grad"] = probs_grad
    _expect_product(op, named)
    checks.expect(experts_num >= 1, op, "experts_num", ">= 1", experts_num, ValueError)
    checks.expect(tokens_num >= 1, op, "tokens_num", ">= 1", tokens_num, ValueError)
    checks.expect_dim(routing_map, 2, op, "routing_map")
    checks.expect_dtype(routing_map, _MAP_DTYPES, op, "routing_map")
    checks.expect(tuple(routing_map.shape) == (tokens_num, experts_num), op, "routing_map",
                  lambda: f"shape (tokens_num, experts_num) = {(tokens_num, experts_num)}",
                  lambda: f"shape {tuple(routing_map.shape)}", RuntimeError)
    rows = grad.shape[0]
    checks.expect_dim(sorted_indices, 1, op, "sorted_indices")
    checks.expect_dtype(sorted_indices, (torch.int32,), op, "sorted_indices")
    checks.expect(sorted_indices.shape[0] == rows, op, "sorted_indices",
                  lambda: f"permuted_token_out_grad.size(0) = {rows} elements",
                  lambda: f"{sorted_indices.shape[0]}", RuntimeError)
    if probs_grad is not None:
        checks.expect(tuple(probs_grad.shape) == (rows,), op, "probs_grad",
                      lambda: f"shape ({rows},) (one value per permuted row)",
                      lambda: f"shape {tuple(probs_grad.shape)}", RuntimeError)
        checks.expect(probs_grad.dtype == grad.dtype, op, "probs_grad",
                      lambda: f"permuted_token_out_grad's dtype ({str(grad.dtype)[6:]})",
                      lambda: str(probs_grad.dtype)[6:], TypeError)
    align, name = (experts_num, "experts_num") if drop_and_pad else (tokens_num, "tokens_num")
    checks.expect(rows % align == 0, op, "permuted_token_out_grad",
                  lambda: f"a row count divisible by {name} = {align}",
                  lambda: f"{rows} rows", RuntimeError)
    checks.expect(drop_and_pad or rows // tokens_num <= _MAX_TOPK, op, "permuted_token_out_grad",
                  "at most 512 rows per token (topK) when drop_and_pad is False",
                  lambda: f"{rows // tokens_num}", ValueError)


def _expect_index_range(op, sorted_indices, high, what):
    if sorted_indices.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(sorted_indices))
    checks.expect(lo >= 0 and hi < high, op, "sorted_indices", f"{what} in [0, {high - 1}]",
                  lambda: f"values in [{lo}, {hi}]", IndexError)


def grad_reference(permuted_token_out_grad, probs_grad, sorted_indices, routing_map,
                   experts_num, tokens_num, drop_and_pad):
    op = GRAD
    grad = permuted_token_out_grad
    rows, hidden = grad.shape
    ct = compute_dtype(grad.dtype)
    idx = sorted_indices.to(torch.int64)
    mask = routing_map.to(torch.bool)
    if drop_and_pad:
        _expect_index_range(op, sorted_indices, tokens_num, "token ids")
        tokens_grad = torch.zeros(tokens_num, hidden, dtype=ct, device=grad.device)
        tokens_grad.index_add_(0, idx, grad.to(ct))
    else:
        _expect_index_range(op, sorted_indices, rows, "row indices")
        k = rows // tokens_num
        tokens_grad = grad.to(ct).index_select(0, idx).view(tokens_num, k, hidden).sum(dim=1)
    tokens_grad = tokens_grad.to(grad.dtype)
    if probs_grad is None:
        return tokens_grad, grad.new_empty((0,))
    probs_out = torch.zeros(experts_num, tokens_num, dtype=probs_grad.dtype, device=grad.device)
    if drop_and_pad:
        capacity = rows // experts_num
        expert = torch.arange(rows, device=grad.device) // max(capacity, 1)
        probs_out.index_put_((expert, idx), probs_grad)
    else:
        routed = int(mask.sum())
        checks.expect(routed == rows, op, "routing_map",
                      lambda: f"as many ones as probs_grad has values ({rows})", routed,
                      ValueError)
        probs_out.masked_scatter_(mask.t(), probs_grad)
    return tokens_grad, probs_out.t().contiguous()


def grad_fake(permuted_token_out_grad, probs_grad, sorted_indices, routing_map, experts_num,
              tokens_num, drop_and_pad):
    grad = permuted_token_out_grad
    tokens_grad = grad.new_empty((tokens_num, grad.shape[1]))
    if probs_grad is None:
        return tokens_grad, grad.new_empty((0,))
    return tokens_grad, probs_grad.new_empty((tokens_num, experts_num))


permute_op = NpuOp(PERMUTE_SCHEMA, namespace=TORCH_NPU_NS, check=check_permute,
                   reference=permute_reference, fake=permute_fake, metadata_check=True,
                   info=OpInfo(api="torch_npu"))
grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_grad, reference=grad_reference,
                fake=grad_fake, metadata_check=True,
                info=OpInfo(api="torch_npu", backward_of=PERMUTE))


def _setup(ctx, inputs, output):
    tokens, routing_map, probs, _num_out, drop_and_pad = inputs
    ctx.mark_non_differentiable(output[2])
    if probs is None:
        ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(routing_map, output[2])
    ctx.has_probs = probs is not None
    ctx.rows_hidden = tuple(output[0].shape)
    ctx.dtype = tokens.dtype
    ctx.drop_and_pad = drop_and_pad


def _backward(ctx, grad_tokens, grad_probs, _grad_indices):
    routing_map, sorted_indices = ctx.saved_tensors
    rows, _ = ctx.rows_hidden
    if grad_tokens is None:
        grad_tokens = sorted_indices.new_zeros(ctx.rows_hidden, dtype=ctx.dtype)
    if ctx.has_probs and grad_probs is None:
        grad_probs = grad_tokens.new_zeros((rows,))
    tokens_num, experts_num = routing_map.shape
    tokens_grad, probs_grad = grad_op(grad_tokens.contiguous(),
                                      grad_probs.contiguous() if ctx.has_probs else None,
                                      sorted_indices, routing_map, experts_num, tokens_num,
                                      ctx.drop_and_pad)
    return tokens_grad, None, (probs_grad if ctx.has_probs else None), None, None


permute_op.set_autograd(setup_context=_setup, backward=_backward)


def npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None,
                                           num_out_tokens=None, drop_and_pad=False):
    """Group tokens (and probs) by expert from a ``(tokens_num, experts_num)`` routing map.

    Formula (Megatron's ``permute`` with a routing map)::

        T, E = routing_map.shape;  n = num_out_tokens (T when None)
        drop_and_pad=False:  K = n // T (every row holds K ones), R = K * T
            token_ids = arange(T).expand(E, T).masked_select(routing_map.T)   # expert-major
            permuted_tokens = tokens[token_ids]
            permuted_probs  = probs.T.masked_select(routing_map.T)
            sorted_indices  = stable argsort(token_ids)   # row of choice t*K + k
        drop_and_pad=True:   C = n // E, R = C * E
            slots = stable descending argsort(routing_map.T, dim=1)[:, :C]
            permuted_tokens = tokens[slots.flat];  permuted_probs[e*C + c] = probs[slots[e, c], e]
            sorted_indices  = slots.flat                  # the token of each row

    Parameters
    ----------
    tokens : Tensor
        ``(tokens_num, hidden)``, bfloat16, float16 or float32; non-contiguous accepted.
    routing_map : Tensor
        ``(tokens_num, experts_num)`` bool, or int8 holding 0 / 1.  Without drop_and_pad every
        row holds exactly ``num_out_tokens // tokens_num`` ones.
    probs : Tensor, optional
        ``(tokens_num, experts_num)``, ``tokens``' dtype.
    num_out_tokens : int, optional
        ``tokens_num`` by default; in ``[0, tokens_num * experts_num]`` and
        ``num_out_tokens // tokens_num <= 512``.  It sets topK (``n // T``) or the capacity
        (``n // E``).
    drop_and_pad : bool
        Give every expert exactly ``C`` rows: its first ``C`` routed tokens (token order),
        padded with its unrouted tokens (token order) when it has fewer.

    Returns
    -------
    (permuted_tokens, permuted_probs, sorted_indices)
        ``(R, hidden)`` in ``tokens``' dtype; ``(R,)`` in ``probs``' dtype (an empty ``(0,)``
        tensor without probs); int32 ``(R,)``.

    Constraints
    -----------
    tokens_num, experts_num < 16777215; strict mode: Atlas A2 and A3.

    Notes
    -----
    On the NPU ``permuted_probs`` is None without probs; a custom op returns tensors, so it is
    an empty tensor here.  Differentiable in ``tokens`` and ``probs`` through
    :func:`npu_moe_token_permute_with_routing_map_grad`; in drop_and_pad mode the padding rows
    are real gathers and pass their gradient back too, as in Megatron.  The row-count rule
    (``drop_and_pad=False``) and int8 values are data: they are checked in eager calls only.
    Follows ops-transformer moe/moe_token_permute_with_routing_map (README, op_api) and
    op-plugin's golden test.

    Examples
    --------
    >>> x = torch.randn(3, 4)
    >>> routing_map = torch.tensor([[True, True], [True, True], [True, True]])
    >>> out, _, idx = npu_moe_token_permute_with_routing_map(x, routing_map, num_out_tokens=6)
    """
    return permute_op(tokens, routing_map, probs=probs, num_out_tokens=num_out_tokens,
                      drop_and_pad=drop_and_pad)


def npu_moe_token_permute_with_routing_map_grad(permuted_token_out_grad, probs_grad,
                                                sorted_indices, routing_map, experts_num,
                                                tokens_num, drop_and_pad):
    """Backward of :func:`npu_moe_token_permute_with_routing_map`: ``(tokens_grad, probs_grad)``.

    Formula::

        drop_and_pad=False (K = R // tokens_num):
            tokens_grad[t] = sum_k g[sorted_indices[t*K + k]]
            probs_grad = zeros(E, T).masked_scatter(routing_map.T, probs_grad).T
        drop_and_pad=True (C = R // experts_num):
            tokens_grad = zeros(T, H).index_add(0, sorted_indices, g)
            probs_grad[sorted_indices[i], i // C] = probs_grad_in[i]   (zeros elsewhere)

    ``tokens_grad``: ``(tokens_num, hidden)`` in ``g``'s dtype (float32 sums, one rounding);
    ``probs_grad``: ``(tokens_num, experts_num)`` in ``probs_grad``'s dtype, or an empty ``(0,)``
    tensor when ``probs_grad`` is None (None on the NPU).  Follows ops-transformer
    moe/moe_token_permute_with_routing_map_grad (README, op_api).
    """
    return grad_op(permuted_token_out_grad, probs_grad, sorted_indices, routing_map,
                   experts_num, tokens_num, drop_and_pad)


TORCH_NPU_FUNCTIONS = {
    PERMUTE: npu_moe_token_permute_with_routing_map,
    GRAD: npu_moe_token_permute_with_routing_map_grad,
}
