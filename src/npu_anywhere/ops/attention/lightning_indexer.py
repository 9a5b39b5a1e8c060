"""torch_npu.npu_lightning_indexer and npu_lightning_indexer_grad (DeepSeek-V3.2 DSA indexer).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_lightning_indexer.md, seed 004),
per batch, key head ``n`` and query token ``s`` with the ``g = N1 / N2`` index heads ``h`` of
that key head::

    score[s, t] = sum_h  weights[s, h] * relu(query[s, h, :] . key[t, n, :])
    sparse_indices[s, :] = the sparse_count keys t of highest score, best first
    sparse_values[s, :]  = score at those keys                    (return_value=True)

Followed for the details (hicann/ops-transformer attention/lightning_indexer/tests/pytest/
lightning_indexer_golden.py, the kernel's golden; op-plugin test/test_custom_ops/
test_npu_lightning_indexer.py agrees where both are defined):

- precision: query, key and weights upcast to float32; q.k, ReLU, the weighting and the sum
  over index heads in float32; ``sparse_values`` rounded once to query's dtype;
- ranking: a stable descending sort, so equal scores keep the lower key position first;
- sparse_mode 3 (rightDownCausal): query row ``i`` of a batch with ``Lq`` valid query rows and
  ``Lk`` valid keys sees keys ``t <= Lk - Lq + i``; sparse_mode 0 sees all ``Lk`` keys;
- slots past the number of visible keys, and rows past a batch's valid query length, hold
  index -1 (and value -inf).

The backward (op-plugin derivatives.yaml: only ``sparse_values`` is differentiable, through
``npu_lightning_indexer_grad``) differentiates ``sparse_values`` with the selection held fixed:
with ``l = q_h . k_t`` at a selected key ``t`` and ``dy`` the gradient of its value,
``d weights[h] = sum_t dy * relu(l)``, ``d q_h = sum_t dy * w_h * [l >= 0] * k_t`` and
``d k_t += sum_h dy * w_h * [l >= 0] * q_h`` (op-plugin test_npu_lightning_indexer_grad.py masks
the ReLU gradient where ``l < 0``), in float32, each rounded once to its input's dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa

OP = "npu_lightning_indexer"
SCHEMA = ("npu_lightning_indexer(Tensor query, Tensor key, Tensor weights, *, "
          "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_key=None, "
          "Tensor? block_table=None, str layout_query=\"BSND\", str layout_key=\"BSND\", "
          "int sparse_count=2048, int sparse_mode=3, int pre_tokens=9223372036854775807, "
          "int next_tokens=9223372036854775807, bool return_value=False) -> (Tensor, Tensor)")
GRAD_OP = "npu_lightning_indexer_grad"
GRAD_SCHEMA = ("npu_lightning_indexer_grad(Tensor query, Tensor key, Tensor dy, "
               "Tensor sparse_indices, Tensor weights, Tensor? actual_seq_lengths_query=None, "
               "Tensor? actual_seq_lengths_key=None, str? layout=\"BSND\", int? sparse_mode=3, "
               "int? pre_tokens=9223372036854775807, int? next_tokens=9223372036854775807) "
               "-> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_HALF = (torch.float16, torch.bfloat16)
_EXTRA_COUNTS = (3072, 4096, 5120, 6144, 7168, 8192)
# Query rows scored at once: bounds the [N2, rows * g, keys] float32 logits.
_CHUNK_ELEMENTS = 1 << 24


def _floats(documented: tuple) -> tuple:
    """The documented dtypes, plus float64 outside strict mode (gradcheck, float64 goldens)."""
    return documented if targets.current() is not None else documented + (torch.float64,)


def _check_dtypes(op: str, query, key, weights) -> None:
    checks.expect_dtype(query, _floats(_HALF), op, "query")
    checks.expect_dtype(key, _floats(_HALF), op, "key")
    checks.expect_same_dtype({"query": query, "key": key}, op)
    checks.expect_dtype(weights, _floats(_HALF + (torch.float32,)), op, "weights")
    checks.expect(weights.dtype in (torch.float32, query.dtype), op, "weights",
                  lambda: f"float32 or query's dtype ({str(query.dtype)[6:]})",
                  str(weights.dtype)[6:], TypeError)


def _check_weights(op: str, weights, query, layout_query: str) -> None:
    want = tuple(query.shape[:-1])
    checks.expect(tuple(weights.shape) == want, op, "weights",
                  lambda: f"shape {list(want)} (query's shape without D)",
                  lambda: f"shape {tuple(weights.shape)}", ValueError)


def _strict_rules(op: str, shapes: dsa.Shapes, weights, product) -> None:
    if product is None:
        return
    # Constraints of the torch_npu doc page: N2 = 1, D = 128, N1 <= 64 (A2/A3) or one of
    # 8/16/24/32/64 (950, where weights are never float32).
    checks.expect(shapes.k_heads == 1, op, "key", "a head count N2 of 1",
                  shapes.k_heads, ValueError)
    checks.expect(shapes.head_dim == 128, op, "query", "a head dim D of 128",
                  shapes.head_dim, ValueError)
    if product is Product.ASCEND_950:
        checks.expect(shapes.q_heads in (8, 16, 24, 32, 64), op, "query",
                      "a head count N1 in [8, 16, 24, 32, 64] on the 950", shapes.q_heads,
                      ValueError)
        checks.expect(weights.dtype != torch.float32, op, "weights",
                      "float16 or bfloat16 on the 950", "float32", TypeError)
    else:
        checks.expect(shapes.q_heads <= 64, op, "query", "a head count N1 of at most 64",
                      shapes.q_heads, ValueError)


def check_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None,
                            actual_seq_lengths_key=None, block_table=None,
                            layout_query="BSND", layout_key="BSND", sparse_count=2048,
                            sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                            next_tokens=dsa.MAX_TOKENS, return_value=False):
    op = OP
    _check_dtypes(op, query, key, weights)
    shapes = dsa.check_inputs(op, query, key, lengths_q=actual_seq_lengths_query,
                              lengths_k=actual_seq_lengths_key, block_table=block_table,
                              layout_query=layout_query, layout_key=layout_key,
                              pre_tokens=pre_tokens, next_tokens=next_tokens)
    checks.expect(key.shape[-1] == shapes.head_dim, op, "key",
                  lambda: f"query's head dim D = {shapes.head_dim}",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    _check_weights(op, weights, query, layout_query)
    checks.expect(1 <= sparse_count <= 2048 or sparse_count in _EXTRA_COUNTS, op,
                  "sparse_count", f"in [1, 2048] or one of {list(_EXTRA_COUNTS)}",
                  repr(sparse_count), ValueError)
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode",
                  "0 (defaultMask) or 3 (rightDownCausal)", repr(sparse_mode), ValueError)
    checks.expect(not (return_value and layout_key == "PA_BSND"), op, "return_value",
                  "False when layout_key is 'PA_BSND'", "True", ValueError)
    checks.expect_same_device({"query": query, "key": key, "weights": weights}, op)
    product = targets.expect_supported(op, _SUPPORTED)
    _strict_rules(op, shapes, weights, product)


def _out_shape(query, key, layout_query: str, sparse_count: int) -> list[int]:
    n2 = key.shape[-2]
    if layout_query == "BSND":
        return [query.shape[0], query.shape[1], n2, sparse_count]
    return [query.shape[0], n2, sparse_count]


def _compute_dtype(query) -> torch.dtype:
    return torch.float64 if query.dtype == torch.float64 else torch.float32


def _scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``[N2, rows, keys]`` index scores of ``q [rows, N2, g, D]`` against ``k [keys, N2, D]``
    with head weights ``w [rows, N2, g]``, all in the compute dtype."""
    rows, n2, g, d = q.shape
    logits = torch.matmul(q.permute(1, 0, 2, 3).reshape(n2, rows * g, d),
                          k.permute(1, 2, 0))                       # [N2, rows * g, keys]
    logits = logits.clamp_min_(0).view(n2, rows, g, -1)
    return (logits * w.permute(1, 0, 2).unsqueeze(-1)).sum(2)


