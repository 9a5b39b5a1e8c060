"""torch_npu.npu_moe_token_unpermute_with_routing_map, its four-output twin and its backward op.

Formula (ops-transformer moe/moe_token_unpermute_with_routing_map docs/aclnn...Map.md, the
pad kernel op_kernel/moe_token_unpermute_with_routing_map_pad.h for the permuted probs;
op-plugin test/test_custom_ops/test_npu_moe_token_unpermute_with_routing_map.py golden, which
is Megatron's ``unpermute`` for the index the NPU's routing-map permute returns)::

    T, H = restore_shape;  R = sorted_indices.numel() = permuted_tokens.size(0)
    drop_and_pad=False: K = R // T; slot t*K + k holds the row of token t's k-th routed expert
        w[t, k] = probs[t, k-th True of routing_map[t]]  (experts ascending; 0 past the row's
                  count: probs.masked_select(routing_map) viewed (T, K) when rows hold K ones)
        out[t] = sum_k w[t, k] * permuted_tokens[sorted_indices[t*K + k]]   (-1 slots add 0)
    drop_and_pad=True: E = routing_map.size(1), C = R // E (row r belongs to expert r // C)
        permute_probs[r] = probs[sorted_indices[r], r // C]
        out[sorted_indices[r]] += permute_probs[r] * permuted_tokens[r]      (all R rows)
        permute_token_id, out_index = stable sort of sorted_indices (values, positions)

Without probs the weights are 1.  Kernel numerics: rows and weights widened to float32
(float64 kept), products and the sum in float32 -- k order, or row order r per token in
padded mode -- and one rounding to ``permuted_tokens``' dtype.

Backward (derivatives.yaml -> npu_moe_token_unpermute_with_routing_map_grad, its aclnn doc):
d permuted_tokens[row] = w * g[token of row] (0 for rows no slot names); d probs[t, e] =
<g[t], permuted_tokens[row of (t, e)]> at the routed entries, 0 elsewhere.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float, weighted_row_sum

OP = "npu_moe_token_unpermute_with_routing_map"
_ARGS = ("(Tensor permuted_tokens, Tensor sorted_indices, int[] restore_shape, *, "
         "Tensor? probs=None, Tensor? routing_map=None, bool drop_and_pad=False)")
SCHEMA = f"{OP}{_ARGS} -> Tensor"
FULL = "_npu_moe_token_unpermute_with_routing_map"
FULL_SCHEMA = f"{FULL}{_ARGS} -> (Tensor, Tensor, Tensor, Tensor)"
GRAD = "npu_moe_token_unpermute_with_routing_map_grad"
GRAD_SCHEMA = (f"{GRAD}(Tensor unpermuted_tokens_grad, Tensor out_index, "
               "Tensor permuted_token_id, Tensor? routing_map, Tensor? permuted_tokens, "
               "Tensor? probs, bool drop_and_pad, int[] restore_shape) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_MAP_DTYPES = (torch.int8, torch.bool)
_MAX_TOPK = 512


def _dtype_name(dtype):
    return str(dtype)[6:]


def _possessive(name):
    return "'" if name.endswith("s") else "'s"


def _expect_probs_dtype(op, probs, dtype, against):
    # aclnn doc: probs in the tokens' dtype, or float32 with bfloat16 tokens.
    allowed = (dtype, torch.float32) if dtype == torch.bfloat16 else (dtype,)
    checks.expect(probs.dtype in allowed, op, "probs",
                  lambda: f"{against}{_possessive(against)} dtype ({_dtype_name(dtype)})"
                  + (" or float32" if dtype == torch.bfloat16 else ""),
                  lambda: _dtype_name(probs.dtype), TypeError)


def _check_map_and_probs(op, probs, routing_map, tokens_num):
    if probs is None and routing_map is None:
        return None
    checks.expect(routing_map is not None, op, "routing_map", "a tensor when probs is given",
                  "None", ValueError)
    checks.expect_dim(routing_map, 2, op, "routing_map")
    checks.expect_dtype(routing_map, _MAP_DTYPES, op, "routing_map")
    checks.expect(routing_map.shape[0] == tokens_num and routing_map.shape[1] >= 1, op,
                  "routing_map", lambda: f"shape (tokens_num, experts_num) with tokens_num = "
                  f"{tokens_num} and experts_num >= 1",
                  lambda: f"shape {tuple(routing_map.shape)}", RuntimeError)
    if probs is not None:
        checks.expect(tuple(probs.shape) == tuple(routing_map.shape), op, "probs",
                      lambda: f"routing_map's shape {tuple(routing_map.shape)}",
                      lambda: f"shape {tuple(probs.shape)}", RuntimeError)
    return routing_map.shape[1]


def _check_layout(op, rows, tokens_num, experts, has_probs, drop_and_pad, what):
    """topK (no padding) or capacity (padding) from the row count, and their limits."""
    if drop_and_pad:
        if experts is None:
            return
        checks.expect(rows % experts == 0, op, what,
                      lambda: f"a length divisible by experts_num = {experts} (drop_and_pad)",
                      rows, RuntimeError)
        checks.expect(not has_probs or rows // experts <= tokens_num, op, what,
                      lambda: f"capacity = length // experts_num <= tokens_num = {tokens_num}",
                      lambda: f"capacity {rows // experts}", ValueError)
        return
    checks.expect(rows % tokens_num == 0, op, what,
                  lambda: f"a length divisible by tokens_num = {tokens_num}", rows,
                  RuntimeError)
    k = rows // tokens_num
    checks.expect(k <= _MAX_TOPK, op, what, "topK = length // tokens_num <= 512",
                  lambda: f"topK {k}", ValueError)
    checks.expect(not has_probs or k <= experts, op, what,
                  lambda: f"topK = length // tokens_num <= experts_num = {experts}",
                  lambda: f"topK {k}", ValueError)


def check_unpermute(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                    routing_map=None, drop_and_pad=False):
    _check_forward(OP, permuted_tokens, sorted_indices, restore_shape, probs, routing_map,
                   drop_and_pad)


def _check_forward(op, permuted_tokens, sorted_indices, restore_shape, probs, routing_map,
                   drop_and_pad):
    checks.expect_dim(permuted_tokens, 2, op, "permuted_tokens")
    expect_float(op, "permuted_tokens", permuted_tokens)
    checks.expect_dim(sorted_indices, 1, op, "sorted_indices")
    checks.expect_dtype(sorted_indices, (torch.int32,), op, "sorted_indices")
    hidden = permuted_tokens.shape[1]
    checks.expect(len(restore_shape) == 2 and restore_shape[0] >= 1
                  and restore_shape[1] == hidden, op, "restore_shape",
                  lambda: f"[tokens_num >= 1, hidden = permuted_tokens.size(1) = {hidden}]",
                  lambda: f"{list(restore_shape)}", ValueError)
    rows = sorted_indices.shape[0]
    checks.expect(permuted_tokens.shape[0] == rows, op, "permuted_tokens",
                  lambda: f"sorted_indices.size(0) = {rows} rows",
                  lambda: f"{permuted_tokens.shape[0]} rows", RuntimeError)
    if probs is not None:
        expect_float(op, "probs", probs)
        _expect_probs_dtype(op, probs, permuted_tokens.dtype, "permuted_tokens")
    tokens_num = restore_shape[0]
    experts = _check_map_and_probs(op, probs, routing_map, tokens_num)
    _check_layout(op, rows, tokens_num, experts, probs is not None, drop_and_pad,
                  "sorted_indices")
    targets.expect_supported(op, _SUPPORTED)


def _expect_values(op, sorted_indices, routing_map, rows, tokens_num, drop_and_pad):
    """The data rules: index ranges (doc) and int8 maps holding 0 / 1."""
    if sorted_indices.numel():
        lo, hi = (int(v) for v in torch.aminmax(sorted_indices))
        low, high = (0, tokens_num - 1) if drop_and_pad else (-1, rows - 1)
        checks.expect(lo >= low and hi <= high, op, "sorted_indices",
                      f"values in [{low}, {high}]", lambda: f"values in [{lo}, {hi}]",
                      IndexError)
    if routing_map is not None and routing_map.dtype == torch.int8 and routing_map.numel():
        lo, hi = (int(v) for v in torch.aminmax(routing_map))
        checks.expect(lo >= 0 and hi <= 1, op, "routing_map", "values 0 or 1 (int8)",
                      lambda: f"values in [{lo}, {hi}]", ValueError)


def slot_weights(probs, routing_map, k):
    """``(T, K)``: the prob of each token's k-th routed expert (experts ascending), 0 past the
    row's count of routed experts.  A stable descending sort of the 0/1 row puts the routed
    experts first in expert order: a fixed-size ``masked_select(routing_map)`` per row."""
    mask = routing_map.to(torch.bool)
    order = torch.sort(mask.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :k]
    return torch.where(mask.gather(1, order), probs.gather(1, order), 0), order


def _unpermute_topk(permuted_tokens, sorted_indices, tokens_num, probs, routing_map):
    ct = compute_dtype(permuted_tokens.dtype)
    k = sorted_indices.shape[0] // tokens_num
    idx = sorted_indices.to(torch.int64).view(tokens_num, k)
    weights = None if probs is None else slot_weights(probs, routing_map, k)[0].to(ct)
    # Eager calls skip the masking pass when every slot is used (a compiled graph cannot
    # branch on data; there the mask fuses into the same loop for free).
    unused = idx < 0                                            # -1: an unused slot adds 0
    skip = unused if torch.compiler.is_compiling() or bool(unused.any()) else None
    total = weighted_row_sum(permuted_tokens, idx.clamp(min=0), skip, weights, ct)
    return total.to(permuted_tokens.dtype), weights


def _padded_probs(probs, sorted_indices, experts):
    rows = sorted_indices.shape[0]
    capacity = rows // experts
    expert = torch.arange(rows, device=sorted_indices.device) // max(capacity, 1)
    return probs[sorted_indices.to(torch.int64), expert]


def _unpermute_padded(permuted_tokens, sorted_indices, tokens_num, probs, routing_map):
    hidden = permuted_tokens.shape[1]
    ct = compute_dtype(permuted_tokens.dtype)
    contrib = permuted_tokens.to(ct)
    permute_probs = None
    if probs is not None:
        permute_probs = _padded_probs(probs, sorted_indices, routing_map.shape[1])
        contrib = contrib * permute_probs.to(ct).unsqueeze(-1)
    out = torch.zeros(tokens_num, hidden, dtype=ct, device=permuted_tokens.device)
    # index_add_ walks the rows in order: each token sums its rows in ascending r.
    out.index_add_(0, sorted_indices.to(torch.int64), contrib)
    return out.to(permuted_tokens.dtype), permute_probs


def unpermute_values(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                     routing_map=None, drop_and_pad=False):
    """The arithmetic alone (no data checks): what the compiled provider compiles."""
    solve = _unpermute_padded if drop_and_pad else _unpermute_topk
    return solve(permuted_tokens, sorted_indices, restore_shape[0], probs, routing_map)[0]


def unpermute_reference(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                        routing_map=None, drop_and_pad=False):
    _expect_values(OP, sorted_indices, routing_map, sorted_indices.shape[0], restore_shape[0],
                   drop_and_pad)
    return unpermute_values(permuted_tokens, sorted_indices, restore_shape, probs=probs,
                            routing_map=routing_map, drop_and_pad=drop_and_pad)


def unpermute_fake(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                   routing_map=None, drop_and_pad=False):
    return permuted_tokens.new_empty((restore_shape[0], restore_shape[1]))


def check_full(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
               drop_and_pad=False):
    _check_forward(FULL, permuted_tokens, sorted_indices, restore_shape, probs, routing_map,
                   drop_and_pad)


def full_reference(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                   routing_map=None, drop_and_pad=False):
    _expect_values(FULL, sorted_indices, routing_map, sorted_indices.shape[0], restore_shape[0],
                   drop_and_pad)
    tokens_num = restore_shape[0]
    if drop_and_pad:
        out, permute_probs = _unpermute_padded(permuted_tokens, sorted_indices, tokens_num,
                                               probs, routing_map)
        token_id, out_index = torch.sort(sorted_indices, stable=True)
    else:
        out, weights = _unpermute_topk(permuted_tokens, sorted_indices, tokens_num, probs,
                                       routing_map)
        permute_probs = None if weights is None else weights.reshape(-1)
        # The kernel leaves these unspecified without padding (the golden reads neither):
        # the slot's row and the slot's token, the pair the backward op reads.
        out_index = sorted_indices.clone()
        k = sorted_indices.shape[0] // tokens_num
        token_id = torch.arange(sorted_indices.shape[0], dtype=torch.int32,
                                device=sorted_indices.device) // max(k, 1)
    if permute_probs is None:
        permute_probs = permuted_tokens.new_empty((0,))
    else:
        permute_probs = permute_probs.to(probs.dtype)
    return out, out_index.to(torch.int32), token_id.to(torch.int32), permute_probs


def full_fake(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
              drop_and_pad=False):
    rows = sorted_indices.shape[0]
    permute_probs = (permuted_tokens.new_empty((0,)) if probs is None
                     else probs.new_empty((rows,)))
    return (permuted_tokens.new_empty((restore_shape[0], restore_shape[1])),
            sorted_indices.new_empty((rows,)), sorted_indices.new_empty((rows,)), permute_probs)


def check_grad(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map,
               permuted_tokens, probs, drop_and_pad, restore_shape):
    op = GRAD
    g = unpermuted_tokens_grad
    checks.expect_dim(g, 2, op, "unpermuted_tokens_grad")
    expect_float(op, "unpermuted_tokens_grad", g)
    tokens_num, hidden = g.shape
    checks.expect(tokens_num >= 1, op, "unpermuted_tokens_grad", "at least one token row",
                  lambda: f"shape {tuple(g.shape)}", ValueError)
    for name, t in (("out_index", out_index), ("permuted_token_id", permuted_token_id)):
        checks.expect_dim(t, 1, op, name)
        checks.expect_dtype(t, (torch.int32,), op, name)
    rows = out_index.shape[0]
    checks.expect(permuted_token_id.shape[0] == rows, op, "permuted_token_id",
                  lambda: f"out_index's length {rows}",
                  lambda: f"{permuted_token_id.shape[0]}", RuntimeError)
    if drop_and_pad:
        checks.expect(tuple(restore_shape) == (tokens_num, hidden), op, "restore_shape",
                      lambda: f"unpermuted_tokens_grad's shape {[tokens_num, hidden]}",
                      lambda: f"{list(restore_shape)}", ValueError)
    if probs is not None:
        expect_float(op, "probs", probs)
        _expect_probs_dtype(op, probs, g.dtype, "unpermuted_tokens_grad")
        checks.expect(permuted_tokens is not None, op, "permuted_tokens",
                      "a tensor when probs is given", "None", ValueError)
        checks.expect(tuple(permuted_tokens.shape) == (rows, hidden), op, "permuted_tokens",
                      lambda: f"shape (out_index.size(0), hidden) = {(rows, hidden)}",
                      lambda: f"shape {tuple(permuted_tokens.shape)}", RuntimeError)
        checks.expect(permuted_tokens.dtype == g.dtype, op, "permuted_tokens",
                      lambda: f"unpermuted_tokens_grad's dtype ({_dtype_name(g.dtype)})",
                      lambda: _dtype_name(permuted_tokens.dtype), TypeError)
    experts = _check_map_and_probs(op, probs, routing_map, tokens_num)
    _check_layout(op, rows, tokens_num, experts, probs is not None, drop_and_pad, "out_index")
    targets.expect_supported(op, _SUPPORTED)


def grad_reference(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map,
                   permuted_tokens, probs, drop_and_pad, restore_shape):
    g = unpermuted_tokens_grad
    tokens_num, hidden = g.shape
    rows = out_index.shape[0]
    ct = compute_dtype(g.dtype)
    row = out_index.to(torch.int64)
    if drop_and_pad:
        token = permuted_token_id.to(torch.int64)
        _expect_values(GRAD, permuted_token_id, routing_map, rows, tokens_num, True)
        checks.expect(bool(((row >= 0) & (row < rows)).all()) if rows else True, GRAD,
                      "out_index", f"values in [0, {rows - 1}]", "values out of range",
                      IndexError)
    else:
        _expect_values(GRAD, out_index, routing_map, rows, tokens_num, False)
        k = rows // tokens_num
        token = torch.arange(rows, device=g.device) // max(k, 1)
    valid = row >= 0                                           # -1: an unused slot
    safe_row = torch.where(valid, row, rows)                   # a spare row takes them
    upstream = g.to(ct).index_select(0, token)                 # (slots, H)
    if probs is None:
        weight = None
    elif drop_and_pad:
        capacity = rows // routing_map.shape[1]
        expert = row // max(capacity, 1)
        weight = probs[token, expert].to(ct)
    else:
        k = rows // tokens_num
        w, order = slot_weights(probs, routing_map, k)
        weight = w.to(ct).reshape(-1)
    scaled = upstream if weight is None else upstream * weight.unsqueeze(-1)
    grad_rows = torch.zeros(rows + 1, hidden, dtype=ct, device=g.device)
    grad_rows.index_add_(0, safe_row, scaled)
    grad_permuted = grad_rows[:rows].to(g.dtype)
    if probs is None:
        return grad_permuted, g.new_empty((0,))
    table = torch.cat([permuted_tokens.to(ct), permuted_tokens.new_zeros(1, hidden, dtype=ct)])
    dots = (upstream * table.index_select(0, safe_row)).sum(dim=-1)          # (slots,)
    probs_grad = torch.zeros(tokens_num, routing_map.shape[1], dtype=ct, device=g.device)
    if drop_and_pad:
        probs_grad.index_put_((token, expert), dots, accumulate=True)
    else:
        mask = routing_map.to(torch.bool)
        routed = mask.gather(1, order).reshape(-1)
        dots = torch.where(routed & valid, dots, 0)
        probs_grad.view(-1).index_add_(0, (token * routing_map.shape[1] + order.reshape(-1)),
                                       dots)
    return grad_permuted, probs_grad.to(g.dtype)


def grad_fake(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map,
              permuted_tokens, probs, drop_and_pad, restore_shape):
    g = unpermuted_tokens_grad
    grad_permuted = g.new_empty((out_index.shape[0], g.shape[1]))
    if probs is None:
        return grad_permuted, g.new_empty((0,))
    return grad_permuted, g.new_empty(tuple(probs.shape))


unpermute_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_unpermute,
                     reference=unpermute_reference, fake=unpermute_fake, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
full_op = NpuOp(FULL_SCHEMA, namespace=TORCH_NPU_NS, check=check_full, reference=full_reference,
                fake=full_fake, metadata_check=True, info=OpInfo(api="torch_npu"))
grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_grad, reference=grad_reference,
                fake=grad_fake, metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _setup(ctx, inputs, output):
    permuted_tokens, sorted_indices, restore_shape, probs, routing_map, drop_and_pad = inputs
    if isinstance(output, tuple):
        ctx.mark_non_differentiable(*output[1:])
    ctx.save_for_backward(permuted_tokens, sorted_indices, probs, routing_map)
    ctx.args = (drop_and_pad, list(restore_shape))


def _backward(ctx, grad, *_unused):
    permuted_tokens, sorted_indices, probs, routing_map = ctx.saved_tensors
    drop_and_pad, restore_shape = ctx.args
    if drop_and_pad:
        token_id, out_index = torch.sort(sorted_indices, stable=True)
        out_index, token_id = out_index.to(torch.int32), token_id.to(torch.int32)
    else:
        out_index = token_id = sorted_indices          # derivatives.yaml passes it twice
    grad_permuted, grad_probs = grad_op(grad.contiguous(), out_index, token_id, routing_map,
                                        permuted_tokens if probs is not None else None, probs,
                                        drop_and_pad, restore_shape)
    if probs is not None:
        grad_probs = grad_probs.to(probs.dtype)
    return (grad_permuted.to(permuted_tokens.dtype), None, None,
            grad_probs if probs is not None else None, None, None)


unpermute_op.set_autograd(setup_context=_setup, backward=_backward)
full_op.set_autograd(setup_context=_setup, backward=_backward)


def _compiled_key(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                  routing_map=None, drop_and_pad=False):
    k = sorted_indices.shape[0] // restore_shape[0]
    return ("unpermute_map", permuted_tokens.dtype, None if probs is None else probs.dtype,
            None if routing_map is None else routing_map.dtype, k, permuted_tokens.shape[1],
            permuted_tokens.device.type)


# The k loop fused into one pass over the output (no padding: the padded mode's index_add
# keeps the eager order).  The data checks run eagerly, outside the compiled graph.
_compiled_unpermute = compiled.CompiledProvider(unpermute_values, _compiled_key, op_name=OP)


def _compiled_supports(*args, **kwargs):
    if kwargs.get("drop_and_pad", False):
        return "drop_and_pad runs the eager reference (its index_add order)"
    return _compiled_unpermute.supports(*args, **kwargs)


def _compiled_run(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                  routing_map=None, drop_and_pad=False):
    _expect_values(OP, sorted_indices, routing_map, sorted_indices.shape[0], restore_shape[0],
                   drop_and_pad)
    return _compiled_unpermute.run(permuted_tokens, sorted_indices, restore_shape, probs=probs,
                                   routing_map=routing_map, drop_and_pad=drop_and_pad)


unpermute_op.add_provider(compiled.CompiledProvider.name, _compiled_run, _compiled_supports)


def npu_moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, restore_shape, *,
                                             probs=None, routing_map=None, drop_and_pad=False):
    """Sum the experts' rows back into token order, weighted by the routing map's probs.

    Formula (Megatron's ``unpermute`` for the index of
    :func:`npu_moe_token_permute_with_routing_map`)::

        T, H = restore_shape;  R = len(sorted_indices)
        drop_and_pad=False (K = R // T):
            w[t, k] = probs[t, e_k(t)]    e_k(t): the k-th routed expert of token t, ascending
            out[t]  = sum_k w[t, k] * permuted_tokens[sorted_indices[t*K + k]]  (-1 adds 0)
        drop_and_pad=True (E = routing_map.size(1), C = R // E):
            out[sorted_indices[r]] += probs[sorted_indices[r], r // C] * permuted_tokens[r]

    Parameters
    ----------
    permuted_tokens : Tensor
        ``(R, H)`` bfloat16, float16 or float32 (float64 outside strict mode).
    sorted_indices : Tensor
        int32 ``(R,)``: without padding the row of each slot ``t*K + k`` (``-1``: unused
        slot), with padding the token of each row (the permute op's third output).
    restore_shape : list[int]
        ``[tokens_num, hidden]`` of the output.
    probs : Tensor, optional
        ``(tokens_num, experts_num)``, ``permuted_tokens``' dtype (or float32 with bfloat16
        tokens).  Without it every weight is 1.
    routing_map : Tensor, optional
        ``(tokens_num, experts_num)`` bool or int8 (0 / 1); needed with probs.
    drop_and_pad : bool
        Expert-capacity layout: ``R = experts_num * capacity`` rows, each added to its token.

    Returns
    -------
    Tensor ``(tokens_num, hidden)`` in ``permuted_tokens``' dtype: float32 products and sums
    (k order; ascending row per token with padding), one rounding.

    Constraints
    -----------
    topK = R // tokens_num <= 512 (and <= experts_num with probs); with padding and probs,
    capacity <= tokens_num; sorted_indices in [-1, R - 1] (no padding) or [0, tokens_num - 1].
    Strict mode: Atlas A2 and A3.

    Notes
    -----
    Differentiable in ``permuted_tokens`` and ``probs`` through
    :func:`npu_moe_token_unpermute_with_routing_map_grad`.  Index ranges and int8 values are
    data: they are checked in eager calls only.  Follows ops-transformer
    moe/moe_token_unpermute_with_routing_map (aclnn doc, pad kernel) and op-plugin's golden.
    """
    return unpermute_op(permuted_tokens, sorted_indices, restore_shape, probs=probs,
                        routing_map=routing_map, drop_and_pad=drop_and_pad)


def _npu_moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, restore_shape, *,
                                              probs=None, routing_map=None, drop_and_pad=False):
    """:func:`npu_moe_token_unpermute_with_routing_map` with the kernel's side outputs:
    ``(unpermuted_tokens, out_index, permute_token_id, permute_probs)``.

    With padding ``permute_token_id, out_index = stable sort(sorted_indices)`` and
    ``permute_probs[r] = probs[sorted_indices[r], r // C]``; without, ``permute_probs`` is the
    ``(T*K,)`` slot weights (``probs.masked_select(routing_map)`` when every row holds K ones)
    and ``out_index`` / ``permute_token_id`` are the slot's row and token (the NPU leaves them
    unspecified).  ``permute_probs`` is an empty ``(0,)`` tensor without probs (None on the
    NPU).
    """
    return full_op(permuted_tokens, sorted_indices, restore_shape, probs=probs,
                   routing_map=routing_map, drop_and_pad=drop_and_pad)


def npu_moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index,
                                                  permuted_token_id, routing_map,
                                                  permuted_tokens, probs, drop_and_pad,
                                                  restore_shape):
    """Backward of :func:`npu_moe_token_unpermute_with_routing_map`.

    Formula (aclnnMoeTokenUnpermuteWithRoutingMapGrad)::

        slot i: row = out_index[i]; token = permuted_token_id[i] (padding) or i // K (none)
        d permuted_tokens[row] = w_i * g[token]        w_i: the slot's prob (1 without probs)
        d probs[token, e_i] = <g[token], permuted_tokens[row]>     e_i = row // C (padding)
                                                       or the slot's routed expert (none)

    derivatives.yaml passes ``sorted_indices`` as both index inputs without padding, and the
    stable sort of it (positions, values) with padding.  Returns ``(d permuted_tokens, d
    probs)`` in ``unpermuted_tokens_grad``'s dtype (float32 math, one rounding); ``d probs``
    is an empty ``(0,)`` tensor without probs (None on the NPU).
    """
    return grad_op(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map,
                   permuted_tokens, probs, drop_and_pad, restore_shape)


TORCH_NPU_FUNCTIONS = {
    OP: npu_moe_token_unpermute_with_routing_map,
    FULL: _npu_moe_token_unpermute_with_routing_map,
    GRAD: npu_moe_token_unpermute_with_routing_map_grad,
}
