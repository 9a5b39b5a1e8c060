"""torch_npu.npu_recurrent_gated_delta_rule (state updated in place) and its _functional twin.

The decode-time Gated DeltaNet step over a batch of variable-length sequences (continuous
batching; up to 8 tokens per sequence for speculative decoding).  Sources: seed 004 and
op-plugin's ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_recurrent_gated_delta_rule.md``
(formula, parameters), ``op_plugin_functions.yaml`` (schemas; no entry in derivatives.yaml),
op-plugin's golden ``test/test_custom_ops/test_npu_recurrent_gated_delta_rule.py``, and the
kernel, which decides the numerics: ops-transformer
``attention/recurrent_gated_delta_rule/op_kernel/recurrent_gated_delta_rule.h`` (checks in
``op_host/recurrent_gated_delta_rule_tiling.cpp`` and ``op_api/aclnn_recurrent_gated_delta_rule
.cpp``).  For every sequence ``i`` (tokens ``t`` in order) and value head ``h``::

    S      = state[ssm_state_indices[first_i]]        first_i: the sequence's first token, or its
                                                      (num_accepted_tokens[i])-th when given
    S      = exp(g_t) * S  (* exp(gk_t) on the key dim)
    S      = S + beta_t * (v_t - S k_t) k_t^T
    o_t    = S (scale * q_t)
    state[ssm_state_indices[t]] = S                   (every token's state is stored)

Precision (the kernel's order): inputs cast to float32, ``q`` scaled in float32, the state kept
in float32 from token to token of a sequence, each token's ``o`` and ``S`` rounded to bfloat16
(round to nearest even) when stored.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common as common
from ._gdr import head_map, recurrent_steps

OP = "npu_recurrent_gated_delta_rule"
FUNCTIONAL_OP = "npu_recurrent_gated_delta_rule_functional"
_TAIL = ("*, Tensor? beta=None, float? scale=None, Tensor? actual_seq_lengths=None, "
         "Tensor? ssm_state_indices=None, Tensor? num_accepted_tokens=None, Tensor? g=None, "
         "Tensor? gk=None)")
SCHEMA = f"{OP}(Tensor query, Tensor key, Tensor value, Tensor(a!) state, {_TAIL} -> Tensor"
FUNCTIONAL_SCHEMA = (f"{FUNCTIONAL_OP}(Tensor query, Tensor key, Tensor value, Tensor state, "
                     f"{_TAIL} -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
MAX_TOKENS = 8          # L_i <= 8 (the kernel's MAX_MTP buffers)
MAX_HEADS = 256         # Nk, Nv <= 256
MAX_DIM = 512           # Dk, Dv <= 512 (tiling and op-plugin's doc; seed 004 writes 256)
_BF16 = (torch.bfloat16,)
_INT = (torch.int32,)
_FP32 = (torch.float32,)


def _check(op, query, key, value, state, beta, scale, actual_seq_lengths, ssm_state_indices,
           num_accepted_tokens, g, gk):
    product = targets.expect_supported(op, _SUPPORTED)
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect_dim(t, 3, op, name)
        common.expect_dtype(t, _BF16, op, name)
    checks.expect_dim(state, 4, op, "state")
    common.expect_dtype(state, _BF16, op, "state")
    common.expect_given(actual_seq_lengths, op, "actual_seq_lengths",
                        "each sequence's token count; aclnnRecurrentGatedDeltaRule requires it")
    common.expect_given(ssm_state_indices, op, "ssm_state_indices",
                        "each token's state slot; aclnnRecurrentGatedDeltaRule requires it")
    named = {"query": query, "key": key, "value": value, "state": state,
             "actual_seq_lengths": actual_seq_lengths, "ssm_state_indices": ssm_state_indices}
    for name, t in (("beta", beta), ("num_accepted_tokens", num_accepted_tokens), ("g", g),
                    ("gk", gk)):
        if t is not None:
            named[name] = t
    checks.expect_same_device(named, op)
    checks.expect_nonempty(query, op, "query")
    t_len, nk, dk, nv, dv = common.expect_qkv(query, key, value, op, MAX_HEADS, MAX_DIM)
    checks.expect(tuple(state.shape[1:]) == (nv, dv, dk) and state.shape[0] >= 1, op, "state",
                  lambda: f"shape (BlockNum, Nv, Dv, Dk) = (BlockNum >= 1, {nv}, {dv}, {dk})",
                  common.shape(state), RuntimeError)
    if product is not None:
        checks.expect(state.shape[0] >= t_len, op, "state", lambda: f"BlockNum >= T = {t_len} "
                      f"on {product.value} (op-plugin's doc)", common.shape(state), RuntimeError)
        checks.expect(beta is not None, op, "beta", f"a tensor on {product.value} "
                      "(aclnnRecurrentGatedDeltaRule rejects a null beta)", "None", ValueError)
        checks.expect(scale is not None, op, "scale", f"a float on {product.value} (torch_npu "
                      "raises 'scale cannot be empty')", "None", ValueError)
        checks.expect(gk is None, op, "gk", f"None on {product.value} (the kernel rejects gk: "
                      "'not supported in the current version')", "a tensor", ValueError)
    if beta is not None:
        common.expect_dtype(beta, _BF16, op, "beta")
        common.expect_shape(beta, (t_len, nv), op, "beta", "(T, Nv)")
    checks.expect_dim(actual_seq_lengths, 1, op, "actual_seq_lengths")
    common.expect_dtype(actual_seq_lengths, _INT, op, "actual_seq_lengths")
    checks.expect_nonempty(actual_seq_lengths, op, "actual_seq_lengths")
    batch = actual_seq_lengths.shape[0]
    common.expect_dtype(ssm_state_indices, _INT, op, "ssm_state_indices")
    common.expect_shape(ssm_state_indices, (t_len,), op, "ssm_state_indices", "(T,)")
    if num_accepted_tokens is not None:
        common.expect_dtype(num_accepted_tokens, _INT, op, "num_accepted_tokens")
        common.expect_shape(num_accepted_tokens, (batch,), op, "num_accepted_tokens",
                            "(B,), actual_seq_lengths' shape")
    if g is not None:
        common.expect_dtype(g, _FP32, op, "g")
        common.expect_shape(g, (t_len, nv), op, "g", "(T, Nv)")
    if gk is not None:
        common.expect_dtype(gk, _FP32, op, "gk")
        common.expect_shape(gk, (t_len, nv, dk), op, "gk", "(T, Nv, Dk)")


def check_recurrent_gated_delta_rule(query, key, value, state, *, beta=None, scale=None,
                                     actual_seq_lengths=None, ssm_state_indices=None,
                                     num_accepted_tokens=None, g=None, gk=None):
    _check(OP, query, key, value, state, beta, scale, actual_seq_lengths, ssm_state_indices,
           num_accepted_tokens, g, gk)


def check_recurrent_gated_delta_rule_functional(query, key, value, state, *, beta=None,
                                                scale=None, actual_seq_lengths=None,
                                                ssm_state_indices=None,
                                                num_accepted_tokens=None, g=None, gk=None):
    _check(FUNCTIONAL_OP, query, key, value, state, beta, scale, actual_seq_lengths,
           ssm_state_indices, num_accepted_tokens, g, gk)


def _sequences(op, t_len, blocks, actual_seq_lengths, ssm_state_indices, num_accepted_tokens):
    """Value checks (eager, before any write) and each sequence's start and first state slot."""
    lengths = common.int_values(actual_seq_lengths)
    low = 0 if targets.current() is None else 1     # the kernel skips empty sequences
    common.expect_values_in(lengths, low, MAX_TOKENS, op, "actual_seq_lengths",
                            "sequence lengths")
    checks.expect(sum(lengths) == t_len, op, "actual_seq_lengths",
                  f"lengths summing to T = {t_len} (query's first dim)", f"sum {sum(lengths)}",
                  ValueError)
    slots = common.int_values(ssm_state_indices)
    common.expect_values_in(slots, 0, blocks - 1, op, "ssm_state_indices", "state slots",
                            IndexError)
    accepted = None
    if num_accepted_tokens is not None:
        accepted = common.int_values(num_accepted_tokens)
        for i, (n, length) in enumerate(zip(accepted, lengths)):
            checks.expect(length == 0 or 1 <= n <= length, op, "num_accepted_tokens",
                          f"values in [1, actual_seq_lengths[i]] (sequence {i} has {length} "
                          "tokens)", f"{n} at position {i}", ValueError)
    starts, firsts, kept = [], [], []
    start = 0
    for i, length in enumerate(lengths):
        if length:
            offset = accepted[i] - 1 if accepted is not None else 0
            starts.append(start)
            firsts.append(slots[start + offset])
            kept.append(length)
        start += length
    return kept, starts, firsts


