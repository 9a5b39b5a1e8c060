"""torch_npu.npu_nsa_compress_infer (Native Sparse Attention, decode-time KV compression).

Formula (seed 004; hicann/ops-transformer attention/nsa_compress_with_cache/docs/
aclnnNsaCompressWithCache.md), per batch ``b`` whose ``L = actual_seq_len[b]`` cached tokens
just completed a window (``L >= compress_block_size`` and ``(L - compress_block_size) %
compress_stride == 0``)::

    cache[slot_mapping[b], n, :] = sum_w weight[w, n] * token[L - compress_block_size + w, n, :]

where logical token ``p`` of batch ``b`` lives in the paged ``input`` at page
``block_table[b, p // page_block_size]``, row ``p % page_block_size``.  Other batches, and
every other cache row, are left untouched.  Followed for the details: op-plugin
test/test_custom_ops/test_npu_nsa_compress_infer.py (the golden): float32 math, the written
rows rounded once to the cache's dtype.  ``cache`` is updated in place and returned.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, OpInfo, define_out
from ...targets import Product
from . import nsa_common as nsa
from .nsa_select_attention_infer import gather_pages

OP = "npu_nsa_compress_infer"
SCHEMA = ("npu_nsa_compress_infer.cache(Tensor input, Tensor weight, Tensor slot_mapping, "
          "int compress_block_size, int compress_stride, int page_block_size, *, "
          "Tensor? block_table=None, int[]? actual_seq_len=None, Tensor(a!) cache) "
          "-> Tensor(a!)")

_SUPPORTED = frozenset({Product.A2})


def check_nsa_compress_infer(input, weight, slot_mapping, compress_block_size, compress_stride,
                             page_block_size, *, block_table=None, actual_seq_len=None,
                             cache):
    op = OP
    nsa.expect_tensor(op, "input", input, 4)
    nsa.expect_tensor(op, "weight", weight, 2)
    checks.expect_same_dtype({"input": input, "weight": weight, "cache": cache}, op)
    checks.expect_same_device({"input": input, "weight": weight, "cache": cache,
                               "slot_mapping": slot_mapping}, op)
    _, page, heads, dim = input.shape
    checks.expect(page == page_block_size, op, "input",
                  lambda: f"a page size (dim 1) equal to page_block_size = {page_block_size}",
                  page, RuntimeError)
    checks.expect(compress_block_size > 0 and compress_stride > 0, op, "compress_block_size",
                  lambda: f"positive with a positive compress_stride ({compress_stride})",
                  compress_block_size, ValueError)
    checks.expect(compress_block_size >= compress_stride, op, "compress_block_size",
                  lambda: f"at least compress_stride = {compress_stride}", compress_block_size,
                  ValueError)
    want = (compress_block_size, heads)
    checks.expect(tuple(weight.shape) == want, op, "weight",
                  lambda: f"shape {list(want)} ([compress_block_size, N] of input)",
                  lambda: f"shape {tuple(weight.shape)}", RuntimeError)
    checks.expect_dtype(slot_mapping, (torch.int32,), op, "slot_mapping")
    checks.expect_dim(slot_mapping, 1, op, "slot_mapping")
    batch = slot_mapping.shape[0]
    checks.expect(block_table is not None, op, "block_table",
                  "a tensor (only the paged cache is supported)", "None", ValueError)
    checks.expect_dtype(block_table, (torch.int32,), op, "block_table")
    checks.expect_dim(block_table, 2, op, "block_table")
    checks.expect(block_table.shape[0] == batch, op, "block_table",
                  lambda: f"one row per batch of slot_mapping ({batch})", block_table.shape[0],
                  RuntimeError)
    checks.expect(actual_seq_len is not None and len(actual_seq_len) == batch, op,
                  "actual_seq_len", lambda: f"a list of {batch} lengths (one per batch)",
                  lambda: repr(actual_seq_len), ValueError)
    room = block_table.shape[1] * page_block_size
    checks.expect(all(0 <= int(x) <= room for x in actual_seq_len), op, "actual_seq_len",
                  lambda: f"lengths in [0, {room}] (block_table columns x page_block_size)",
                  lambda: repr(list(actual_seq_len)), ValueError)
    checks.expect(cache.dim() == 3 and tuple(cache.shape[1:]) == (heads, dim), op, "cache",
                  lambda: f"a [slots, {heads}, {dim}] tensor ([slots, N, D] of input)",
                  lambda: f"shape {tuple(cache.shape)}", RuntimeError)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        # The A2 kernel's limits (seed 004 constraints).
        nsa.expect_multiple_of_16(op, compress_block_size=compress_block_size,
                                  compress_stride=compress_stride, head_dim=dim)
        checks.expect(compress_block_size <= 64, op, "compress_block_size", "at most 64",
                      compress_block_size, ValueError)
        checks.expect(page_block_size in (64, 128), op, "page_block_size", "64 or 128",
                      page_block_size, ValueError)
        checks.expect(dim <= 256, op, "input", "a head dim of at most 256", dim, ValueError)
        checks.expect(heads <= 64 and (heads <= 50 or heads % 2 == 0), op, "input",
                      "a head count of at most 64 (even above 50)", heads, ValueError)


def due_batches(actual_seq_len, block: int, stride: int) -> list[int]:
    """Batches whose newest token completes a compression window."""
    return [b for b, n in enumerate(int(x) for x in actual_seq_len)
            if n >= block and (n - block) % stride == 0]


def nsa_compress_infer_reference(input, weight, slot_mapping, compress_block_size,
                                 compress_stride, page_block_size, *, block_table=None,
                                 actual_seq_len=None, cache):
    ct = nsa.compute_dtype(input)
    wt = weight.to(ct)
    for b in due_batches(actual_seq_len, compress_block_size, compress_stride):
        length = int(actual_seq_len[b])
        tokens = gather_pages(input, block_table[b], length)[length - compress_block_size:]
        row = torch.einsum("wnd,wn->nd", tokens.to(ct), wt).to(cache.dtype)
        cache.index_copy_(0, slot_mapping[b:b + 1].long(), row.unsqueeze(0))


_, compress_infer_op = define_out(
    SCHEMA, check=check_nsa_compress_infer, reference=nsa_compress_infer_reference,
    no_grad="npu_nsa_compress_infer writes an inference cache", info=OpInfo(api="torch_npu"))


def npu_nsa_compress_infer(input, weight, slot_mapping, compress_block_size, compress_stride,
                           page_block_size, block_table=None, actual_seq_len=None, *,
                           cache):
    """Compress each batch's newest KV window into its slot of a compressed cache (NSA decode).

    Formula (seed 004; ops-transformer aclnnNsaCompressWithCache.md), for each batch with
    ``L >= compress_block_size`` and ``(L - compress_block_size) % compress_stride == 0``::

        cache[slot_mapping[b]] = sum_w weight[w, :, None] * kv[L - compress_block_size + w]

    Parameters
    ----------
    input : Tensor
        Paged KV ``[block_num, page_block_size, N, D]``, float16 or bfloat16 (float32 /
        float64 outside strict mode).
    weight : Tensor
        ``[compress_block_size, N]``, input's dtype.
    slot_mapping : Tensor
        int32 ``[B]``: the cache row each batch writes (values must not repeat).
    compress_block_size, compress_stride, page_block_size : int
        Window length, step between windows, tokens per page.
    block_table : Tensor
        int32 ``[B, max_pages]`` page numbers; required.
    actual_seq_len : list of int
        Cached tokens of each batch (not cumulative); required.
    cache : Tensor
        ``[slots, N, D]``, input's dtype; written in place.

    Returns
    -------
    Tensor
        ``cache``.  Batches with no completed window leave it unchanged.

    Constraints
    -----------
    Atlas A2.  Strict mode adds: ``compress_block_size`` and ``compress_stride`` multiples of
    16 with ``compress_block_size <= 64``; ``page_block_size`` 64 or 128; ``D`` a multiple
    of 16 up to 256; ``N <= 64`` (even above 50).

    Notes
    -----
    No backward.  ``cache`` is keyword-only here as in the schema; the doc's signature lists
    it last.

    Examples
    --------
    >>> x = torch.randn(2, 16, 1, 16, dtype=torch.float16)
    >>> cache = torch.zeros(3, 1, 16, dtype=torch.float16)
    >>> _ = npu_anywhere.npu_nsa_compress_infer(
    ...     x, torch.randn(16, 1, dtype=torch.float16), torch.tensor([2], dtype=torch.int32),
    ...     16, 16, 16, block_table=torch.tensor([[1, 0]], dtype=torch.int32),
    ...     actual_seq_len=[32], cache=cache)
    >>> bool(cache[2].abs().sum() > 0), bool(cache[0].abs().sum() == 0)
    (True, True)
    """
    return compress_infer_op(input, weight, slot_mapping, compress_block_size, compress_stride,
                             page_block_size, block_table=block_table,
                             actual_seq_len=actual_seq_len, cache=cache)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_compress_infer}
