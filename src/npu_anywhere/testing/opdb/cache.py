"""Op database entries of the KV-cache / scatter family.

Samples carry valid index values (the ops check them eagerly, which FakeTensor cannot do);
error samples are metadata errors only, so that eager and FakeTensor raise the same words.
Mutated tensors are passed positionally (the generic compile test clones positional args).
The float8 dtypes are tested in tests/ops/cache/ only: opcheck's schema check multiplies
tensors, which PyTorch does not implement for float8 on CPU.
"""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _fill(shape, dtype, *, low=-4, high=5):
    """Random values exactly representable in every dtype used here (small integers / 8)."""
    ints = torch.randint(low, high, shape)
    if dtype == torch.bool:
        return ints > 0
    if dtype.is_floating_point:
        return (ints.to(torch.float32) / 8).to(dtype)
    if dtype in (torch.uint8, torch.uint16, torch.uint32):
        return (ints - low).to(torch.int64).to(dtype)
    return ints.to(dtype)


def _noncontiguous(t):
    """``t``'s values in a tensor whose last dim has stride 2."""
    wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


# -- scatter_update / scatter_update_ -------------------------------------------------------

def _scatter_update_make(dtype=torch.float32, *, axis=-2, index_dims=1, index_dtype=torch.int64,
                         noncontig=False):
    data = _fill((3, 2, 6, 4), dtype)
    if noncontig:
        data = _noncontiguous(data)
    ax = axis % 4
    span = 2
    shape = [2, 2, 6, 4]
    shape[ax] = span
    updates = _fill(tuple(shape), dtype)
    limit = data.shape[ax] - span + 1
    if index_dims == 2:
        indices = torch.stack((torch.tensor([2, 0]), torch.randint(0, limit, (2,))), 1)
    elif index_dims == 0:
        updates = updates[:1]
        indices = torch.tensor(limit - 1)
    else:
        indices = torch.randint(0, limit, (2,))
    return (data, indices.to(index_dtype), updates, axis), {}


def _scatter_update_errors(op):
    return [
        ErrorSample("int64_data", lambda: _bad_dtype_update(), TypeError,
                    f"{op}: expected data dtype in"),
        ErrorSample("axis_zero", lambda: ((_fill((2, 3), torch.float32), torch.tensor([0, 1]),
                                           _fill((2, 3), torch.float32), 0), {}), ValueError,
                    f"{op}: expected axis in"),
        ErrorSample("rank_mismatch", lambda: ((_fill((2, 3, 4), torch.float32),
                                               torch.tensor([0, 1]),
                                               _fill((2, 1), torch.float32), -1), {}),
                    RuntimeError, f"{op}: expected updates 3 dims"),
        ErrorSample("other_dims", lambda: ((_fill((2, 3, 4), torch.float32), torch.tensor([0, 1]),
                                            _fill((2, 2, 1), torch.float32), -1), {}),
                    RuntimeError, f"{op}: expected updates the shape of data"),
        ErrorSample("indices_3d", lambda: ((_fill((2, 3), torch.float32),
                                            torch.zeros(2, 1, 1, dtype=torch.int64),
                                            _fill((2, 1), torch.float32), 1), {}), ValueError,
                    f"{op}: expected indices a tensor with one of"),
        ErrorSample("pairs", lambda: ((_fill((2, 3), torch.float32),
                                       torch.zeros(2, 3, dtype=torch.int64),
                                       _fill((2, 1), torch.float32), 1), {}), RuntimeError,
                    f"{op}: expected indices a second dim of 2"),
        ErrorSample("empty", lambda: ((_fill((2, 3), torch.float32),
                                       torch.zeros(0, dtype=torch.int64),
                                       _fill((0, 1), torch.float32), 1), {}), ValueError,
                    f"{op}: expected indices a non-empty"),
    ]


def _bad_dtype_update():
    return ((torch.zeros(2, 3, dtype=torch.int64), torch.tensor([0, 1]),
             torch.zeros(2, 1, dtype=torch.int64), 1), {})