def select_top(op, query, key, *, lengths_q, lengths_k, block_table, layout_query, layout_key,
               sparse_count, sparse_mode, score_rows, values_dtype=None):
    """The ranking shared with npu_quant_lightning_indexer.

    ``score_rows(b, k_span, rows)`` returns the ``[N2, len(rows), keys]`` scores of query rows
    ``rows`` (a slice of the flattened query) against batch ``b``'s keys; this loops over
    batches and row chunks, masks (sparse_mode 3), ranks stably and pads with -1.
    """
    n1 = query.shape[-2]
    n2 = key.shape[-2]
    q_spans = dsa.query_spans(op, query, layout_query, lengths_q)
    k_spans = dsa.key_spans(op, key, layout_key, lengths_k, block_table, len(q_spans))
    rows_total = query.reshape(-1, n1, query.shape[-1]).shape[0]
    device = query.device
    indices = torch.full((rows_total, n2, sparse_count), -1, dtype=torch.int32, device=device)
    values = None if values_dtype is None else torch.full(
        (rows_total, n2, sparse_count), float("-inf"), dtype=values_dtype, device=device)
    for b, ((q_start, q_len), k_span) in enumerate(zip(q_spans, k_spans)):
        k_len = k_span[1]
        if q_len == 0 or k_len == 0:
            continue
        seen = dsa.causal_limit(q_len, k_len, device) if sparse_mode == 3 else \
            torch.full((q_len,), k_len, device=device)
        take = min(sparse_count, k_len)
        step = max(1, _CHUNK_ELEMENTS // max(1, n1 * k_len))
        positions = torch.arange(k_len, device=device)
        for lo in range(0, q_len, step):
            hi = min(q_len, lo + step)
            rows = slice(q_start + lo, q_start + hi)
            score = score_rows(b, k_span, rows)                       # [N2, rows, keys]
            visible = positions < seen[lo:hi].unsqueeze(1)            # [rows, keys]
            score = score.masked_fill(~visible, float("-inf"))
            top, order = torch.sort(score, dim=-1, descending=True, stable=True)
            top, order = top[..., :take], order[..., :take]
            used = torch.arange(take, device=device) < seen[lo:hi].unsqueeze(1)
            indices[rows, :, :take] = order.masked_fill(~used, -1).to(torch.int32) \
                .permute(1, 0, 2)
            if values is not None:
                values[rows, :, :take] = top.masked_fill(~used, float("-inf")).permute(1, 0, 2)
    shape = _out_shape(query, key, layout_query, sparse_count)
    return indices.view(shape), None if values is None else values.view(shape)


def lightning_indexer_reference(query, key, weights, *, actual_seq_lengths_query=None,
                                actual_seq_lengths_key=None, block_table=None,
                                layout_query="BSND", layout_key="BSND", sparse_count=2048,
                                sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                next_tokens=dsa.MAX_TOKENS, return_value=False):
    ct = _compute_dtype(query)
    n1, d = query.shape[-2], query.shape[-1]
    n2 = key.shape[-2]
    g = n1 // n2
    q_flat = query.reshape(-1, n1, d)
    w_flat = weights.reshape(-1, n1)
    keys = {}

    def score_rows(b, k_span, rows):
        if b not in keys:
            keys.clear()
            keys[b] = dsa.batch_rows(key, layout_key, k_span, b, block_table).to(ct)
        q = q_flat[rows].to(ct).view(-1, n2, g, d)
        w = w_flat[rows].to(ct).view(-1, n2, g)
        return _scores(q, keys[b], w)

    indices, values = select_top(
        OP, query, key, lengths_q=actual_seq_lengths_query, lengths_k=actual_seq_lengths_key,
        block_table=block_table, layout_query=layout_query, layout_key=layout_key,
        sparse_count=sparse_count, sparse_mode=sparse_mode, score_rows=score_rows,
        values_dtype=ct if return_value else None)
    if values is None:
        return indices, query.new_empty((0,))
    return indices, values.to(query.dtype)


def _fake(query, key, weights, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
          block_table=None, layout_query="BSND", layout_key="BSND", sparse_count=2048,
          sparse_mode=3, pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
          return_value=False):
    # The selection reads the length tensors' values; the outputs' metadata does not.
    shape = _out_shape(query, key, layout_query, sparse_count)
    indices = query.new_empty(shape, dtype=torch.int32)
    values = query.new_empty(shape if return_value else (0,))
    return indices, values


def check_lightning_indexer_grad(query, key, dy, sparse_indices, weights,
                                 actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                                 layout="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                                 next_tokens=dsa.MAX_TOKENS):
    op = GRAD_OP
    layout = "BSND" if layout is None else layout
    sparse_mode = 3 if sparse_mode is None else sparse_mode
    _check_dtypes(op, query, key, weights)
    shapes = dsa.check_inputs(op, query, key, lengths_q=actual_seq_lengths_query,
                              lengths_k=actual_seq_lengths_key, block_table=None,
                              layout_query=layout, layout_key=layout, layout_key_name="layout",
                              layout_query_name="layout",
                              pre_tokens=dsa.MAX_TOKENS if pre_tokens is None else pre_tokens,
                              next_tokens=dsa.MAX_TOKENS if next_tokens is None
                              else next_tokens)
    checks.expect(key.shape[-1] == shapes.head_dim, op, "key",
                  lambda: f"query's head dim D = {shapes.head_dim}",
                  lambda: f"shape {tuple(key.shape)}", ValueError)
    _check_weights(op, weights, query, layout)
    checks.expect_dtype(sparse_indices, (torch.int32,), op, "sparse_indices")
    want = list(query.shape[:-2]) + [shapes.k_heads]
    checks.expect(sparse_indices.dim() == len(want) + 1 and
                  list(sparse_indices.shape[:-1]) == want, op, "sparse_indices",
                  lambda: f"shape {want + ['sparse_count']}",
                  lambda: f"shape {tuple(sparse_indices.shape)}", ValueError)
    checks.expect(tuple(dy.shape) == tuple(sparse_indices.shape), op, "dy",
                  lambda: f"sparse_indices' shape {tuple(sparse_indices.shape)}",
                  lambda: f"shape {tuple(dy.shape)}", ValueError)
    checks.expect_dtype(dy, _floats(_HALF + (torch.float32,)), op, "dy")
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode",
                  "0 (defaultMask) or 3 (rightDownCausal)", repr(sparse_mode), ValueError)
    checks.expect_same_device({"query": query, "key": key, "dy": dy,
                               "sparse_indices": sparse_indices, "weights": weights}, op)
    targets.expect_supported(op, _SUPPORTED)


def lightning_indexer_grad_reference(query, key, dy, sparse_indices, weights,
                                     actual_seq_lengths_query=None,
                                     actual_seq_lengths_key=None, layout="BSND", sparse_mode=3,
                                     pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS):
    op = GRAD_OP
    layout = "BSND" if layout is None else layout
    ct = _compute_dtype(query)
    n1, d = query.shape[-2], query.shape[-1]
    n2 = key.shape[-2]
    g = n1 // n2
    q_spans = dsa.query_spans(op, query, layout, actual_seq_lengths_query)
    k_spans = dsa.key_spans(op, key, layout, actual_seq_lengths_key, None, len(q_spans))
    q_flat = query.reshape(-1, n1, d)
    k_flat = key.reshape(-1, n2, d)
    w_flat = weights.reshape(-1, n1)
    count = sparse_indices.shape[-1]
    idx_flat = sparse_indices.reshape(-1, n2, count)
    dy_flat = dy.reshape(-1, n2, count)
    dq = torch.zeros(q_flat.shape, dtype=ct, device=query.device)
    dk = torch.zeros(k_flat.shape, dtype=ct, device=query.device)
    dw = torch.zeros(w_flat.shape, dtype=ct, device=query.device)
    heads = torch.arange(n2, device=query.device).view(1, n2, 1)
    for (q_start, q_len), (k_start, k_len) in zip(q_spans, k_spans):
        if q_len == 0 or k_len == 0:
            continue
        rows = slice(q_start, q_start + q_len)
        idx = idx_flat[rows].long()                                   # [s, N2, K]
        ok = (idx >= 0) & (idx < k_len)
        safe = idx.clamp(0, k_len - 1)
        flat_rows = (k_start + safe) * n2 + heads                     # rows of k.view(-1, D)
        k_sel = k_flat.reshape(-1, d)[flat_rows].to(ct)               # [s, N2, K, D]
        q = q_flat[rows].to(ct).view(q_len, n2, g, d)
        w = w_flat[rows].to(ct).view(q_len, n2, g)
        grad = dy_flat[rows].to(ct).masked_fill(~ok, 0)               # [s, N2, K]
        logits = torch.einsum("sngd,snkd->sngk", q, k_sel)
        dw[rows] = torch.einsum("sngk,snk->sng", logits.clamp_min(0), grad).reshape(q_len, n1)
        g_logits = grad.unsqueeze(2) * w.unsqueeze(-1) * (logits >= 0)
        dq[rows] = torch.einsum("sngk,snkd->sngd", g_logits, k_sel).reshape(q_len, n1, d)
        dk_sel = torch.einsum("sngk,sngd->snkd", g_logits, q)
        dk.view(-1, d).index_add_(0, flat_rows.reshape(-1), dk_sel.reshape(-1, d))
    return (dq.view(query.shape).to(query.dtype), dk.view(key.shape).to(key.dtype),
            dw.view(weights.shape).to(weights.dtype))


def _grad_fake(query, key, dy, sparse_indices, weights, actual_seq_lengths_query=None,
               actual_seq_lengths_key=None, layout="BSND", sparse_mode=3,
               pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS):
    return (torch.empty_like(query, memory_format=torch.contiguous_format),
            torch.empty_like(key, memory_format=torch.contiguous_format),
            torch.empty_like(weights, memory_format=torch.contiguous_format))


lightning_indexer_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_lightning_indexer,
                             reference=lightning_indexer_reference, fake=_fake,
                             metadata_check=True, info=OpInfo(api="torch_npu"))