def _run(op, query, key, value, state, target, beta, scale, actual_seq_lengths,
         ssm_state_indices, num_accepted_tokens, g, gk):
    """Compute every token and store its output and state (in ``target``); returns ``o``."""
    t_len, nk, dk = query.shape
    nv, dv = value.shape[1], value.shape[2]
    lengths, starts, firsts = _sequences(op, t_len, state.shape[0], actual_seq_lengths,
                                         ssm_state_indices, num_accepted_tokens)
    f32 = torch.float32
    heads = head_map(nk, nv, query.device)
    if scale is None:
        scale = 1.0 / math.sqrt(dk)
    q = query.to(f32).index_select(1, heads) * scale
    k = key.to(f32).index_select(1, heads)
    v = value.to(f32)
    ones = torch.ones((t_len, nv), dtype=f32, device=value.device)
    beta32 = beta.to(f32) if beta is not None else ones
    alpha = torch.exp(g) if g is not None else ones
    alpha_k = torch.exp(gk) if gk is not None else None
    # Every sequence's starting state is read before any token's state is stored.
    first = torch.tensor(firsts, dtype=torch.long, device=state.device)
    state0 = state.index_select(0, first).to(f32)
    slots = ssm_state_indices.to(torch.long)
    out = value.new_empty((t_len, nv, dv), dtype=torch.bfloat16)
    for _, tok, active, o, s in recurrent_steps(state0, q, k, v, beta32, alpha, alpha_k,
                                                lengths, starts):
        rows = tok[active]
        out[rows] = o[active].to(torch.bfloat16)
        target[slots[rows]] = s[active].to(target.dtype)
    return out


