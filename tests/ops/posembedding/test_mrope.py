"""Tests for npu_mrope against goldens written from the documented formula.

Spec: seed 004, entry "npu_mrope", and op-plugin's docs/zh/custom_APIs/torch_npu/
torch_npu-npu_mrope.md (the fuller formula)::

    cosSin[i] = cosSinCache[positions[i]];  cos, sin = cosSin.chunk(2, dim=-1)
    M-RoPE, cache_mode 'default', 3 sections:
        cos = cat(cos[0, :, :s0], cos[1, :, s0:s0+s1], cos[2, :, s0+s1:s0+s1+s2])   (sin alike)
    M-RoPE, cache_mode 'default', 4 sections:
        cos = cat([m[i] for i, m in enumerate(cos.split(mropeSection, dim=-1))])
    M-RoPE, cache_mode 'interleave':
        cosTmp = cos
        cos[..., 1:mropeSection[1]*3:3] = cosTmp[1, ..., 1:mropeSection[1]*3:3]
        cos[..., 2:mropeSection[1]*3:3] = cosTmp[2, ..., 2:mropeSection[1]*3:3]      (row 0 base)
    queryRot = query[..., :rotaryDim];  queryPass = query[..., rotaryDim:]         (per head)
    half:        x1, x2 = chunk(queryRot, 2)
    interleaved: x1, x2 = queryRot[..., ::2], queryRot[..., 1::2]
    o1 = x1*cos - x2*sin;  o2 = x2*cos + x1*sin
    half: cat((o1, o2));   interleaved: stack((o1, o2), -1) (flattened back to rotaryDim)
    out = cat((queryRot, queryPass));   key alike

Every expected value below is computed from those lines in float64 (or, for the rounding test,
in float32 rounded once), never by the library.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

OP = "npu_mrope"
FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
ROTARY_MODES = ["half", "interleave", "interleaved"]


# -- golden (literal doc formula, float64) ---------------------------------------------------

def golden_cos_sin(positions, cache, mrope_section, cache_mode):
    """(cos, sin), each (num_tokens, rotary_dim/2), exactly as the doc selects them."""
    cache = cache.to(torch.float64)
    cos_sin = cache[positions.long()]                    # (T, R) or (m, T, R)
    cos, sin = cos_sin.chunk(2, dim=-1)
    if mrope_section is None or all(s == 0 for s in mrope_section):
        return cos, sin
    sec = list(mrope_section)
    if cache_mode == "default":
        if len(sec) == 3:
            cos0 = cos[0, :, :sec[0]]
            cos1 = cos[1, :, sec[0]:(sec[0] + sec[1])]
            cos2 = cos[2, :, (sec[0] + sec[1]):(sec[0] + sec[1] + sec[2])]
            sin0 = sin[0, :, :sec[0]]
            sin1 = sin[1, :, sec[0]:(sec[0] + sec[1])]
            sin2 = sin[2, :, (sec[0] + sec[1]):(sec[0] + sec[1] + sec[2])]
            return torch.cat((cos0, cos1, cos2), dim=-1), torch.cat((sin0, sin1, sin2), dim=-1)
        cos = torch.cat([m[i] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1)
        sin = torch.cat([m[i] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1)
        return cos, sin
    assert cache_mode == "interleave"
    cos_tmp, sin_tmp = cos.clone(), sin.clone()
    cos, sin = cos[0].clone(), sin[0].clone()
    # plain Python slicing: a stop past rotary_dim/2 is clipped, as a slice is
    cos[..., 1:sec[1] * 3:3] = cos_tmp[1, ..., 1:sec[1] * 3:3]
    cos[..., 2:sec[1] * 3:3] = cos_tmp[2, ..., 2:sec[1] * 3:3]
    sin[..., 1:sec[1] * 3:3] = sin_tmp[1, ..., 1:sec[1] * 3:3]
    sin[..., 2:sec[1] * 3:3] = sin_tmp[2, ..., 2:sec[1] * 3:3]
    return cos, sin


def golden_rotate(x, cos, sin, head_size, rotary_mode, compute=torch.float64):
    """One of query/key, (T, H*head_size), rotated per head on its first rotary_dim features."""
    tokens = x.shape[0]
    rotary_dim = cos.shape[-1] * 2
    heads = x.to(compute).reshape(tokens, -1, head_size)
    cos = cos.to(compute)[:, None, :]
    sin = sin.to(compute)[:, None, :]
    x_rot, x_pass = heads[..., :rotary_dim], heads[..., rotary_dim:]
    if rotary_mode == "half":
        x1, x2 = torch.chunk(x_rot, 2, dim=-1)
    else:
        x1, x2 = x_rot[..., ::2], x_rot[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if rotary_mode == "half":
        x_rot = torch.cat((o1, o2), dim=-1)
    else:
        x_rot = torch.stack((o1, o2), dim=-1).reshape(x_rot.shape)
    return torch.cat((x_rot, x_pass), dim=-1).reshape(x.shape)


def golden_mrope(positions, query, key, cache, head_size, mrope_section=None,
                 rotary_mode="half", cache_mode="default", compute=torch.float64):
    cos, sin = golden_cos_sin(positions, cache, mrope_section, cache_mode)
    return (golden_rotate(query, cos, sin, head_size, rotary_mode, compute),
            golden_rotate(key, cos, sin, head_size, rotary_mode, compute))


# -- inputs ----------------------------------------------------------------------------------

def rand(shape, dtype, seed, unit=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1 if unit
         else torch.randn(shape, generator=g, dtype=torch.float64))
    return t.to(dtype)


def make(*, dtype=torch.float32, tokens=7, head_size=64, rotary_dim=None, q_heads=3, k_heads=2,
         rows=None, max_seq_len=11, pos_dtype=torch.int64, seed=0):
    """(positions, query, key, cos_sin_cache); rows=None gives 1-D (RoPE) positions."""
    rotary_dim = head_size if rotary_dim is None else rotary_dim
    g = torch.Generator().manual_seed(seed + 100)
    pos_shape = (tokens,) if rows is None else (rows, tokens)
    positions = torch.randint(0, max_seq_len, pos_shape, generator=g).to(pos_dtype)
    query = rand((tokens, q_heads * head_size), dtype, seed)
    key = rand((tokens, k_heads * head_size), dtype, seed + 1)
    cache = rand((max_seq_len, rotary_dim), dtype, seed + 2, unit=True)
    return positions, query, key, cache


def _raises(exc, fn, prefix=f"{OP}: expected"):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)
    return info


def _check(out, golden_pair, inputs):
    (qo, ko), (gq, gk) = out, golden_pair
    _, query, key, _ = inputs
    for o, g, x in ((qo, gq, query), (ko, gk, key)):
        assert o.shape == x.shape and o.dtype == x.dtype, (o.shape, o.dtype, x.shape, x.dtype)
        assert_close_to_golden(o, g)


# ============================================================================================
# RoPE mode (1-D positions)
# ============================================================================================

@pytest.mark.parametrize("pos_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("rotary_mode", ROTARY_MODES)
@pytest.mark.parametrize("section", [None, [0, 0, 0]], ids=["none", "zeros"])
def test_rope_mode_matches_doc(section, rotary_mode, dtype, pos_dtype):
    inputs = make(dtype=dtype, pos_dtype=pos_dtype, seed=1)
    out = na.npu_mrope(*inputs, 64, mrope_section=section, rotary_mode=rotary_mode)
    golden = golden_mrope(*inputs, 64, section, rotary_mode)
    _check(out, golden, inputs)


def test_defaults_are_rope_half_default():
    inputs = make(seed=2)
    out = na.npu_mrope(*inputs, 64)
    _check(out, golden_mrope(*inputs, 64), inputs)
    # None for the optional strings (schema `str?`) means the defaults as well
    out_none = na.npu_mrope(*inputs, 64, mrope_section=None, rotary_mode=None, cache_mode=None)
    assert torch.equal(out_none[0], out[0]) and torch.equal(out_none[1], out[1])


def test_interleaved_alias_equals_interleave():
    inputs = make(rows=3, seed=3)
    a = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], rotary_mode="interleave")
    b = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], rotary_mode="interleaved")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # and the two rotary modes really differ
    c = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], rotary_mode="half")
    assert not torch.equal(a[0], c[0])


def test_known_values_rope_half():
    # one token, one head of 32 (fp32 needs multiples of 16), rotary_dim 32:
    # cos = 0, sin = 1 turns (x1, x2) into (-x2, x1); cos = 1, sin = 0 is the identity.
    x = torch.arange(1.0, 33.0).reshape(1, 32)
    cache = torch.cat((torch.zeros(1, 16), torch.ones(1, 16)), -1)
    cache = torch.cat((cache, torch.cat((torch.ones(1, 16), torch.zeros(1, 16)), -1)))
    q, k = na.npu_mrope(torch.tensor([0]), x, x, cache, 32)
    assert torch.equal(q, torch.cat((-x[:, 16:], x[:, :16]), -1))
    assert torch.equal(k, q)
    q, _ = na.npu_mrope(torch.tensor([1]), x, x, cache, 32)
    assert torch.equal(q, x)
    q, _ = na.npu_mrope(torch.tensor([0]), x, x, cache, 32, rotary_mode="interleave")
    expected = torch.stack((-x[:, 1::2], x[:, ::2]), -1).reshape(1, 32)
    assert torch.equal(q, expected)


# ============================================================================================
# M-RoPE mode (2-D positions)
# ============================================================================================

MROPE_CASES = [
    # (mrope_section, rotary_dim, cache_mode)
    ([8, 12, 12], 64, "default"),
    ([8, 12, 12], 64, "interleave"),    # 3*12 = 36 > 32: strided slices clipped
    ([16, 24, 24], 128, "default"),
    ([16, 24, 24], 128, "interleave"),  # 3*24 = 72 > 64: strided slices clipped
    ([24, 20, 20], 128, "default"),
    ([24, 20, 20], 128, "interleave"),  # 3*20 = 60 < 64: last four frequencies from row 0
    ([10, 11, 11], 64, "default"),      # not a documented section (default mode accepts it)
    ([8, 8, 8, 8], 64, "default"),
    ([16, 16, 16, 16], 128, "default"),
    ([4, 12, 6, 10], 64, "default"),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("rotary_mode", ["half", "interleaved"])
@pytest.mark.parametrize("section,rotary_dim,cache_mode", MROPE_CASES,
                         ids=[f"{s}-{c}".replace(" ", "") for s, _, c in MROPE_CASES])
def test_mrope_mode_matches_doc(section, rotary_dim, cache_mode, rotary_mode, dtype):
    inputs = make(dtype=dtype, rows=len(section), head_size=128, rotary_dim=rotary_dim,
                  q_heads=2, k_heads=1, tokens=5, seed=4)
    out = na.npu_mrope(*inputs, 128, mrope_section=section, rotary_mode=rotary_mode,
                       cache_mode=cache_mode)
    golden = golden_mrope(*inputs, 128, section, rotary_mode, cache_mode)
    _check(out, golden, inputs)


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("cache_mode", ["default", "interleave"])
def test_mrope_int32_positions(cache_mode, pos_dtype):
    inputs = make(rows=3, pos_dtype=pos_dtype, seed=5)
    out = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], cache_mode=cache_mode)
    _check(out, golden_mrope(*inputs, 64, [8, 12, 12], "half", cache_mode), inputs)


def _frequency_sources(section, rotary_dim, cache_mode):
    """Which position row each of the rotary_dim/2 frequencies is read from (by reading it)."""
    rows, half = len(section), rotary_dim // 2
    max_seq_len = rows
    # cache row p: cos = p + 1 everywhere, sin = 0; query = (1 ... 1 | 0 ... 0): in half mode
    # query_out's first half is then cos itself, i.e. (position + 1) of the row that was used.
    cache = torch.cat((torch.arange(1.0, max_seq_len + 1)[:, None].expand(-1, half),
                       torch.zeros(max_seq_len, half)), -1)
    positions = torch.arange(rows).reshape(rows, 1)            # row r uses position r
    query = torch.cat((torch.ones(1, half), torch.zeros(1, half)), -1)
    q, _ = na.npu_mrope(positions, query, query, cache, rotary_dim, mrope_section=section,
                        cache_mode=cache_mode)
    return (q[0, :half] - 1).long().tolist()


def test_default_cache_mode_section_sources():
    assert _frequency_sources([8, 12, 12], 64, "default") == [0] * 8 + [1] * 12 + [2] * 12
    assert _frequency_sources([4, 12, 6, 10], 64, "default") == ([0] * 4 + [1] * 12 + [2] * 6
                                                                  + [3] * 10)


@pytest.mark.parametrize("section,rotary_dim", [([16, 24, 24], 128), ([24, 20, 20], 128),
                                                ([8, 12, 12], 64)])
def test_interleave_cache_mode_sources_follow_doc_slices(section, rotary_dim):
    # The doc: row 0, except cos[..., 1:s1*3:3] from row 1 and cos[..., 2:s1*3:3] from row 2,
    # with Python slicing (a stop past rotary_dim/2 is clipped).
    half = rotary_dim // 2
    expected = [0] * half
    for j in range(half)[1:section[1] * 3:3]:
        expected[j] = 1
    for j in range(half)[2:section[1] * 3:3]:
        expected[j] = 2
    assert _frequency_sources(section, rotary_dim, "interleave") == expected


def test_interleave_cache_16_24_24_clipped_slice_matches_literal_formula():
    # 3 * 24 = 72 > rotary_dim/2 = 64: the doc's strided assignments stop at the end of the
    # half dim.  Compare with the doc formula applied literally (Python slicing, float64).
    inputs = make(rows=3, head_size=128, rotary_dim=128, q_heads=2, k_heads=2, tokens=6,
                  max_seq_len=16, seed=6)
    for rotary_mode in ("half", "interleave"):
        out = na.npu_mrope(*inputs, 128, mrope_section=[16, 24, 24], rotary_mode=rotary_mode,
                           cache_mode="interleave")
        _check(out, golden_mrope(*inputs, 128, [16, 24, 24], rotary_mode, "interleave"), inputs)
    # every frequency of the half dim follows the mod-3 pattern (none is left to row 0 by the
    # bound): 1, 4, ..., 61 from row 1 and 2, 5, ..., 62 from row 2
    assert _frequency_sources([16, 24, 24], 128, "interleave") == [j % 3 for j in range(64)]


def test_mrope_with_equal_rows_equals_rope():
    # all position rows equal: every M-RoPE selection reads the same cache row as RoPE
    positions, query, key, cache = make(seed=7)
    rope = na.npu_mrope(positions, query, key, cache, 64)
    for section, cache_mode in (([8, 12, 12], "default"), ([8, 12, 12], "interleave"),
                                ([8, 8, 8, 8], "default")):
        rows = positions.expand(len(section), -1)
        out = na.npu_mrope(rows, query, key, cache, 64, mrope_section=section,
                           cache_mode=cache_mode)
        assert torch.equal(out[0], rope[0]) and torch.equal(out[1], rope[1])


# ============================================================================================
# Partial rotation, head counts, positions, empty, non-contiguous, inputs untouched
# ============================================================================================

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("rotary_mode", ["half", "interleave"])
@pytest.mark.parametrize("section", [None, [8, 12, 12]], ids=["rope", "mrope"])
def test_partial_rotation_tail_passes_through(section, rotary_mode, dtype):
    rows = None if section is None else 3
    inputs = make(dtype=dtype, head_size=96, rotary_dim=64, q_heads=3, k_heads=2, rows=rows,
                  seed=8)
    positions, query, key, cache = inputs
    qo, ko = na.npu_mrope(*inputs, 96, mrope_section=section, rotary_mode=rotary_mode)
    _check((qo, ko), golden_mrope(*inputs, 96, section, rotary_mode), inputs)
    for o, x in ((qo, query), (ko, key)):
        o_h, x_h = o.reshape(7, -1, 96), x.reshape(7, -1, 96)
        assert torch.equal(o_h[..., 64:], x_h[..., 64:])       # bit-exact pass-through
        assert not torch.equal(o_h[..., :64], x_h[..., :64])


def test_smallest_sizes_fp32():
    # float32: head_size and rotary_dim multiples of 16; one token, one head each
    inputs = make(tokens=1, head_size=32, rotary_dim=16, q_heads=1, k_heads=1, seed=9)
    out = na.npu_mrope(*inputs, 32)
    _check(out, golden_mrope(*inputs, 32), inputs)
    inputs = make(tokens=1, head_size=16, q_heads=1, k_heads=1, rows=3, seed=9)
    out = na.npu_mrope(*inputs, 16, mrope_section=[2, 3, 3])
    _check(out, golden_mrope(*inputs, 16, [2, 3, 3]), inputs)


@pytest.mark.parametrize("q_heads,k_heads", [(4, 1), (1, 3), (5, 5)])
def test_query_and_key_head_counts(q_heads, k_heads):
    inputs = make(q_heads=q_heads, k_heads=k_heads, dtype=torch.float16, rows=3, seed=10)
    out = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], rotary_mode="interleave")
    _check(out, golden_mrope(*inputs, 64, [8, 12, 12], "interleave"), inputs)


@pytest.mark.parametrize("rows", [None, 3])
def test_duplicated_and_unordered_positions(rows):
    positions, query, key, cache = make(rows=rows, tokens=9, max_seq_len=5, seed=11)
    fixed = torch.tensor([4, 0, 0, 3, 1, 4, 4, 2, 0])
    positions = fixed if rows is None else torch.stack((fixed, fixed.flip(0), fixed.roll(3)))
    section = None if rows is None else [8, 12, 12]
    for cache_mode in (["default"] if rows is None else ["default", "interleave"]):
        inputs = (positions, query, key, cache)
        out = na.npu_mrope(*inputs, 64, mrope_section=section, cache_mode=cache_mode)
        _check(out, golden_mrope(*inputs, 64, section, "half", cache_mode), inputs)
    if rows is None:
        # tokens with the same position and the same features give the same output
        q = query.clone()
        q[2] = q[1]
        qo, _ = na.npu_mrope(positions, q, key, cache, 64)
        assert torch.equal(qo[1], qo[2])


def test_position_order_follows_tokens():
    # permuting tokens (positions and rows of query/key together) permutes the outputs
    positions, query, key, cache = make(rows=3, tokens=8, seed=12)
    perm = torch.tensor([7, 2, 5, 0, 1, 6, 3, 4])
    a = na.npu_mrope(positions, query, key, cache, 64, mrope_section=[8, 12, 12])
    b = na.npu_mrope(positions[:, perm], query[perm], key[perm], cache, 64,
                     mrope_section=[8, 12, 12])
    assert torch.equal(a[0][perm], b[0]) and torch.equal(a[1][perm], b[1])


@pytest.mark.parametrize("section", [None, [8, 12, 12], [8, 8, 8, 8]],
                         ids=["rope", "mrope3", "mrope4"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_empty_num_tokens(dtype, section):
    rows = None if section is None else len(section)
    positions, query, key, cache = make(dtype=dtype, tokens=0, rows=rows, seed=13)
    assert positions.shape[-1] == 0 and query.shape == (0, 192)
    qo, ko = na.npu_mrope(positions, query, key, cache, 64, mrope_section=section)
    assert qo.shape == (0, 192) and ko.shape == (0, 128)
    assert qo.dtype == ko.dtype == dtype


def test_empty_cache_with_no_tokens():
    # an empty tensor is allowed for every input; with no tokens no row is looked up
    positions, query, key, _ = make(tokens=0, seed=13)
    cache = torch.empty(0, 64)
    qo, ko = na.npu_mrope(positions, query, key, cache, 64)
    assert qo.shape == (0, 192) and ko.shape == (0, 128)


@pytest.mark.parametrize("section", [None, [8, 12, 12]], ids=["rope", "mrope"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_contiguous_inputs(dtype, section):
    tokens, rows = 6, 3
    g = torch.Generator().manual_seed(14)
    # positions: a transposed (tokens, rows) tensor or a strided 1-D slice
    if section is None:
        positions = torch.randint(0, 11, (2 * tokens,), generator=g)[::2]
    else:
        positions = torch.randint(0, 11, (tokens, rows), generator=g).t()
    # query: every other column of a wider tensor; key: rows of a transposed tensor
    query = rand((tokens, 2 * 3 * 64), dtype, 15)[:, ::2]
    key = rand((2 * 64, tokens), dtype, 16).t()
    # cache: every other column of a wider cache
    cache = rand((11, 128), dtype, 17, unit=True)[:, 1::2]
    for t in (positions, query, key, cache):
        assert not t.is_contiguous()
    inputs = (positions, query, key, cache)
    out = na.npu_mrope(*inputs, 64, mrope_section=section, rotary_mode="interleave")
    _check(out, golden_mrope(*inputs, 64, section, "interleave"), inputs)
    contiguous = na.npu_mrope(*(t.contiguous() for t in inputs), 64, mrope_section=section,
                              rotary_mode="interleave")
    assert torch.equal(out[0], contiguous[0]) and torch.equal(out[1], contiguous[1])


@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
def test_transposed_inputs_give_contiguous_outputs_in_eager_and_fake(partial):
    """Outputs are fresh contiguous tensors whatever the inputs' strides, and FakeTensor
    describes the same strides (a transposed query used to keep its layout in eager only)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    positions = torch.tensor([3, 0, 7, 1, 5])
    query = rand((2 * 64, 5), torch.float32, 21).t()                 # strides (1, 5)
    key = rand((64, 5), torch.float32, 22).t()
    cache = rand((11, 32 if partial else 64), torch.float32, 23, unit=True)
    out = na.npu_mrope(positions, query, key, cache, 64)
    with FakeTensorMode() as fm:
        fake = na.npu_mrope(*(fm.from_tensor(t) for t in (positions, query, key, cache)), 64)
    for o, f, x in zip(out, fake, (query, key)):
        assert o.is_contiguous() and o.shape == x.shape
        assert (f.shape, f.stride(), f.dtype) == (o.shape, o.stride(), o.dtype)


