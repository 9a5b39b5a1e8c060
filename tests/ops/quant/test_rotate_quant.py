"""Tests for npu_rotate_quant against the doc's definition (op-plugin
torch_npu-npu_rotate_quant.md and its golden test_npu_rotate_quant.py)::

    x_rot = (x.reshape(-1, N / K, K) @ rotation).reshape(x.shape)   # in x's dtype
    int8/int4 (A2/A3): scale = rowMax(|x_rot|) / DTYPE_MAX;  y = round(x_rot / scale)
    MX (950): npu_dynamic_mx_quant(x_rot, block 32)  -- golden in mx_goldens.py
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mx_goldens import mx_golden, unpack_nibbles  # noqa: E402
from quant_goldens import half_even, rand, unpack_int4_bytes  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def golden(x, rot, dtype_max):
    m, n = x.shape
    k = rot.shape[0]
    v = (x.to(torch.float64).reshape(m, n // k, k) @ rot.to(torch.float64)).reshape(m, n)
    v = v.to(x.dtype).to(torch.float64)          # the rotation's result is stored in x's dtype
    amax = v.abs().amax(dim=-1, keepdim=True)
    return v / (amax / dtype_max), (amax / dtype_max).squeeze(-1)


def compare(y, exact, lo, hi):
    """equal to round-half-even of the exact quotient except rare +-1 steps (float32 vs
    float64 accumulation can move the x-dtype rounding of the rotation by one ulp)."""
    diff = (y.to(torch.float64) - half_even(exact).clamp(lo, hi)).abs()
    assert diff.max() <= 1
    assert int((diff > 0).sum()) <= max(3, diff.numel() // 200)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 128, 16), (3, 136, 17), (5, 256, 64), (2, 1024, 1024)])
def test_int8_matches_formula(dtype, m, n, k):
    x = rand((m, n), dtype, seed=n)
    rot = rand((k, k), dtype, seed=k) / k ** 0.5
    y, scale = na.npu_rotate_quant(x, rot)
    assert y.dtype == torch.int8 and y.shape == (m, n)
    assert scale.dtype == torch.float32 and scale.shape == (m,)
    exact, scale64 = golden(x, rot, 127.0)
    compare(y, exact, -128, 127)
    torch.testing.assert_close(scale.double(), scale64, rtol=1e-2 if dtype != torch.float32
                               else 1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_matches_formula(dtype):
    x = rand((4, 256), dtype, seed=9)
    rot = rand((32, 32), dtype, seed=10) / 32 ** 0.5
    for dst in (torch.quint4x2, 285):
        y, scale = na.npu_rotate_quant(x, rot, dst_dtype=dst)
        assert y.dtype == torch.int32 and y.shape == (4, 32) and scale.shape == (4,)
        exact, _ = golden(x, rot, 7.0)
        compare(unpack_int4_bytes(y), exact, -8, 7)


ROW = [127.0, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -1.5]


@pytest.mark.parametrize("mode,want", [("rint", [127, 2, 4, -2, 0, 0, 2, -2]),
                                       ("round", [127, 3, 4, -3, 1, -1, 2, -2]),
                                       ("floor", [127, 2, 3, -3, 0, -1, 1, -2])])
def test_round_modes_at_exact_ties(mode, want):
    # identity rotation and amax 127: scale 1, x_rot / scale hits .5 exactly
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    x[0, :8] = torch.tensor(ROW)
    y, scale = na.npu_rotate_quant(x, torch.eye(16, dtype=torch.bfloat16), round_mode=mode)
    assert scale.tolist() == [1.0]
    assert y[0, :8].tolist() == want and y[0, 8:].eq(0).all()


def test_int4_ties_and_saturation_free_range():
    x = torch.zeros(1, 128, dtype=torch.float16)
    x[0, :8] = torch.tensor([7.0, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -7.0])
    y, scale = na.npu_rotate_quant(x, torch.eye(16, dtype=torch.float16), dst_dtype=285)
    assert scale.tolist() == [1.0]
    assert unpack_int4_bytes(y)[0, :8].tolist() == [7, 2, 4, -2, 0, 0, 2, -7]


def test_rotation_is_applied_per_block():
    # a permutation rotation moves columns inside each block of K
    k = 16
    perm = torch.eye(k)[torch.arange(k).flip(0)]
    x = torch.arange(128, dtype=torch.float32).reshape(1, 128) - 60
    y, _ = na.npu_rotate_quant(x, perm)
    y_ref, _ = na.npu_rotate_quant(x.reshape(1, 8, k).flip(-1).reshape(1, 128), torch.eye(k))
    assert torch.equal(y, y_ref)


def test_zero_and_nan_rows():
    x = rand((3, 128), torch.float32, seed=11)
    x[0] = 0
    x[1, 3] = float("nan")
    y, scale = na.npu_rotate_quant(x, torch.eye(16))
    assert scale[0].item() == 0.0 and y[0].eq(0).all()
    assert torch.isnan(scale[1]) and y[1].eq(0).all()
    assert y[2].abs().max().item() == 127


def test_non_contiguous_and_inputs_unchanged():
    x = rand((128, 3), torch.float16, seed=12).t()
    rot = rand((16, 16), torch.float16, seed=13).t()
    saved = (x.clone(), rot.clone())
    y, scale = na.npu_rotate_quant(x, rot)
    assert torch.equal(x, saved[0]) and torch.equal(rot, saved[1])
    y2, scale2 = na.npu_rotate_quant(x.contiguous(), rot.contiguous())
    assert torch.equal(y, y2) and torch.equal(scale, scale2)


@pytest.mark.parametrize("kwargs,exc,msg", [
    ({"dst_dtype": torch.float16}, ValueError, "expected dst_dtype one of"),
    ({"dst_dtype": 297}, ValueError, "expected dst_dtype one of"),
    ({"axis": 0}, ValueError, "expected axis -1 or 1"),
    ({"round_mode": "ceil"}, ValueError, "expected round_mode one of"),
    ({"scale_alg": 1}, ValueError, "expected scale_alg 0"),
    ({"dst_type_max": 6.0}, ValueError, "expected dst_type_max 0.0"),
    ({"transpose_y": True}, ValueError, "expected transpose_y False"),
])
def test_bad_arguments(kwargs, exc, msg):
    x, rot = torch.ones(2, 128, dtype=torch.float16), torch.eye(16, dtype=torch.float16)
    with pytest.raises(exc, match="npu_rotate_quant: " + msg):
        na.npu_rotate_quant(x, rot, **kwargs)


@pytest.mark.parametrize("xs,rs,exc,msg", [
    ((2, 128), (8, 8), ValueError, "expected rotation K in"),
    ((2, 120), (20, 20), RuntimeError, "expected x a last dim in"),
    ((2, 136), (16, 16), RuntimeError, "expected x a last dim in"),
    ((2, 16008), (24, 24), RuntimeError, "expected x a last dim in"),
    ((2, 128), (16, 8), RuntimeError, "expected rotation a square"),
    ((2, 2, 128), (16, 16), ValueError, "expected x a 2-D tensor"),
])
def test_bad_shapes(xs, rs, exc, msg):
    with pytest.raises(exc, match="npu_rotate_quant: " + msg):
        na.npu_rotate_quant(torch.ones(xs), torch.ones(rs))


def test_bad_dtypes():
    with pytest.raises(TypeError, match="npu_rotate_quant: expected rotation the dtype of x"):
        na.npu_rotate_quant(torch.ones(2, 128), torch.eye(16, dtype=torch.float16))
    with pytest.raises(TypeError, match="npu_rotate_quant: expected x dtype"):
        na.npu_rotate_quant(torch.ones(2, 128).double(), torch.eye(16).double())


def test_alpha_and_strict_products():
    x, rot = torch.ones(2, 128, dtype=torch.bfloat16), torch.eye(16, dtype=torch.bfloat16)
    y, s = na.npu_rotate_quant(x, rot, alpha=torch.tensor([0.5]))     # no effect on int output
    assert torch.equal(y, na.npu_rotate_quant(x, rot)[0])
    with targets.strict("A2"):
        na.npu_rotate_quant(x, rot)
        with pytest.raises(ValueError, match="npu_rotate_quant: expected alpha None"):
            na.npu_rotate_quant(x, rot, alpha=torch.tensor([0.5]))
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_rotate_quant(x.float(), rot.float())
    with targets.strict("950"):
        with pytest.raises(ValueError, match="npu_rotate_quant: expected dst_dtype an MX"):
            na.npu_rotate_quant(x, rot)


def test_no_autograd():
    with pytest.raises(RuntimeError, match="npu_rotate_quant: expected inputs"):
        na.npu_rotate_quant(torch.ones(2, 128, requires_grad=True), torch.eye(16))


def test_compiled_provider_matches_reference():
    kwargs = {"dst_dtype": torch.quint4x2, "round_mode": "round"}
    from npu_anywhere import use_providers
    from npu_anywhere.kernels import compiled
    x, rot = rand((5, 256), torch.float16, seed=23), rand((32, 32), torch.float16, seed=24)
    with use_providers("reference"):
        ref = na.npu_rotate_quant(x, rot, **kwargs)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = na.npu_rotate_quant(x, rot, **kwargs)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape and torch.equal(r, g)


# -- MX outputs (Ascend 950) ---------------------------------------------------------------------

MX = [(torch.float8_e4m3fn, "float8_e4m3fn"), (torch.float8_e5m2, "float8_e5m2"),
      (296, "float4_e2m1")]


def hadamard(k, dtype, shift=0):
    """+-1/4 Hadamard matrix (columns rolled by ``shift``): with x on a 1/16 grid every product
    and sum is exact in float32 and float64, so the rotation's rounding is deterministic."""
    h = torch.ones(1, 1)
    while h.shape[0] < k:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h.roll(shift, dims=1) / 4).to(dtype)


