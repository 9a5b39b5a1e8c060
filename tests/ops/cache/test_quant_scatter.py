"""npu_quant_scatter (copy) and npu_quant_scatter_ (in place) against a float64 golden written
from the aclnn docs' formula (hicann/ops-nn index/quant_update_scatter)::

    q = cast(updates / quant_scales.reshape(-1) + quant_zero_points.reshape(-1))
    indices 1-D:  input[i][..][indices[i] + k][..]          = q[i][..][k][..]
    indices 2-D:  input[indices[i][0]][..][indices[i][1] + k][..] = q[i][..][k][..]

int8 cast: round half to even (written out below, not torch.round), NaN -> 0, clip to
[-128, 127].  float8 cast (950): the nearest float8 value, ties to the even code, saturating at
the largest finite value (the 950 kernel's SatMode::SAT), found by searching all 256 codes.
Scales are powers of two in the exact tests, so float32 and float64 give the same quotient.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.library import TORCH_NPU_NS
from npu_anywhere.ops.quant import core

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from cache_helpers import bits  # noqa: E402
from quant_goldens import hifloat8_golden  # noqa: E402

OP = "npu_quant_scatter: expected"
IOP = "npu_quant_scatter_: expected"
COMBOS = {torch.float16: (torch.float32, torch.int32),
          torch.bfloat16: (torch.bfloat16, torch.bfloat16)}


# -- golden ---------------------------------------------------------------------------------

def round_half_even(y: float) -> float:
    f = math.floor(y)
    frac = y - f
    if frac > 0.5:
        return f + 1
    if frac < 0.5:
        return f
    return f if f % 2 == 0 else f + 1


def int8_cast(y: float) -> int:
    if math.isnan(y):
        return 0
    if math.isinf(y):
        return 127 if y > 0 else -128
    return int(min(127, max(-128, round_half_even(y))))


def float8_table(dtype):
    """(value, code) of every finite float8 code (decoded exactly through float64)."""
    codes = torch.arange(256, dtype=torch.int16).to(torch.uint8)
    vals = codes.view(dtype).to(torch.float64).tolist()
    return [(v, c) for c, v in enumerate(vals) if math.isfinite(v)]


def float8_cast(y: float, table, top: float):
    """The code of the nearest float8 value (ties: the even code, i.e. even mantissa),
    saturating at +-top; NaN gives +0 (the kernel's SatMode::SAT)."""
    if math.isnan(y):
        return 0x00
    y = min(top, max(-top, y))
    best = min(abs(v - y) for v, _ in table)
    near = sorted({(v, c) for v, c in table if abs(v - y) == best}, key=lambda vc: vc[1])
    if any(v == 0 for v, _ in near) and (len({v for v, _ in near}) == 1 or
                                          all(c % 2 for v, c in near if v != 0)):
        return 0x80 if math.copysign(1.0, y) < 0 else 0x00     # zero keeps y's sign
    even = [c for v, c in near if c % 2 == 0]
    return (even or [c for _, c in near])[0]


def quantized(updates, scales, zeros, fmt="int8"):
    """float64 quotient-plus-offset, cast element by element; returns a list-nested int8/uint8."""
    s = scales.reshape(-1).to(torch.float64).tolist()
    z = zeros.reshape(-1).to(torch.float64).tolist() if zeros is not None else [0.0] * len(s)
    u = updates.to(torch.float64)
    out = torch.empty(updates.shape, dtype=torch.int8)
    if fmt != "int8":
        dtype = getattr(torch, fmt)
        table = float8_table(dtype)
        top = max(v for v, _ in table)
    for pos in itertools.product(*(range(n) for n in updates.shape)):
        j = pos[-1]
        with_scale = u[pos].item() / s[j] if s[j] != 0 else (
            math.copysign(math.inf, u[pos].item()) * math.copysign(1, s[j])
            if u[pos].item() != 0 else math.nan)
        y = with_scale + z[j]
        if fmt == "int8":
            out[pos] = int8_cast(y)
        else:
            code = float8_cast(y, table, top)
            out[pos] = code - 256 if code >= 128 else code
    return out


def golden(inp, indices, updates, scales, zeros, axis, fmt="int8"):
    """Bits (int8 view) of the expected output."""
    out = bits(inp.clone()).clone()
    q = quantized(updates, scales, zeros, fmt)
    ax = axis % inp.dim()
    for pos in itertools.product(*(range(n) for n in updates.shape)):
        i, k = pos[0], pos[ax]
        if indices.dim() == 2:
            row, start = int(indices[i][0]), int(indices[i][1])
        else:
            row, start = i, int(indices[i])
        target = list(pos)
        target[0], target[ax] = row, start + k
        out[tuple(target)] = q[pos]
    return out


# -- inputs ---------------------------------------------------------------------------------

def make(updates_dtype=torch.bfloat16, *, shape=(4, 5, 32), axis=-2, span=2, rows=3,
         index_dims=1, index_dtype=torch.int32, zero_points=True, seed=0, inp_dtype=torch.int8):
    """Sentinel-filled input; updates k/8 in [-20, 20]; scales 2**[-2, 2]; integer/half zeros."""
    gen = torch.Generator().manual_seed(seed)
    rank = len(shape)
    ax = axis % rank
    inp = torch.randint(-128, 128, shape, generator=gen, dtype=torch.int32).to(torch.int8)
    if inp_dtype != torch.int8:
        inp = inp.view(inp_dtype)
    ushape = list(shape)
    ushape[0], ushape[ax] = rows, span
    updates = (torch.randint(-160, 161, ushape, generator=gen) / 8).to(updates_dtype)
    scale_dtype, zero_dtype = COMBOS[updates_dtype]
    last = shape[-1]
    scales = (2.0 ** torch.randint(-2, 3, (last,), generator=gen)).to(scale_dtype)
    zeros = None
    if zero_points:
        zeros = torch.randint(-6, 7, (last,), generator=gen).to(torch.float32)
        if zero_dtype == torch.bfloat16:
            zeros = zeros / 2          # halves: more ties
        zeros = zeros.to(zero_dtype)
    if index_dims == 2:
        batch = torch.randperm(shape[0], generator=gen)[:rows]
        indices = torch.stack((batch, torch.randint(0, shape[ax] - span + 1, (rows,),
                                                    generator=gen)), 1)
    else:
        indices = torch.randint(0, shape[ax] - span + 1, (rows,), generator=gen)
    return inp, indices.to(index_dtype), updates, scales, zeros


def both(inp, indices, updates, scales, zeros, axis=-2, **kw):
    """Run both variants; check the copy leaves input alone and the in-place one returns it."""
    before = bits(inp).clone()
    out = na.npu_quant_scatter(inp, indices, updates, scales, zeros, axis=axis, **kw)
    assert torch.equal(bits(inp), before), "npu_quant_scatter must not touch input"
    assert out.dtype == inp.dtype and out.shape == inp.shape
    ret = na.npu_quant_scatter_(inp, indices, updates, scales, zeros, axis=axis, **kw)
    assert ret is inp
    assert torch.equal(bits(out), bits(inp)), "the two variants disagree"
    return out


# -- values ---------------------------------------------------------------------------------

@pytest.mark.parametrize("updates_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("zero_points", [True, False], ids=["zp", "no_zp"])
@pytest.mark.parametrize("index_dims", [1, 2])
def test_matches_golden(updates_dtype, zero_points, index_dims):
    inp, indices, updates, scales, zeros = make(updates_dtype, zero_points=zero_points,
                                                index_dims=index_dims)
    want = golden(inp, indices, updates, scales, zeros, -2)
    assert torch.equal(bits(both(inp, indices, updates, scales, zeros)), want)


@pytest.mark.parametrize("shape,axis", [((3, 4, 5, 32), 1), ((3, 4, 5, 32), 2),
                                        ((3, 4, 5, 32), -3), ((2, 3, 2, 3, 2, 16), -4),
                                        ((2, 1, 1, 2, 1, 1, 3, 16), 6)], ids=str)
@pytest.mark.parametrize("index_dims", [1, 2])
def test_axes_and_ranks(shape, axis, index_dims):
    inp, indices, updates, scales, zeros = make(shape=shape, axis=axis, rows=2,
                                                index_dims=index_dims, index_dtype=torch.int64,
                                                seed=len(shape) + axis)
    want = golden(inp, indices, updates, scales, zeros, axis)
    assert torch.equal(bits(both(inp, indices, updates, scales, zeros, axis=axis)), want)


def test_exact_ties_round_half_to_even():
    # updates / 0.5 and updates / 2 land exactly on k + 0.5
    y = [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, -4.5, -5.5, -6.5, 0.0]
    want = [-4, -2, -2, 0, 0, 2, 2, 4, 4, 6, 6, 8, -4, -6, -6, 0]
    scales = torch.tensor([0.5] * 8 + [2.0] * 8)
    updates = (torch.tensor(y) * scales).to(torch.float16).reshape(1, 1, 16)
    inp = torch.full((1, 1, 16), 99, dtype=torch.int8)
    out = na.npu_quant_scatter(inp, torch.tensor([0], dtype=torch.int32), updates, scales)
    assert out.reshape(-1).tolist() == want
    # zero points move values onto ties too: 1.0 / 2 + 0.5 * k (bfloat16 zero points)
    upd = torch.ones(1, 1, 16, dtype=torch.bfloat16)
    zp = (torch.arange(16) - 8).to(torch.bfloat16)
    out = na.npu_quant_scatter(inp, torch.tensor([0]), upd,
                               torch.full((16,), 2.0, dtype=torch.bfloat16), zp)
    assert out.reshape(-1).tolist() == [round_half_even(0.5 + k) for k in range(-8, 8)]
    assert out.reshape(-1).tolist()[8] == 0 and out.reshape(-1).tolist()[9] == 2


def test_saturation_nan_inf_and_zero_scale():
    y = [127.5, -127.5, 128.0, -128.5, -129.0, 60000.0, -60000.0, math.inf, -math.inf,
         math.nan, 126.5, -126.5, 300.0, 0.0, 1.0, -1.0]
    want = [127, -128, 127, -128, -128, 127, -128, 127, -128, 0, 126, -126, 127, 0, 1, -1]
    updates = torch.tensor(y, dtype=torch.float16).reshape(1, 1, 16)
    inp = torch.full((2, 1, 16), 55, dtype=torch.int8)
    out = both(inp, torch.tensor([0], dtype=torch.int32), updates, torch.ones(16), None)
    assert out[0, 0].tolist() == want
    assert out[1, 0].tolist() == [55] * 16, "row 1 was not indexed"
    # a zero scale: x / 0 = +-inf (saturates), 0 / 0 = NaN (-> 0)
    upd = torch.tensor([[[2.0, -2.0, 0.0] + [1.0] * 13]], dtype=torch.float16)
    scales = torch.tensor([0.0] * 3 + [1.0] * 13)
    out = na.npu_quant_scatter(inp, torch.tensor([[1, 0]]), upd, scales)
    assert out[1, 0, :3].tolist() == [127, -128, 0]


def test_general_scales_agree_with_float64_away_from_ties():
    gen = torch.Generator().manual_seed(5)
    inp = torch.zeros(4, 8, 64, dtype=torch.int8)
    updates = (torch.rand(4, 8, 64, generator=gen) * 60 - 30).to(torch.float16)
    scales = torch.rand(64, generator=gen) * 0.5 + 0.05
    zeros = torch.randint(-10, 11, (64,), generator=gen, dtype=torch.int32)
    out = na.npu_quant_scatter(inp, torch.zeros(4, dtype=torch.int32), updates, scales, zeros)
    y = updates.double() / scales.double() + zeros.double()
    near_tie = ((y - y.floor()) - 0.5).abs() < 1e-4
    want = golden(inp, torch.zeros(4, dtype=torch.int32), updates, scales, zeros, -2)
    assert near_tie.sum() < 5
    assert torch.equal(out[~near_tie], want[~near_tie])
    assert ((out.int() - want.int()).abs() <= 1).all()
    assert (y.abs() > 127).any() and out.abs().max() >= 127      # saturation exercised


def test_non_contiguous_inputs():
    inp, indices, updates, scales, zeros = make(torch.float16, shape=(4, 6, 5, 32), axis=2,
                                                index_dims=2, rows=2)
    want = golden(inp, indices, updates, scales, zeros, 2)
    inp_nc = inp.transpose(1, 2).contiguous().transpose(1, 2)
    upd_nc = updates.transpose(1, 3).contiguous().transpose(1, 3)
    scales_nc = torch.stack((scales, scales), 1)[:, 0]
    zeros_nc = torch.stack((zeros, zeros), 1)[:, 1]
    idx_nc = indices.t().contiguous().t()
    for t in (inp_nc, upd_nc, scales_nc, zeros_nc, idx_nc):
        assert not t.is_contiguous()
    out = both(inp_nc, idx_nc, upd_nc, scales_nc, zeros_nc, axis=2)
    assert out.stride() == inp_nc.stride()
    assert torch.equal(bits(out), want)


def test_scales_of_any_shape_with_the_right_count():
    inp, indices, updates, scales, zeros = make()
    want = golden(inp, indices, updates, scales, zeros, -2)
    out = na.npu_quant_scatter(inp, indices, updates, scales.reshape(1, 1, 32),
                               zeros.reshape(4, 8), quant_axis=2)
    assert torch.equal(out, want)


def test_aliases_and_torch_ops_path():
    inp, indices, updates, scales, zeros = make()
    want = golden(inp, indices, updates, scales, zeros, -2)
    out = na.npu_quant_scatter(self=inp, indices=indices, updates=updates, quant_scales=scales,
                               quant_zero_points=zeros, axis=-2, quant_axis=-1, reduce="update",
                               dst_type=torch.int8, round_mode=None)
    assert torch.equal(out, want)
    assert torch.equal(na.npu_quant_scatter(input=inp, indices=indices, updates=updates,
                                            quant_scales=scales, quant_zero_points=zeros), want)
    ret = getattr(torch.ops, TORCH_NPU_NS).npu_quant_scatter_(inp, indices, updates, scales,
                                                              zeros, dst_type=1)
    assert ret is inp and torch.equal(inp, want)
    with pytest.raises(TypeError, match="got both 'input' and its alias 'self'"):
        na.npu_quant_scatter(inp, indices, updates, scales, self=inp)


def test_empty_batch_writes_nothing():
    inp = torch.full((2, 3, 32), 7, dtype=torch.int8)
    out = na.npu_quant_scatter_(inp, torch.zeros(0, dtype=torch.int32),
                                torch.zeros(0, 1, 32, dtype=torch.bfloat16),
                                torch.ones(32, dtype=torch.bfloat16))
    assert out is inp and (inp == 7).all()


# -- float8 / hifloat8 destinations (950) ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_float8_dst_on_950(dtype):
    inp, indices, updates, scales, zeros = make(index_dims=2, inp_dtype=dtype)
    big = torch.tensor([[[1e6, -1e6, 5e5, -5e5, 460.0, 470.0, 61000.0, 62000.0]]],
                       dtype=torch.bfloat16)
    updates[:1, :1, :8] = big
    updates[1, 0, 8] = math.nan
    with na.strict("950"):
        want = golden(inp, indices, updates, scales, zeros, -2, fmt=str(dtype)[6:])
        out = both(inp, indices, updates, scales, zeros, dst_type=dtype)
    assert torch.equal(bits(out), want)
    top = 448.0 if dtype == torch.float8_e4m3fn else 57344.0
    row, start = int(indices[0, 0]), int(indices[0, 1])
    written = out[row, start, :4].to(torch.float32).tolist()
    assert written == [top, -top, top, -top]              # saturated, never inf / NaN
    assert bits(out)[int(indices[1, 0]), int(indices[1, 1]), 8] == 0    # NaN -> +0
    # torch_npu's own dtype codes select the same format
    code = 292 if dtype == torch.float8_e4m3fn else 291
    again = na.npu_quant_scatter(inp, indices, updates, scales, zeros, dst_type=code)
    assert torch.equal(bits(again), bits(out))


def test_float8_round_mode_and_container_rules():
    inp, indices, updates, scales, zeros = make(inp_dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match=f"{OP} round_mode one of \\['rint'\\] for dst format "
                       "float8_e5m2"):
        na.npu_quant_scatter(inp, indices, updates, scales, zeros, dst_type=torch.float8_e5m2,
                             round_mode="round")
    before = bits(inp).clone()
    with pytest.raises(TypeError, match=f"{IOP} input dtype int8 \\(the storage of dst_type's "
                       "format int8; dst_type None means int8\\), but got float8_e5m2"):
        na.npu_quant_scatter_(inp, indices, updates, scales, zeros)
    with pytest.raises(TypeError, match=f"{IOP} input dtype float8_e4m3fn"):
        na.npu_quant_scatter_(inp, indices, updates, scales, zeros,
                              dst_type=torch.float8_e4m3fn)
    assert torch.equal(bits(inp), before)


def test_hifloat8_dst_on_950():
    """hifloat8 codes in a uint8 input: "round" against the CANN golden's cast (clip to +-2^15,
    NaN -> 0, en_dtypes' half-away-from-zero); "hybrid" reaches the quant core's CAST_HYBRID
    (itself checked against the instruction's rules in tests/ops/quant/test_hifloat8.py)."""
    inp, indices, updates, scales, zeros = make(inp_dtype=torch.uint8)
    updates[0, 0, :4] = torch.tensor([1e6, -1e6, math.nan, 0.0])
    with pytest.raises(ValueError, match=f"{OP} round_mode one of \\['round', 'hybrid'\\]"):
        na.npu_quant_scatter(inp, indices, updates, scales, zeros, dst_type=290)
    y = updates.float() / scales.float().reshape(-1) + zeros.float().reshape(-1)
    for mode, want_rows in (("round", hifloat8_golden(y)),
                            ("hybrid", core.cast_to(y, core.FORMATS["hifloat8"],
                                                    round_mode="hybrid"))):
        with na.strict("950"):
            out = both(inp, indices, updates, scales, zeros, dst_type=290, round_mode=mode)
        assert out.dtype == torch.uint8
        for i in range(indices.shape[0]):
            start = int(indices[i])
            assert torch.equal(out[i, start:start + 2], want_rows[i])
        untouched = torch.ones_like(out, dtype=torch.bool)
        for i in range(indices.shape[0]):
            untouched[i, int(indices[i]):int(indices[i]) + 2] = False
        assert torch.equal(out[untouched], inp[untouched])


# -- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bad,match", [
    ("offset_past_end", "indices offsets along axis -2 in \\[0, 3\\]"),
    ("negative_offset", "indices offsets along axis -2 in \\[0, 3\\]"),
    ("batch_index", "indices batch indices \\(column 0\\) in \\[0, 3\\]"),
])
def test_out_of_range_raises_and_changes_nothing(bad, match):
    inp, indices, updates, scales, zeros = make(index_dims=2 if bad == "batch_index" else 1)
    if bad == "offset_past_end":
        indices[-1] = 4
    elif bad == "negative_offset":
        indices[1] = -1
    else:
        indices[-1, 0] = 4
    before = inp.clone()
    for fn, prefix in ((na.npu_quant_scatter, OP), (na.npu_quant_scatter_, IOP)):
        with pytest.raises(IndexError, match=f"{prefix} {match}"):
            fn(inp, indices, updates, scales, zeros)
        assert torch.equal(inp, before)