def _scatter_update_samples() -> None:
    for name in ("scatter_update", "scatter_update_"):
        e = _entry(name)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                      torch.int32, torch.float64):
            e.samples.append(Sample(f"axis-2_{dtype}".replace("torch.", ""),
                                    lambda dtype=dtype: _scatter_update_make(dtype)))
        e.samples += [
            Sample("axis-1_int32_indices", lambda: _scatter_update_make(
                axis=-1, index_dtype=torch.int32)),
            Sample("axis1_pairs", lambda: _scatter_update_make(axis=1, index_dims=2)),
            Sample("axis2_scalar_index", lambda: _scatter_update_make(axis=2, index_dims=0)),
            Sample("noncontiguous_bf16", lambda: _scatter_update_make(torch.bfloat16, axis=-1,
                                                                      noncontig=True)),
        ]
        e.errors += _scatter_update_errors(name)


# -- npu_scatter_nd_update / npu_scatter_nd_update_ -----------------------------------------

def _nd_make(dtype=torch.float32, *, depth=1, index_dtype=torch.int64, lead=(3,), empty=False):
    x = _fill((4, 5, 6), dtype)
    if empty:
        lead = (0,)
    # distinct index tuples, so the result does not depend on the write order
    count = int(torch.tensor(lead).prod())
    flat = torch.randperm(int(torch.tensor(x.shape[:depth]).prod()))[:count]
    cols = []
    for size in reversed(x.shape[:depth]):
        cols.append(flat % size)
        flat = flat // size
    indices = torch.stack(cols[::-1], -1).reshape(lead + (depth,)).to(index_dtype)
    updates = _fill(lead + tuple(x.shape[depth:]), dtype)
    return (x, indices, updates), {}


def _nd_errors(op):
    return [
        ErrorSample("indices_1d", lambda: ((_fill((4, 5), torch.float32),
                                            torch.tensor([1, 2]), _fill((2,), torch.float32)),
                                           {}), ValueError, f"{op}: expected indices at least 2"),
        ErrorSample("depth", lambda: ((_fill((4, 5), torch.float32),
                                       torch.zeros(2, 3, dtype=torch.int64),
                                       _fill((2,), torch.float32)), {}), RuntimeError,
                    f"{op}: expected indices a last dim"),
        ErrorSample("updates_shape", lambda: ((_fill((4, 5, 6), torch.float32),
                                               torch.zeros(3, 2, dtype=torch.int64),
                                               _fill((3, 5), torch.float32)), {}), RuntimeError,
                    f"{op}: expected updates shape"),
        ErrorSample("int32_input", lambda: ((torch.zeros(4, 5, dtype=torch.int32),
                                             torch.zeros(3, 1, dtype=torch.int64),
                                             torch.zeros(3, 5, dtype=torch.int32)), {}),
                    TypeError, f"{op}: expected input dtype in"),
        ErrorSample("float_indices", lambda: ((_fill((4, 5), torch.float32),
                                               torch.zeros(3, 1), _fill((3, 5), torch.float32)),
                                              {}), TypeError, f"{op}: expected indices dtype in"),
    ]


def _scatter_nd_update_samples() -> None:
    for name in ("npu_scatter_nd_update", "npu_scatter_nd_update_"):
        e = _entry(name)
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.bool, torch.int64,
                      torch.int8, torch.float64):
            e.samples.append(Sample(f"depth1_{dtype}".replace("torch.", ""),
                                    lambda dtype=dtype: _nd_make(dtype)))
        e.samples += [
            Sample("depth2_int32", lambda: _nd_make(depth=2, index_dtype=torch.int32)),
            Sample("depth3_2d_lead", lambda: _nd_make(depth=3, lead=(2, 3))),
            Sample("empty_indices", lambda: _nd_make(empty=True)),
        ]
        e.errors += _nd_errors(name)


# -- npu_scatter ----------------------------------------------------------------------------

def _npu_scatter_make(dtype=torch.float32, dim=1, empty=False):
    x = _fill((3, 4, 5), dtype)
    d = dim % 3
    shape = tuple(s for i, s in enumerate(x.shape) if i != d)
    if empty:
        return (x, torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=dtype), dim), {}
    indices = torch.randint(0, x.shape[d], shape, dtype=torch.int32)
    return (x, indices, _fill(shape, dtype), dim), {}