lightning_indexer_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_lightning_indexer_grad,
                                  reference=lightning_indexer_grad_reference, fake=_grad_fake,
                                  metadata_check=True,
                                  info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    query, key, weights = inputs[:3]
    ctx.options = dict(inputs[3])
    indices = output[0]
    ctx.mark_non_differentiable(indices)
    ctx.save_for_backward(query, key, weights, indices,
                          ctx.options.get("actual_seq_lengths_query"),
                          ctx.options.get("actual_seq_lengths_key"))


def _backward(ctx, grad_indices, grad_values):
    query, key, weights, indices, lengths_q, lengths_k = ctx.saved_tensors
    o = ctx.options
    none = (None,) * len(o)
    if grad_values is None or grad_values.numel() == 0:
        return (None, None, None) + none
    checks.expect(o.get("layout_key", "BSND") != "PA_BSND", OP, "layout_key",
                  "'BSND' or 'TND' for a backward (npu_lightning_indexer_grad has no "
                  "block_table)", "'PA_BSND'", NotImplementedError)
    dq, dk, dw = lightning_indexer_grad_op(
        query, key, grad_values.contiguous(), indices, weights, lengths_q, lengths_k,
        o.get("layout_query", "BSND"), o.get("sparse_mode", 3))
    return (dq, dk, dw) + none