def test_last_offset_is_writable():
    inp, indices, updates, scales, zeros = make()
    indices[:] = inp.shape[1] - updates.shape[1]
    want = golden(inp, indices, updates, scales, zeros, -2)
    assert torch.equal(na.npu_quant_scatter(inp, indices, updates, scales, zeros), want)


@pytest.mark.parametrize("change,error,match", [
    ("reduce", ValueError, "reduce one of \\['update'\\], but got 'max'"),
    ("dst_uint8", ValueError, "dst_type one of"),
    ("float64_updates", TypeError, "updates dtype in \\['float16', 'bfloat16'\\]"),
    ("fp16_with_bf16_scales", TypeError, "quant_scales dtype float32 \\(with float16 updates\\)"),
    ("fp16_with_bf16_zeros", TypeError, "quant_zero_points dtype int32 \\(with float16"),
    ("float_indices", TypeError, "indices dtype in"),
    ("int16_input", TypeError, "input dtype int8"),
    ("axis_out", ValueError, "axis in \\[-2, -1\\) or \\[1, 2\\)"),
    ("axis_neg_first", ValueError, "axis in"),
    ("quant_axis_0", ValueError, "quant_axis -1 or 2 \\(only the last dim of updates\\)"),
    ("rank_mismatch", RuntimeError, "updates 3 dims \\(the rank of input\\)"),
    ("too_many_rows", RuntimeError, "updates dim 0 <= input's dim 0"),
    ("span", RuntimeError, "updates the shape of input"),
    ("zeros_numel", RuntimeError, "quant_zero_points 32 elements"),
    ("scales_0d", ValueError, "quant_scales a tensor with one of"),
    ("rank9", ValueError, "input a tensor with one of \\[3, 4, 5, 6, 7, 8\\] dims"),
])
def test_bad_metadata_raises_and_changes_nothing(change, error, match):
    inp, indices, updates, scales, zeros = make(torch.float16, index_dtype=torch.int64)
    kw = {}
    if change == "reduce":
        kw["reduce"] = "max"
    elif change == "dst_uint8":
        kw["dst_type"] = torch.uint8
    elif change == "float64_updates":
        updates = updates.double()
    elif change == "fp16_with_bf16_scales":
        scales = scales.bfloat16()
    elif change == "fp16_with_bf16_zeros":
        zeros = zeros.bfloat16()
    elif change == "float_indices":
        indices = indices.float()
    elif change == "int16_input":
        inp = inp.short()
    elif change == "axis_out":
        kw["axis"] = 2
    elif change == "axis_neg_first":
        kw["axis"] = -3
    elif change == "quant_axis_0":
        kw["quant_axis"] = 0
    elif change == "rank_mismatch":
        updates = updates[:, None]
    elif change == "too_many_rows":
        inp = inp[:2]
    elif change == "span":
        updates = torch.cat([updates] * 3, dim=1)
    elif change == "zeros_numel":
        zeros = torch.cat([zeros, zeros])
    elif change == "scales_0d":
        scales = scales[0]
    else:
        inp = inp.reshape((1,) * 6 + inp.shape)
        updates = updates.reshape((1,) * 6 + updates.shape)
    before = inp.clone()
    for fn, prefix in ((na.npu_quant_scatter, OP), (na.npu_quant_scatter_, IOP)):
        with pytest.raises(error, match=f"{prefix} {match}"):
            fn(inp, indices, updates, scales, zeros, **kw)
        assert torch.equal(inp, before)