def _npu_scatter_samples() -> None:
    e = _entry("npu_scatter")
    for dtype in (torch.float32, torch.float16, torch.int32, torch.int8, torch.float64):
        e.samples.append(Sample(f"dim1_{dtype}".replace("torch.", ""),
                                lambda dtype=dtype: _npu_scatter_make(dtype)))
    e.samples += [Sample("dim0", lambda: _npu_scatter_make(dim=0)),
                  Sample("dim-1", lambda: _npu_scatter_make(dim=-1)),
                  Sample("empty_indices", lambda: _npu_scatter_make(empty=True))]
    e.errors += [
        ErrorSample("int64_indices", lambda: ((_fill((2, 3), torch.float32),
                                               torch.zeros(3, dtype=torch.int64),
                                               _fill((3,), torch.float32), 0), {}), TypeError,
                    "npu_scatter: expected indices dtype in"),
        ErrorSample("bf16", lambda: ((_fill((2, 3), torch.bfloat16),
                                      torch.zeros(3, dtype=torch.int32),
                                      _fill((3,), torch.bfloat16), 0), {}), TypeError,
                    "npu_scatter: expected self dtype in"),
        ErrorSample("keepdim_indices", lambda: ((_fill((2, 3), torch.float32),
                                                 torch.zeros(1, 3, dtype=torch.int32),
                                                 _fill((1, 3), torch.float32), 0), {}),
                    RuntimeError, "npu_scatter: expected indices self's shape without dim"),
        ErrorSample("dim", lambda: ((_fill((2, 3), torch.float32),
                                     torch.zeros(3, dtype=torch.int32),
                                     _fill((3,), torch.float32), 2), {}), ValueError,
                    "npu_scatter: expected dim in"),
    ]


# -- npu_scatter_pa_kv_cache / _functional ---------------------------------------------------

def _slots(tokens, total, *, skip=True, dtype=torch.int32):
    slots = torch.randperm(total)[:tokens]
    if skip and tokens > 1:
        slots[1] = -1
    return slots.to(dtype)


def _pa_nd(dtype=torch.float16, *, tokens=5, heads=2, dk=8, dv=4, nb=3, bs=4, mode="Norm",
           slot_dtype=torch.int32):
    return ((_fill((tokens, heads, dk), dtype), _fill((tokens, heads, dv), dtype),
             _fill((nb, bs, heads, dk), dtype), _fill((nb, bs, heads, dv), dtype),
             _slots(tokens, nb * bs, dtype=slot_dtype)), {"cache_mode": mode})


