"""torch_npu.npu_fused_causal_conv1d: causal depthwise conv1d over variable-length sequences
with per-sequence convolution state caches (prefill, decode, mixed, speculative decoding, APC).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_causal_conv1d.md and the
golden of test/test_custom_ops/test_npu_fused_causal_conv1d.py, which decides where the two
differ; K = 3, C = conv_states.size(1), L = the sequence's length)::

    read line  = cache_indices[b, initial_state_idx[b]] (APC) | cache_indices[b] | b
    write line = cache_indices[b, block_idx_last[b]]    (APC) | cache_indices[b] | b
    read line == pad_slot_id: the sequence is skipped (its output rows are 1, as the golden
                              fills them; the NPU leaves them unspecified)
    num_computed_tokens[b] == 0:  cached = zeros(K - 1), offset = 0
    elif num_accepted_tokens:     offset = num_accepted_tokens[b] - 1
    else:                         offset = C - (K - 1)
                                  cached = conv_states[read][: offset + K - 1]
    padded = cat(cached, x_b);  M = min(C, len(padded))
    conv_states[write][C - M:] = padded[len(padded) - M:]               (in place)
    x' = padded[offset:]
    APC: for chunk in range(idx_last - idx_first):                         (block B = block_size)
        boundary = last_full_block_token_index - (n_fill - chunk - 1) * B
        conv_states[cache_indices[b, idx_first + chunk]][C - (K - 1):] = x'[boundary:boundary + K-1]
    y[i] = sum_k weight[k] * x'[i + k],  i < L
    pangu (num_computed_tokens given): y[: clamp(K - 1 - num_computed_tokens[b], 0, L)] = 0
    residual_connection == 1: y = y + x_b

Computed in float32 and rounded once to x's dtype, as the golden does.  ``initial_state_mode``,
``bias``, ``activation`` and ``run_mode`` are documented as having no effect and are ignored;
``max_query_len`` only sizes the NPU's tiling.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_fused_causal_conv1d"
SCHEMA = ("npu_fused_causal_conv1d(Tensor x, Tensor weight, Tensor(a!) conv_states, *, "
          "Tensor? query_start_loc=None, Tensor? cache_indices=None, "
          "Tensor? initial_state_mode=None, Tensor? bias=None, Tensor? num_accepted_tokens=None, "
          "str? activation=\"None\", int? pad_slot_id=-1, int? run_mode=0, "
          "int? residual_connection=0, int? max_query_len=-1, Tensor? num_computed_tokens=None, "
          "Tensor? block_idx_first_scheduled_token=None, "
          "Tensor? block_idx_last_scheduled_token=None, Tensor? initial_state_idx=None, "
          "int? block_size=128, str? conv_mode=\"default\") -> Tensor")

_SUPPORTED = frozenset({Product.ASCEND_950})
_DOC_DTYPES = (torch.float16, torch.bfloat16)
_DTYPES = _DOC_DTYPES + (torch.float32,)
K = 3
_CONV_MODES = ("default", "pangu")
_APC_TENSORS = ("num_computed_tokens", "block_idx_first_scheduled_token",
                "block_idx_last_scheduled_token", "initial_state_idx")


def _expect_index(op: str, name: str, t, shape) -> None:
    if t is None:
        return
    checks.expect_dtype(t, (torch.int32,), op, name)
    checks.expect(tuple(t.shape) == tuple(shape), op, name, lambda: f"the shape {tuple(shape)}",
                  lambda: f"shape {tuple(t.shape)}", RuntimeError)


def _batch(x, query_start_loc) -> int:
    if x.dim() == 2:
        return query_start_loc.shape[0] - 1
    return x.shape[0]


def check_common(op: str, x, weight, conv_states, *, query_start_loc=None,
                 cache_indices=None, initial_state_mode=None, bias=None,
                 num_accepted_tokens=None, activation="None", pad_slot_id=-1, run_mode=0,
                 residual_connection=0, max_query_len=-1, num_computed_tokens=None,
                 block_idx_first_scheduled_token=None, block_idx_last_scheduled_token=None,
                 initial_state_idx=None, block_size=128, conv_mode="default"):
    """The checks of npu_fused_causal_conv1d and its in-place form (``op`` names the caller)."""
    strict = targets.expect_supported(op, _SUPPORTED) is not None
    checks.expect_dtype(x, _DOC_DTYPES if strict else _DTYPES, op, "x")
    checks.expect_dim(x, (2, 3), op, "x")
    checks.expect_nonempty(x, op, "x")
    dim = x.shape[-1]
    checks.expect(tuple(weight.shape) == (K, dim), op, "weight",
                  lambda: f"the shape [K, dim] = ({K}, {dim}) (K = 3 only)",
                  lambda: f"shape {tuple(weight.shape)}", RuntimeError)
    checks.expect(conv_states.dim() == 3 and conv_states.shape[1] >= K - 1
                  and conv_states.shape[2] == dim and conv_states.shape[0] > 0, op,
                  "conv_states", lambda: f"a 3-D [slots, K - 1 + m, dim = {dim}] tensor",
                  lambda: f"shape {tuple(conv_states.shape)}", RuntimeError)
    checks.expect_same_dtype({"x": x, "weight": weight, "conv_states": conv_states}, op)
    checks.expect(x.dim() == 3 or query_start_loc is not None, op, "query_start_loc",
                  "a tensor when x is 2-D [cu_seq_len, dim]", "None", RuntimeError)
    if query_start_loc is not None:
        checks.expect_dtype(query_start_loc, (torch.int32,), op, "query_start_loc")
        checks.expect_dim(query_start_loc, 1, op, "query_start_loc")
        checks.expect(query_start_loc.shape[0] >= 2, op, "query_start_loc",
                      "[batch + 1] entries with batch >= 1",
                      lambda: f"shape {tuple(query_start_loc.shape)}", RuntimeError)
    batch = _batch(x, query_start_loc)
    if x.dim() == 3 and query_start_loc is not None:
        _expect_index(op, "query_start_loc", query_start_loc, (batch + 1,))
    mode = "default" if conv_mode is None else conv_mode
    checks.expect_one_of(mode, _CONV_MODES, op, "conv_mode")
    residual = 0 if residual_connection is None else residual_connection
    checks.expect_one_of(residual, (0, 1), op, "residual_connection")
    checks.expect(block_size is None or block_size >= 2, op, "block_size", ">= 2",
                  block_size, ValueError)
    apc = block_idx_last_scheduled_token is not None
    if cache_indices is not None:
        checks.expect_dtype(cache_indices, (torch.int32,), op, "cache_indices")
        want = 2 if apc else 1
        checks.expect(cache_indices.dim() == want and cache_indices.shape[0] == batch, op,
                      "cache_indices", lambda: f"[batch = {batch}]" if want == 1 else
                      f"[batch = {batch}, maxNumBlocks] when APC is on", lambda: f"shape "
                      f"{tuple(cache_indices.shape)}", RuntimeError)
    if apc:
        given = dict(zip(_APC_TENSORS, (num_computed_tokens, block_idx_first_scheduled_token,
                                        block_idx_last_scheduled_token, initial_state_idx)))
        for name, t in given.items():
            checks.expect(t is not None, op, name, "a tensor when APC is on "
                          "(block_idx_last_scheduled_token given)", "None", RuntimeError)
        checks.expect(cache_indices is not None, op, "cache_indices",
                      "a [batch, maxNumBlocks] tensor when APC is on", "None", RuntimeError)
        for name, t in given.items():
            _expect_index(op, name, t, (batch,))
    checks.expect(mode != "pangu" or num_computed_tokens is not None, op, "num_computed_tokens",
                  "a tensor when conv_mode is 'pangu'", "None", RuntimeError)
    _expect_index(op, "num_computed_tokens", num_computed_tokens, (batch,))
    _expect_index(op, "num_accepted_tokens", num_accepted_tokens, (batch,))
    checks.expect_same_device({"x": x, "weight": weight, "conv_states": conv_states}, op)
    if strict:
        checks.expect(64 <= dim <= 16384 and dim % 16 == 0, op, "x",
                      "dim in [64, 16384] and a multiple of 16 on 950", dim, ValueError)
        checks.expect(1 <= batch <= 256, op, "x", "batch in [1, 256] on 950", batch, ValueError)
        if x.dim() == 3:
            checks.expect(1 <= x.shape[1] <= 8, op, "x", "[batch, m + 1, dim] with m in [0, 7]",
                          lambda: f"shape {tuple(x.shape)}", ValueError)


def check_fused_causal_conv1d(x, weight, conv_states, **kwargs):
    check_common(OP, x, weight, conv_states, **kwargs)


def _sequence_bounds(x, query_start_loc) -> list[tuple[int, int]]:
    if x.dim() == 3:
        s = x.shape[1]
        return [(b * s, (b + 1) * s) for b in range(x.shape[0])]
    loc = query_start_loc.tolist()
    return list(zip(loc[:-1], loc[1:]))


def _as_list(t):
    return None if t is None else t.tolist()


def _plan(op, x, conv_states, query_start_loc, cache_indices, num_accepted_tokens, pad_slot_id,
          num_computed_tokens, idx_first, idx_last, initial_state_idx, block_size):
    """Per sequence: (start, end, read line, write line, offset, fill lines).  Checks the index
    values before anything is written."""
    bounds = _sequence_bounds(x, query_start_loc)
    total = x.shape[0] * (x.shape[1] if x.dim() == 3 else 1)
    slots, c = conv_states.shape[0], conv_states.shape[1]
    cache, accepted, computed = (_as_list(cache_indices), _as_list(num_accepted_tokens),
                                 _as_list(num_computed_tokens))
    first, last, initial = _as_list(idx_first), _as_list(idx_last), _as_list(initial_state_idx)
    plan = []
    prev_end = 0
    for b, (start, end) in enumerate(bounds):
        checks.expect(prev_end <= start <= end <= total and (b > 0 or start == 0), op,
                      "query_start_loc", lambda: f"non-decreasing offsets from 0 to at most "
                      f"{total}", lambda: _as_list(query_start_loc), ValueError)
        prev_end = end
        seq_len = end - start
        fills = []
        if last is not None:
            n_blocks = len(cache[b])
            checks.expect(initial[b] <= first[b] + 1 and initial[b] <= last[b] <= n_blocks - 1
                          and first[b] <= last[b], op, "block_idx_last_scheduled_token",
                          "initial_state_idx <= first + 1, initial_state_idx <= last, "
                          "first <= last < maxNumBlocks", lambda b=b: f"first={first[b]}, "
                          f"last={last[b]}, initial={initial[b]} for sequence {b}", ValueError)
            read, write = cache[b][initial[b]], cache[b][last[b]]
            completed = block_size - computed[b] % block_size
            end_offset = (seq_len - completed) % block_size
            last_full = seq_len - end_offset - (block_size if end_offset == 0 else 0)
            n_fill = last[b] - first[b]
            fills = [(cache[b][first[b] + chunk],
                      last_full - (n_fill - chunk - 1) * block_size) for chunk in range(n_fill)]
        elif cache is not None:
            read = write = cache[b]
        else:
            read = write = b
        if read == pad_slot_id:
            plan.append((start, end, None, None, 0, []))
            continue
        if computed is not None and computed[b] == 0:
            offset = 0
        elif accepted is not None:
            checks.expect(1 <= accepted[b] <= seq_len, op, "num_accepted_tokens",
                          lambda b=b, n=seq_len: f"entries in [1, {n}] (sequence {b})",
                          lambda b=b: accepted[b], ValueError)
            offset = accepted[b] - 1
            checks.expect(offset + K - 1 <= c, op, "num_accepted_tokens",
                          lambda: f"num_accepted_tokens - 1 + K - 1 <= conv_states.size(1) = {c}",
                          lambda b=b: accepted[b], ValueError)
        else:
            offset = c - (K - 1)
        for line in (read, write, *(f[0] for f in fills)):
            checks.expect(0 <= line < slots, op, "cache_indices",
                          lambda: f"entries in [0, {slots - 1}] (conv_states.size(0) - 1)",
                          line, ValueError)
        for _line, boundary in fills:
            checks.expect(0 <= boundary and boundary + K - 1 <= K - 1 + seq_len,
                          op, "block_idx_first_scheduled_token",
                          "blocks to fill whose boundary lies inside the sequence",
                          boundary, ValueError)
        plan.append((start, end, read, write, offset, fills))
    return plan


def run(op, x, weight, conv_states, *, query_start_loc=None, cache_indices=None,
        initial_state_mode=None, bias=None, num_accepted_tokens=None, activation="None",
        pad_slot_id=-1, run_mode=0, residual_connection=0, max_query_len=-1,
        num_computed_tokens=None, block_idx_first_scheduled_token=None,
        block_idx_last_scheduled_token=None, initial_state_idx=None, block_size=128,
        conv_mode="default"):
    """Updates conv_states in place; returns (y, the (start, end) rows of computed sequences)."""
    pad = -1 if pad_slot_id is None else pad_slot_id
    plan = _plan(op, x, conv_states, query_start_loc, cache_indices, num_accepted_tokens, pad,
                 num_computed_tokens, block_idx_first_scheduled_token,
                 block_idx_last_scheduled_token, initial_state_idx,
                 128 if block_size is None else block_size)
    dim = x.shape[-1]
    flat = x.reshape(-1, dim).float()
    w = weight.float()
    c = conv_states.shape[1]
    computed = _as_list(num_computed_tokens)
    pangu = conv_mode == "pangu"
    out = torch.ones_like(flat)
    for b, (start, end, read, write, offset, fills) in enumerate(plan):
        if read is None:
            continue
        seq = flat[start:end]
        seq_len = end - start
        if offset == 0 and computed is not None and computed[b] == 0:
            cached = flat.new_zeros(K - 1, dim)
        else:
            cached = conv_states[read, :offset + K - 1].float()
        padded = torch.cat([cached, seq])
        m = min(c, padded.shape[0])
        conv_states[write, c - m:] = padded[padded.shape[0] - m:].to(conv_states.dtype)
        shifted = padded[offset:]
        for line, boundary in fills:
            conv_states[line, c - (K - 1):] = shifted[boundary:boundary + K - 1].to(
                conv_states.dtype)
        y = sum(w[k] * shifted[k:k + seq_len] for k in range(K))
        if pangu:
            reset = min(max(K - 1 - computed[b], 0), seq_len)
            y[:reset] = 0
        if residual_connection == 1:
            y = y + seq
        out[start:end] = y
    computed_rows = [(start, end) for start, end, read, *_rest in plan if read is not None]
    return out.to(x.dtype).reshape(x.shape), computed_rows


def fused_causal_conv1d_reference(x, weight, conv_states, **kwargs):
    return run(OP, x, weight, conv_states, **kwargs)[0]


def _fake(x, weight, conv_states, **kwargs):
    return x.new_empty(tuple(x.shape))


fused_causal_conv1d_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_fused_causal_conv1d,
                               reference=fused_causal_conv1d_reference, fake=_fake,
                               metadata_check=True, info=OpInfo(api="torch_npu"))
fused_causal_conv1d_op.forbid_autograd("an inference op: op-plugin's derivatives.yaml has no "
                                       "backward for it")


def npu_fused_causal_conv1d(x, weight, conv_states, *, query_start_loc=None, cache_indices=None,
                            initial_state_mode=None, bias=None, num_accepted_tokens=None,
                            activation="None", pad_slot_id=-1, run_mode=0,
                            residual_connection=0, max_query_len=-1, num_computed_tokens=None,
                            block_idx_first_scheduled_token=None,
                            block_idx_last_scheduled_token=None, initial_state_idx=None,
                            block_size=128, conv_mode="default"):
    """Causal depthwise conv1d (K = 3) with cached history, updating ``conv_states`` in place.

    Formula (torch_npu-npu_fused_causal_conv1d.md; K = 3, C = conv_states.size(1))::

        offset = 0 (num_computed_tokens[b] == 0, zero history) | num_accepted_tokens[b] - 1
                 | C - (K - 1)
        padded = cat(conv_states[read][: offset + K - 1], x_b)
        conv_states[write][C - M:] = padded[-M:],   M = min(C, len(padded))
        x' = padded[offset:];  y[i] = sum_k weight[k] * x'[i + k]
        pangu: y[: clamp(K - 1 - num_computed_tokens[b], 0, L)] = 0
        residual_connection = 1: y += x_b
        APC (block_idx_last_scheduled_token given): read line cache_indices[b,
        initial_state_idx[b]], write line cache_indices[b, block_idx_last[b]], and the K - 1
        tokens ending each completed block are stored in cache_indices[b, block_idx_first[b] +
        chunk].

    Parameters
    ----------
    x : Tensor
        ``[cu_seq_len, dim]`` (with ``query_start_loc``) or ``[batch, m + 1, dim]``, float16 or
        bfloat16 (float32 accepted outside strict mode).
    weight : Tensor
        ``[3, dim]``, x's dtype.
    conv_states : Tensor
        ``[slots, K - 1 + m, dim]``, x's dtype; updated in place.
    query_start_loc : Tensor, optional
        int32 ``[batch + 1]`` cumulative offsets; required for 2-D x.
    cache_indices : Tensor, optional
        int32 ``[batch]`` state lines (default: line b), or ``[batch, maxNumBlocks]`` with APC.
    initial_state_mode, bias, activation, run_mode
        Documented as without effect; accepted and ignored.
    num_accepted_tokens : Tensor, optional
        int32 ``[batch]``, accepted speculative tokens (1..L); the history starts at
        ``num_accepted_tokens - 1``.
    pad_slot_id : int
        A sequence whose read line equals it is skipped.
    residual_connection : {0, 1}
    max_query_len : int
        Tiling hint on the NPU; unused.
    num_computed_tokens : Tensor, optional
        int32 ``[batch]``; 0 means no history.  Required with APC and with ``'pangu'``.
    block_idx_first_scheduled_token, block_idx_last_scheduled_token, initial_state_idx : Tensor
        int32 ``[batch]``, APC block indices (all required when APC is on).
    block_size : int
        APC block size, >= 2.
    conv_mode : {'default', 'pangu'}

    Returns
    -------
    Tensor
        ``y``, x's shape and dtype (float32 accumulation, rounded once).  Rows of a skipped
        (``pad_slot_id``) sequence are 1, as op-plugin's golden fills them.

    Constraints
    -----------
    Ascend 950 only (strict mode, which also checks dim in [64, 16384] divisible by 16, batch in
    [1, 256], m in [0, 7]).  Index values (cache lines in range, APC block order, accepted
    tokens in [1, L]) are checked before anything is written.

    Notes
    -----
    Not differentiable (inference op).
    """
    return fused_causal_conv1d_op(
        x, weight, conv_states, query_start_loc=query_start_loc, cache_indices=cache_indices,
        initial_state_mode=initial_state_mode, bias=bias,
        num_accepted_tokens=num_accepted_tokens, activation=activation,
        pad_slot_id=pad_slot_id, run_mode=run_mode, residual_connection=residual_connection,
        max_query_len=max_query_len, num_computed_tokens=num_computed_tokens,
        block_idx_first_scheduled_token=block_idx_first_scheduled_token,
        block_idx_last_scheduled_token=block_idx_last_scheduled_token,
        initial_state_idx=initial_state_idx, block_size=block_size, conv_mode=conv_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_fused_causal_conv1d}