def recurrent_gated_delta_rule_reference(query, key, value, state, *, beta=None, scale=None,
                                         actual_seq_lengths=None, ssm_state_indices=None,
                                         num_accepted_tokens=None, g=None, gk=None):
    return _run(OP, query, key, value, state, state, beta, scale, actual_seq_lengths,
                ssm_state_indices, num_accepted_tokens, g, gk)


def recurrent_gated_delta_rule_functional_reference(query, key, value, state, *, beta=None,
                                                    scale=None, actual_seq_lengths=None,
                                                    ssm_state_indices=None,
                                                    num_accepted_tokens=None, g=None, gk=None):
    new_state = torch.empty(state.shape, dtype=state.dtype, device=state.device)
    new_state.copy_(state)
    out = _run(FUNCTIONAL_OP, query, key, value, state, new_state, beta, scale,
               actual_seq_lengths, ssm_state_indices, num_accepted_tokens, g, gk)
    return out, new_state


def _fake(query, key, value, state, **kwargs):
    return value.new_empty(tuple(value.shape), dtype=torch.bfloat16)


def _fake_functional(query, key, value, state, **kwargs):
    return (value.new_empty(tuple(value.shape), dtype=torch.bfloat16),
            state.new_empty(tuple(state.shape)))


_NO_GRAD = "an inference op: op-plugin's derivatives.yaml defines no backward for it"

recurrent_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_recurrent_gated_delta_rule,
                     reference=recurrent_gated_delta_rule_reference, fake=_fake,
                     metadata_check=True, info=OpInfo(api="torch_npu"))
recurrent_op.forbid_autograd(_NO_GRAD)
functional_op = NpuOp(FUNCTIONAL_SCHEMA, namespace=TORCH_NPU_NS,
                      check=check_recurrent_gated_delta_rule_functional,
                      reference=recurrent_gated_delta_rule_functional_reference,
                      fake=_fake_functional, metadata_check=True, info=OpInfo(api="torch_npu"))
functional_op.forbid_autograd(_NO_GRAD)


