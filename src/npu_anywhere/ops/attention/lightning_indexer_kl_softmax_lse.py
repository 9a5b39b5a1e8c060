"""torch_npu.npu_dense_lightning_indexer_softmax_lse (the statistics ahead of the dense
lightning-indexer KL-loss backward).

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/
torch_npu-npu_dense_lightning_indexer_softmax_lse.md), per batch, key head ``n`` and query
token ``s``, over the ``g = N1 / N2`` index heads ``h`` of that key head::

    res[s, t]      = AttentionMask(sum_h weights[s, h] * relu(query_index[s, h] . key_index[t, n]))
    max_index[s]   = max_t res[s, t]
    sum_index[s]   = sum_t exp(res[s, t] - max_index[s])

Followed for the details: op-plugin test/test_custom_ops/
test_npu_dense_lightning_indexer_softmax_lse.py (the golden) and its meta function: float32
math; sparse_mode 3 (rightDownCausal) hides keys ``t > S2 - S1 + s``, sparse_mode 0 none;
outputs float32 ``[B, N2, S1]`` (BSND) or ``[N2, T1]`` (TND).  The score is the one of
``npu_lightning_indexer`` (its scoring helper is reused).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import dsa_common as dsa
from . import nsa_common as nsa
from .lightning_indexer import _scores as indexer_scores

OP = "npu_dense_lightning_indexer_softmax_lse"
SCHEMA = ("npu_dense_lightning_indexer_softmax_lse(Tensor query_index, Tensor key_index, "
          "Tensor weights, *, SymInt[]? actual_seq_qlen=None, SymInt[]? actual_seq_klen=None, "
          "str? layout='BSND', int? sparse_mode=3, int? pre_tokens=9223372036854775807, "
          "int? next_tokens=9223372036854775807) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def check_dense_lightning_indexer_softmax_lse(query_index, key_index, weights, *,
                                              actual_seq_qlen=None, actual_seq_klen=None,
                                              layout="BSND", sparse_mode=3,
                                              pre_tokens=dsa.MAX_TOKENS,
                                              next_tokens=dsa.MAX_TOKENS):
    op = OP
    layout = "BSND" if layout is None else layout
    checks.expect_one_of(layout, ("BSND", "TND"), op, "layout")
    dims = 4 if layout == "BSND" else 3
    checks.expect_dim(query_index, dims, op, "query_index")
    checks.expect_dim(key_index, dims, op, "key_index")
    checks.expect_dim(weights, dims - 1, op, "weights")
    checks.expect_dtype(query_index, nsa.floats(), op, "query_index")
    checks.expect_same_dtype({"query_index": query_index, "key_index": key_index}, op)
    checks.expect_dtype(weights, nsa.floats() + (torch.float32,), op, "weights")
    checks.expect_same_device({"query_index": query_index, "key_index": key_index,
                               "weights": weights}, op)
    n1, d = query_index.shape[-2:]
    n2 = key_index.shape[-2]
    checks.expect(key_index.shape[-1] == d, op, "key_index",
                  lambda: f"query_index's head dim D = {d}", key_index.shape[-1], RuntimeError)
    checks.expect(n1 % n2 == 0, op, "query_index",
                  lambda: f"a head count divisible by key_index's N2 = {n2}", n1, ValueError)
    want = tuple(query_index.shape[:-1])
    checks.expect(tuple(weights.shape) == want, op, "weights",
                  lambda: f"shape {list(want)} (query_index's shape without D)",
                  lambda: f"shape {tuple(weights.shape)}", RuntimeError)
    if layout == "BSND":
        checks.expect(key_index.shape[0] == query_index.shape[0], op, "key_index",
                      lambda: f"query_index's batch B = {query_index.shape[0]}",
                      key_index.shape[0], RuntimeError)
    else:
        q_lens = nsa.expect_cumulative(op, "actual_seq_qlen", actual_seq_qlen,
                                       query_index.shape[0])
        k_lens = nsa.expect_cumulative(op, "actual_seq_klen", actual_seq_klen,
                                       key_index.shape[0])
        checks.expect(len(q_lens) == len(k_lens), op, "actual_seq_klen",
                      lambda: f"one entry per batch of actual_seq_qlen ({len(q_lens)})",
                      len(k_lens), ValueError)
    sparse_mode = 3 if sparse_mode is None else sparse_mode
    checks.expect(sparse_mode in (0, 3), op, "sparse_mode",
                  "0 (defaultMask) or 3 (rightDownCausal)", repr(sparse_mode), ValueError)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(n2 == 1, op, "key_index", "a head count N2 of 1", n2, ValueError)


def _batches(query_index, key_index, weights, layout, q_lens, k_lens):
    """Per batch: ``q [S1, N1, D]``, ``k [S2, N2, D]``, ``w [S1, N1]``."""
    if layout == "BSND":
        for b in range(query_index.shape[0]):
            yield query_index[b], key_index[b], weights[b]
        return
    for (qs, ql), (ks, kl) in zip(nsa.spans(q_lens), nsa.spans(k_lens)):
        yield query_index[qs:qs + ql], key_index[ks:ks + kl], weights[qs:qs + ql]


def dense_lightning_indexer_softmax_lse_reference(query_index, key_index, weights, *,
                                                  actual_seq_qlen=None, actual_seq_klen=None,
                                                  layout="BSND", sparse_mode=3,
                                                  pre_tokens=dsa.MAX_TOKENS,
                                                  next_tokens=dsa.MAX_TOKENS):
    layout = "BSND" if layout is None else layout
    sparse_mode = 3 if sparse_mode is None else sparse_mode
    ct = nsa.compute_dtype(query_index)
    n1 = query_index.shape[-2]
    n2 = key_index.shape[-2]
    g = n1 // n2
    maxes, sums = [], []
    for q, k, w in _batches(query_index, key_index, weights, layout, actual_seq_qlen,
                            actual_seq_klen):
        rows, keys = q.shape[0], k.shape[0]
        score = indexer_scores(q.to(ct).reshape(rows, n2, g, -1), k.to(ct),
                               w.to(ct).reshape(rows, n2, g))               # [N2, S1, S2]
        if sparse_mode == 3:
            seen = dsa.causal_limit(rows, keys, q.device)
            hidden = torch.arange(keys, device=q.device) >= seen.unsqueeze(1)
            score = score.masked_fill(hidden, float("-inf"))
        mx = score.amax(dim=-1) if keys > 0 else score.new_full((n2, rows), float("-inf"))
        # a row that sees no key keeps max -inf and gets sum 0 (not exp(nan))
        shift = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
        total = torch.exp(score - shift.unsqueeze(-1)).sum(dim=-1)
        maxes.append(mx)
        sums.append(total)
    stats = torch.float64 if ct == torch.float64 else torch.float32
    if layout == "BSND":
        return torch.stack(maxes).to(stats), torch.stack(sums).to(stats)
    return torch.cat(maxes, dim=1).to(stats), torch.cat(sums, dim=1).to(stats)


softmax_lse_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                       check=check_dense_lightning_indexer_softmax_lse,
                       reference=dense_lightning_indexer_softmax_lse_reference,
                       metadata_check=True, info=OpInfo(api="torch_npu"))
softmax_lse_op.forbid_autograd(f"{OP} has no backward (its outputs are statistics)")


def npu_dense_lightning_indexer_softmax_lse(query_index, key_index, weights, *,
                                            actual_seq_qlen=None, actual_seq_klen=None,
                                            layout="BSND", sparse_mode=3,
                                            pre_tokens=dsa.MAX_TOKENS,
                                            next_tokens=dsa.MAX_TOKENS):
    """Softmax max and sum of the dense lightning-indexer scores (for the KL-loss backward).

    Formula (seed 004)::

        res = AttentionMask(ReduceSum_h(W * ReLU(Q_index @ K_index^T)))
        max_index = max(res),  sum_index = ReduceSum(exp(res - max_index))

    Parameters
    ----------
    query_index : Tensor
        ``[B, S1, N1, D]`` (BSND) or ``[T1, N1, D]`` (TND), float16 or bfloat16 (float32 /
        float64 outside strict mode).
    key_index : Tensor
        ``[B, S2, N2, D]`` or ``[T2, N2, D]``, query_index's dtype.
    weights : Tensor
        ``[B, S1, N1]`` or ``[T1, N1]``; float16, bfloat16 or float32.
    actual_seq_qlen, actual_seq_klen : list of int, optional
        TND: cumulative lengths of the query and key batches (required there).
    layout : str
        ``"BSND"`` (default) or ``"TND"``.
    sparse_mode : int
        3 (rightDownCausal, default: query row ``s`` sees keys ``t <= S2 - S1 + s``) or 0.
    pre_tokens, next_tokens : int
        Accepted; only their defaults are documented.

    Returns
    -------
    (Tensor, Tensor)
        ``softmax_max_index`` and ``softmax_sum_index``, float32 ``[B, N2, S1]`` (BSND) or
        ``[N2, T1]`` (TND).  A row that sees no key has max ``-inf`` and sum 0.

    Constraints
    -----------
    Atlas A2 / A3 training.  Strict mode: ``N2 = 1``.

    Examples
    --------
    >>> q = torch.randn(1, 4, 8, 16, dtype=torch.float16); k = torch.randn(1, 6, 1, 16,
    ...     dtype=torch.float16); w = torch.randn(1, 4, 8, dtype=torch.float16)
    >>> mx, sm = npu_anywhere.npu_dense_lightning_indexer_softmax_lse(q, k, w)
    >>> mx.shape, mx.dtype
    (torch.Size([1, 1, 4]), torch.float32)
    """
    return softmax_lse_op(query_index, key_index, weights, actual_seq_qlen=actual_seq_qlen,
                          actual_seq_klen=actual_seq_klen, layout=layout,
                          sparse_mode=sparse_mode, pre_tokens=pre_tokens,
                          next_tokens=next_tokens)


TORCH_NPU_FUNCTIONS = {OP: npu_dense_lightning_indexer_softmax_lse}
