"""npu_scatter_pa_kv_cache (in place) and npu_scatter_pa_kv_cache_functional against goldens
written from the documentation.

Spec (seed 004; op-plugin test_scatter_pa_kv_cache.py; aclnnScatterPaKvCache doc)::

    slot s = slot_mapping[i];  block = s // block_size;  offset = s % block_size;  s < 0: skip
    ND   ('Norm'/None): key_cache[block][offset] = key[i]
    NZ   ('PA_NZ'):     token = key[i].reshape(num_head * head_size)
                        key_cache[block][c][offset][:] = token[c * ld : (c + 1) * ld]
                        ld = 32 // element size; 5-D caches: [nb, N, D // ld, bs, ld]
    4-D key: per (b, h) a run of slots from slot_mapping[b, h] (CANN Alibi/Rope goldens):
        no offsets: the last compress_lens[b, h] tokens of seq_lens[b]
        offset o:   tokens [0, o), mean(tokens [o, o + w)), tokens [o + w, L); o == -1: all L

The goldens below are Python loops over tokens; every cache starts filled with a sentinel so
that every slot the call does not name is checked unchanged, bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_helpers import bits  # noqa: E402
from npu_anywhere.ops.cache.paged import nd_to_nz, nz_to_nd
from npu_anywhere.ops.cache.scatter_pa_kv_cache import scatter_pa_kv_cache_reference

OP = "npu_scatter_pa_kv_cache: expected"
FOP = "npu_scatter_pa_kv_cache_functional: expected"
ALL_DTYPES = [torch.float16, torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.uint16, torch.int32, torch.uint32, torch.float8_e5m2, torch.float8_e4m3fn]
def assert_bits_equal(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(bits(actual.contiguous()), bits(expected.contiguous()))


def rand(shape, dtype, gen=None):
    """Distinct-looking values of any dtype, built from random bytes (NaN payloads included for
    the float dtypes: the op must copy bits, not values)."""
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def sentinel(shape, dtype):
    """A cache full of one bit pattern (0x5A bytes) the random inputs are unlikely to repeat."""
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    return torch.full((n,), 0x5A, dtype=torch.uint8).view(dtype).reshape(shape)


# -- goldens -----------------------------------------------------------------------------------

def golden_nd(x, cache, slots):
    out = cache.clone()
    bs = cache.shape[1]
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        bits(out)[s // bs][s % bs] = bits(x[i])
    return out


def golden_nz(x, cache, slots):
    out = cache.clone()
    bs, ld = cache.shape[-2], cache.shape[-1]
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        token = bits(x[i]).reshape(-1)
        if cache.dim() == 4:
            for c in range(cache.shape[1]):
                bits(out)[s // bs][c][s % bs][:] = token[c * ld:(c + 1) * ld]
        else:
            per_head = x.shape[2] // ld
            for h in range(cache.shape[1]):
                for c in range(per_head):
                    start = h * x.shape[2] + c * ld
                    bits(out)[s // bs][h][c][s % bs][:] = token[start:start + ld]
    return out


def golden_window_mean(rows):
    """The kernel's mean of a window of token rows: float32 (float types) or integer sums in
    token order, divided by the count; rounded half to even / truncated."""
    dtype = rows[0].dtype
    if dtype.is_floating_point:
        acc = torch.zeros(rows[0].shape, dtype=torch.float32)
        for r in rows:
            acc = acc + r.to(torch.float32)
        return (acc / torch.tensor(float(len(rows)), dtype=torch.float32)).to(dtype)
    values = [[int(v) for v in r.to(torch.int64).tolist()] for r in rows]
    out = []
    for col in zip(*values):
        total = sum(col)
        q = abs(total) // len(col)
        out.append(q if total >= 0 else -q)             # C division: toward zero
    return torch.tensor(out, dtype=torch.int64).to(dtype)


def golden_compress(x, cache, slots, comp_lens, seq_lens, offsets):
    out = cache.clone()
    bs = cache.shape[1]
    batch, seq, heads, _ = x.shape

    def put(slot, row):
        bits(out)[slot // bs][slot % bs][0] = bits(row)

    for b in range(batch):
        length = int(seq_lens[b])
        for h in range(heads):
            slot, w = int(slots[b, h]), int(comp_lens[b, h])
            if slot < 0:
                continue
            if offsets is None:
                for j in range(min(w, seq)):
                    t = length - w + j
                    if t >= 0:
                        put(slot + j, x[b, t, h])
                continue
            o = int(offsets[b * heads + h])
            cur = slot
            if o == -1:
                for t in range(length):
                    put(cur, x[b, t, h])
                    cur += 1
                continue
            for t in range(min(o, seq)):
                put(cur, x[b, t, h])
                cur += 1
            window = [x[b, t, h] for t in range(o, min(o + w, seq))]
            if window:
                put(cur, golden_window_mean(window))
                cur += 1
            for t in range(o + w, length):
                put(cur, x[b, t, h])
                cur += 1
    return out


# -- inputs ------------------------------------------------------------------------------------

def nd_inputs(dtype, *, tokens=7, heads=3, dk=5, dv=6, nb=4, bs=3, slot_dtype=torch.int32,
              skip=(1, 4), vdtype=None):
    gen = torch.Generator().manual_seed(tokens * 31 + dk)
    vdtype = vdtype or dtype
    key, value = rand((tokens, heads, dk), dtype, gen), rand((tokens, heads, dv), vdtype, gen)
    slots = torch.randperm(nb * bs, generator=gen)[:tokens]
    for i in skip:
        if i < tokens:
            slots[i] = -1 - i
    return (key, value, sentinel((nb, bs, heads, dk), dtype),
            sentinel((nb, bs, heads, dv), vdtype), slots.to(slot_dtype))


def nz_inputs(dtype, *, vdtype=None, five=False, tokens=6, heads=2, nb=3, bs=5, mult=(2, 1)):
    vdtype = vdtype or dtype
    ldk, ldv = 32 // dtype.itemsize, 32 // vdtype.itemsize
    dk, dv = mult[0] * ldk, mult[1] * ldv
    gen = torch.Generator().manual_seed(7)
    key, value = rand((tokens, heads, dk), dtype, gen), rand((tokens, heads, dv), vdtype, gen)

    def cache(d, ld, t):
        return sentinel((nb, heads, d // ld, bs, ld) if five else (nb, heads * d // ld, bs, ld), t)

    slots = torch.randperm(nb * bs, generator=gen)[:tokens]
    slots[2] = -1
    return key, value, cache(dk, ldk, dtype), cache(dv, ldv, vdtype), slots.to(torch.int64)


def finite(shape, dtype, gen):
    """Small finite values (for the window means, which do arithmetic)."""
    ints = torch.randint(-20, 21, shape, generator=gen)
    if dtype.is_floating_point:
        return (ints.to(torch.float32) / 7).to(dtype)
    if dtype in (torch.uint8, torch.uint16, torch.uint32):
        return (ints + 20).to(dtype)
    return ints.to(dtype)


def compress_inputs(dtype, *, offsets=True):
    gen = torch.Generator().manual_seed(3)
    batch, seq, heads, dk, dv, nb, bs = 3, 6, 2, 4, 3, 8, 5
    key, value = finite((batch, seq, heads, dk), dtype, gen), finite((batch, seq, heads, dv),
                                                                       dtype, gen)
    seq_lens = torch.tensor([6, 4, 5])
    comp = torch.tensor([[3, 0], [2, 4], [5, 1]])
    slots = torch.tensor([[0, 8], [15, -1], [22, 30]])
    offs = torch.tensor([1, 2, -1, 0, 0, 3]) if offsets else None
    return (key, value, sentinel((nb, bs, 1, dk), dtype), sentinel((nb, bs, 1, dv), dtype),
            slots.to(torch.int32), comp.to(torch.int32), seq_lens.to(torch.int32),
            None if offs is None else offs.to(torch.int32))


# -- scenario 2: ND ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("mode", ["Norm", None])
def test_nd_matches_golden(dtype, slot_dtype, mode):
    key, value, kc, vc, slots = nd_inputs(dtype, slot_dtype=slot_dtype)
    want_k, want_v = golden_nd(key, kc, slots), golden_nd(value, vc, slots)
    key0, value0, slots0 = key.clone(), value.clone(), slots.clone()
    assert na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode=mode) is None
    assert_bits_equal(kc, want_k)
    assert_bits_equal(vc, want_v)
    assert_bits_equal(key, key0) and assert_bits_equal(value, value0)
    assert torch.equal(slots, slots0)


def test_nd_one_token_every_slot_of_one_block():
    key, value, kc, vc, slots = nd_inputs(torch.bfloat16, tokens=1, skip=())
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
    assert_bits_equal(kc, golden_nd(key, sentinel(kc.shape, kc.dtype), slots))


def test_nd_all_slots_skipped_changes_nothing():
    key, value, kc, vc, _ = nd_inputs(torch.float16)
    slots = torch.full((key.shape[0],), -1, dtype=torch.int32)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
    assert_bits_equal(kc, sentinel(kc.shape, kc.dtype))
    assert_bits_equal(vc, sentinel(vc.shape, vc.dtype))


def test_nd_non_contiguous_inputs_and_caches():
    key, value, kc, vc, slots = nd_inputs(torch.float16, dk=4, dv=4)
    # key/value transposed views; caches as strided slices of a wider buffer
    key_nc = key.transpose(0, 1).contiguous().transpose(0, 1)
    big = sentinel(kc.shape[:3] + (9,), kc.dtype)
    kc_nc = big[..., 2:6]
    vbig = sentinel(vc.shape[:2] + (vc.shape[2] * 2,) + vc.shape[3:], vc.dtype)
    vc_nc = vbig[:, :, ::2]
    assert not key_nc.is_contiguous() and not kc_nc.is_contiguous() and not vc_nc.is_contiguous()
    na.npu_scatter_pa_kv_cache(key_nc, value, kc_nc, vc_nc, slots[::1], cache_mode="Norm")
    assert_bits_equal(kc_nc, golden_nd(key, kc, slots))
    assert_bits_equal(vc_nc, golden_nd(value, vc, slots))
    # the rest of the wide buffers is untouched
    assert_bits_equal(big[..., :2], sentinel(big[..., :2].shape, big.dtype))
    assert_bits_equal(vbig[:, :, 1::2], sentinel(vbig[:, :, 1::2].shape, vbig.dtype))


def test_vllm_style_kv_cache_views():
    """vllm-ascend passes kv_cache[0] / kv_cache[1] of one [2, nb, bs, N, D] tensor."""
    key, value, kc, _, slots = nd_inputs(torch.bfloat16, dk=4, dv=4)
    kv = torch.stack((sentinel(kc.shape, kc.dtype), sentinel(kc.shape, kc.dtype)))
    na.npu_scatter_pa_kv_cache(key=key, value=value, key_cache=kv[0], value_cache=kv[1],
                               slot_mapping=slots, cache_mode="Norm")
    assert_bits_equal(kv[0], golden_nd(key, kc, slots))
    assert_bits_equal(kv[1], golden_nd(value, kc, slots))


# -- scenario 1: NZ ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("five", [False, True], ids=["4d", "5d"])
def test_nz_matches_golden(dtype, five):
    key, value, kc, vc, slots = nz_inputs(dtype, five=five)
    want_k, want_v = golden_nz(key, kc, slots), golden_nz(value, vc, slots)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots)           # default cache_mode PA_NZ
    assert_bits_equal(kc, want_k)
    assert_bits_equal(vc, want_v)


@pytest.mark.parametrize("kdtype,vdtype", [(torch.float16, torch.int8),
                                           (torch.int8, torch.bfloat16),
                                           (torch.float32, torch.float8_e4m3fn)], ids=str)
def test_nz_key_and_value_of_different_dtypes(kdtype, vdtype):
    key, value, kc, vc, slots = nz_inputs(kdtype, vdtype=vdtype, mult=(1, 2))
    want_k, want_v = golden_nz(key, kc, slots), golden_nz(value, vc, slots)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="PA_NZ")
    assert_bits_equal(kc, want_k)
    assert_bits_equal(vc, want_v)


@pytest.mark.parametrize("dtype,last", [(torch.float16, 16), (torch.bfloat16, 16),
                                        (torch.int8, 32), (torch.float8_e5m2, 32),
                                        (torch.float32, 8)], ids=str)
def test_nz_last_dim_is_32_bytes(dtype, last):
    key, value, kc, vc, slots = nz_inputs(dtype)
    assert kc.shape[-1] == last and vc.shape[-1] == last
    # a 4-D cache with the 2-byte row width is rejected for a 1-byte dtype and vice versa
    other = 16 if last != 16 else 32
    bad = sentinel(kc.shape[:-1] + (other,), dtype)
    with pytest.raises(RuntimeError, match=f"{OP} key_cache an NZ cache of shape"):
        na.npu_scatter_pa_kv_cache(key, value, bad, vc, slots)


def test_nz_equals_nd_through_the_layout_helpers():
    """The two layouts hold the same tokens: nz_to_nd(NZ result) == ND result."""
    key, value, kc, vc, slots = nd_inputs(torch.float16, dk=16, dv=32, heads=2)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
    kz, vz = nd_to_nz(sentinel(kc.shape, kc.dtype)), nd_to_nz(sentinel(vc.shape, vc.dtype),
                                                               per_head=True)
    na.npu_scatter_pa_kv_cache(key, value, kz, vz, slots, cache_mode="PA_NZ")
    assert_bits_equal(nz_to_nd(kz, 2), kc)
    assert_bits_equal(nz_to_nd(vz, 2), vc)


# -- scenario 3: 4-D key with compression ------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("offsets", [True, False], ids=["rope", "alibi"])
def test_compress_matches_golden(dtype, offsets):
    key, value, kc, vc, slots, comp, lens, offs = compress_inputs(dtype, offsets=offsets)
    want_k = golden_compress(key, kc, slots, comp, lens, offs)
    want_v = golden_compress(value, vc, slots, comp, lens, offs)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp, seq_lens=lens,
                               compress_seq_offsets=offs, cache_mode="Norm")
    assert_bits_equal(kc, want_k)
    assert_bits_equal(vc, want_v)


def test_compress_mean_is_float32_sum_rounded_half_to_even():
    """Window means by hand: (1 + (1 + 2^-10)) / 2 = 1 + 2^-11 is a tie between two float16
    neighbours and rounds to even (1.0); the mean of 1, 1 + 2^-10, 1 + 2^-10 is
    1 + 2^-10 * 2/3, whose nearest float16 is 1 + 2^-10 (a float16 running sum would give 1.0)."""
    up = 1.0 + 2.0 ** -10
    key = torch.zeros(1, 3, 2, 16, dtype=torch.float16)
    key[0, :, 0] = torch.tensor([1.0, up, 5.0])[:, None]
    key[0, :, 1] = torch.tensor([1.0, up, up])[:, None]
    kc, vc = sentinel((2, 4, 1, 16), torch.float16), sentinel((2, 4, 1, 16), torch.float16)
    na.npu_scatter_pa_kv_cache(key, key.clone(), kc, vc, torch.tensor([[0, 4]], dtype=torch.int32),
                               compress_lens=torch.tensor([[2, 3]], dtype=torch.int32),
                               seq_lens=torch.tensor([3], dtype=torch.int32),
                               compress_seq_offsets=torch.tensor([0, 0], dtype=torch.int32))
    expected = sentinel((2, 4, 1, 16), torch.float16)
    expected[0, 0] = 1.0             # mean of head 0's window, a tie rounded to even
    expected[0, 1] = 5.0             # head 0's token after the window
    expected[1, 0] = up              # mean of head 1's window
    assert_bits_equal(kc, expected)
    assert_bits_equal(vc, expected)


def test_compress_ignores_cache_mode():
    args = compress_inputs(torch.bfloat16)
    key, value, kc, vc, slots, comp, lens, offs = args
    kc2, vc2 = kc.clone(), vc.clone()
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp, seq_lens=lens,
                               compress_seq_offsets=offs)                 # default 'PA_NZ'
    na.npu_scatter_pa_kv_cache(key, value, kc2, vc2, slots, compress_lens=comp, seq_lens=lens,
                               compress_seq_offsets=offs, cache_mode="Norm")
    assert_bits_equal(kc, kc2) and assert_bits_equal(vc, vc2)


def test_compress_args_are_ignored_for_3d_key():
    key, value, kc, vc, slots = nd_inputs(torch.float16)
    kc2, vc2 = kc.clone(), vc.clone()
    junk = torch.tensor([9, 9], dtype=torch.int32)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=junk, seq_lens=junk,
                               compress_seq_offsets=junk, cache_mode="Norm")
    na.npu_scatter_pa_kv_cache(key, value, kc2, vc2, slots, cache_mode="Norm")
    assert_bits_equal(kc, kc2)


# -- functional --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["nd", "nz", "compress"])
def test_functional_returns_new_caches_and_leaves_inputs(case):
    if case == "nd":
        key, value, kc, vc, slots = nd_inputs(torch.int8)
        kw = {"cache_mode": "Norm"}
    elif case == "nz":
        key, value, kc, vc, slots = nz_inputs(torch.bfloat16, five=True)
        kw = {}
    else:
        key, value, kc, vc, slots, comp, lens, offs = compress_inputs(torch.float16)
        kw = {"compress_lens": comp, "seq_lens": lens, "compress_seq_offsets": offs}
    kc0, vc0 = kc.clone(), vc.clone()
    out_k, out_v = torch.ops.npu.npu_scatter_pa_kv_cache_functional(key, value, kc, vc, slots,
                                                                     **kw)
    assert_bits_equal(kc, kc0) and assert_bits_equal(vc, vc0)
    na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, **kw)
    assert_bits_equal(out_k, kc) and assert_bits_equal(out_v, vc)
    assert out_k.is_contiguous() and out_v.is_contiguous()
    assert out_k.data_ptr() != kc.data_ptr()


def test_functional_output_is_contiguous_for_strided_caches():
    key, value, kc, vc, slots = nd_inputs(torch.float32, dk=4, dv=4)
    wide = torch.cat((kc, kc), dim=-1)[..., :4]
    out_k, _ = torch.ops.npu.npu_scatter_pa_kv_cache_functional(key, value, wide, vc, slots,
                                                                cache_mode="Norm")
    assert out_k.is_contiguous()
    assert_bits_equal(out_k, golden_nd(key, kc, slots))


# -- the write costs the tokens, not the cache -------------------------------------------------

class _Allocations(TorchDispatchMode):
    """Records the bytes of every new storage an aten op returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves(
            (args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("mode", ["Norm", "PA_NZ"])
def test_in_place_write_never_copies_the_cache(mode):
    tokens, heads, d, nb, bs = 4, 2, 16, 256, 16
    key = torch.randn(tokens, heads, d, dtype=torch.float16)
    if mode == "Norm":
        kc = torch.zeros(nb, bs, heads, d, dtype=torch.float16)
    else:
        kc = torch.zeros(nb, heads * d // 16, bs, 16, dtype=torch.float16)
    vc = kc.clone()
    slots = torch.tensor([3, -1, 4000, 77], dtype=torch.int32)
    # (the mode sees the aten ops of the kernel only when the kernel is called directly)
    with _Allocations() as seen:
        scatter_pa_kv_cache_reference(key, key, kc, vc, slots, cache_mode=mode)
    cache_bytes = kc.untyped_storage().nbytes()
    assert seen.largest < cache_bytes // 64, (seen.largest, cache_bytes)


# -- errors: raise, and change nothing ---------------------------------------------------------

def _untouched(before, *after):
    for b, a in zip(before, after):
        assert_bits_equal(a, b)


@pytest.mark.parametrize("scenario", ["nd", "nz"])
@pytest.mark.parametrize("bad_slot", ["too_large", "last_token_too_large"])
def test_out_of_range_slot_raises_and_writes_nothing(scenario, bad_slot):
    if scenario == "nd":
        key, value, kc, vc, slots = nd_inputs(torch.float16)
        total, kw = kc.shape[0] * kc.shape[1], {"cache_mode": "Norm"}
    else:
        key, value, kc, vc, slots = nz_inputs(torch.float16)
        total, kw = kc.shape[0] * kc.shape[-2], {}
    slots[-1 if bad_slot == "last_token_too_large" else 0] = total
    before = (kc.clone(), vc.clone())
    with pytest.raises(IndexError, match=f"{OP} slot_mapping values < num_blocks \\* block_size "
                       f"= {total}"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, **kw)
    _untouched(before, kc, vc)
    with pytest.raises(IndexError, match=FOP):
        torch.ops.npu.npu_scatter_pa_kv_cache_functional(key, value, kc, vc, slots, **kw)
    _untouched(before, kc, vc)


@pytest.mark.parametrize("change,error,match", [
    ("slot_past_cache", IndexError, "slot_mapping runs of slots that end below"),
    ("seq_lens_too_long", IndexError, "seq_lens values in \\[0, 6\\]"),
    ("negative_compress_len", ValueError, "compress_lens non-negative values"),
    ("offset_below_minus_one", IndexError, "compress_seq_offsets values in \\[-1, 6\\]"),
    ("documented_sum", ValueError, "seq_lens and compress_lens sum"),
])
def test_compress_bad_values_raise_and_write_nothing(change, error, match):
    key, value, kc, vc, slots, comp, lens, offs = compress_inputs(torch.float16)
    if change == "slot_past_cache":
        slots[2, 1] = kc.shape[0] * kc.shape[1] - 2
    elif change == "seq_lens_too_long":
        lens[1] = 7
    elif change == "negative_compress_len":
        comp[2, 0] = -1
    elif change == "offset_below_minus_one":
        offs[4] = -2
    else:
        kc, vc = kc[:1], vc[:1]
        slots = torch.zeros_like(slots)
    before = (kc.clone(), vc.clone())
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp, seq_lens=lens,
                                   compress_seq_offsets=offs)
    _untouched(before, kc, vc)


@pytest.mark.parametrize("change,error,match", [
    ("cache_mode", ValueError, "cache_mode one of"),
    ("key_2d", ValueError, "key a tensor with one of \\[3, 4\\] dims"),
    ("value_4d", ValueError, "value 3 dims like key"),
    ("value_heads", RuntimeError, "value the first two dims of key"),
    ("cache_heads", RuntimeError, "key_cache an ND cache"),
    ("value_cache_blocks", RuntimeError, "value_cache the num_blocks and block_size"),
    ("empty", ValueError, "key a non-empty tensor"),
    ("slots_len", RuntimeError, "slot_mapping shape \\(7,\\)"),
    ("mixed_index_dtypes", TypeError, "seq_lens the same dtype as slot_mapping"),
    ("float64", TypeError, "key dtype in"),
    ("cache_dtype", TypeError, "key_cache the same dtype as key"),
])
def test_bad_metadata_raises(change, error, match):
    key, value, kc, vc, slots = nd_inputs(torch.float16)
    kw = {"cache_mode": "Norm"}
    if change == "cache_mode":
        kw["cache_mode"] = "ND"
    elif change == "key_2d":
        key = key[:, 0]
    elif change == "value_4d":
        value = value[None]
    elif change == "value_heads":
        value = value[:, :2]
    elif change == "cache_heads":
        kc = kc[:, :, :2]
    elif change == "value_cache_blocks":
        vc = vc[:2]
    elif change == "empty":
        key, value, slots = key[:0], value[:0], slots[:0]
    elif change == "slots_len":
        slots = slots[:3]
    elif change == "mixed_index_dtypes":
        kw["seq_lens"] = torch.zeros(2, dtype=torch.int64)
    elif change == "float64":
        key, value = key.double(), value.double()
        kc, vc = kc.double(), vc.double()
    else:
        kc = kc.to(torch.bfloat16)
    before = (kc.clone(), vc.clone())
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, **kw)
    _untouched(before, kc, vc)


def test_nz_constraints():
    key, value, kc, vc, slots = nz_inputs(torch.float16)
    with pytest.raises(ValueError, match=f"{OP} key a head size whose bytes are a multiple of 32"):
        na.npu_scatter_pa_kv_cache(key[..., :8], value, kc, vc, slots)
    big_k = sentinel((1, kc.shape[1], 65535, 16), torch.float16)
    big_v = sentinel((1, vc.shape[1], 65535, 16), torch.float16)
    with pytest.raises(ValueError, match=f"{OP} key_cache a block_size \\(dim -2\\) below 65535"):
        na.npu_scatter_pa_kv_cache(key, value, big_k, big_v, slots)
    # a cache of too few dims names no block size: a clean error, in eager and under FakeTensor
    from torch._subclasses.fake_tensor import FakeTensorMode
    for name, bad in (("key_cache", (torch.tensor(0.0, dtype=torch.float16), vc)),
                      ("value_cache", (kc, vc.flatten(1)))):
        with pytest.raises(RuntimeError, match=f"{OP} {name} a 4-D or 5-D NZ cache") as eager:
            na.npu_scatter_pa_kv_cache(key, value, *bad, slots)
        with FakeTensorMode() as fm, pytest.raises(RuntimeError) as fake:
            na.npu_scatter_pa_kv_cache(*(fm.from_tensor(t) for t in (key, value, *bad, slots)))
        assert str(fake.value) == str(eager.value)


def test_compress_metadata():
    key, value, kc, vc, slots, comp, lens, offs = compress_inputs(torch.float16)
    with pytest.raises(ValueError, match=f"{OP} compress_lens and seq_lens tensors"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp)
    with pytest.raises(RuntimeError, match=f"{OP} compress_seq_offsets shape \\(6,\\)"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp, seq_lens=lens,
                                   compress_seq_offsets=offs[:3])
    with pytest.raises(RuntimeError, match=f"{OP} key_cache a cache \\[num_blocks, block_size, 1"):
        na.npu_scatter_pa_kv_cache(key, value, kc.expand(-1, -1, 2, -1), vc, slots,
                                   compress_lens=comp, seq_lens=lens)
    with pytest.raises(RuntimeError, match=f"{OP} slot_mapping shape \\(3, 2\\)"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots.reshape(-1), compress_lens=comp,
                                   seq_lens=lens)


def test_requires_grad_raises():
    key, value, kc, vc, slots = nd_inputs(torch.float32)
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.npu_scatter_pa_kv_cache(key.requires_grad_(), value, kc, vc, slots, cache_mode="Norm")


# -- strict mode -------------------------------------------------------------------------------

def test_strict_a2_a3():
    for product in ("A2", "A3"):
        with na.strict(product):
            key, value, kc, vc, slots = nd_inputs(torch.bfloat16)
            na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
            key, value, kc, vc, slots = nd_inputs(torch.float32)
            with pytest.raises(TypeError, match=f"{OP} key dtype in .* on {product}"):
                na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
            key, value, kc, vc, slots = nz_inputs(torch.float16, vdtype=torch.int8)
            with pytest.raises(TypeError, match=f"{OP} key int8 when value is int8"):
                na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots)
            key, value, kc, vc, slots, comp, lens, offs = compress_inputs(torch.float16)
            with pytest.raises(ValueError, match=f"{OP} key 3 dims on {product}"):
                na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp,
                                           seq_lens=lens)


