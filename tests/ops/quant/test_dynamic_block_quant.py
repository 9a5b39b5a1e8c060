"""Tests for npu_dynamic_block_quant against goldens written from the CANN doc
(aclnnDynamicBlockQuant.md)::

    input_max = block_reduce_max(abs(x))
    scale     = min(input_max / DTYPE_MAX, 1 / min_scale)
    y         = cast(x / scale)

The float64 golden accepts either neighbour only within a hair of a .5 boundary; the kernel
order golden (float32: scale = amax / DTYPE_MAX, y = x / scale, hicann/ops-nn
quant/dynamic_block_quant/op_kernel/arch35/) must match bit for bit.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import (  # noqa: E402
    float8_golden, half_even, hifloat8_golden, rand, same_bits)

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
MAXES = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def blocks_golden(x, r, c, dtype_max, min_scale=0.0):
    """float64 (exact quotient x / scale, scale) with the scale expanded per element and the
    block scale grid."""
    v = x.to(torch.float64)
    if v.dim() == 2:
        v = v.unsqueeze(0)
    b, m, n = v.shape
    mb, nb = math.ceil(m / r), math.ceil(n / c)
    grid = torch.empty(b, mb, nb, dtype=torch.float64)
    full = torch.empty_like(v)
    for bi in range(b):
        for i in range(mb):
            for j in range(nb):
                blk = v[bi, i * r:(i + 1) * r, j * c:(j + 1) * c]
                s = blk.abs().max() / dtype_max
                if min_scale > 0 and s < math.inf:
                    s = torch.minimum(s, torch.tensor(1.0 / min_scale, dtype=torch.float64))
                grid[bi, i, j] = s
                full[bi, i * r:(i + 1) * r, j * c:(j + 1) * c] = s
    exact = v / full
    if x.dim() == 2:
        return exact[0], full[0], grid[0]
    return exact, full, grid


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,r,c", [((1, 7), 1, 128), ((3, 130), 1, 128),
                                       ((2, 65, 70), 64, 64), ((5, 200), 1, 192),
                                       ((130, 300), 128, 256), ((513, 64), 512, 64)])
def test_int8_matches_doc_formula(dtype, shape, r, c):
    x = rand(shape, dtype, seed=shape[-1])
    y, scale = na.npu_dynamic_block_quant(x, row_block_size=r, col_block_size=c)
    assert y.dtype == torch.int8 and y.shape == x.shape
    exact, full, grid = blocks_golden(x, r, c, 127.0)
    assert scale.dtype == torch.float32 and scale.shape == grid.shape
    # amax is exact in float32, so the float32 division is the rounded float64 quotient
    assert torch.equal(scale, grid.to(torch.float32))
    # bit for bit against the kernel order: float32 x / float32 scale, half to even
    want = torch.round(x.to(torch.float32) / full.to(torch.float32)).clamp(-128, 127)
    assert torch.equal(y.to(torch.float32), want)
    # and the doc formula in float64 up to the float32 scale rounding (which decides exact
    # ties: bfloat16 data hits x / scale == k + .5 often, so no flip budget here)
    assert_near_ties(y, exact)


def assert_near_ties(y, exact, window=2e-6):
    want = half_even(exact)
    diff = (y.to(torch.float64) - want).abs()
    frac = exact - torch.floor(exact)
    near = (frac - 0.5).abs() <= window * exact.abs().clamp_min(1.0)
    assert not ((diff > 0) & ~(near & (diff <= 1))).any()


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float8_kernel_order(dst, dtype):
    x = rand((3, 40, 130), dtype, seed=7)
    y, scale = na.npu_dynamic_block_quant(x, dst_type=dst, row_block_size=64, col_block_size=64)
    assert y.dtype == dst and y.shape == x.shape and scale.shape == (3, 1, 3)
    exact, full, grid = blocks_golden(x, 64, 64, MAXES[dst])
    s32 = full.to(torch.float32)
    want = (x.to(torch.float32) / s32).clamp(-MAXES[dst], MAXES[dst]).to(dst)
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))
    # and within float8 resolution of the exact quotient
    torch.testing.assert_close(y.to(torch.float64), exact, rtol=0.13, atol=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dst_type_max", [0.0, 15.0, 224.0, 32768.0])
def test_hifloat8_kernel_order(dtype, dst_type_max):
    # DTYPE_MAX = dst_type_max, 0 meaning 32768; float32 scale = amax / DTYPE_MAX, x / scale,
    # then the CANN golden's cast (clip to 2^15, en_dtypes: round half away from zero).
    x = rand((2, 70, 130), dtype, seed=int(dst_type_max) + 3)
    y, scale = na.npu_dynamic_block_quant(x, dst_type=290, round_mode="round",
                                          row_block_size=64, col_block_size=64,
                                          dst_type_max=dst_type_max)
    assert y.dtype == torch.uint8 and y.shape == x.shape and scale.shape == (2, 2, 3)
    exact, full, grid = blocks_golden(x, 64, 64, dst_type_max or 32768.0)
    assert torch.equal(scale, grid.to(torch.float32))
    want = hifloat8_golden(x.to(torch.float32) / full.to(torch.float32))
    assert torch.equal(y, want)


def test_hifloat8_by_hand():
    # amax 15 with dst_type_max 15 -> scale 1; hifloat8 steps 1/8 in [1, 2), 1 in [8, 16)
    x = torch.tensor([[15.0, 1.0625, -14.5, 9.5, 0.0, -1.1875]])
    y, scale = na.npu_dynamic_block_quant(x, dst_type=290, round_mode="round",
                                          col_block_size=64, dst_type_max=15.0)
    assert scale.tolist() == [[1.0]]
    assert y.tolist() == [[0x2F, 0x09, 0xAF, 0x2A, 0x00, 0x8A]]   # ties away from zero
    y0, s0 = na.npu_dynamic_block_quant(torch.zeros(1, 8), dst_type=290, round_mode="round",
                                        col_block_size=64)
    assert s0.tolist() == [[0.0]] and y0.eq(0).all()              # 0 / 0 = NaN -> 0


def test_npu_dtype_codes():
    x = rand((2, 128), torch.float16, seed=1)
    for code, dst in ((1, torch.int8), (23, torch.float8_e5m2), (291, torch.float8_e5m2),
                      (24, torch.float8_e4m3fn), (292, torch.float8_e4m3fn)):
        assert na.npu_dynamic_block_quant(x, dst_type=code)[0].dtype == dst


def test_rint_ties_at_exact_half():
    # amax 127 -> scale exactly 1, so x / scale hits .5 exactly
    row = [127.0, 2.5, 3.5, -2.5, -0.5, 0.5, 1.5, -1.5]
    x = torch.tensor([row], dtype=torch.float32)
    y, scale = na.npu_dynamic_block_quant(x, col_block_size=64)
    assert scale.tolist() == [[1.0]]
    assert y.tolist() == [[127, 2, 4, -2, 0, 0, 2, -2]]


def test_float8_ties_round_half_even():
    # e4m3fn: amax 448 -> scale 1; between 1 and 2 the step is 1/8
    x = torch.tensor([[448.0, 1.0625, 1.1875, -1.0625]])
    y, _ = na.npu_dynamic_block_quant(x, dst_type=torch.float8_e4m3fn, col_block_size=64)
    assert y.float().tolist() == [[448.0, 1.0, 1.25, -1.0]]


def test_min_scale_caps_scale_and_saturates():
    x = torch.tensor([[1000.0, 3.0, -2000.0, 0.5]], dtype=torch.float32)
    y, scale = na.npu_dynamic_block_quant(x, min_scale=1.0, col_block_size=64)
    assert scale.tolist() == [[1.0]]                         # min(2000 / 127, 1 / 1)
    assert y.tolist() == [[127, 3, -128, 0]]                 # saturated at the int8 range
    y8, s8 = na.npu_dynamic_block_quant(x, min_scale=1.0, col_block_size=64,
                                        dst_type=torch.float8_e4m3fn)
    assert y8.float().tolist() == [[448.0, 3.0, -448.0, 0.5]]
    # a min_scale whose bound is above the scale changes nothing
    y2, s2 = na.npu_dynamic_block_quant(x, min_scale=1e-6, col_block_size=64)
    assert s2.item() == pytest.approx(2000 / 127, rel=1e-7)


def test_zero_nan_inf_blocks():
    x = torch.zeros(3, 128, dtype=torch.float16)
    x[1, :64] = torch.linspace(-1, 1, 64, dtype=torch.float16)
    x[1, 5] = float("nan")
    x[2, 3] = float("inf")
    x[2, 70:] = 1.0
    y, scale = na.npu_dynamic_block_quant(x, col_block_size=64)
    assert scale[0].tolist() == [0.0, 0.0] and y[0].eq(0).all()        # 0 / 0 -> 0
    assert math.isnan(scale[1, 0]) and y[1, :64].eq(0).all()            # NaN -> 0
    assert scale[1, 1].item() == 0.0
    assert math.isinf(scale[2, 0]) and y[2, :64].eq(0).all()            # x / inf, inf / inf
    assert y[2, 70:].eq(127).all()


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_zero_nan_inf_blocks(dst):
    # The kernel's block max compares |x| bit patterns (NaN > inf > finite), so a NaN block
    # has scale NaN and an inf block scale inf; the float8 cast is SatMode::SAT, so every NaN
    # quotient (0 / 0, NaN / s, inf / inf, x / NaN) becomes +0 (the CANN golden's
    # nan_to_num), never a float8 NaN.
    x = torch.zeros(4, 128, dtype=torch.bfloat16)
    x[1, :64] = torch.linspace(-3, 3, 64, dtype=torch.bfloat16)
    x[1, 5] = float("nan")
    x[1, 64:] = torch.linspace(-2, 5, 64, dtype=torch.bfloat16)
    x[1, 70] = -float("nan")
    x[2, 3] = float("inf")
    x[2, 70:] = 1.0
    x[3] = torch.linspace(-7, 7, 128, dtype=torch.bfloat16)
    y, scale = na.npu_dynamic_block_quant(x, dst_type=dst, col_block_size=64)
    _, full, grid = blocks_golden(x, 1, 64, MAXES[dst])
    assert torch.equal(scale.isnan(), grid.isnan())
    assert torch.equal(scale.nan_to_num(), grid.to(torch.float32).nan_to_num())
    want = float8_golden(x.to(torch.float32) / full.to(torch.float32), dst)
    assert same_bits(y, want)
    assert not y.float().isnan().any() and not y.float().signbit()[:3].any()
    assert y[:3, :64].float().eq(0).all() and y[1].float().eq(0).all()
    assert y[2, 70:].float().eq(MAXES[dst]).all()


def test_non_contiguous_and_inputs_unchanged():
    base = rand((130, 6), torch.bfloat16, seed=4)
    x = base.t()
    before = x.clone()
    y, scale = na.npu_dynamic_block_quant(x, col_block_size=64)
    assert torch.equal(x, before)
    y2, scale2 = na.npu_dynamic_block_quant(x.contiguous(), col_block_size=64)
    assert torch.equal(y, y2) and torch.equal(scale, scale2)


@pytest.mark.parametrize("kwargs,exc,msg", [
    ({"dst_type": 290}, ValueError, "expected round_mode 'round' for hifloat8 output"),
    ({"dst_type": 290, "round_mode": "round", "dst_type_max": 100.0}, ValueError,
     r"expected dst_type_max one of \[0.0, 15.0, 56.0, 224.0, 32768.0\]"),
    ({"dst_type_max": 15.0}, ValueError, "expected dst_type_max 0 for int8 output"),
    ({"dst_type": 2}, ValueError, "expected dst_type one of"),
    ({"round_mode": "round"}, ValueError, "expected round_mode 'rint'"),
    ({"round_mode": "floor"}, ValueError, "expected round_mode one of"),
    ({"row_block_size": 2}, ValueError, "expected row_block_size one of"),
    ({"col_block_size": 128 + 1}, ValueError, "expected col_block_size one of"),
    ({"min_scale": -0.5}, ValueError, "expected min_scale a value >= 0"),
    ({"min_scale": 1e300}, ValueError, "expected min_scale 0, or a value whose float32"),
    ({"min_scale": 1e-300}, ValueError, "expected min_scale 0, or a value whose float32"),
    ({"min_scale": math.inf}, ValueError, "expected min_scale 0, or a value whose float32"),
    ({"dst_type_max": -1.0}, ValueError, "expected dst_type_max a value >= 0"),
])
def test_bad_arguments(kwargs, exc, msg):
    x = rand((2, 128), torch.float16)
    with pytest.raises(exc, match="npu_dynamic_block_quant: " + msg):
        na.npu_dynamic_block_quant(x, **kwargs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="npu_dynamic_block_quant: expected x 2 or 3 dims"):
        na.npu_dynamic_block_quant(torch.ones(2, 2, 2, 2))
    with pytest.raises(TypeError, match="npu_dynamic_block_quant: expected x dtype"):
        na.npu_dynamic_block_quant(torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="npu_dynamic_block_quant: expected x"):
        na.npu_dynamic_block_quant(torch.ones(0, 2))


def test_strict_products():
    x = rand((2, 128), torch.float16)
    with targets.strict("A2"):
        na.npu_dynamic_block_quant(x)
        with pytest.raises(ValueError, match="expected dst_type torch.int8"):
            na.npu_dynamic_block_quant(x, dst_type=torch.float8_e4m3fn)
        with pytest.raises(ValueError, match="expected col_block_size 128"):
            na.npu_dynamic_block_quant(x, col_block_size=64)
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_dynamic_block_quant(x.float())
    with targets.strict("950"):
        na.npu_dynamic_block_quant(x, dst_type=torch.float8_e4m3fn, col_block_size=64,
                                   row_block_size=64)
    with targets.strict("310P"):
        with pytest.raises(Exception, match="npu_dynamic_block_quant"):
            na.npu_dynamic_block_quant(x)


def test_no_autograd():
    x = rand((2, 128), torch.float32).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_dynamic_block_quant: expected inputs"):
        na.npu_dynamic_block_quant(x)


def _same(a, b):
    if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


def test_compiled_provider_matches_reference():
    # 1 x 128 blocks: the layout that once hit an Inductor miscompile (pad, reduce, slice)
    kwargs = {"dst_type": torch.float8_e4m3fn, "min_scale": 100.0}
    from npu_anywhere import use_providers
    from npu_anywhere.kernels import compiled
    x = rand((3, 70, 300), torch.bfloat16, seed=21)
    with use_providers("reference"):
        ref = na.npu_dynamic_block_quant(x, **kwargs)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = na.npu_dynamic_block_quant(x, **kwargs)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape and _same(r, g)