def npu_recurrent_gated_delta_rule(query, key, value, state, *, beta=None, scale=None,
                                   actual_seq_lengths=None, ssm_state_indices=None,
                                   num_accepted_tokens=None, g=None, gk=None):
    """Recurrent Gated Delta Rule over variable-length sequences; ``state`` is updated in place.

    Formula (op-plugin's doc; ``S`` is ``(Dv, Dk)`` per value head)::

        D_t = alpha_t S_{t-1} Diag(alpha_kt)             (the decayed state)
        S_t = D_t + beta_t (v_t - D_t k_t) k_t^T
        o_t = S_t (scale * q_t)          alpha_t = exp(g_t), alpha_kt = exp(gk_t)

    Sequence ``i`` owns the next ``actual_seq_lengths[i]`` tokens.  Its starting state is
    ``state[ssm_state_indices[s_i]]`` (``s_i`` its first token), or with ``num_accepted_tokens``
    ``state[ssm_state_indices[s_i + num_accepted_tokens[i] - 1]]`` (speculative decoding: the
    state after the last accepted draft token of the previous step).  After each token ``t``
    its state is written to ``state[ssm_state_indices[t]]``.

    Parameters
    ----------
    query, key : Tensor
        ``(T, Nk, Dk)`` bfloat16.  Key head ``h // (Nv // Nk)`` serves value head ``h``.
    value : Tensor
        ``(T, Nv, Dv)`` bfloat16.
    state : Tensor
        ``(BlockNum, Nv, Dv, Dk)`` bfloat16, read and written in place.
    beta : Tensor, optional
        ``(T, Nv)`` bfloat16; None means 1 (op-plugin's golden).
    scale : float, optional
        Query scale; None means ``1 / sqrt(Dk)`` (op-plugin's golden; torch_npu itself raises
        "scale cannot be empty").
    actual_seq_lengths : Tensor
        ``(B,)`` int32, each ``0 <= L_i <= 8`` (the doc asks ``L_i >= 1``; the kernel skips
        empty sequences), summing to ``T``.  Required.
    ssm_state_indices : Tensor
        ``(T,)`` int32 state slots in ``[0, BlockNum)``.  Required.
    num_accepted_tokens : Tensor, optional
        ``(B,)`` int32, ``1 <= n_i <= L_i``; None means 1.
    g : Tensor, optional
        ``(T, Nv)`` float32 log-decay; None means 0 (``alpha = 1``).
    gk : Tensor, optional
        ``(T, Nv, Dk)`` float32 per-key log-decay (op-plugin's newer doc; the kernel in
        ops-transformer still rejects it, and strict mode does too).

    Returns
    -------
    Tensor
        ``o``, ``(T, Nv, Dv)`` bfloat16.

    Constraints
    -----------
    ``Nv`` a multiple of ``Nk``; ``1 <= Nk, Nv <= 256``; ``1 <= Dk, Dv <= 512``.  Strict mode
    (A2, A3): also ``BlockNum >= T``, ``L_i >= 1``, ``beta`` and ``scale`` given, ``gk`` None.

    Notes
    -----
    Numerics follow the kernel (recurrent_gated_delta_rule.h): float32 throughout, the state
    carried in float32 between the tokens of one sequence, each stored ``o`` / state rounded to
    bfloat16.  ``gk`` scales the key dim of ``S`` (the doc's first form, ``S_{t-1}(alpha_t
    Diag(alpha_kt)(I - beta_t k_t k_t^T))``; its second form writes ``Diag(alpha_kt) S_{t-1}``,
    which only fits when Dk = Dv).  All starting states are read before any state is
    written; on the NPU, sequences run on parallel cores, so slots shared between sequences
    (one's write, another's read) have no defined order there.  Inference only (no backward).

    Examples
    --------
    >>> o = npu_anywhere.npu_recurrent_gated_delta_rule(
    ...     q, k, v, state, beta=beta, scale=dk ** -0.5, actual_seq_lengths=lengths,
    ...     ssm_state_indices=slots, g=g)
    """
    return recurrent_op(query, key, value, state, beta=beta, scale=scale,
                        actual_seq_lengths=actual_seq_lengths,
                        ssm_state_indices=ssm_state_indices,
                        num_accepted_tokens=num_accepted_tokens, g=g, gk=gk)


def npu_recurrent_gated_delta_rule_functional(query, key, value, state, *, beta=None,
                                              scale=None, actual_seq_lengths=None,
                                              ssm_state_indices=None, num_accepted_tokens=None,
                                              g=None, gk=None):
    """:func:`npu_recurrent_gated_delta_rule` with the updated state returned, ``state`` kept.

    Returns
    -------
    (o, state_out)
        ``o`` ``(T, Nv, Dv)`` bfloat16, and a new ``(BlockNum, Nv, Dv, Dk)`` tensor in
        ``state``'s dtype: a copy of ``state`` with every token's slot written (as torch_npu
        does: it clones ``state`` and runs the in-place kernel on the clone).

    Everything else (formula, parameters, constraints, precision) is the in-place op's.
    """
    return functional_op(query, key, value, state, beta=beta, scale=scale,
                         actual_seq_lengths=actual_seq_lengths,
                         ssm_state_indices=ssm_state_indices,
                         num_accepted_tokens=num_accepted_tokens, g=g, gk=gk)


TORCH_NPU_FUNCTIONS = {
    OP: npu_recurrent_gated_delta_rule,
    FUNCTIONAL_OP: npu_recurrent_gated_delta_rule_functional,
}