@pytest.mark.parametrize("section,cache_mode", [(None, "default"), ([8, 12, 12], "interleave"),
                                                ([8, 8, 8, 8], "default")])
def test_inputs_unchanged_and_outputs_new(section, cache_mode):
    rows = None if section is None else len(section)
    inputs = make(dtype=torch.float16, rows=rows, head_size=96, rotary_dim=64, seed=18)
    before = [t.clone() for t in inputs]
    qo, ko = na.npu_mrope(*inputs, 96, mrope_section=section, cache_mode=cache_mode)
    for t, b in zip(inputs, before):
        assert torch.equal(t, b) and t.dtype == b.dtype
    assert qo.data_ptr() != inputs[1].data_ptr() and ko.data_ptr() != inputs[2].data_ptr()


def test_entry_points_agree():
    inputs = make(rows=3, seed=19)
    kwargs = dict(mrope_section=[8, 12, 12], rotary_mode="interleave", cache_mode="interleave")
    a = na.npu_mrope(*inputs, 64, **kwargs)
    b = torch.ops.npu.npu_mrope(*inputs, 64, **kwargs)
    c = torch.ops.npu.npu_mrope.default(*inputs, 64, **kwargs)
    for other in (b, c):
        assert torch.equal(a[0], other[0]) and torch.equal(a[1], other[1])