def grid_x(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-127, 128, shape, generator=g) / 16).to(dtype)


def rotate64(x, rotation):
    """The rotation in float64 (exact for the inputs above), rounded to x's dtype."""
    n, k = x.shape[-1], rotation.shape[-1]
    b = x.to(torch.float64).reshape(-1, n // k, k)
    r = rotation.to(torch.float64)
    out = torch.einsum("mbk,kj->mbj", b, r) if r.dim() == 2 else \
        torch.einsum("mbk,bkj->mbj", b, r)
    return out.reshape(x.shape).to(x.dtype)


def mx_codes(y, fmt):
    return unpack_nibbles(y) if fmt == "float4_e2m1" else y.view(torch.uint8).to(torch.int64)


def check_mx(y, scale, x_rot, fmt, mode="rint", alg=0, dmax=0.0):
    _, codes, want_scale = mx_golden(x_rot, fmt, mode, alg, dmax)
    n = x_rot.shape[-1]
    assert scale.dtype == torch.float8_e8m0fnu
    assert scale.shape == (*x_rot.shape[:-1], -(-n // 64), 2)
    if fmt == "float4_e2m1":
        assert y.dtype == torch.uint8 and y.shape == (*x_rot.shape[:-1], n // 2)
    else:
        assert y.dtype == getattr(torch, fmt) and y.shape == x_rot.shape
    assert torch.equal(scale.view(torch.uint8).to(torch.int64), want_scale)
    assert torch.equal(mx_codes(y, fmt), codes)


@pytest.mark.parametrize("dst,fmt", MX)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,k,three_d", [((128,), 32, False), ((3, 256), 64, True),
                                             ((2, 3, 384), 128, False), ((2, 96), 32, True)])
def test_mx_matches_formula(dst, fmt, dtype, shape, k, three_d):
    x = grid_x(shape, dtype, seed=shape[-1] + k)
    n = shape[-1]
    rot = torch.stack([hadamard(k, dtype, shift=b) for b in range(n // k)]) if three_d \
        else hadamard(k, dtype)
    y, scale = na.npu_rotate_quant(x, rot, dst_dtype=dst)
    check_mx(y, scale, rotate64(x, rot), fmt)


@pytest.mark.parametrize("dst,fmt,mode,alg,dmax", [
    (torch.float8_e4m3fn, "float8_e4m3fn", "rint", 1, 0.0),
    (torch.float8_e5m2, "float8_e5m2", "rint", 1, 0.0),
    (296, "float4_e2m1", "round", 0, 0.0), (296, "float4_e2m1", "floor", 0, 0.0),
    (296, "float4_e2m1", "rint", 2, 0.0), (296, "float4_e2m1", "round", 2, 6.0),
    (296, "float4_e2m1", "floor", 2, 7.0), (296, "float4_e2m1", "rint", 2, 10.5),
    (291, "float8_e5m2", "rint", 0, 0.0), (292, "float8_e4m3fn", "rint", 0, 0.0)])
def test_mx_modes_and_scale_algs(dst, fmt, mode, alg, dmax):
    x = grid_x((4, 192), torch.bfloat16, seed=alg)
    rot = hadamard(64, torch.bfloat16)
    y, scale = na.npu_rotate_quant(x, rot, dst_dtype=dst, round_mode=mode, scale_alg=alg,
                                   dst_type_max=dmax)
    check_mx(y, scale, rotate64(x, rot), fmt, mode, alg, dmax)


FP4_ROW = [6.0, 2.5, -2.5, 0.75, -0.25, 5.0, 3.5, -7.0]


@pytest.mark.parametrize("mode,want", [
    ("rint", [6.0, 2.0, -2.0, 1.0, -0.0, 4.0, 4.0, -6.0]),
    ("round", [6.0, 3.0, -3.0, 1.0, -0.5, 6.0, 4.0, -6.0]),
    ("floor", [6.0, 2.0, -3.0, 0.5, -0.5, 4.0, 3.0, -6.0])])
def test_fp4_round_modes_at_exact_ties(mode, want):
    # identity rotation, block maximum 7: floor(log2 7) - emax(2) = 0, scale 1 (code 127)
    x = torch.zeros(1, 64, dtype=torch.bfloat16)
    x[0, :8] = torch.tensor(FP4_ROW)
    y, scale = na.npu_rotate_quant(x, torch.eye(32, dtype=torch.bfloat16), dst_dtype=296,
                                   round_mode=mode)
    assert scale.view(torch.uint8).tolist() == [[[127, 0]]]
    table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    got = [(-1.0 if c & 8 else 1.0) * table[c & 7] for c in unpack_nibbles(y)[0, :8].tolist()]
    assert got == want and [math.copysign(1, g) for g in got] == [math.copysign(1, w)
                                                                   for w in want]
    assert unpack_nibbles(y)[0, 8:].eq(0).all()


def test_mx_random_rotation_close_to_float64():
    # a general rotation: float32 vs float64 sums may round x_rot to the other bfloat16
    x = rand((8, 512), torch.bfloat16, seed=3)
    rot = rand((128, 128), torch.bfloat16, seed=4) / 128 ** 0.5
    y, scale = na.npu_rotate_quant(x, rot, dst_dtype=torch.float8_e4m3fn)
    _, codes, want_scale = mx_golden(rotate64(x, rot), "float8_e4m3fn")
    assert (scale.view(torch.uint8).to(torch.int64) != want_scale).sum() <= 2
    assert (mx_codes(y, "float8_e4m3fn") != codes).float().mean() < 0.01


def test_mx_alpha_clamps_each_block():
    x = grid_x((3, 128), torch.bfloat16, seed=5)
    rot = hadamard(32, torch.bfloat16)
    x_rot = rotate64(x, rot)
    base = na.npu_rotate_quant(x, rot, dst_dtype=296)
    for alpha in (0.5, 0.3):
        y, scale = na.npu_rotate_quant(x, rot, alpha=torch.tensor([alpha, 7.0]), dst_dtype=296)
        groups = x_rot.to(torch.float64).reshape(-1, 32)
        limit = (alpha * groups.abs().amax(-1, keepdim=True)).to(torch.bfloat16).double()
        clipped = torch.maximum(torch.minimum(groups, limit), -limit)
        check_mx(y, scale, clipped.reshape(x_rot.shape).to(torch.bfloat16), "float4_e2m1")
        assert not torch.equal(y, base[0])
    for no_effect in ([0.0], [1.0], [1.5], [-0.5], [float("nan")], []):
        y, scale = na.npu_rotate_quant(x, rot, alpha=torch.tensor(no_effect), dst_dtype=296)
        assert torch.equal(y, base[0]) and torch.equal(scale.view(torch.uint8),
                                                       base[1].view(torch.uint8))


def test_mx_zero_nan_and_tiny_blocks():
    x = grid_x((3, 64), torch.bfloat16, seed=6)
    x[0] = 0
    x[1, 40] = float("nan")
    x[2, :32] = x[2, :32] * 2.0 ** -122            # e4m3: scale code 0, written as zeros
    eye = torch.eye(32, dtype=torch.bfloat16)
    y, scale = na.npu_rotate_quant(x, eye, dst_dtype=torch.float8_e4m3fn)
    codes = scale.view(torch.uint8)
    assert codes[0].eq(0).all() and y[0].view(torch.uint8).eq(0).all()
    assert codes[1, 0, 1].item() == 255 and y[1, 32:].view(torch.uint8).eq(0).all()
    assert codes[2, 0, 0].item() == 0 and y[2, :32].float().eq(0).all()
    check_mx(y, scale, x, "float8_e4m3fn")


def test_mx_non_contiguous_and_inputs_unchanged():
    x = grid_x((128, 3), torch.float16, seed=7).t()
    rot = hadamard(32, torch.float16).t()
    saved = (x.clone(), rot.clone())
    y, scale = na.npu_rotate_quant(x, rot, dst_dtype=296, round_mode="floor")
    assert torch.equal(x, saved[0]) and torch.equal(rot, saved[1])
    y2, scale2 = na.npu_rotate_quant(x.contiguous(), rot.contiguous(), dst_dtype=296,
                                     round_mode="floor")
    assert torch.equal(y, y2) and torch.equal(scale.view(torch.uint8), scale2.view(torch.uint8))


@pytest.mark.parametrize("xs,rs,kwargs,exc,msg", [
    ((2, 128), (16, 16), {}, ValueError, "expected rotation K in [32, 64, 128] for MX"),
    ((2, 128), (32, 16), {}, RuntimeError, "expected rotation (K, K) or (N / K, K, K)"),
    ((2, 96), (64, 64), {}, RuntimeError, "expected x a last dim divisible by K (64)"),
    ((2, 128), (3, 32, 32), {}, RuntimeError, "expected rotation N / K = 4 matrices"),
    ((1,) * 7 + (64,), (32, 32), {}, ValueError, "expected x 1 to 7 dims"),
    ((2, 64), (32, 32), {"axis": 0}, ValueError, "expected axis -1 or 1 (the last dim)"),
    ((2, 64), (32, 32), {"round_mode": "round"}, ValueError, "expected round_mode 'rint' for"),
    ((2, 64), (32, 32), {"scale_alg": 2}, ValueError, "expected scale_alg one of [0, 1]"),
    ((2, 64), (32, 32), {"dst_type_max": 6.0}, ValueError, "expected dst_type_max 0.0 unless"),
    ((2, 64), (32, 32), {"alpha": torch.tensor([1])}, TypeError, "expected alpha dtype in"),
    ((2, 64), (32, 32), {"alpha": torch.ones(1, 1)}, ValueError, "expected alpha a 1-D"),
])
def test_mx_bad_arguments(xs, rs, kwargs, exc, msg):
    x, rot = torch.ones(xs, dtype=torch.bfloat16), torch.ones(rs, dtype=torch.bfloat16)
    with pytest.raises(exc, match="npu_rotate_quant: " + re.escape(msg)):
        na.npu_rotate_quant(x, rot, dst_dtype=torch.float8_e4m3fn, **kwargs)


@pytest.mark.parametrize("kwargs,msg", [
    ({"scale_alg": 1}, "expected scale_alg one of [0, 2] for float4_e2m1"),
    ({"scale_alg": 2, "dst_type_max": 5.0}, "expected dst_type_max 0.0 or a value in [6.0, 12.0]"),
    ({"scale_alg": 2, "dst_type_max": 12.5}, "expected dst_type_max 0.0 or a value in"),
    ({"round_mode": "ceil"}, "expected round_mode one of"),
])
def test_fp4_bad_arguments(kwargs, msg):
    x, rot = torch.ones(2, 64, dtype=torch.bfloat16), torch.eye(32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="npu_rotate_quant: " + re.escape(msg)):
        na.npu_rotate_quant(x, rot, dst_dtype=296, **kwargs)


def test_mx_strict_products():
    x, rot = grid_x((2, 64), torch.bfloat16, seed=8), hadamard(32, torch.bfloat16)
    for product in ("A2", "A3"):
        with targets.strict(product), pytest.raises(
                ValueError, match="npu_rotate_quant: expected dst_dtype torch.int8 or "
                                  "torch.quint4x2 on " + product):
            na.npu_rotate_quant(x, rot, dst_dtype=296)
    with targets.strict("950"):
        y, _ = na.npu_rotate_quant(x, rot, dst_dtype=296, alpha=torch.tensor([0.5]))
        y, _ = na.npu_rotate_quant(x.half(), rot.half(), dst_dtype=torch.float8_e5m2)
        na.npu_rotate_quant(x, rot, dst_dtype=296, scale_alg=2, dst_type_max=6.0)
        with pytest.raises(ValueError, match="expected dst_type_max a value in \\[6.0, 12.0\\] "
                                             "for scale_alg 2 on 950"):
            na.npu_rotate_quant(x, rot, dst_dtype=296, scale_alg=2)
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16 on 950"):
            na.npu_rotate_quant(x.float(), rot.float(), dst_dtype=296)
    # outside strict mode dst_type_max 0.0 with scale_alg 2 means 6.0 (aclnnDynamicMxQuantV3)
    a = na.npu_rotate_quant(x, rot, dst_dtype=296, scale_alg=2)
    b = na.npu_rotate_quant(x, rot, dst_dtype=296, scale_alg=2, dst_type_max=6.0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))


def test_mx_float32_input_outside_strict_mode():
    x = grid_x((2, 64), torch.float32, seed=9)
    rot = hadamard(32, torch.float32)
    y, scale = na.npu_rotate_quant(x, rot, dst_dtype=torch.float8_e4m3fn)
    check_mx(y, scale, rotate64(x, rot), "float8_e4m3fn")


def test_compiled_provider_matches_reference_mx():
    from npu_anywhere import use_providers
    from npu_anywhere.kernels import compiled
    x = grid_x((5, 256), torch.bfloat16, seed=10)
    rot = torch.stack([hadamard(64, torch.bfloat16, shift=b) for b in range(4)])
    kwargs = {"dst_dtype": 296, "round_mode": "round", "alpha": torch.tensor([0.6])}
    with use_providers("reference"):
        ref = na.npu_rotate_quant(x, rot, **kwargs)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = na.npu_rotate_quant(x, rot, **kwargs)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape
        assert torch.equal(r.view(torch.uint8), g.view(torch.uint8))
