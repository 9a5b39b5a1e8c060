"""torch_npu.npu_scatter_pa_kv_cache (in place) and npu_scatter_pa_kv_cache_functional.

Writes each token's key and value into a paged KV cache at the slot ``slot_mapping`` names
(``slot = block_id * block_size + offset``).  Three scenarios, told apart by the arguments
(seed 004):

1. 3-D key/value ``[T, N, D]`` into NZ caches (``cache_mode='PA_NZ'``, the default):
   ``[nb, N * D // ld, bs, ld]`` or ``[nb, N, D // ld, bs, ld]`` with ``ld = 32 // element
   size`` (see :mod:`.paged`);
2. 3-D key/value into ND caches ``[nb, bs, N, D]`` (``cache_mode=None`` or ``'Norm'``);
3. 4-D key/value ``[B, S, N, D]`` into ``[nb, bs, 1, D]`` caches, one run of slots per
   (batch, head) starting at ``slot_mapping[b, h]``, driven by ``seq_lens``/``compress_lens``
   and optionally ``compress_seq_offsets`` (the kernel's "alibi" and "rope" compressions).

A negative slot skips its token (scenarios 1-2) or its (batch, head) run (scenario 3), as the
CANN goldens do (``if slot < 0: continue``) and as vLLM's padding slot -1 needs.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import PRE_950, Product
from ._common import (FLOAT8, INDEX_DTYPES, expect_dtype_now, expect_in_range,
                      expect_nonnegative)
from .paged import as_words, bitwise, nz_last_dim, split_slots, write_nd, write_nz

OP = "npu_scatter_pa_kv_cache"
SCHEMA = ("npu_scatter_pa_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, "
          "Tensor(b!) value_cache, Tensor slot_mapping, *, Tensor? compress_lens=None, "
          "Tensor? compress_seq_offsets=None, Tensor? seq_lens=None, str? cache_mode='PA_NZ') "
          "-> ()")
FUNCTIONAL_OP = "npu_scatter_pa_kv_cache_functional"
FUNCTIONAL_SCHEMA = ("npu_scatter_pa_kv_cache_functional(Tensor key, Tensor value, "
                     "Tensor key_cache, Tensor value_cache, Tensor slot_mapping, *, "
                     "Tensor? compress_lens=None, Tensor? compress_seq_offsets=None, "
                     "Tensor? seq_lens=None, str? cache_mode='PA_NZ') -> (Tensor, Tensor)")

# None and "Norm" select the ND layout; the tiling code also reads an empty string as "Norm".
CACHE_MODES = (None, "Norm", "PA_NZ", "")
KV_DTYPES = (torch.float16, torch.float32, torch.bfloat16, torch.int8, torch.uint8,
             torch.int16, torch.uint16, torch.int32, torch.uint32) + FLOAT8
_A2 = (torch.float16, torch.bfloat16, torch.int8)
_PER_PRODUCT = {Product.A2: _A2, Product.A3: _A2, Product.ASCEND_950: KV_DTYPES}
_SUPPORTED = frozenset(_PER_PRODUCT)
MAX_NZ_BLOCK_SIZE = 65535           # "倒数第二维必须小于UINT16_MAX" (PA_NZ)


def _scenario(key, cache_mode) -> str:
    if key.dim() == 4:
        return "compress"
    return "nz" if cache_mode == "PA_NZ" else "nd"


def _shape(t):
    return lambda: f"shape {tuple(t.shape)}"


def _check(op, key, value, key_cache, value_cache, slot_mapping, compress_lens,
           compress_seq_offsets, seq_lens, cache_mode):
    product = targets.expect_supported(op, _SUPPORTED)
    checks.expect(cache_mode in CACHE_MODES, op, "cache_mode", "one of [None, 'Norm', 'PA_NZ']",
                  repr(cache_mode), ValueError)
    checks.expect_dim(key, (3, 4), op, "key")
    checks.expect(value.dim() == key.dim(), op, "value", lambda: f"{key.dim()} dims like key",
                  _shape(value), ValueError)
    kind = _scenario(key, cache_mode)
    expect_dtype_now(key, KV_DTYPES, _PER_PRODUCT, op, "key")
    expect_dtype_now(value, KV_DTYPES, _PER_PRODUCT, op, "value")
    if kind == "nz":
        # aclnn doc: with PA_NZ, key/key_cache and value/value_cache may differ in dtype.
        checks.expect_same_dtype({"key": key, "key_cache": key_cache}, op)
        checks.expect_same_dtype({"value": value, "value_cache": value_cache}, op)
        if product in PRE_950 and value.dtype == torch.int8:
            checks.expect(key.dtype == torch.int8, op, "key",
                          lambda: f"int8 when value is int8 on {product.value}",
                          str(key.dtype).replace("torch.", ""), TypeError)
    else:
        checks.expect_same_dtype({"key": key, "value": value, "key_cache": key_cache,
                                  "value_cache": value_cache}, op)
    checks.expect_dtype(slot_mapping, INDEX_DTYPES, op, "slot_mapping")
    optional = {name: t for name, t in (("compress_lens", compress_lens),
                                        ("compress_seq_offsets", compress_seq_offsets),
                                        ("seq_lens", seq_lens)) if t is not None}
    checks.expect_same_dtype({"slot_mapping": slot_mapping, **optional}, op)
    checks.expect_same_device({"key": key, "value": value, "key_cache": key_cache,
                               "value_cache": value_cache, "slot_mapping": slot_mapping,
                               **optional}, op)
    for name, t in (("key", key), ("value", value), ("key_cache", key_cache),
                    ("value_cache", value_cache), ("slot_mapping", slot_mapping)):
        checks.expect_nonempty(t, op, name)
    if kind == "compress":
        _check_compress(op, product, key, value, key_cache, value_cache, slot_mapping,
                        compress_lens, compress_seq_offsets, seq_lens)
        return
    tokens, heads = key.shape[0], key.shape[1]
    checks.expect(value.shape[:2] == key.shape[:2], op, "value",
                  lambda: f"the first two dims of key ({tokens}, {heads})", _shape(value),
                  RuntimeError)
    checks.expect(slot_mapping.dim() == 1 and slot_mapping.shape[0] == tokens, op,
                  "slot_mapping", lambda: f"shape ({tokens},) (one slot per token)",
                  _shape(slot_mapping), RuntimeError)
    if kind == "nz":
        _check_nz(op, key, value, key_cache, value_cache)
    else:
        _check_nd(op, key, value, key_cache, value_cache)


def _check_nd(op, key, value, key_cache, value_cache):
    _, heads, dk = key.shape
    dv = value.shape[2]
    for name, cache, d in (("key_cache", key_cache, dk), ("value_cache", value_cache, dv)):
        checks.expect(cache.dim() == 4 and tuple(cache.shape[2:]) == (heads, d), op, name,
                      lambda d=d: f"an ND cache [num_blocks, block_size, {heads}, {d}] "
                      "(cache_mode None/'Norm')", _shape(cache), RuntimeError)
    checks.expect(value_cache.shape[:2] == key_cache.shape[:2], op, "value_cache",
                  lambda: f"the num_blocks and block_size of key_cache "
                  f"{tuple(key_cache.shape[:2])}", _shape(value_cache), RuntimeError)


def _check_nz(op, key, value, key_cache, value_cache):
    _, heads, _ = key.shape
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        # before any dim is read from it: a 0-D or 2-D cache names no block size
        checks.expect(cache.dim() in (4, 5), op, name, "a 4-D or 5-D NZ cache (cache_mode "
                      "'PA_NZ')", _shape(cache), RuntimeError)
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[-2]
    for name, x, cache_name, cache in (("key", key, "key_cache", key_cache),
                                       ("value", value, "value_cache", value_cache)):
        d, ld = x.shape[2], nz_last_dim(x.dtype)
        checks.expect(d % ld == 0, op, name,
                      lambda d=d, ld=ld, x=x: f"a head size whose bytes are a multiple of 32 "
                      f"(a multiple of {ld} elements for {str(x.dtype)[6:]}) with cache_mode "
                      "'PA_NZ'", f"head size {d}", ValueError)
        four = (num_blocks, heads * d // ld, block_size, ld)
        five = (num_blocks, heads, d // ld, block_size, ld)
        checks.expect(tuple(cache.shape) in (four, five), op, cache_name,
                      lambda four=four, five=five: f"an NZ cache of shape {four} or {five} "
                      "(cache_mode 'PA_NZ': [num_blocks, num_head * head_size // last_dim, "
                      "block_size, last_dim], last_dim = 32 // element size)", _shape(cache),
                      RuntimeError)
    checks.expect(block_size < MAX_NZ_BLOCK_SIZE, op, "key_cache",
                  f"a block_size (dim -2) below {MAX_NZ_BLOCK_SIZE} with cache_mode 'PA_NZ'",
                  block_size, ValueError)


def _check_compress(op, product, key, value, key_cache, value_cache, slot_mapping,
                    compress_lens, compress_seq_offsets, seq_lens):
    if product in PRE_950:
        checks.expect(False, op, "key", f"3 dims on {product.value} (the 4-D compressed "
                      "scenario runs on the 950 only, per the aclnn doc)", _shape(key)(),
                      ValueError)
    batch, _, heads, dk = key.shape
    dv = value.shape[3]
    checks.expect(value.shape[:3] == key.shape[:3], op, "value",
                  lambda: f"the first three dims of key {tuple(key.shape[:3])}", _shape(value),
                  RuntimeError)
    for name, cache, d in (("key_cache", key_cache, dk), ("value_cache", value_cache, dv)):
        checks.expect(cache.dim() == 4 and cache.shape[2] == 1 and cache.shape[3] == d, op, name,
                      lambda d=d: f"a cache [num_blocks, block_size, 1, {d}] when key is 4-D",
                      _shape(cache), RuntimeError)
    checks.expect(value_cache.shape[:2] == key_cache.shape[:2], op, "value_cache",
                  lambda: f"the num_blocks and block_size of key_cache "
                  f"{tuple(key_cache.shape[:2])}", _shape(value_cache), RuntimeError)
    checks.expect(compress_lens is not None and seq_lens is not None, op,
                  "compress_lens and seq_lens", "tensors (required when key is 4-D)",
                  f"compress_lens={'None' if compress_lens is None else 'a tensor'}, "
                  f"seq_lens={'None' if seq_lens is None else 'a tensor'}", ValueError)
    for name, t, want in (("slot_mapping", slot_mapping, (batch, heads)),
                          ("compress_lens", compress_lens, (batch, heads)),
                          ("seq_lens", seq_lens, (batch,))):
        checks.expect(tuple(t.shape) == want, op, name,
                      lambda want=want: f"shape {want} when key is 4-D [batch, seq_len, "
                      "num_head, head_size]", _shape(t), RuntimeError)
    if compress_seq_offsets is not None:
        want = (batch * heads,)
        checks.expect(tuple(compress_seq_offsets.shape) == want, op, "compress_seq_offsets",
                      lambda: f"shape {want} (batch * num_head)", _shape(compress_seq_offsets),
                      RuntimeError)


def check_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *,
                              compress_lens=None, compress_seq_offsets=None, seq_lens=None,
                              cache_mode="PA_NZ"):
    _check(OP, key, value, key_cache, value_cache, slot_mapping, compress_lens,
           compress_seq_offsets, seq_lens, cache_mode)


def check_scatter_pa_kv_cache_functional(key, value, key_cache, value_cache, slot_mapping, *,
                                         compress_lens=None, compress_seq_offsets=None,
                                         seq_lens=None, cache_mode="PA_NZ"):
    _check(FUNCTIONAL_OP, key, value, key_cache, value_cache, slot_mapping, compress_lens,
           compress_seq_offsets, seq_lens, cache_mode)


# -- the writes ------------------------------------------------------------------------------

def scatter_into(op, key, value, key_cache, value_cache, slot_mapping, compress_lens,
                 compress_seq_offsets, seq_lens, cache_mode) -> None:
    """Validate the slot values, then write key/value into the caches in place."""
    if key.dim() == 4:
        plan = _compress_plan(op, key, key_cache, slot_mapping, compress_lens,
                              compress_seq_offsets, seq_lens)
        _apply_compress(plan, key, key_cache)
        _apply_compress(plan, value, value_cache)
        return
    slots, key, value = checked_token_slots(op, key, value, key_cache, slot_mapping, cache_mode)
    write_tokens(key, value, key_cache, value_cache, slots, cache_mode)


def checked_token_slots(op, key, value, key_cache, slot_mapping, cache_mode):
    """Scenarios 1-2: ``(slots, key, value)`` without the tokens whose slot is negative (they
    are skipped); IndexError for a slot past the cache."""
    nz = cache_mode == "PA_NZ"
    total = key_cache.shape[0] * key_cache.shape[-2 if nz else 1]
    slots = slot_mapping             # int32 or int64: both index directly
    lo, hi = (int(v) for v in torch.aminmax(slots))
    if hi >= total:
        bad = int((slots >= total).nonzero()[0, 0])
        checks.expect(False, op, "slot_mapping",
                      f"values < num_blocks * block_size = {total} (a negative slot skips its "
                      "token)", f"{int(slots[bad])} at position {bad}", IndexError)
    if lo < 0:
        keep = (slots >= 0).nonzero().squeeze(1)
        slots, key, value = slots[keep], key[keep], value[keep]
    return slots, key, value


def write_tokens(key, value, key_cache, value_cache, slots, cache_mode) -> None:
    """Scenarios 1-2: token ``i`` of key/value to slot ``slots[i]`` of the caches."""
    write = write_nz if cache_mode == "PA_NZ" else write_nd
    write(key_cache, slots, key)
    write(value_cache, slots, value)


def _compress_plan(op, key, key_cache, slot_mapping, compress_lens, compress_seq_offsets,
                   seq_lens) -> dict:
    """Where every token of scenario 3 goes, checked against the cache before any write.

    Per (batch b, head h) run ``p = b * num_head + h`` starting at ``slot = slot_mapping[b, h]``
    (runs with a negative slot are skipped), with ``L = seq_lens[b]``, ``w = compress_lens[b, h]``:

    * no ``compress_seq_offsets`` ("alibi"): the last ``w`` tokens of the sequence,
      ``key[b, L - w + k, h]`` for ``k < min(w, S)``, go to ``slot + k`` (positions whose
      source would precede the sequence are left alone);
    * with ``o = compress_seq_offsets[p]`` ("rope"): ``o == -1`` copies the ``L`` tokens to
      ``slot .. slot + L - 1``; otherwise tokens ``[0, o)`` go to ``slot + k``, the mean of the
      window ``[o, min(o + w, S))`` to ``slot + o``, and the tokens ``[o + w, L)`` follow right
      after it.
    """
    batch, seq, heads, _ = key.shape
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1]
    total = num_blocks * block_size
    dev = key.device
    slot = slot_mapping.reshape(-1).to(torch.int64)
    win = compress_lens.reshape(-1).to(torch.int64)
    lens = seq_lens.reshape(-1).to(torch.int64)
    expect_in_range(lens, 0, seq + 1, op, "seq_lens", "values",
                    f" (at most key's seq_len dim, {seq})")
    expect_nonnegative(win, op, "compress_lens")
    length = lens.repeat_interleave(heads)
    kept = int((length - win).sum())
    checks.expect(kept <= total, op, "seq_lens and compress_lens",
                  f"sum(seq_lens[b] - compress_lens[b, h]) <= num_blocks * block_size ({total})",
                  kept, ValueError)
    runs = torch.arange(batch * heads, device=dev)
    active = (slot >= 0)[:, None]
    k = torch.arange(seq, device=dev)[None, :]
    pieces = []          # (valid mask, source token, destination slot), each [runs, seq]
    means = None
    if compress_seq_offsets is None:
        src = length[:, None] - win[:, None] + k
        pieces.append((active & (k < win[:, None]) & (src >= 0), src, slot[:, None] + k))
    else:
        off = compress_seq_offsets.reshape(-1).to(torch.int64)
        expect_in_range(off, -1, seq + 1, op, "compress_seq_offsets", "values",
                        f" (-1 for no compression, else at most key's seq_len dim, {seq})")
        plain = off < 0
        prefix = torch.where(plain, length, torch.clamp(off, max=seq))
        end = torch.clamp(off + win, max=seq)
        has_mean = ~plain & (end > off)
        tail = torch.where(plain, 0, torch.clamp(length - win - off, min=0))
        first_tail = slot + off + has_mean.to(torch.int64)
        pieces.append((active & (k < prefix[:, None]), k.expand(batch * heads, seq),
                       slot[:, None] + k))
        pieces.append((active & (k < tail[:, None]), (off + win)[:, None] + k,
                       first_tail[:, None] + k))
        pick = (active[:, 0] & has_mean).nonzero().squeeze(1)
        means = {"runs": pick, "start": off[pick], "stop": end[pick], "dst": (slot + off)[pick]}
    mask = torch.cat([m for m, _, _ in pieces], 1)
    src = torch.cat([s for _, s, _ in pieces], 1)[mask]
    dst = torch.cat([d for _, _, d in pieces], 1)[mask]
    run = runs[:, None].expand(mask.shape)[mask]
    highest = [int(dst.max())] if dst.numel() else []
    if means is not None and means["dst"].numel():
        highest.append(int(means["dst"].max()))
    if highest and max(highest) >= total:
        checks.expect(False, op, "slot_mapping",
                      f"runs of slots that end below num_blocks * block_size = {total}",
                      f"a write to slot {max(highest)}", IndexError)
    return {"batch": torch.div(run, heads, rounding_mode="floor"), "head": run % heads,
            "token": src, "dst": dst, "means": means, "heads": heads}


def _mean_dtypes(dtype):
    """(accumulation dtype, rounding) of the kernel's window mean for a cache dtype."""
    if dtype.is_floating_point:
        return torch.float32, None
    if dtype in (torch.uint8, torch.uint16, torch.uint32):
        return torch.int64, "floor"
    return (torch.int32 if dtype == torch.int32 else torch.int64), "trunc"