def test_strict_mode_products_and_rules():
    args = make()
    with na.strict("910"), pytest.raises(RuntimeError, match=f"{OP} a product the op supports"):
        na.npu_quant_scatter(*args)
    for product in ("A2", "A3", "310P", "950"):
        fp16 = make(torch.float16)
        with na.strict(product):
            na.npu_quant_scatter(*fp16)
            na.npu_quant_scatter(*fp16, dst_type=torch.int8, round_mode="rint")
    with na.strict("A2"):
        na.npu_quant_scatter(*args)
        with pytest.raises(ValueError, match=f"{OP} dst_type None or torch.int8 on A2"):
            na.npu_quant_scatter(*make(inp_dtype=torch.float8_e4m3fn),
                                 dst_type=torch.float8_e4m3fn)
        # last dim 16: 16 int8 bytes (input) are not 32-byte aligned
        with pytest.raises(ValueError, match=f"{OP} input a last dim of a multiple of 32 bytes "
                           "\\(32 int8 elements\\) on A2"):
            na.npu_quant_scatter(*make(shape=(4, 5, 16)))
    with na.strict("310P"), pytest.raises(TypeError, match=f"{OP} updates dtype in "
                                          "\\['float16'\\] on 310P"):
        na.npu_quant_scatter(*args)
    with na.strict("950"):
        na.npu_quant_scatter(*make(shape=(4, 5, 16)))      # no alignment rule on the 950
        na.npu_quant_scatter(*make(inp_dtype=torch.float8_e5m2), dst_type=torch.float8_e5m2)


def test_no_autograd():
    inp, indices, updates, scales, zeros = make(torch.float16)
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.npu_quant_scatter(inp, indices, updates.requires_grad_(), scales, zeros)