def test_strict_950_and_unsupported_products():
    with na.strict("950"):
        key, value, kc, vc, slots = nz_inputs(torch.float8_e4m3fn)
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots)
        key, value, kc, vc, slots, comp, lens, offs = compress_inputs(torch.uint16)
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, compress_lens=comp, seq_lens=lens)
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(RuntimeError, match=f"{OP} a product the op"):
            na.npu_scatter_pa_kv_cache(*nd_inputs(torch.float16), cache_mode="Norm")


# -- FakeTensor and compile --------------------------------------------------------------------

def test_fake_tensor_skips_value_checks_but_not_metadata():
    from torch._subclasses.fake_tensor import FakeTensorMode
    key, value, kc, vc, slots = nd_inputs(torch.float16)
    slots[0] = 10 ** 6                       # a bad value: only the eager call can see it
    mode = FakeTensorMode()
    fk = [mode.from_tensor(t) for t in (key, value, kc, vc, slots)]
    with mode:
        assert torch.ops.npu.npu_scatter_pa_kv_cache(*fk, cache_mode="Norm") is None
        out_k, out_v = torch.ops.npu.npu_scatter_pa_kv_cache_functional(*fk, cache_mode="Norm")
        assert out_k.shape == kc.shape and out_k.is_contiguous()
        with pytest.raises(ValueError, match=f"{OP} cache_mode one of"):
            torch.ops.npu.npu_scatter_pa_kv_cache(*fk, cache_mode="nz")