# ============================================================================================
# Precision: float32 compute, rounded once
# ============================================================================================

def _ordered_bits(t):
    bits = t.view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rotary_mode", ["half", "interleave"])
@pytest.mark.parametrize("section,cache_mode", [(None, "default"), ([8, 12, 12], "default"),
                                                ([8, 12, 12], "interleave"),
                                                ([8, 8, 8, 8], "default")])
def test_half_precision_is_fp32_rounded_once(section, cache_mode, rotary_mode, dtype):
    rows = None if section is None else len(section)
    inputs = make(dtype=dtype, rows=rows, tokens=16, head_size=96, rotary_dim=64, q_heads=8,
                  k_heads=4, max_seq_len=32, seed=20)
    out = na.npu_mrope(*inputs, 96, mrope_section=section, rotary_mode=rotary_mode,
                       cache_mode=cache_mode)
    expected = golden_mrope(*inputs, 96, section, rotary_mode, cache_mode,
                            compute=torch.float32)
    for o, e in zip(out, expected):
        assert e.dtype == torch.float32
        ulps = (_ordered_bits(o) - _ordered_bits(e.to(dtype))).abs()
        assert int(ulps.max()) <= 1
        assert float((ulps == 0).double().mean()) >= 0.99


def test_float64_is_exact_to_golden():
    inputs = make(dtype=torch.float64, rows=3, seed=21)
    out = na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12], cache_mode="interleave")
    golden = golden_mrope(*inputs, 64, [8, 12, 12], "half", "interleave")
    for o, g in zip(out, golden):
        assert o.dtype == torch.float64
        torch.testing.assert_close(o, g, rtol=1e-14, atol=1e-14)


