"""torch_npu.npu_nsa_compress_attention_infer (Native Sparse Attention, paged decode).

Formula (seed 004; hicann/ops-transformer attention/nsa_compress_attention_infer/docs/
aclnnNsaCompressAttentionInfer.md), per batch ``b`` (one query token) over its
``L = actual_cmp_seq_kvlen[b]`` compressed tokens, read from the paged cache through
``block_table``, and query head ``h`` of key head ``n``::

    P[h]   = softmax(scale_value * q[h] @ K_n^T)           (float32)
    out[h] = P[h] @ V_n                                     (P rounded to query's dtype first)
    score[n, s] = sum_{h of n} sum_j c_j * P[h, m * (s + 1) - j]     s < S_sel
    S_sel = ceil(((L - 1) * compress_stride + compress_block_size) / select_block_size)
    topk_indices[b, n] = [0, S_sel - 2, S_sel - 1] + the other blocks by descending score

with the overlap weights ``c_j`` of :mod:`.nsa_compress_attention`.  Followed for the details:
op-plugin test/test_custom_ops/test_npu_nsa_compress_attention_infer.py (the golden): the
first and the last two selection blocks are always chosen, in that order, then the best of
the rest (a stable descending sort, so ties keep the lower block first).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import nsa_common as nsa
from .nsa_compress_attention import overlap_weights
from .nsa_select_attention_infer import check_paged, gather_pages, paged_heads, query_heads

OP = "npu_nsa_compress_attention_infer"
SCHEMA = ("npu_nsa_compress_attention_infer(Tensor query, Tensor key, Tensor value, "
          "float scale_value, int head_num, int key_value_head_num, int select_block_size, "
          "int select_block_count, int page_block_size, int compress_block_size, "
          "int compress_stride, *, str layout='TND', Tensor? atten_mask=None, "
          "Tensor? block_table=None, Tensor? topk_mask=None, int[]? actual_seq_qlen=None, "
          "int[]? actual_cmp_seq_kvlen=None, int[]? actual_sel_seq_kvlen=None) "
          "-> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2})
_BLOCKS = (16, 32, 48, 64, 80, 96, 112, 118)


def selection_length(cmp_len: int, block: int, stride: int, select_block: int) -> int:
    return -(-((cmp_len - 1) * stride + block) // select_block)


def check_nsa_compress_attention_infer(query, key, value, scale_value, head_num,
                                       key_value_head_num, select_block_size,
                                       select_block_count, page_block_size, compress_block_size,
                                       compress_stride, *, layout="TND", atten_mask=None,
                                       block_table=None, topk_mask=None, actual_seq_qlen=None,
                                       actual_cmp_seq_kvlen=None, actual_sel_seq_kvlen=None):
    op = OP
    checks.expect_one_of(layout, ("TND", "BSND"), op, "layout")
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect_dtype(t, nsa.floats(), op, name)
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value}, op)
    checks.expect(key_value_head_num > 0 and head_num % key_value_head_num == 0, op,
                  "head_num", lambda: f"a multiple of key_value_head_num = {key_value_head_num}",
                  head_num, ValueError)
    q = query_heads(op, query, layout, head_num)
    checks.expect(q.shape[1] == head_num, op, "query", lambda: f"head_num = {head_num} heads",
                  lambda: f"shape {tuple(query.shape)}", RuntimeError)
    checks.expect_dim(key, 3, op, "key")
    checks.expect_dim(value, 3, op, "value")
    k = paged_heads(op, "key", key, key_value_head_num)
    v = paged_heads(op, "value", value, key_value_head_num)
    checks.expect(k.shape[3] == q.shape[2] and v.shape[3] <= q.shape[2], op, "key",
                  lambda: f"query's head dim D = {q.shape[2]} (and value's at most D)",
                  lambda: f"head dims {k.shape[3]} and {v.shape[3]}", RuntimeError)
    nsa.expect_block_sizes(op, compress_block_size, compress_stride, select_block_size)
    nsa.expect_positive(op, select_block_count=select_block_count,
                        page_block_size=page_block_size)
    for name, given in (("atten_mask", atten_mask), ("topk_mask", topk_mask)):
        checks.expect(given is None, op, name, "None (not supported)", "a tensor", ValueError)
    check_paged(op, key, value, block_table, page_block_size, q.shape[0],
                actual_cmp_seq_kvlen)
    for n in actual_cmp_seq_kvlen:
        sel = selection_length(int(n), compress_block_size, compress_stride, select_block_size)
        checks.expect(int(n) > 0 and select_block_count <= sel, op, "select_block_count",
                      lambda: f"at most each batch's selection block count ({sel}) with a "
                              "non-empty actual_cmp_seq_kvlen", select_block_count, ValueError)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        # The A2 kernel's limits (seed 004 constraints).
        checks.expect(compress_block_size in _BLOCKS and select_block_size in _BLOCKS, op,
                      "compress_block_size", f"with select_block_size one of {list(_BLOCKS)}",
                      f"{compress_block_size} and {select_block_size}", ValueError)
        checks.expect(compress_stride in (16, 32, 48, 64), op, "compress_stride",
                      "one of [16, 32, 48, 64]", compress_stride, ValueError)
        g = head_num // key_value_head_num
        checks.expect(g <= 128 and 128 % g == 0 and 1 <= q.shape[0] <= 20, op, "query",
                      "a group G dividing 128 and a batch of 1 to 20",
                      f"G = {g}, B = {q.shape[0]}", ValueError)
        checks.expect(q.shape[2] <= 192 and v.shape[3] <= 128, op, "query",
                      "a head dim of at most 192 with value's at most 128",
                      f"{q.shape[2]} and {v.shape[3]}", ValueError)
        checks.expect(page_block_size <= 128 and page_block_size % 16 == 0, op,
                      "page_block_size", "a multiple of 16 up to 128", page_block_size,
                      ValueError)
        checks.expect(all(128 <= int(n) <= 4096 for n in actual_cmp_seq_kvlen), op,
                      "actual_cmp_seq_kvlen", "values in [128, 4096]",
                      lambda: repr(list(actual_cmp_seq_kvlen)), ValueError)


def nsa_compress_attention_infer_reference(query, key, value, scale_value, head_num,
                                           key_value_head_num, select_block_size,
                                           select_block_count, page_block_size,
                                           compress_block_size, compress_stride, *,
                                           layout="TND", atten_mask=None, block_table=None,
                                           topk_mask=None, actual_seq_qlen=None,
                                           actual_cmp_seq_kvlen=None,
                                           actual_sel_seq_kvlen=None):
    ct = nsa.compute_dtype(query)
    q = query_heads(OP, query, layout, head_num).to(ct)
    k = paged_heads(OP, "key", key, key_value_head_num).to(ct)
    v = paged_heads(OP, "value", value, key_value_head_num).to(ct)
    batch, n1, _ = q.shape
    n2 = key_value_head_num
    g = n1 // n2
    m, n_c = select_block_size // compress_stride, compress_block_size // compress_stride
    out = q.new_zeros((batch, n1, v.shape[3]))
    topk = torch.zeros((batch, n2, select_block_count), dtype=torch.int32, device=query.device)
    for b in range(batch):
        length = int(actual_cmp_seq_kvlen[b])
        kb = gather_pages(k, block_table[b], length).repeat_interleave(g, dim=1)   # [L, N1, D]
        vb = gather_pages(v, block_table[b], length).repeat_interleave(g, dim=1)
        p = torch.softmax(torch.einsum("hd,lhd->hl", q[b], kb) * scale_value, dim=-1)
        out[b] = torch.einsum("hl,lhd->hd", p.to(query.dtype).to(ct), vb)
        sel = selection_length(length, compress_block_size, compress_stride, select_block_size)
        score = (p @ overlap_weights(length, sel, m, n_c, ct, query.device)) \
            .view(n2, g, sel).sum(dim=1)
        forced = torch.zeros(sel, dtype=torch.bool, device=query.device)
        forced[[0, max(sel - 2, 0), sel - 1]] = True
        # +inf for the forced blocks: a stable descending sort puts them first, in block order
        score = score.masked_fill(forced, float("inf"))
        order = torch.sort(score, dim=-1, descending=True, stable=True).indices
        topk[b] = order[:, :select_block_count].to(torch.int32)
    out = out.to(query.dtype)
    if layout == "BSND":
        return out.unsqueeze(1), topk.unsqueeze(1)
    return out, topk


compress_attention_infer_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_nsa_compress_attention_infer,
                                    reference=nsa_compress_attention_infer_reference,
                                    metadata_check=True, info=OpInfo(api="torch_npu"))
compress_attention_infer_op.forbid_autograd(f"{OP} is inference-only")


def npu_nsa_compress_attention_infer(query, key, value, scale_value, head_num,
                                     key_value_head_num, select_block_size, select_block_count,
                                     page_block_size, compress_block_size, compress_stride, *,
                                     layout="TND", atten_mask=None, block_table=None,
                                     topk_mask=None, actual_seq_qlen=None,
                                     actual_cmp_seq_kvlen=None, actual_sel_seq_kvlen=None):
    """NSA decode attention over a paged compressed-KV cache, with the blocks to select.

    Formula (seed 004; op-plugin test_npu_nsa_compress_attention_infer.py)::

        P = softmax(scale_value * q_h @ K_n^T),  out_h = P @ V_n
        score[n, s] = sum_{h of n} sum_j c_j * P[h, m * (s + 1) - j]
        topk_indices = [0, S_sel - 2, S_sel - 1] + the best other blocks (stable)

    Parameters
    ----------
    query : Tensor
        ``[B, N1, D]`` (TND, the default) or ``[B, 1, N1, D]`` (BSND): one token per batch;
        float16 or bfloat16 (float32 / float64 outside strict mode).
    key, value : Tensor
        Paged compressed caches ``[block_num, page_block_size, N2 * D]`` and ``[...,
        N2 * Dv]`` (``Dv <= D``), query's dtype.
    scale_value : float
        Score scale.
    head_num, key_value_head_num : int
        ``N1`` and ``N2`` (``N1 % N2 == 0``).
    select_block_size, select_block_count, page_block_size : int
        Selection block length, blocks to return, tokens per cache page.
    compress_block_size, compress_stride : int
        The compression window and stride that built the cache (``select_block_size >=
        compress_block_size >= compress_stride``, ``select_block_size % compress_stride == 0``).
    layout : str
        ``"TND"`` or ``"BSND"``.
    atten_mask, topk_mask : None
        Not supported (must be None).
    block_table : Tensor
        int32 ``[B, max_pages]``; required.
    actual_seq_qlen, actual_sel_seq_kvlen : list of int, optional
        Not used (one query token per batch; selection lengths follow from the rest).
    actual_cmp_seq_kvlen : list of int
        Compressed tokens of each batch (not cumulative); required.

    Returns
    -------
    (Tensor, Tensor)
        ``out`` (query's layout with head dim ``Dv``, query's dtype) and int32
        ``topk_indices`` ``[B, N2, select_block_count]`` (BSND: ``[B, 1, N2, count]``).

    Constraints
    -----------
    Atlas A2.  ``select_block_count`` at most each batch's selection block count.  Strict
    mode adds the kernel's limits: block sizes in 16/32/48/64/80/96/112/118, stride in
    16/32/48/64, ``G`` dividing 128, ``B <= 20``, ``D <= 192``, ``Dv <= 128``, page size a
    multiple of 16 up to 128, ``actual_cmp_seq_kvlen`` in [128, 4096].

    Notes
    -----
    Inference only (no backward).

    Examples
    --------
    >>> q = torch.randn(1, 4, 16); k = torch.randn(3, 16, 32); v = torch.randn(3, 16, 16)
    >>> out, topk = npu_anywhere.npu_nsa_compress_attention_infer(
    ...     q, k, v, 0.25, 4, 2, 64, 4, 16, 32, 16,
    ...     block_table=torch.tensor([[2, 0, 1]], dtype=torch.int32), actual_cmp_seq_kvlen=[40])
    >>> out.shape, topk[0, 0, :3].tolist()
    (torch.Size([1, 4, 8]), [0, 9, 10])
    """
    return compress_attention_infer_op(
        query, key, value, scale_value, head_num, key_value_head_num, select_block_size,
        select_block_count, page_block_size, compress_block_size, compress_stride,
        layout=layout, atten_mask=atten_mask, block_table=block_table, topk_mask=topk_mask,
        actual_seq_qlen=actual_seq_qlen, actual_cmp_seq_kvlen=actual_cmp_seq_kvlen,
        actual_sel_seq_kvlen=actual_sel_seq_kvlen)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_compress_attention_infer}
