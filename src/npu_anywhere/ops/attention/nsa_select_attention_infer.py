"""torch_npu.npu_nsa_select_attention_infer (Native Sparse Attention, paged decode).

Formula (seed 004; hicann/ops-transformer attention/nsa_selected_attention_infer/docs/
aclnnNsaSelectedAttentionInfer.md), per batch ``b`` (one query token) and query head ``h`` of
key head ``n = h // G``::

    keys      = blocks topk_indices[b, n, :] of the batch's cached keys (select_block_size
                each; the last block of a sequence may be partial)
    out[b, h] = softmax(scale_value * query[b, h] @ key[keys]^T) @ value[keys]

The cache is paged: logical token ``p`` of batch ``b`` sits in page ``block_table[b, p //
page_block_size]`` at row ``p % page_block_size``; ``actual_seq_kvlen[b]`` tokens are valid.
Followed for the details: op-plugin test/test_custom_ops/test_npu_nsa_select_attention_infer.py
(the golden): the selection stops at the first ``-1`` of ``topk_indices``; softmax and both
products in float32, the output rounded once to query's dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import nsa_common as nsa
from . import nsa_select_math as math

OP = "npu_nsa_select_attention_infer"
SCHEMA = ("npu_nsa_select_attention_infer(Tensor query, Tensor key, Tensor value, "
          "Tensor topk_indices, float scale_value, int head_num, int key_value_head_num, "
          "int select_block_size, int select_block_count, int page_block_size, *, "
          "str layout='BSND', Tensor? atten_mask=None, Tensor? block_table=None, "
          "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2})
_LAYOUTS = ("BSH", "BSND", "TND")


def query_heads(op, query, layout, head_num):
    """``[B, N1, D]`` view of the one-token query of each batch (checks its shape)."""
    if layout == "BSND":
        checks.expect_dim(query, 4, op, "query")
        checks.expect(query.shape[1] == 1, op, "query", "a sequence length S of 1",
                      query.shape[1], ValueError)
        return query.reshape(query.shape[0], query.shape[2], query.shape[3])
    checks.expect_dim(query, 3, op, "query")
    if layout == "TND":
        return query
    checks.expect(query.shape[1] == 1, op, "query", "a sequence length S of 1",
                  query.shape[1], ValueError)
    checks.expect(query.shape[2] % head_num == 0, op, "query",
                  lambda: f"a hidden size H divisible by head_num = {head_num}",
                  query.shape[2], ValueError)
    return query.reshape(query.shape[0], head_num, query.shape[2] // head_num)


def paged_heads(op, name, cache, kv_heads):
    """``[blocks, page, N2, D]`` view of a paged cache given as ``[blocks, page, H]`` or 4-D."""
    checks.expect_dim(cache, (3, 4), op, name)
    if cache.dim() == 4:
        checks.expect(cache.shape[2] == kv_heads, op, name,
                      lambda: f"key_value_head_num = {kv_heads} heads",
                      lambda: f"shape {tuple(cache.shape)}", RuntimeError)
        return cache
    checks.expect(cache.shape[2] % kv_heads == 0, op, name,
                  lambda: f"a hidden size divisible by key_value_head_num = {kv_heads}",
                  cache.shape[2], ValueError)
    return cache.reshape(cache.shape[0], cache.shape[1], kv_heads, cache.shape[2] // kv_heads)


def check_paged(op, key, value, block_table, page_block_size, batch, kv_lens):
    checks.expect_same_dtype({"key": key, "value": value}, op)
    checks.expect(key.shape[:2] == value.shape[:2], op, "value",
                  lambda: f"key's block_num and block_size {tuple(key.shape[:2])}",
                  lambda: f"shape {tuple(value.shape)}", RuntimeError)
    checks.expect(key.shape[1] == page_block_size, op, "key",
                  lambda: f"a block size (dim 1) equal to page_block_size = {page_block_size}",
                  key.shape[1], RuntimeError)
    checks.expect(block_table is not None, op, "block_table",
                  "a tensor (only the paged cache is supported)", "None", ValueError)
    checks.expect_dtype(block_table, (torch.int32,), op, "block_table")
    checks.expect_dim(block_table, 2, op, "block_table")
    checks.expect(block_table.shape[0] == batch, op, "block_table",
                  lambda: f"one row per batch ({batch})", block_table.shape[0], RuntimeError)
    checks.expect(kv_lens is not None and len(kv_lens) == batch, op, "actual_seq_kvlen",
                  lambda: f"a list of {batch} lengths (one per batch)",
                  lambda: repr(kv_lens), ValueError)
    room = block_table.shape[1] * page_block_size
    checks.expect(all(0 <= int(x) <= room for x in kv_lens), op, "actual_seq_kvlen",
                  lambda: f"lengths in [0, {room}] (block_table columns x page_block_size)",
                  lambda: repr(list(kv_lens)), ValueError)


def gather_pages(cache, table_row, length: int):
    """The first ``length`` logical tokens of one batch's paged ``cache [blocks, page, ...]``."""
    page = cache.shape[1]
    pos = torch.arange(length, device=cache.device)
    return cache[table_row.long()[pos // page], pos % page]


def check_nsa_select_attention_infer(query, key, value, topk_indices, scale_value, head_num,
                                     key_value_head_num, select_block_size, select_block_count,
                                     page_block_size, *, layout="BSND", atten_mask=None,
                                     block_table=None, actual_seq_qlen=None,
                                     actual_seq_kvlen=None):
    op = OP
    checks.expect_one_of(layout, _LAYOUTS, op, "layout")
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect_dtype(t, nsa.floats(), op, name)
    checks.expect_same_dtype({"query": query, "key": key, "value": value}, op)
    checks.expect_same_device({"query": query, "key": key, "value": value,
                               "topk_indices": topk_indices}, op)
    checks.expect(key_value_head_num > 0 and head_num % key_value_head_num == 0, op,
                  "head_num", lambda: f"a multiple of key_value_head_num = {key_value_head_num}",
                  head_num, ValueError)
    q = query_heads(op, query, layout, head_num)
    checks.expect(q.shape[1] == head_num, op, "query", lambda: f"head_num = {head_num} heads",
                  lambda: f"shape {tuple(query.shape)}", RuntimeError)
    k = paged_heads(op, "key", key, key_value_head_num)
    v = paged_heads(op, "value", value, key_value_head_num)
    checks.expect(k.shape[3] == q.shape[2], op, "key",
                  lambda: f"query's head dim D = {q.shape[2]}", k.shape[3], RuntimeError)
    batch = q.shape[0]
    for name, x in (("select_block_size", select_block_size),
                    ("select_block_count", select_block_count),
                    ("page_block_size", page_block_size)):
        checks.expect(x > 0, op, name, "a positive int", x, ValueError)
    checks.expect_dtype(topk_indices, (torch.int32,), op, "topk_indices")
    want = (batch, key_value_head_num, select_block_count)
    checks.expect(tuple(topk_indices.shape) == want, op, "topk_indices",
                  lambda: f"shape {list(want)} ([B, key_value_head_num, select_block_count])",
                  lambda: f"shape {tuple(topk_indices.shape)}", RuntimeError)
    checks.expect(atten_mask is None, op, "atten_mask", "None (not supported)", "a tensor",
                  ValueError)
    checks.expect(actual_seq_qlen is None, op, "actual_seq_qlen", "None (not supported)",
                  lambda: repr(actual_seq_qlen), ValueError)
    check_paged(op, key, value, block_table, page_block_size, batch, actual_seq_kvlen)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        g = head_num // key_value_head_num
        checks.expect(batch <= 3072 and key_value_head_num <= 256 and g <= 16, op, "query",
                      "B <= 3072, key_value_head_num <= 256 and head_num / key_value_head_num "
                      "<= 16", f"B = {batch}, N2 = {key_value_head_num}, G = {g}", ValueError)
        checks.expect(q.shape[2] == 192 and v.shape[3] == 128, op, "query",
                      "a head dim of 192 with value's 128", f"{q.shape[2]} and {v.shape[3]}",
                      ValueError)
        checks.expect(select_block_size % 16 == 0, op, "select_block_size",
                      "a multiple of 16", select_block_size, ValueError)
        longest = max(int(x) for x in actual_seq_kvlen)
        checks.expect(select_block_count * select_block_size <= longest, op,
                      "select_block_count", lambda: f"with select_block_size at most the "
                      f"longest actual_seq_kvlen ({longest}) keys", select_block_count,
                      ValueError)


def _until_first_gap(topk: torch.Tensor) -> torch.Tensor:
    """Entries after the first -1 of each selection are dropped (set to -1)."""
    live = torch.cumprod((topk >= 0).to(torch.int32), dim=-1).bool()
    return topk.masked_fill(~live, -1)


def nsa_select_attention_infer_reference(query, key, value, topk_indices, scale_value, head_num,
                                         key_value_head_num, select_block_size,
                                         select_block_count, page_block_size, *, layout="BSND",
                                         atten_mask=None, block_table=None,
                                         actual_seq_qlen=None, actual_seq_kvlen=None):
    ct = nsa.compute_dtype(query)
    q = query_heads(OP, query, layout, head_num).to(ct)
    k = paged_heads(OP, "key", key, key_value_head_num).to(ct)
    v = paged_heads(OP, "value", value, key_value_head_num).to(ct)
    batch, n1, d = q.shape
    g = n1 // key_value_head_num
    topk = _until_first_gap(topk_indices)
    out = q.new_zeros((batch, n1, v.shape[3]))
    for b in range(batch):
        length = int(actual_seq_kvlen[b])
        kb = gather_pages(k, block_table[b], length)
        vb = gather_pages(v, block_table[b], length)
        o, _, _ = math.forward(q[b].reshape(1, key_value_head_num, g, d), kb, vb,
                               topk[b:b + 1], block=select_block_size, scale=scale_value,
                               causal=False, round_dtype=ct)
        out[b] = o.reshape(n1, -1)
    out = out.to(query.dtype)
    if layout == "BSND":
        return out.unsqueeze(1)
    if layout == "BSH":
        return out.reshape(batch, 1, -1)
    return out


select_infer_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nsa_select_attention_infer,
                        reference=nsa_select_attention_infer_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
select_infer_op.forbid_autograd("npu_nsa_select_attention_infer is inference-only")


def npu_nsa_select_attention_infer(query, key, value, topk_indices, scale_value, head_num,
                                   key_value_head_num, select_block_size, select_block_count,
                                   page_block_size, *, layout="BSND", atten_mask=None,
                                   block_table=None, actual_seq_qlen=None,
                                   actual_seq_kvlen=None):
    """NSA selection attention for decode: one query token per batch over a paged KV cache.

    Formula (seed 004; ops-transformer aclnnNsaSelectedAttentionInfer.md)::

        out[b, h] = softmax(scale_value * q[b, h] @ K_sel^T) @ V_sel
        K_sel, V_sel = blocks topk_indices[b, h // G, :] (select_block_size tokens each) of
                       batch b's first actual_seq_kvlen[b] cached tokens

    Parameters
    ----------
    query : Tensor
        ``[B, 1, H]`` (BSH), ``[B, 1, N1, D]`` (BSND) or ``[B, N1, D]`` (TND), float16 or
        bfloat16 (float32 / float64 outside strict mode).
    key, value : Tensor
        Paged caches ``[block_num, page_block_size, N2 * D]`` or ``[block_num,
        page_block_size, N2, D]`` (value's ``Dv`` may differ), query's dtype.
    topk_indices : Tensor
        int32 ``[B, N2, select_block_count]`` block numbers; ``-1`` ends the selection.
    scale_value : float
        Score scale.
    head_num, key_value_head_num : int
        ``N1`` and ``N2`` (``N1 % N2 == 0``).
    select_block_size, select_block_count, page_block_size : int
        Tokens per selected block, blocks per head, tokens per cache page.
    layout : str
        ``"BSH"``, ``"BSND"`` (default) or ``"TND"``.
    atten_mask, actual_seq_qlen : None
        Not supported (must be None).
    block_table : Tensor
        int32 ``[B, max_pages]`` page numbers of each batch; required.
    actual_seq_kvlen : list of int
        Valid cached tokens of each batch (not cumulative); required.

    Returns
    -------
    Tensor
        ``query``'s layout with head dim ``Dv``, query's dtype (float32 math, one rounding).

    Constraints
    -----------
    Atlas A2.  Strict mode adds: ``B <= 3072``, ``N2 <= 256``, ``G <= 16``, ``D = 192``,
    ``Dv = 128``, ``select_block_size`` a multiple of 16, ``select_block_count *
    select_block_size <= max(actual_seq_kvlen)``.

    Notes
    -----
    Inference only (no backward).

    Examples
    --------
    >>> q = torch.randn(1, 1, 64); k = torch.randn(4, 16, 32); v = torch.randn(4, 16, 16)
    >>> topk = torch.tensor([[[0, -1], [1, 0]]], dtype=torch.int32)
    >>> npu_anywhere.npu_nsa_select_attention_infer(
    ...     q, k, v, topk, 0.2, 4, 2, 16, 2, 16, layout="BSH",
    ...     block_table=torch.tensor([[2, 0]], dtype=torch.int32), actual_seq_kvlen=[30]).shape
    torch.Size([1, 1, 32])
    """
    return select_infer_op(query, key, value, topk_indices, scale_value, head_num,
                           key_value_head_num, select_block_size, select_block_count,
                           page_block_size, layout=layout, atten_mask=atten_mask,
                           block_table=block_table, actual_seq_qlen=actual_seq_qlen,
                           actual_seq_kvlen=actual_seq_kvlen)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_select_attention_infer}