# ============================================================================================
# Errors
# ============================================================================================

def _bad(case):
    """(callable, exception type) for one documented constraint."""
    f16 = dict(dtype=torch.float16)
    if case == "rotary_dim_not_32_fp16":
        inputs = make(head_size=64, rotary_dim=48, **f16)       # multiple of 16, not of 32
        return lambda: na.npu_mrope(*inputs, 64), ValueError
    if case == "rotary_dim_not_32_bf16":
        inputs = make(head_size=64, rotary_dim=16, dtype=torch.bfloat16)
        return lambda: na.npu_mrope(*inputs, 64), ValueError
    if case == "rotary_dim_not_16_fp32":
        inputs = make(head_size=64, rotary_dim=24)
        return lambda: na.npu_mrope(*inputs, 64), ValueError
    if case == "head_size_not_32_fp16":
        inputs = make(head_size=48, rotary_dim=32, **f16)
        return lambda: na.npu_mrope(*inputs, 48), ValueError
    if case == "head_size_not_16_fp32":
        inputs = make(head_size=40, rotary_dim=32)
        return lambda: na.npu_mrope(*inputs, 40), ValueError
    if case == "head_size_zero":
        inputs = make()
        return lambda: na.npu_mrope(*inputs, 0), ValueError
    if case == "rotary_dim_gt_head_size":
        inputs = make(head_size=64, rotary_dim=128)
        return lambda: na.npu_mrope(*inputs, 64), ValueError
    if case == "section_sum":
        inputs = make(rows=3)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 8]), ValueError
    if case == "section_sum_4":
        inputs = make(rows=4)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 8, 8, 16]), ValueError
    if case == "section_negative":
        inputs = make(rows=3)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[-8, 20, 20]), ValueError
    if case == "section_two_entries":
        inputs = make(rows=2)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[16, 16]), ValueError
    if case == "positions_rows_4_for_3_sections":
        inputs = make(rows=4)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12]), ValueError
    if case == "positions_rows_3_for_4_sections":
        inputs = make(rows=3)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 8, 8, 8]), ValueError
    if case == "positions_1d_in_mrope_mode":
        inputs = make()
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12]), ValueError
    if case == "positions_2d_in_rope_mode":
        inputs = make(rows=3)
        return lambda: na.npu_mrope(*inputs, 64, mrope_section=[0, 0, 0]), ValueError
    if case == "positions_length":
        p, q, k, c = make(rows=3)
        return (lambda: na.npu_mrope(p[:, :-1], q, k, c, 64, mrope_section=[8, 12, 12]),
                RuntimeError)
    if case == "key_rows":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p, q, k[:-1], c, 64), RuntimeError
    if case == "query_not_multiple_of_head":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p, q[:, :-16], k, c, 64), ValueError
    if case == "interleave_cache_4_sections":
        inputs = make(rows=4)
        return (lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 8, 8, 8],
                                     cache_mode="interleave"), ValueError)
    if case == "position_too_large":
        p, q, k, c = make(max_seq_len=11)
        p = p.clone()
        p[3] = 11
        return lambda: na.npu_mrope(p, q, k, c, 64), IndexError
    if case == "position_too_large_mrope":
        p, q, k, c = make(rows=3, max_seq_len=11)
        p = p.clone()
        p[2, 0] = 50
        return lambda: na.npu_mrope(p, q, k, c, 64, mrope_section=[8, 12, 12]), IndexError
    if case == "position_negative":
        p, q, k, c = make(pos_dtype=torch.int32)
        p = p.clone()
        p[0] = -1
        return lambda: na.npu_mrope(p, q, k, c, 64), IndexError
    if case == "unknown_rotary_mode":
        inputs = make()
        return lambda: na.npu_mrope(*inputs, 64, rotary_mode="quarter"), ValueError
    if case == "unknown_cache_mode":
        inputs = make(rows=3)
        return (lambda: na.npu_mrope(*inputs, 64, mrope_section=[8, 12, 12],
                                     cache_mode="invalid_mode"), ValueError)
    if case == "mixed_query_key":
        p, q, k, c = make(**f16)
        return lambda: na.npu_mrope(p, q, k.float(), c, 64), TypeError
    if case == "mixed_cache":
        p, q, k, c = make(**f16)
        return lambda: na.npu_mrope(p, q, k, c.to(torch.bfloat16), 64), TypeError
    if case == "float_positions":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p.float(), q, k, c, 64), TypeError
    if case == "int16_positions":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p.to(torch.int16), q, k, c, 64), TypeError
    if case == "integer_query":
        p, q, k, c = make()
        return (lambda: na.npu_mrope(p, q.to(torch.int32), k.to(torch.int32), c.to(torch.int32),
                                     64), TypeError)
    if case == "query_3d":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p, q.reshape(7, 3, 64), k, c, 64), ValueError
    if case == "key_3d":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p, q, k.reshape(7, 2, 64), c, 64), ValueError
    if case == "cache_1d":
        p, q, k, c = make()
        return lambda: na.npu_mrope(p, q, k, c.reshape(-1), 64), ValueError
    raise AssertionError(case)


