"""torch_npu.npu_block_sparse_attention and npu_block_sparse_attention_backward.

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu-npu_block_sparse_attention.md)::

    attention_out = Softmax(scale * query key_sparse^T) value_sparse

where ``block_sparse_mask[b, n, i, j] != 0`` lets query block ``i`` (``blockShapeX`` rows) of
head ``n`` see key block ``j`` (``blockShapeY`` columns).  Schemas from op-plugin's
``op_plugin_functions.yaml``; output shapes from its ``python/meta/_meta_registrations.py``;
numerics from the hicann/ops-transformer A2 kernel (see :mod:`.bsa_math`); the backward from
``derivatives.yaml`` (query, key, value through npu_block_sparse_attention_backward).

Provider ``flat_gather`` (blockShapeX >= 32, the gather solver's calls): the same arithmetic
with row-copy block gathers and, on CPU, one ``add_`` per selected block for the key / value
gradients (see :mod:`.bsa_math`).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import bsa_math
from .bsa_problem import lse_shape, parse, stats_dtype

OP = "npu_block_sparse_attention"
GRAD_OP = "npu_block_sparse_attention_backward"
SCHEMA = (
    "npu_block_sparse_attention(Tensor query, Tensor key, Tensor value, "
    "Tensor block_sparse_mask, int[] block_shape, *, str q_input_layout='TND', "
    "str kv_input_layout='TND', int num_key_value_heads=1, float scale_value=0.0, "
    "int inner_precise=1, int[]? actual_seq_lengths=None, int[]? actual_seq_lengths_kv=None, "
    "int? softmax_lse_flag=0) -> (Tensor, Tensor)")
GRAD_SCHEMA = (
    "npu_block_sparse_attention_backward(Tensor d_out, Tensor query, Tensor key, Tensor value, "
    "Tensor attention_out, Tensor softmax_lse, Tensor block_sparse_mask, int[]? block_shape, "
    "int[]? actual_seq_lengths, int[]? actual_seq_lengths_kv, str q_input_layout, "
    "str kv_input_layout, int num_key_value_heads, float scale_value) -> (Tensor, Tensor, Tensor)")
_DEFAULT_BLOCK = [128, 128]     # the backward's block_shape when None (op-plugin's kernel glue)
FAST_PROVIDER = "flat_gather"


# -- forward -----------------------------------------------------------------------------------

def check_block_sparse_attention(query, key, value, block_sparse_mask, block_shape, *,
                                 q_input_layout="TND", kv_input_layout="TND",
                                 num_key_value_heads=1, scale_value=0.0, inner_precise=1,
                                 actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                 softmax_lse_flag=0):
    p = parse(OP, query, key, value, block_sparse_mask, block_shape, q_input_layout,
              kv_input_layout, num_key_value_heads, actual_seq_lengths, actual_seq_lengths_kv)
    checks.expect_one_of(inner_precise, (0, 1), OP, "inner_precise")
    checks.expect(inner_precise == 0 or query.dtype != torch.bfloat16, OP, "inner_precise",
                  "0 (float32 softmax) when query/key/value are bfloat16", inner_precise,
                  ValueError)
    checks.expect_one_of(0 if softmax_lse_flag is None else softmax_lse_flag, (0, 1), OP,
                         "softmax_lse_flag")
    return p


def block_sparse_attention_reference(query, key, value, block_sparse_mask, block_shape, *,
                                     q_input_layout="TND", kv_input_layout="TND",
                                     num_key_value_heads=1, scale_value=0.0, inner_precise=1,
                                     actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                     softmax_lse_flag=0):
    p = check_block_sparse_attention(
        query, key, value, block_sparse_mask, block_shape, q_input_layout=q_input_layout,
        kv_input_layout=kv_input_layout, num_key_value_heads=num_key_value_heads,
        inner_precise=inner_precise, actual_seq_lengths=actual_seq_lengths,
        actual_seq_lengths_kv=actual_seq_lengths_kv, softmax_lse_flag=softmax_lse_flag)
    return bsa_math.forward(query, key, value, block_sparse_mask, p, float(scale_value),
                            inner_precise)


def _forward_fake(query, key, value, block_sparse_mask, block_shape, **kwargs):
    p = check_block_sparse_attention(query, key, value, block_sparse_mask, block_shape, **kwargs)
    return (query.new_empty(query.shape),
            query.new_empty(lse_shape(query, p), dtype=stats_dtype(query.dtype)))


block_sparse_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_block_sparse_attention,
                                  reference=block_sparse_attention_reference,
                                  fake=_forward_fake, metadata_check=True,
                                  info=OpInfo(api="torch_npu"))


def _fast_forward(query, key, value, block_sparse_mask, block_shape, **kwargs):
    p = check_block_sparse_attention(query, key, value, block_sparse_mask, block_shape, **kwargs)
    return bsa_math.forward(query, key, value, block_sparse_mask, p,
                            float(kwargs.get("scale_value", 0.0)),
                            kwargs.get("inner_precise", 1), fast=True)


def _fast_supports(query, key, value, block_sparse_mask, block_shape, *args, **kwargs):
    # a malformed block_shape is taken (and refused by the op's checks, with its message)
    if len(block_shape) >= 1 and 0 < block_shape[0] < bsa_math.GATHER_MIN_BLOCK_X:
        return (f"blockShapeX {block_shape[0]} < {bsa_math.GATHER_MIN_BLOCK_X}: the dense "
                f"solver of the reference")
    return None


# The gather solver with row-copy gathers (bsa_math._FlatGather) and per-block gradient adds.
block_sparse_attention_op.add_provider(FAST_PROVIDER, _fast_forward, _fast_supports)


# -- backward ----------------------------------------------------------------------------------

def check_block_sparse_attention_backward(d_out, query, key, value, attention_out, softmax_lse,
                                          block_sparse_mask, block_shape, actual_seq_lengths,
                                          actual_seq_lengths_kv, q_input_layout,
                                          kv_input_layout, num_key_value_heads, scale_value):
    shape = _DEFAULT_BLOCK if block_shape is None or len(block_shape) < 2 else block_shape
    p = parse(GRAD_OP, query, key, value, block_sparse_mask, shape, q_input_layout,
              kv_input_layout, num_key_value_heads, actual_seq_lengths, actual_seq_lengths_kv)
    if targets.current() is not None:
        # seed 004 and the grad kernel's README (ops-transformer block_sparse_attention_grad)
        checks.expect(p.d == 128, GRAD_OP, "query", "a head dim D of 128 (the backward kernel)",
                      p.d, ValueError)
        checks.expect(p.bx % 16 == 0, GRAD_OP, "block_shape",
                      "blockShapeX (block_shape[0]) a multiple of 16 (the backward kernel)",
                      p.bx, ValueError)
    for name, t in (("d_out", d_out), ("attention_out", attention_out)):
        checks.expect(t.shape == query.shape, GRAD_OP, name,
                      lambda: f"the shape of query {tuple(query.shape)}",
                      lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)
        checks.expect(t.dtype == query.dtype, GRAD_OP, name,
                      lambda: f"the dtype of query ({query.dtype})", lambda t=t: t.dtype,
                      TypeError)
    want = lse_shape(query, p)
    checks.expect(list(softmax_lse.shape) == want, GRAD_OP, "softmax_lse",
                  lambda: f"shape {want} (the forward's softmax_lse)",
                  lambda: f"shape {tuple(softmax_lse.shape)}", RuntimeError)
    checks.expect(softmax_lse.is_floating_point(), GRAD_OP, "softmax_lse",
                  "a floating-point tensor (float32)", lambda: softmax_lse.dtype, TypeError)
    return p, shape


def block_sparse_attention_backward_reference(d_out, query, key, value, attention_out,
                                              softmax_lse, block_sparse_mask, block_shape,
                                              actual_seq_lengths, actual_seq_lengths_kv,
                                              q_input_layout, kv_input_layout,
                                              num_key_value_heads, scale_value):
    p, _ = check_block_sparse_attention_backward(
        d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask, block_shape,
        actual_seq_lengths, actual_seq_lengths_kv, q_input_layout, kv_input_layout,
        num_key_value_heads, scale_value)
    return bsa_math.backward(d_out, query, key, value, attention_out, softmax_lse,
                             block_sparse_mask, p, float(scale_value))


def _backward_fake(d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask,
                   block_shape, actual_seq_lengths, actual_seq_lengths_kv, q_input_layout,
                   kv_input_layout, num_key_value_heads, scale_value):
    check_block_sparse_attention_backward(
        d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask, block_shape,
        actual_seq_lengths, actual_seq_lengths_kv, q_input_layout, kv_input_layout,
        num_key_value_heads, scale_value)
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)


block_sparse_attention_backward_op = NpuOp(
    GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_block_sparse_attention_backward,
    reference=block_sparse_attention_backward_reference, fake=_backward_fake,
    metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _fast_backward(d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask,
                   block_shape, actual_seq_lengths, actual_seq_lengths_kv, q_input_layout,
                   kv_input_layout, num_key_value_heads, scale_value):
    p, _ = check_block_sparse_attention_backward(
        d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask, block_shape,
        actual_seq_lengths, actual_seq_lengths_kv, q_input_layout, kv_input_layout,
        num_key_value_heads, scale_value)
    return bsa_math.backward(d_out, query, key, value, attention_out, softmax_lse,
                             block_sparse_mask, p, float(scale_value), fast=True)


def _fast_backward_supports(d_out, query, key, value, attention_out, softmax_lse,
                            block_sparse_mask, block_shape, *args, **kwargs):
    shape = _DEFAULT_BLOCK if block_shape is None or len(block_shape) < 2 else block_shape
    return _fast_supports(query, key, value, block_sparse_mask, shape)


block_sparse_attention_backward_op.add_provider(FAST_PROVIDER, _fast_backward,
                                                _fast_backward_supports)


# -- autograd (derivatives.yaml: query, key, value; softmax_lse is not differentiable) --------

_ARGS = ("query", "key", "value", "block_sparse_mask", "block_shape", "q_input_layout",
         "kv_input_layout", "num_key_value_heads", "scale_value", "inner_precise",
         "actual_seq_lengths", "actual_seq_lengths_kv", "softmax_lse_flag")


def _setup_context(ctx, inputs, output):
    a = dict(zip(_ARGS, inputs))
    attention_out, softmax_lse = output
    ctx.mark_non_differentiable(softmax_lse)
    ctx.args = {k: a[k] for k in ("block_shape", "q_input_layout", "kv_input_layout",
                                  "num_key_value_heads", "scale_value", "actual_seq_lengths",
                                  "actual_seq_lengths_kv")}
    ctx.save_for_backward(a["query"], a["key"], a["value"], a["block_sparse_mask"],
                          attention_out, softmax_lse)


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, mask, out, lse = ctx.saved_tensors
    a = ctx.args
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = block_sparse_attention_backward_op(
        grad_out, q, k, v, out, lse, mask, a["block_shape"], a["actual_seq_lengths"],
        a["actual_seq_lengths_kv"], a["q_input_layout"], a["kv_input_layout"],
        a["num_key_value_heads"], a["scale_value"])
    return (dq, dk, dv) + (None,) * (len(_ARGS) - 3)


block_sparse_attention_op.set_autograd(setup_context=_setup_context, backward=_backward)


# -- Python functions --------------------------------------------------------------------------

def npu_block_sparse_attention(query, key, value, block_sparse_mask, block_shape, *,
                               q_input_layout="TND", kv_input_layout="TND",
                               num_key_value_heads=1, scale_value=0.0, inner_precise=1,
                               actual_seq_lengths=None, actual_seq_lengths_kv=None,
                               softmax_lse_flag=0):
    """Block-sparse attention: each query block attends only the key blocks its mask selects.

    Formula (seed 004)::

        selected(i, j) = block_sparse_mask[b, n, i // blockShapeX, j // blockShapeY] != 0
        attention_out  = Softmax(scale_value * query key^T  over selected j) value
        softmax_lse    = log(sum_j exp(scale_value * q_i . k_j))   over selected j

    Parameters
    ----------
    query : Tensor
        float16 or bfloat16 (float64 outside strict mode).  TND ``[totalQTokens, N1, D]`` or
        BNSD ``[B, N1, maxQSeqLength, D]``; D is 64 or 128.
    key, value : Tensor
        The same dtype and D; TND ``[totalKvTokens, N2, D]`` or BNSD ``[B, N2, maxKvSeqLength,
        D]``; N1 a multiple of N2 (GQA: key head ``n // (N1 / N2)`` serves query head ``n``).
    block_sparse_mask : Tensor
        ``[B, N1, ceilDiv(maxQSeqLength, blockShapeX), ceilDiv(maxKvSeqLength, blockShapeY)]``,
        int8 (the kernel's type; uint8 and bool, one byte too, also in strict mode; int32
        only outside it, as the kernel would misread its bytes); nonzero selects a block.  TND: the max over ``actual_seq_lengths`` (B is their count); BNSD with
        lengths: the padded S or the longest actual length.
    block_shape : list of int
        ``[blockShapeX, blockShapeY]`` (further elements ignored), both > 0; blockShapeY a
        multiple of 128.
    q_input_layout, kv_input_layout : {"TND", "BNSD"}
        Equal.
    num_key_value_heads : int
        N2 (must match key's head count; the default 1 only fits single-head key / value).
    scale_value : float
        The score scale (default 0.0: uniform weights over the selected keys).
    inner_precise : {0, 1}
        0 float32 softmax; 1 float16 softmax (float16 inputs only: bfloat16 needs 0).
    actual_seq_lengths, actual_seq_lengths_kv : list of int, optional
        Per-batch lengths (not cumulative), both or neither; required for TND (their sums are
        the token counts); with BNSD each at most the padded S.
    softmax_lse_flag : {0, 1}
        Whether the NPU writes softmax_lse.

    Returns
    -------
    (attention_out, softmax_lse)
        attention_out in query's shape, layout and dtype; softmax_lse float32 ``[B, N1, S, 1]``
        (BNSD) or ``[T, N1, 1]`` (TND).

    Constraints
    -----------
    Strict mode: Atlas A2 / A3 only, no float64, one-byte masks; the backward needs D = 128
    and blockShapeX a multiple of 16.

    Notes
    -----
    softmax_lse is computed whatever ``softmax_lse_flag`` says (with 0 the NPU leaves it
    unwritten, so any content is valid) and is float64 for float64 inputs.  Rows that select no
    key, and BNSD rows past a batch's actual length, give output 0 and ``lse = -inf`` (the NPU
    leaves them unwritten); mask blocks past a batch's actual lengths select nothing.
    Differentiable in query, key and value through :func:`npu_block_sparse_attention_backward`.

    Examples
    --------
    >>> q = k = v = torch.randn(2, 8, 32, 64, dtype=torch.float16)
    >>> mask = torch.ones(2, 8, 1, 1, dtype=torch.int8)
    >>> out, lse = npu_anywhere.npu_block_sparse_attention(
    ...     q, k, v, mask, [128, 128], q_input_layout="BNSD", kv_input_layout="BNSD",
    ...     num_key_value_heads=8, scale_value=0.125, softmax_lse_flag=1)
    """
    return block_sparse_attention_op(
        query, key, value, block_sparse_mask, block_shape, q_input_layout=q_input_layout,
        kv_input_layout=kv_input_layout, num_key_value_heads=num_key_value_heads,
        scale_value=scale_value, inner_precise=inner_precise,
        actual_seq_lengths=actual_seq_lengths, actual_seq_lengths_kv=actual_seq_lengths_kv,
        softmax_lse_flag=softmax_lse_flag)


def npu_block_sparse_attention_backward(d_out, query, key, value, attention_out, softmax_lse,
                                        block_sparse_mask, block_shape, actual_seq_lengths,
                                        actual_seq_lengths_kv, q_input_layout,
                                        kv_input_layout, num_key_value_heads, scale_value):
    """Gradient of :func:`npu_block_sparse_attention` from its output and softmax_lse.

    Formula (P recomputed on the selected positions from the forward's lse)::

        P  = exp(scale * q k^T - lse);   D = rowsum(d_out * attention_out)
        dS = P * (d_out v^T - D)
        d_query = scale dS k;   d_key = scale dS^T q;   d_value = P^T d_out

    GQA: each key / value head sums the gradients of the query heads it serves.
    ``block_shape`` None means ``[128, 128]``.  Float32 arithmetic, one rounding per output.
    Strict mode: D = 128 (seed 004: the backward path supports headDim 128) and blockShapeX a
    multiple of 16 (the grad kernel's README); default mode accepts D in {64, 128} and any
    blockShapeX.  GQA is accepted as seed 004 documents it (the grad kernel's README still
    lists MHA only for A2 / A3).

    Returns ``(d_query, d_key, d_value)`` in the shapes and dtypes of query, key and value.
    """
    return block_sparse_attention_backward_op(
        d_out, query, key, value, attention_out, softmax_lse, block_sparse_mask, block_shape,
        actual_seq_lengths, actual_seq_lengths_kv, q_input_layout, kv_input_layout,
        num_key_value_heads, scale_value)


TORCH_NPU_FUNCTIONS = {
    OP: npu_block_sparse_attention,
    GRAD_OP: npu_block_sparse_attention_backward,
}