def _window_mean(x, batch, head, start, stop):
    """Sequential sum of x[b, start:stop, h] in the kernel's accumulator, then the division."""
    acc_dtype, rounding = _mean_dtypes(x.dtype)
    count = stop - start
    acc = torch.zeros((batch.numel(), x.shape[-1]), dtype=acc_dtype, device=x.device)
    for j in range(int(count.max())):
        take = (j < count)[:, None]
        token = torch.clamp(start + j, max=x.shape[1] - 1)
        row = bitwise(x)[batch, token, head].view(x.dtype)
        acc = torch.where(take, acc + row.to(acc_dtype), acc)
    if rounding is None:
        return (acc / count[:, None].to(acc_dtype)).to(x.dtype)
    if x.dtype == torch.uint32:
        acc = acc & 0xFFFFFFFF          # the kernel sums in uint32
    mean = torch.div(acc, count[:, None].to(acc_dtype), rounding_mode=rounding)
    # Keep the low bits of the narrow type (a wrapping cast, as the kernel's packing does).
    width = x.dtype.itemsize * 8
    low = mean.to(torch.int64) & ((1 << width) - 1)
    signed = (low ^ (1 << (width - 1))) - (1 << (width - 1))
    return signed.to(bitwise(x).dtype).view(x.dtype)