BAD_CASES = [
    "rotary_dim_not_32_fp16", "rotary_dim_not_32_bf16", "rotary_dim_not_16_fp32",
    "head_size_not_32_fp16", "head_size_not_16_fp32", "head_size_zero",
    "rotary_dim_gt_head_size", "section_sum", "section_sum_4", "section_negative",
    "section_two_entries", "positions_rows_4_for_3_sections", "positions_rows_3_for_4_sections",
    "positions_1d_in_mrope_mode", "positions_2d_in_rope_mode", "positions_length", "key_rows",
    "query_not_multiple_of_head", "interleave_cache_4_sections", "position_too_large", "position_too_large_mrope",
    "position_negative", "unknown_rotary_mode", "unknown_cache_mode", "mixed_query_key",
    "mixed_cache", "float_positions", "int16_positions", "integer_query", "query_3d", "key_3d",
    "cache_1d",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_errors(case):
    fn, exc = _bad(case)
    _raises(exc, fn)


def test_error_leaves_inputs_untouched():
    p, q, k, c = make(rows=3)
    p = p.clone()
    p[1, 1] = 99
    before = [t.clone() for t in (p, q, k, c)]
    _raises(IndexError, lambda: na.npu_mrope(p, q, k, c, 64, mrope_section=[8, 12, 12]))
    for t, b in zip((p, q, k, c), before):
        assert torch.equal(t, b)


def test_boundary_positions_accepted():
    # 0 and max_seq_len - 1 are the first and last valid rows
    p, q, k, c = make(max_seq_len=11)
    p = torch.tensor([0, 10, 0, 10, 5, 10, 0])
    out = na.npu_mrope(p, q, k, c, 64)
    _check(out, golden_mrope(p, q, k, c, 64), (p, q, k, c))


# ============================================================================================
# Strict mode
# ============================================================================================

@pytest.mark.parametrize("product", ["A2", "A3"])
def test_strict_accepts_documented_sections(product):
    for section in ([16, 24, 24], [24, 20, 20], [8, 12, 12], [16, 16, 16, 16]):
        rotary_dim = 2 * sum(section)
        inputs = make(rows=len(section), head_size=128, rotary_dim=rotary_dim,
                      dtype=torch.bfloat16, seed=22)
        with na.strict(product):
            out = na.npu_mrope(*inputs, 128, mrope_section=section)
        _check(out, golden_mrope(*inputs, 128, section), inputs)
    with na.strict(product):
        inputs = make(rows=3, head_size=128, rotary_dim=128, seed=22)
        na.npu_mrope(*inputs, 128, mrope_section=[16, 24, 24], cache_mode="interleave")
        inputs = make(head_size=128, seed=22)
        na.npu_mrope(*inputs, 128, mrope_section=[0, 0, 0])
        na.npu_mrope(*inputs, 128)


@pytest.mark.parametrize("section", [[12, 12, 8], [10, 11, 11], [8, 8, 8, 8]])
def test_strict_a2_rejects_undocumented_sections(section):
    inputs = make(rows=len(section), seed=23)
    na.npu_mrope(*inputs, 64, mrope_section=section)          # default mode accepts them
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_mrope(*inputs, 64, mrope_section=section),
                f"{OP}: expected mrope_section one of the documented")