def _setup(ctx, inputs, output):
    # Inputs arrive flattened: 3 positional tensors, then the keyword-only arguments in
    # schema order.
    names = [a.name for a in lightning_indexer_op.overload._schema.arguments]
    _setup_context(ctx, (inputs[0], inputs[1], inputs[2], dict(zip(names[3:], inputs[3:]))),
                   output)


lightning_indexer_op.set_autograd(setup_context=_setup, backward=_backward)
lightning_indexer_grad_op.forbid_autograd("torch_npu defines no double backward for it")


def npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None,
                          actual_seq_lengths_key=None, block_table=None, layout_query="BSND",
                          layout_key="BSND", sparse_count=2048, sparse_mode=3,
                          pre_tokens=dsa.MAX_TOKENS, next_tokens=dsa.MAX_TOKENS,
                          return_value=False):
    """DeepSeek-V3.2 lightning indexer: the top ``sparse_count`` key positions per query token.

    Formula (op-plugin torch_npu-npu_lightning_indexer.md)::

        score[s, t] = sum_h weights[s, h] * relu(query[s, h] . key[t])   (h: the g = N1/N2
                                                                          heads of key head n)
        sparse_indices[s, n] = top-sparse_count of score[s, :], best first

    Parameters
    ----------
    query : Tensor
        float16 / bfloat16: ``[B, S1, N1, D]`` (``layout_query="BSND"``) or ``[T1, N1, D]``
        (``"TND"``).
    key : Tensor
        query's dtype: ``[B, S2, N2, D]`` (BSND), ``[T2, N2, D]`` (TND) or ``[block_count,
        block_size, N2, D]`` (``layout_key="PA_BSND"``, read through ``block_table``).
    weights : Tensor
        query's dtype or float32, ``[B, S1, N1]`` / ``[T1, N1]``.
    actual_seq_lengths_query, actual_seq_lengths_key : Tensor of int32, optional
        Valid lengths per batch (``[B]``); prefix sums for a TND tensor (then required, and
        its length is B).  ``actual_seq_lengths_key`` is required for TND and PA_BSND keys.
    block_table : Tensor of int32, optional
        ``[B, max_blocks]`` block ids of each sequence (PA_BSND only).
    layout_query, layout_key : str
        ``layout_key`` equals ``layout_query`` unless it is ``"PA_BSND"``.
    sparse_count : int
        Slots kept per row: 1 to 2048, or 3072, 4096, 5120, 6144, 7168, 8192.
    sparse_mode : int
        0: every valid key; 3 (default): rightDownCausal, row ``i`` of ``Lq`` sees keys
        ``t <= Lk - Lq + i``.
    pre_tokens, next_tokens : int
        Only the default ``2**63 - 1`` is supported (as on the NPU).
    return_value : bool
        Also return the scores of the selected keys (not with PA_BSND keys).

    Returns
    -------
    (sparse_indices, sparse_values)
        ``sparse_indices`` int32 ``[B, S1, N2, sparse_count]`` (BSND) or ``[T1, N2,
        sparse_count]`` (TND), key positions within the batch's sequence, best score first,
        equal scores by lower position; -1 fills the slots past the visible keys and the rows
        past a batch's valid query length.  ``sparse_values``: the scores there in query's
        dtype (-inf in the -1 slots) when ``return_value``, else an empty ``(0,)`` tensor.

    Constraints
    -----------
    query and key one dtype; ``N1`` a multiple of ``N2``.  Strict mode (A2, A3, 950): ``N2 =
    1``, ``D = 128``, ``N1 <= 64`` (A2/A3) or in {8, 16, 24, 32, 64} (950, no float32 weights).

    Notes
    -----
    Follows the kernel golden hicann/ops-transformer attention/lightning_indexer/tests/pytest/
    lightning_indexer_golden.py (float32 scores, stable ranking, -1 padding).  The NPU writes
    the selected set in its own order (that golden sorts both sides before comparing);
    here the order is by score.  The value in the -1 slots is not documented; -inf is the
    golden's masked score.  ``sparse_values`` is differentiable (npu_lightning_indexer_grad,
    op-plugin derivatives.yaml); non-contiguous inputs are accepted.

    Examples
    --------
    >>> q = torch.randn(1, 4, 8, 128, dtype=torch.bfloat16)
    >>> k = torch.randn(1, 16, 1, 128, dtype=torch.bfloat16)
    >>> w = torch.randn(1, 4, 8, dtype=torch.bfloat16)
    >>> idx, _ = npu_anywhere.npu_lightning_indexer(q, k, w, sparse_count=8)
    >>> idx.shape
    torch.Size([1, 4, 1, 8])
    """
    return lightning_indexer_op(
        query, key, weights, actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_key=actual_seq_lengths_key, block_table=block_table,
        layout_query=layout_query, layout_key=layout_key, sparse_count=sparse_count,
        sparse_mode=sparse_mode, pre_tokens=pre_tokens, next_tokens=next_tokens,
        return_value=return_value)