def _apply_compress(plan, x, cache) -> None:
    block_size = cache.shape[1]
    dst = bitwise(cache)
    if plan["dst"].numel():
        blocks, offsets = split_slots(plan["dst"], block_size)
        dst[blocks, offsets, 0] = bitwise(x)[plan["batch"], plan["token"], plan["head"]]
    means = plan["means"]
    if means is not None and means["dst"].numel():
        run = means["runs"]
        heads = plan["heads"]
        rows = _window_mean(x, torch.div(run, heads, rounding_mode="floor"), run % heads,
                            means["start"], means["stop"])
        blocks, offsets = split_slots(means["dst"], block_size)
        dst[blocks, offsets, 0] = bitwise(rows)


# -- registration ----------------------------------------------------------------------------

def scatter_pa_kv_cache_reference(key, value, key_cache, value_cache, slot_mapping, *,
                                  compress_lens=None, compress_seq_offsets=None, seq_lens=None,
                                  cache_mode="PA_NZ"):
    scatter_into(OP, key, value, key_cache, value_cache, slot_mapping, compress_lens,
                 compress_seq_offsets, seq_lens, cache_mode)


def _inplace_fake(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                  compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    return None


def scatter_pa_kv_cache_functional_reference(key, value, key_cache, value_cache, slot_mapping, *,
                                             compress_lens=None, compress_seq_offsets=None,
                                             seq_lens=None, cache_mode="PA_NZ"):
    # op-plugin clones both caches with MemoryFormat::Contiguous, then runs the in-place kernel.
    key_out = key_cache.clone(memory_format=torch.contiguous_format)
    value_out = value_cache.clone(memory_format=torch.contiguous_format)
    scatter_into(FUNCTIONAL_OP, key, value, key_out, value_out, slot_mapping, compress_lens,
                 compress_seq_offsets, seq_lens, cache_mode)
    return key_out, value_out


def _functional_fake(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                     compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    return key_cache.new_empty(key_cache.shape), value_cache.new_empty(value_cache.shape)


scatter_pa_kv_cache_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_scatter_pa_kv_cache,
                               reference=scatter_pa_kv_cache_reference, fake=_inplace_fake,
                               metadata_check=True, info=OpInfo(api="torch_npu"))
scatter_pa_kv_cache_op.forbid_autograd("npu_scatter_pa_kv_cache is an inference cache write "
                                       "(no backward in op-plugin's derivatives.yaml)")

# The compiled provider.  Decode-sized writes are dominated by per-op overhead; Inductor turns
# the two index_puts into one loop.  Slot values are still checked eagerly first
# (data-dependent, and errors must come before any write); calls that skip tokens (negative
# slots) stay eager.


def _write_key(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
               compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    return (cache_mode == "PA_NZ", key.dtype, value.dtype, key.device.type, key_cache.dim())


_compiled_write = compiled.CompiledProvider(write_tokens, key=_write_key)


def _compiled_scatter(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                      compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    slots, kept_key, kept_value = checked_token_slots(OP, key, value, key_cache, slot_mapping,
                                                      cache_mode)
    if slots is not slot_mapping:
        write_tokens(kept_key, kept_value, key_cache, value_cache, slots, cache_mode)
        return
    # The compiled code gets integer views (made here: Inductor would write a dtype view of a
    # mutated input back with a value conversion), so it copies bits, NaN payloads kept.
    key_words, key_cache_words = as_words(key, key_cache)
    value_words, value_cache_words = as_words(value, value_cache)
    _compiled_write.run_as(_write_key(key, value, key_cache, value_cache, slot_mapping,
                                      cache_mode=cache_mode),
                           key_words, value_words, key_cache_words, value_cache_words, slots,
                           cache_mode)


def _compiled_supports(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                       compress_seq_offsets=None, seq_lens=None, cache_mode="PA_NZ"):
    if key.dim() == 4:
        return "scenario 3 (4-D key) runs the reference"
    return _compiled_write.supports(key, value, key_cache, value_cache, slot_mapping,
                                    cache_mode=cache_mode)


scatter_pa_kv_cache_op.add_provider(compiled.CompiledProvider.name, _compiled_scatter,
                                    _compiled_supports)

scatter_pa_kv_cache_functional_op = NpuOp(
    FUNCTIONAL_SCHEMA, namespace=TORCH_NPU_NS, check=check_scatter_pa_kv_cache_functional,
    reference=scatter_pa_kv_cache_functional_reference, fake=_functional_fake,
    metadata_check=True, info=OpInfo(api="torch_npu"))
scatter_pa_kv_cache_functional_op.forbid_autograd(
    "npu_scatter_pa_kv_cache_functional has no backward (none in derivatives.yaml)")


_DOC_COMMON = """
    Scenarios (seed 004; told apart by the arguments)::

        1  key [T, N, Dk], value [T, N, Dv], cache_mode 'PA_NZ' (default):
           key_cache [nb, N*Dk//ld, bs, ld] or [nb, N, Dk//ld, bs, ld]  (ld = 32 // element size)
           key_cache[s // bs, c, s % bs, :] = key[t].reshape(-1)[c*ld:(c+1)*ld]
        2  key [T, N, Dk], cache_mode None or 'Norm':
           key_cache [nb, bs, N, Dk];  key_cache[s // bs, s % bs] = key[t]
        3  key [B, S, N, Dk], caches [nb, bs, 1, D], slot_mapping/compress_lens [B, N],
           seq_lens [B], compress_seq_offsets [B*N] (optional): per (b, h) a run of slots from
           slot_mapping[b, h]; without offsets the last compress_lens[b, h] tokens of the
           sequence; with offset o: tokens [0, o), then the mean of [o, o + w), then the rest
           ([o + w, seq_lens[b])); o == -1 copies the whole sequence

    with ``s = slot_mapping[t]`` for token ``t`` (value and value_cache alike).  A negative
    slot skips its token (its run in scenario 3).

    Parameters
    ----------
    key, value : Tensor
        3-D or 4-D (both the same).  float16, float32, bfloat16, int8, uint8, int16, uint16,
        int32, uint32, float8_e5m2 or float8_e4m3fn (hifloat8 travels as uint8); A2/A3 take
        float16, bfloat16 and int8 only.  Non-contiguous tensors are fine.
    key_cache, value_cache : Tensor
        The caches, same dtype as key (with 'PA_NZ' each cache matches its own input, and key
        and value may differ, as the aclnn doc allows).  Same num_blocks and block_size.
    slot_mapping : Tensor
        int32 or int64: ``[T]`` (scenarios 1-2) or ``[B, N]`` (scenario 3).  Values below
        ``num_blocks * block_size``; a negative value skips.  No repeats (the NPU does not
        guarantee the result then; neither do we).
    compress_lens, compress_seq_offsets, seq_lens : Tensor, optional
        slot_mapping's dtype.  Required (compress_lens, seq_lens) for 4-D key; accepted and
        unused for 3-D key (torch_npu passes scatter_mode "None", so the kernel ignores them).
    cache_mode : {'PA_NZ', 'Norm', None}
        Cache layout for 3-D key (ignored for 4-D key, whose caches are ND).

    Constraints
    -----------
    No empty tensors; key/value agree in their leading dims (2 for 3-D, 3 for 4-D); PA_NZ head
    sizes are multiples of 32 bytes and block_size < 65535; scenario 3 needs seq_lens <= S
    and ``sum(seq_lens[b] - compress_lens[b, h]) <= num_blocks * block_size``.  Slot values
    are checked before anything is written (IndexError); the NPU does not check them.  Strict
    mode: A2/A3 (float16/bfloat16/int8, scenarios 1-2 only: the aclnn doc lists scenario 3
    for the 950 only; int8 value needs int8 key) and the 950 (every dtype).

    Notes
    -----
    Sources: seed 004 and op-plugin
    ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_scatter_pa_kv_cache.md``;
    op-plugin ``test/test_custom_ops/test_scatter_pa_kv_cache.py`` (the NZ and ND goldens,
    negative slots skipped); hicann/ops-transformer ``attention/scatter_pa_kv_cache``
    (``docs/aclnnScatterPaKvCache.md``: ld = 32 // element size, 5-D NZ caches, dtypes per
    product; ``op_host/scatter_pa_kv_cache_tiling*.cpp``: 4-D key runs the "rope" template with
    compress_seq_offsets and the "alibi" one without; ``op_kernel/arch35/*_fully_load.h``: the
    window mean sums in float32 (int32 for int8/int16, uint32 for uint8/uint16), in token order,
    divides by the window length and rounds half to even).  Scenario 3 follows the CANN
    Rope/Alibi goldens (``tests/st/.../executor_aclnnScatterPaKvCache.py``) where the arch35
    kernel differs: the tokens after the window are ``[o + w, L)`` (the kernel re-reads from
    token 0), ``o == -1`` copies the sequence, and a negative slot skips the whole run.
    Integer window means divide with truncation (unsigned: floor); uint8 data holding hifloat8
    is averaged as integers, not as hifloat8.
"""


def npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *,
                            compress_lens=None, compress_seq_offsets=None, seq_lens=None,
                            cache_mode="PA_NZ"):
    scatter_pa_kv_cache_op(key, value, key_cache, value_cache, slot_mapping,
                           compress_lens=compress_lens,
                           compress_seq_offsets=compress_seq_offsets,
                           seq_lens=seq_lens, cache_mode=cache_mode)


def npu_scatter_pa_kv_cache_functional(key, value, key_cache, value_cache, slot_mapping, *,
                                       compress_lens=None, compress_seq_offsets=None,
                                       seq_lens=None, cache_mode="PA_NZ"):
    return scatter_pa_kv_cache_functional_op(
        key, value, key_cache, value_cache, slot_mapping, compress_lens=compress_lens,
        compress_seq_offsets=compress_seq_offsets, seq_lens=seq_lens, cache_mode=cache_mode)


npu_scatter_pa_kv_cache.__doc__ = """Write key/value tokens into paged KV caches in place
    (``torch_npu.npu_scatter_pa_kv_cache``).
""" + _DOC_COMMON + """
    Returns
    -------
    None
        key_cache and value_cache are updated in place; a failed call leaves both untouched.
        The cost follows the tokens written, not the cache size.

    Examples
    --------
    >>> kc = torch.zeros(2, 4, 1, 8); vc = torch.zeros(2, 4, 1, 8)       # ND: nb=2, bs=4
    >>> k = torch.ones(3, 1, 8); v = torch.ones(3, 1, 8)
    >>> npu_anywhere.npu_scatter_pa_kv_cache(k, v, kc, vc, torch.tensor([5, -1, 0]),
    ...                                      cache_mode="Norm")
    >>> kc[:, :, 0, 0]
    tensor([[1., 0., 0., 0.],
            [0., 1., 0., 0.]])
"""

npu_scatter_pa_kv_cache_functional.__doc__ = """Out-of-place :func:`npu_scatter_pa_kv_cache`:
    returns new ``(key_cache, value_cache)`` (contiguous, as op-plugin clones them with
    MemoryFormat::Contiguous) and leaves the inputs untouched.  Not exposed as
    ``torch_npu.<name>`` by torch_npu (op-plugin's yaml has no ``exposed``); call it as
    ``torch.ops.npu.npu_scatter_pa_kv_cache_functional``.
""" + _DOC_COMMON


TORCH_NPU_FUNCTIONS = {"npu_scatter_pa_kv_cache": npu_scatter_pa_kv_cache}