def test_strict_a2_rejects_float64():
    inputs = make(dtype=torch.float64, seed=24)
    with na.strict("A2"):
        _raises(TypeError, lambda: na.npu_mrope(*inputs, 64))


@pytest.mark.parametrize("product", ["950", "310P", "910"])
def test_strict_unlisted_product_rejects(product):
    inputs = make(rows=3, head_size=128, rotary_dim=128, seed=25)
    with na.strict(product):
        _raises(RuntimeError, lambda: na.npu_mrope(*inputs, 128, mrope_section=[16, 24, 24]))


# ============================================================================================
# Autograd (none) and torch.compile
# ============================================================================================

@pytest.mark.parametrize("which", [1, 2, 3])
def test_requires_grad_raises(which):
    inputs = list(make(seed=26))
    inputs[which] = inputs[which].clone().requires_grad_(True)
    _raises(RuntimeError, lambda: na.npu_mrope(*inputs, 64))
    with torch.no_grad():                 # no gradient requested: the forward runs
        out = na.npu_mrope(*inputs, 64)
    _check(out, golden_mrope(*(t.detach() for t in inputs), 64), inputs)


def test_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    inputs = make(rows=3, head_size=96, rotary_dim=64, dtype=torch.float16, seed=27)
    kwargs = dict(mrope_section=[8, 12, 12], rotary_mode="interleaved", cache_mode="interleave")

    def fn(p, q, k, c):
        qo, ko = na.npu_mrope(p, q, k, c, 96, **kwargs)
        return qo * 2, ko + 1

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    got = compiled(*inputs)
    want = fn(*inputs)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)
    gq, gk = golden_mrope(*inputs, 96, kwargs["mrope_section"], "interleave", "interleave")
    assert_close_to_golden(got[0], gq * 2, rtol=2e-3)
    torch._dynamo.reset()


@pytest.mark.parametrize("section", [None, [0, 0, 0]])
def test_interleave_cache_mode_is_ignored_in_rope_mode(section):
    # op-plugin's test_npu_mrope_rope passes cache_mode='interleave' with 1-D positions and
    # expects the plain RoPE result (its golden ignores cache_mode there).
    inputs = make()
    out = na.npu_mrope(*inputs, 64, mrope_section=section, cache_mode="interleave")
    _check(out, golden_mrope(*inputs, 64, section, "half", "default"), inputs)