def _pa_nz(kdtype=torch.float16, vdtype=None, *, tokens=5, heads=2, nb=3, bs=4, five=False,
           dk=None, dv=None):
    vdtype = vdtype or kdtype
    ldk, ldv = 32 // kdtype.itemsize, 32 // vdtype.itemsize
    dk, dv = dk or ldk, dv or 2 * ldv

    def cache(d, ld, dtype):
        shape = (nb, heads, d // ld, bs, ld) if five else (nb, heads * d // ld, bs, ld)
        return _fill(shape, dtype)

    return ((_fill((tokens, heads, dk), kdtype), _fill((tokens, heads, dv), vdtype),
             cache(dk, ldk, kdtype), cache(dv, ldv, vdtype), _slots(tokens, nb * bs)), {})


def _pa_compress(dtype=torch.float16, *, offsets=True, batch=2, seq=5, heads=2, d=4, nb=6, bs=4):
    lens = torch.tensor([seq, seq - 2])[:batch]
    win = torch.tensor([[2, 1], [3, 0]])[:batch, :heads]
    kwargs = {"compress_lens": win.to(torch.int32), "seq_lens": lens.to(torch.int32),
              "cache_mode": "Norm"}
    slots = torch.tensor([[0, 6], [12, -1]], dtype=torch.int32)
    if offsets:
        kwargs["compress_seq_offsets"] = torch.tensor([1, -1, 0, 2], dtype=torch.int32)
    return ((_fill((batch, seq, heads, d), dtype), _fill((batch, seq, heads, d), dtype),
             _fill((nb, bs, 1, d), dtype), _fill((nb, bs, 1, d), dtype), slots), kwargs)


def _pa_errors(op):
    def nz_bad_cache():
        args, kw = _pa_nz()
        return (args[:2] + (args[2][..., :8],) + args[3:]), kw

    def missing_seq_lens():
        args, kw = _pa_compress()
        del kw["seq_lens"]
        return args, kw

    def slots_2d():
        args, kw = _pa_nd()
        return args[:4] + (args[4][None],), kw

    def bad_head():
        args, kw = _pa_nz(dk=8)
        return args, kw

    def scalar_nz_cache():
        args, kw = _pa_nz()
        return args[:2] + (args[2].flatten()[0],) + args[3:], kw

    return [
        ErrorSample("cache_mode", lambda: (_pa_nd()[0], {"cache_mode": "NZ"}), ValueError,
                    f"{op}: expected cache_mode one of"),
        ErrorSample("value_dtype", lambda: (_pa_nd()[0][:1] + (_pa_nd(torch.bfloat16)[0][1],)
                                            + _pa_nd()[0][2:], {"cache_mode": "Norm"}),
                    TypeError, f"{op}: expected value the same dtype as key"),
        ErrorSample("float64", lambda: _pa_nd(torch.float64), TypeError,
                    f"{op}: expected key dtype in"),
        ErrorSample("nz_cache_shape", nz_bad_cache, RuntimeError,
                    f"{op}: expected key_cache an NZ cache of shape"),
        ErrorSample("nz_cache_0d", scalar_nz_cache, RuntimeError,
                    f"{op}: expected key_cache a 4-D or 5-D NZ cache"),
        ErrorSample("nz_head_bytes", bad_head, ValueError,
                    f"{op}: expected key a head size whose bytes"),
        ErrorSample("nd_cache_for_nz", lambda: (_pa_nd(dk=16, dv=16)[0], {}), RuntimeError,
                    f"{op}: expected key_cache an NZ cache"),
        ErrorSample("missing_seq_lens", missing_seq_lens, ValueError,
                    f"{op}: expected compress_lens and seq_lens tensors"),
        ErrorSample("slot_mapping_2d", slots_2d, RuntimeError,
                    f"{op}: expected slot_mapping shape"),
        ErrorSample("int16_slots", lambda: (_pa_nd()[0][:4] + (torch.zeros(5, dtype=torch.int16),),
                                            {"cache_mode": "Norm"}), TypeError,
                    f"{op}: expected slot_mapping dtype in"),
    ]


def _scatter_pa_kv_cache_samples() -> None:
    for name in ("npu_scatter_pa_kv_cache", "npu_scatter_pa_kv_cache_functional"):
        e = _entry(name)
        for dtype in (torch.float16, torch.bfloat16, torch.int8, torch.float32, torch.uint16):
            e.samples.append(Sample(f"nd_{dtype}".replace("torch.", ""),
                                    lambda dtype=dtype: _pa_nd(dtype)))
            e.samples.append(Sample(f"nz_{dtype}".replace("torch.", ""),
                                    lambda dtype=dtype: _pa_nz(dtype)))
        e.samples += [
            Sample("nd_none_mode_int64_slots", lambda: _pa_nd(mode=None, slot_dtype=torch.int64)),
            Sample("nz_5d_int8", lambda: _pa_nz(torch.int8, five=True)),
            Sample("nz_fp16_key_int8_value", lambda: _pa_nz(torch.float16, torch.int8)),
            Sample("compress_rope_fp16", lambda: _pa_compress()),
            Sample("compress_rope_int8", lambda: _pa_compress(torch.int8)),
            Sample("compress_alibi_bf16", lambda: _pa_compress(torch.bfloat16, offsets=False)),
        ]
        e.errors += _pa_errors(name)


# -- npu_advance_step_flashattn --------------------------------------------------------------

def _advance_make(*, num_seqs=6, num_queries=4, block_size=4, column=False):
    lens = torch.randint(1, 12, (num_seqs,))
    width = 40                          # room for repeated calls (opcheck runs the op often)
    shape = (num_seqs, 1) if column else (num_seqs,)
    state = [torch.randint(0, 50, (num_seqs,)).reshape(shape) for _ in range(2)]
    return ((state[0], torch.randint(0, 50, (num_queries, 1)), state[1], lens.reshape(shape),
             torch.randint(0, 50, (num_seqs,)).reshape(shape),
             torch.randint(0, 20, (num_seqs, width)), num_seqs, num_queries, block_size), {})


def _advance_spec_make(*, num_seqs=4, spec_num=2, block_size=4, two_d=False):
    per = 1 + spec_num
    shape = (num_seqs, per) if two_d else (num_seqs * per,)
    positions = torch.randint(0, 8, shape)
    sampled = torch.randint(0, 50, (num_seqs, per))
    sampled[1, 1:] = -1           # a request whose drafts were all rejected
    sampled[2, 0] = -1            # a request with no accepted token at all
    return ((torch.randint(0, 50, shape), sampled, positions, positions + 1,
             torch.zeros(shape, dtype=torch.int64), torch.randint(0, 20, (num_seqs, 64)),
             num_seqs, num_seqs, block_size),
            {"spec_token": torch.randint(0, 50, (num_seqs, spec_num)),
             "accepted_num": torch.randint(0, per, (num_seqs,))})


def _advance_samples() -> None:
    e = _entry("npu_advance_step_flashattn")
    e.samples += [
        Sample("decode", lambda: _advance_make()),
        Sample("decode_column_state", lambda: _advance_make(column=True)),
        Sample("decode_one_query", lambda: _advance_make(num_seqs=2, num_queries=1,
                                                         block_size=1)),
        Sample("spec_flat", lambda: _advance_spec_make()),
        Sample("spec_2d", lambda: _advance_spec_make(two_d=True, spec_num=1)),
    ]
    op = "npu_advance_step_flashattn"

    def int32_state():
        args, kw = _advance_make()
        return (args[0].to(torch.int32),) + args[1:], kw

    def no_padding():
        args, kw = _advance_make(num_seqs=4, num_queries=4)
        return args, kw

    def spec_without_accepted():
        args, kw = _advance_spec_make()
        del kw["accepted_num"]
        return args, kw

    def spec_short_seq_lens():
        args, kw = _advance_spec_make()
        return args[:3] + (args[3][:4],) + args[4:], kw

    def sampled_shape():
        args, kw = _advance_make()
        return args[:1] + (args[1].reshape(1, -1),) + args[2:], kw

    def scalar_slot_mapping():
        args, kw = _advance_make()
        return args[:4] + (torch.tensor(0),) + args[5:], kw

    e.errors += [
        ErrorSample("int32", int32_state, TypeError, f"{op}: expected input_tokens dtype in"),
        ErrorSample("no_padding", no_padding, ValueError, f"{op}: expected num_seqs >"),
        ErrorSample("spec_half", spec_without_accepted, ValueError,
                    f"{op}: expected spec_token and accepted_num to be both"),
        ErrorSample("spec_seq_lens", spec_short_seq_lens, RuntimeError,
                    f"{op}: expected seq_lens the shape of input_tokens"),
        ErrorSample("sampled_shape", sampled_shape, RuntimeError,
                    f"{op}: expected sampled_token_ids shape"),
        ErrorSample("scalar_state", scalar_slot_mapping, RuntimeError,
                    f"{op}: expected slot_mapping shape"),
    ]


# -- npu_quant_scatter / npu_quant_scatter_ -------------------------------------------------

def _quant_scatter_make(updates_dtype=torch.bfloat16, *, shape=(3, 4, 32), axis=-2,
                        index_dims=1, index_dtype=torch.int32, zero_points=True,
                        noncontig=False, kwargs=False):
    """Valid index values; scales powers of two (exact quotients), zero points small."""
    scale_dtype, zero_dtype = {torch.float16: (torch.float32, torch.int32),
                               torch.bfloat16: (torch.bfloat16, torch.bfloat16)}[updates_dtype]
    rank = len(shape)
    ax = axis % rank
    ushape = list(shape)
    ushape[0], ushape[ax] = 2, 2
    updates = _fill(tuple(ushape), updates_dtype, low=-40, high=41)
    if noncontig:
        updates = _noncontiguous(updates)
    last = shape[-1]
    scales = (2.0 ** torch.randint(-2, 3, (1, last))).to(scale_dtype)
    zeros = torch.randint(-3, 4, (last,)).to(zero_dtype) if zero_points else None
    limit = shape[ax] - 2 + 1
    if index_dims == 2:
        indices = torch.stack((torch.tensor([2, 0]), torch.randint(0, limit, (2,))), 1)
    else:
        indices = torch.randint(0, limit, (2,))
    args = (_fill(shape, torch.int8, low=-100, high=101), indices.to(index_dtype), updates,
            scales, zeros)
    if kwargs:
        return args, {"axis": axis, "quant_axis": rank - 1, "reduce": "update",
                      "dst_type": torch.int8, "round_mode": "rint"}
    return args + (axis,), {}


def _quant_scatter_errors(op):
    def changed(**kw):
        def make():
            args, _ = _quant_scatter_make()
            full = dict(zip(("self", "indices", "updates", "quant_scales", "quant_zero_points"),
                            args))
            full.update({"axis": -2, "quant_axis": -1, "reduce": "update", "dst_type": None,
                         "round_mode": "rint"})
            full.update(kw)
            names = ("self", "indices", "updates", "quant_scales", "quant_zero_points")
            return tuple(full.pop(n) for n in names), full
        return make

    base = _quant_scatter_make()[0]
    return [
        ErrorSample("reduce", changed(reduce="add"), ValueError, f"{op}: expected reduce one of"),
        ErrorSample("round_mode", changed(round_mode="round"), ValueError,
                    f"{op}: expected round_mode one of \\['rint'\\] for dst format int8"),
        ErrorSample("dst_type_int32", changed(dst_type=3), ValueError,
                    f"{op}: expected dst_type one of"),
        ErrorSample("float8_dst_on_int8", changed(dst_type=torch.float8_e5m2), TypeError,
                    f"{op}: expected input dtype float8_e5m2"),
        ErrorSample("float32_updates", changed(updates=base[2].float()), TypeError,
                    f"{op}: expected updates dtype in"),
        ErrorSample("scale_combo", changed(quant_scales=base[3].float()), TypeError,
                    f"{op}: expected quant_scales dtype bfloat16 \\(with bfloat16 updates\\)"),
        ErrorSample("zero_combo", changed(quant_zero_points=base[4].to(torch.int32)), TypeError,
                    f"{op}: expected quant_zero_points dtype bfloat16"),
        ErrorSample("axis_last", changed(axis=-1), ValueError, f"{op}: expected axis in"),
        ErrorSample("axis_batch", changed(axis=0), ValueError, f"{op}: expected axis in"),
        ErrorSample("quant_axis", changed(quant_axis=1), ValueError,
                    f"{op}: expected quant_axis -1 or 2"),
        ErrorSample("scales_numel", changed(quant_scales=base[3][:, :16]), RuntimeError,
                    f"{op}: expected quant_scales 32 elements"),
        ErrorSample("indices_3d", changed(indices=base[1][:, None, None]), ValueError,
                    f"{op}: expected indices a tensor with one of \\[1, 2\\] dims"),
        ErrorSample("pairs", changed(indices=torch.zeros(2, 3, dtype=torch.int32)), RuntimeError,
                    f"{op}: expected indices a second dim of 2"),
        ErrorSample("rank2_input", changed(self=base[0][0], updates=base[2][0]), ValueError,
                    f"{op}: expected input a tensor with one of"),
        ErrorSample("rows", changed(indices=base[1][:1]), RuntimeError,
                    f"{op}: expected updates dim 0 equal to the number of indices"),
        ErrorSample("other_dim", changed(updates=base[2][..., :16],
                                         quant_scales=base[3][:, :16]), RuntimeError,
                    f"{op}: expected updates the shape of input"),
    ]


def _quant_scatter_samples() -> None:
    for name in ("npu_quant_scatter", "npu_quant_scatter_"):
        e = _entry(name)
        e.samples += [
            Sample("bf16", lambda: _quant_scatter_make()),
            Sample("fp16_int32_zero_points_int64_indices", lambda: _quant_scatter_make(
                torch.float16, index_dtype=torch.int64)),
            Sample("no_zero_points", lambda: _quant_scatter_make(zero_points=False)),
            Sample("4d_axis1_pairs", lambda: _quant_scatter_make(shape=(3, 5, 2, 16), axis=1,
                                                                 index_dims=2)),
            Sample("4d_axis2_fp16", lambda: _quant_scatter_make(torch.float16,
                                                                shape=(3, 2, 5, 16), axis=2)),
            Sample("noncontiguous_updates", lambda: _quant_scatter_make(noncontig=True)),
            Sample("keywords", lambda: _quant_scatter_make(kwargs=True)),
        ]
        e.errors += _quant_scatter_errors(name)


_scatter_update_samples()
_scatter_nd_update_samples()
_npu_scatter_samples()
_scatter_pa_kv_cache_samples()
_advance_samples()
_quant_scatter_samples()