def test_compiled_decode_step_matches_eager():
    key, value, kc, vc, slots = nd_inputs(torch.float16)

    def step(k, v, kcache, vcache, s):
        na.npu_scatter_pa_kv_cache(k, v, kcache, vcache, s, cache_mode="Norm")
        return kcache.sum(dtype=torch.float32)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    kc2, vc2 = kc.clone(), vc.clone()
    compiled(key, value, kc, vc, slots)
    step(key, value, kc2, vc2, slots)
    assert_bits_equal(kc, kc2) and assert_bits_equal(vc, vc2)


# -- the compiled provider ---------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["Norm", "PA_NZ", "PA_NZ-5d"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8, torch.uint16], ids=str)
def test_compiled_provider_writes_the_same_bits(layout, dtype):
    """Calls without skipped tokens run compiled code (bit copies, NaN payloads kept); calls
    with negative slots and out-of-range slots behave as in the reference."""
    from npu_anywhere import dispatch
    from npu_anywhere.kernels import compiled
    from npu_anywhere.ops.cache import scatter_pa_kv_cache as module

    def inputs(skip):
        if layout == "Norm":
            return nd_inputs(dtype, skip=skip)
        key, value, kc, vc, slots = nz_inputs(dtype, five=layout.endswith("5d"))
        if not skip:
            slots = torch.randperm(kc.shape[0] * kc.shape[-2],
                                   generator=torch.Generator().manual_seed(5))[:key.shape[0]]
        return key, value, kc, vc, slots
    mode = "Norm" if layout == "Norm" else "PA_NZ"
    golden = golden_nd if layout == "Norm" else golden_nz
    torch._dynamo.reset()
    module._compiled_write._compiled.clear()
    with compiled.compiling_after(0), \
            dispatch.use_providers("compiled", op="npu_scatter_pa_kv_cache"):
        for skip in ((), (1, 4), ()):
            key, value, kc, vc, slots = inputs(skip)
            want_k, want_v = golden(key, kc, slots), golden(value, vc, slots)
            na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode=mode)
            assert_bits_equal(kc, want_k)
            assert_bits_equal(vc, want_v)
        assert len(module._compiled_write._compiled) == 1      # the compiled code did run
        key, value, kc, vc, slots = inputs(())
        slots[0] = kc.shape[0] * kc.shape[-2 if mode == "PA_NZ" else 1]
        before = (kc.clone(), vc.clone())
        with pytest.raises(IndexError, match="npu_scatter_pa_kv_cache: expected slot_mapping"):
            na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode=mode)
        assert_bits_equal(kc, before[0]) and assert_bits_equal(vc, before[1])