def npu_lightning_indexer_grad(query, key, dy, sparse_indices, weights,
                               actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                               layout="BSND", sparse_mode=3, pre_tokens=dsa.MAX_TOKENS,
                               next_tokens=dsa.MAX_TOKENS):
    """Gradient of :func:`npu_lightning_indexer`'s ``sparse_values`` w.r.t. query, key, weights.

    Formula (selection held fixed; ``l = q_h . k_t`` for each selected key ``t``)::

        d weights[s, h] = sum_t dy[s, t] * relu(l)
        d query[s, h]   = sum_t dy[s, t] * weights[s, h] * [l >= 0] * key[t]
        d key[t]       += sum_{s, h} dy[s, t] * weights[s, h] * [l >= 0] * query[s, h]

    ``dy`` and ``sparse_indices`` have the forward's output shape; -1 slots contribute nothing.
    ``layout`` (BSND or TND) applies to query and key.  Returns ``(d_query, d_key,
    d_weights)`` in their inputs' shapes and dtypes, computed in float32 and rounded once
    (op-plugin test/test_custom_ops/test_npu_lightning_indexer_grad.py is the golden followed;
    it sums d_weights pairwise down to eight lanes, a summation order only).
    """
    return lightning_indexer_grad_op(query, key, dy, sparse_indices, weights,
                                     actual_seq_lengths_query, actual_seq_lengths_key, layout,
                                     sparse_mode, pre_tokens, next_tokens)


TORCH_NPU_FUNCTIONS = {
    OP: npu_lightning_indexer,
    GRAD_OP: npu_lightning_indexer_grad,
}
