"""torch_npu.npu_chunk_gated_delta_rule: the chunked (prefill) form of the gated delta rule.

Sources: seed 004 and op-plugin's ``docs/zh/custom_APIs/torch_npu/
torch_npu-npu_chunk_gated_delta_rule.md`` (formula, parameters, constraints),
``op_plugin_functions.yaml`` (schema; no entry in derivatives.yaml), op-plugin's adapter
``op_plugin/ops/opapi/ChunkGatedDeltaRuleKernelNpuOpApi.cpp`` (beta, initial_state,
actual_seq_lengths and scale required), the CANN tiling ``attention/chunk_gated_delta_rule/
op_host/chunk_gated_delta_rule_tiling.cpp`` (shape and dtype rules, chunk size 64) and the
float32 goldens of op-plugin (``test/test_custom_ops/test_npu_chunk_gated_delta_rule.py``,
``cgdr_golden``) and ops-transformer (``tests/assets/impl/golden.py``).  Per sequence ``b``
(the next ``actual_seq_lengths[b]`` tokens) and value head, from ``S_0 = initial_state[b]``::

    S_t = exp(g_t) S_{t-1} + beta_t (v_t - exp(g_t) S_{t-1} k_t) k_t^T
    o_t = S_t (scale * q_t)
    final_state[b] = S_L

computed by chunks of 64 tokens (the WY / UT-transform form, see ``_gdr.chunked``): the same
numbers as the token recurrence, up to float32 rounding.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common as common
from ._gdr import chunked, head_map

OP = "npu_chunk_gated_delta_rule"
SCHEMA = ("npu_chunk_gated_delta_rule(Tensor query, Tensor key, Tensor value, *, "
          "Tensor? beta=None, Tensor? initial_state=None, Tensor? actual_seq_lengths=None, "
          "float? scale=None, Tensor? g=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
MAX_HEADS = 64          # 0 < Nk, Nv <= 64
MAX_DIM = 128           # 0 < Dk, Dv <= 128
_BF16 = (torch.bfloat16,)
_STATE_DTYPES = (torch.bfloat16, torch.float32)      # float32: Ascend 950 only
_REQUIRED = "required in the TND layout; torch_npu raises '{} cannot be empty'"


def check_chunk_gated_delta_rule(query, key, value, *, beta=None, initial_state=None,
                                 actual_seq_lengths=None, scale=None, g=None):
    op = OP
    product = targets.expect_supported(op, _SUPPORTED)
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect_dim(t, 3, op, name)
        common.expect_dtype(t, _BF16, op, name)
    for name, t in (("beta", beta), ("initial_state", initial_state),
                    ("actual_seq_lengths", actual_seq_lengths)):
        common.expect_given(t, op, name, _REQUIRED.format(name))
    named = {"query": query, "key": key, "value": value, "beta": beta,
             "initial_state": initial_state, "actual_seq_lengths": actual_seq_lengths}
    if g is not None:
        named["g"] = g
    checks.expect_same_device(named, op)
    checks.expect_nonempty(query, op, "query")
    t_len, nk, dk, nv, dv = common.expect_qkv(query, key, value, op, MAX_HEADS, MAX_DIM)
    common.expect_dtype(beta, _BF16, op, "beta")
    common.expect_shape(beta, (t_len, nv), op, "beta", "(T, Nv)")
    checks.expect_dim(initial_state, 4, op, "initial_state")
    state_dtypes = _STATE_DTYPES if product in (None, Product.ASCEND_950) else _BF16
    common.expect_dtype(initial_state, state_dtypes, op, "initial_state",
                        "" if product is None else f" on {product.value}")
    batch = initial_state.shape[0]
    checks.expect(batch >= 1 and tuple(initial_state.shape[1:]) == (nv, dv, dk), op,
                  "initial_state", lambda: f"shape (B, Nv, Dv, Dk) = (B >= 1, {nv}, {dv}, {dk})",
                  common.shape(initial_state), RuntimeError)
    common.expect_dtype(actual_seq_lengths, (torch.int32,), op, "actual_seq_lengths")
    common.expect_shape(actual_seq_lengths, (batch,), op, "actual_seq_lengths",
                        "(B,), B = initial_state.shape[0]")
    if g is not None:
        common.expect_dtype(g, (torch.float32,), op, "g")
        common.expect_shape(g, (t_len, nv), op, "g", "(T, Nv)")
    if product is not None:
        checks.expect(scale is not None, op, "scale", f"a float on {product.value} (torch_npu "
                      "raises 'scale cannot be empty')", "None", ValueError)


def chunk_gated_delta_rule_reference(query, key, value, *, beta=None, initial_state=None,
                                     actual_seq_lengths=None, scale=None, g=None):
    op = OP
    t_len, nk, dk = query.shape
    nv = value.shape[1]
    lengths = common.int_values(actual_seq_lengths)
    for i, n in enumerate(lengths):
        checks.expect(n >= 0, op, "actual_seq_lengths", "non-negative sequence lengths",
                      f"{n} at position {i}", ValueError)
    checks.expect(sum(lengths) == t_len, op, "actual_seq_lengths",
                  f"lengths summing to T = {t_len} (query's first dim)", f"sum {sum(lengths)}",
                  ValueError)
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    f32 = torch.float32
    heads = head_map(nk, nv, query.device)
    scale = 1.0 if scale is None else scale
    q = query.to(f32).index_select(1, heads) * scale
    k = key.to(f32).index_select(1, heads)
    log_decay = g if g is not None else torch.zeros((t_len, nv), dtype=f32, device=value.device)
    o, final = chunked(initial_state.to(f32), q, k, value.to(f32), beta.to(f32), log_decay,
                       lengths, starts)
    final_state = torch.empty(initial_state.shape, dtype=initial_state.dtype,
                              device=initial_state.device)
    final_state.copy_(final)
    return o.to(torch.bfloat16), final_state


def _fake(query, key, value, *, beta=None, initial_state=None, actual_seq_lengths=None,
          scale=None, g=None):
    return (value.new_empty(tuple(value.shape), dtype=torch.bfloat16),
            initial_state.new_empty(tuple(initial_state.shape)))


chunk_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_chunk_gated_delta_rule,
                 reference=chunk_gated_delta_rule_reference, fake=_fake, metadata_check=True,
                 info=OpInfo(api="torch_npu"))
chunk_op.forbid_autograd("an inference op: op-plugin's derivatives.yaml defines no backward "
                         "for it")


def npu_chunk_gated_delta_rule(query, key, value, *, beta=None, initial_state=None,
                               actual_seq_lengths=None, scale=None, g=None):
    """Chunked Gated Delta Rule (prefill): every token's output and each sequence's last state.

    Formula (op-plugin's doc; ``S`` is ``(Dv, Dk)`` per value head)::

        S_t = alpha_t S_{t-1} + beta_t (v_t - alpha_t S_{t-1} k_t) k_t^T,   alpha_t = exp(g_t)
        o_t = S_t (q_t * scale)

    Sequence ``b`` owns the next ``actual_seq_lengths[b]`` tokens and starts from
    ``initial_state[b]``; its final state ``S_L`` is ``final_state[b]``.  Computed by chunks of
    64 tokens (arXiv:2412.06464): one triangular solve per chunk, all chunks at once, then a
    loop over chunks carrying the state, so a long prefill costs a few batched matmuls per
    chunk instead of one step per token.

    Parameters
    ----------
    query, key : Tensor
        ``(T, Nk, Dk)`` bfloat16 (the doc asks for L2-normalised rows).  Key head
        ``h // (Nv // Nk)`` serves value head ``h``.
    value : Tensor
        ``(T, Nv, Dv)`` bfloat16.
    beta : Tensor
        ``(T, Nv)`` bfloat16.  Required.
    initial_state : Tensor
        ``(B, Nv, Dv, Dk)`` bfloat16, or float32 (Ascend 950).  Required; not written.
    actual_seq_lengths : Tensor
        ``(B,)`` int32 sequence lengths (not cumulative), summing to ``T``.  Required.
    scale : float, optional
        Query scale; None means 1.0 (op-plugin's doc; torch_npu itself raises "scale cannot be
        empty").  Usually ``Dk ** -0.5``.
    g : Tensor, optional
        ``(T, Nv)`` float32 log-decay; None means 0.

    Returns
    -------
    (out, final_state)
        ``out`` ``(T, Nv, Dv)`` bfloat16; ``final_state`` ``(B, Nv, Dv, Dk)`` in
        ``initial_state``'s dtype.

    Constraints
    -----------
    ``1 <= Nk, Nv <= 64``, ``Nv`` a multiple of ``Nk``; ``1 <= Dk, Dv <= 128``; ``T, B > 0``.
    The doc asks ``-1 <= q, k <= 1`` (normalised), ``-1 <= g <= 0`` and ``0 < beta < 1`` to
    avoid overflow; those are not checked (the math here is defined for any values).  Strict
    mode: A2, A3 (bfloat16 state only) and 950; ``scale`` must be given.

    Notes
    -----
    Precision: float32 throughout and one rounding of each output, as the float32 goldens
    (op-plugin's ``cgdr_golden``, ops-transformer's ``golden.py``).  The NPU kernel keeps some
    chunk intermediates (q', k_cumdecay, v_inner, qk^T) in bfloat16 workspaces, so its results
    differ from these by a few bfloat16 ulps.  Inference only (no backward).

    Examples
    --------
    >>> o, final_state = npu_anywhere.npu_chunk_gated_delta_rule(q, k, v, beta=beta,
    ...     initial_state=state, actual_seq_lengths=lengths, scale=dk ** -0.5, g=g)
    """
    return chunk_op(query, key, value, beta=beta, initial_state=initial_state,
                    actual_seq_lengths=actual_seq_lengths, scale=scale, g=g)


TORCH_NPU_FUNCTIONS = {OP: npu_chunk_gated_delta_rule}
