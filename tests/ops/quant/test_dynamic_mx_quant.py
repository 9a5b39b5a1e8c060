"""Tests for npu_dynamic_mx_quant against a golden written here from the aclnn doc
(hicann/ops-nn ``quant/dynamic_mx_quant/docs/aclnnDynamicMxQuantV3.md``) and the CANN golden
(``quant/dynamic_mx_quant/tests/assets/golden.py``)::

    scale_alg 0: shared_exp = floor(log2(max|V|)) - emax, code = shared_exp + 127 (>= 0)
    scale_alg 1: S = float32(max(max|V|, max_low_bound) / DTYPE_MAX), code = E(S) + (M(S) > 0)
    P_i = round_on_grid(V_i * 2^-shared_exp), saturated, NaN -> +0
    mxscale: axis -> ceil(blocks / 2), trailing 2; block 2i + j at [.., i, .., j]

The block maxima and scale codes are computed in float64 / numpy float32 bit arithmetic, the
elements are rounded by comparing with the table of the format's values (float8 values decoded
from their bit patterns by torch's float8 dtypes, float4 from the OCP tables), and the layouts
are built by explicit indexing -- nothing here calls npu_anywhere's quantization code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mx_goldens import shared_exponents  # noqa: E402  (scale_alg 2, independent of the op)

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E1M2 = [i * 0.25 for i in range(8)]
EMAX = {"float4_e2m1": 2, "float4_e1m2": 0, "float8_e4m3fn": 8, "float8_e5m2": 15}
DMAX = {"float4_e2m1": 6.0, "float4_e1m2": 1.75, "float8_e4m3fn": 448.0,
        "float8_e5m2": 57344.0}
FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
DST = {"float4_e2m1": 296, "float4_e1m2": 297, "float8_e4m3fn": torch.float8_e4m3fn,
       "float8_e5m2": torch.float8_e5m2}
FP4 = ("float4_e2m1", "float4_e1m2")


def grid(fmt: str) -> np.ndarray:
    if fmt == "float4_e2m1":
        return np.array(E2M1)
    if fmt == "float4_e1m2":
        return np.array(E1M2)
    vals = torch.arange(0, 128, dtype=torch.uint8).view(FP8[fmt]).to(torch.float64).numpy()
    return vals[np.isfinite(vals) & (vals <= DMAX[fmt])]


def round_grid(v: np.ndarray, fmt: str, mode: str) -> np.ndarray:
    """Round to the format's table: nearest (ties to the even code for rint, away from zero
    for round) or toward -inf (floor); saturate; NaN -> +0; zeros keep v's sign."""
    g = grid(fmt)
    a = np.abs(np.nan_to_num(v, nan=0.0))
    hi = np.clip(np.searchsorted(g, a, side="left"), 0, len(g) - 1)
    exact = g[hi] == a
    lo = np.where(exact, hi, np.maximum(hi - 1, 0))
    neg = np.signbit(v) & ~np.isnan(v)
    dl, dh = a - g[lo], g[hi] - a
    if mode == "floor":
        r = np.where(neg, g[hi], g[lo])
    else:
        tie_up = (lo % 2 == 1) if mode == "rint" else np.ones_like(exact)
        r = np.where(dl < dh, g[lo], np.where(dh < dl, g[hi], np.where(tie_up, g[hi], g[lo])))
    r = np.where(a >= g[-1], g[-1], r)
    return np.where(neg, -r, r)


def codes_of(values: np.ndarray, fmt: str) -> np.ndarray:
    """Element codes: float4 sign bit 3 | table index; float8 bit patterns."""
    if fmt in FP4:
        idx = np.searchsorted(grid(fmt), np.abs(values))
        return idx | (np.signbit(values).astype(np.int64) << 3)
    t = torch.from_numpy(values).to(FP8[fmt])
    return t.view(torch.uint8).to(torch.int64).numpy()


def block_codes(amax: np.ndarray, fmt: str, alg: int, dst_type_max: float):
    """(e8m0 codes, multiply-by factor; 0 = write zeros, NaN for code 255)."""
    finite = np.isfinite(amax)
    if alg == 0:
        safe = np.where(finite & (amax > 0), amax, 1.0)
        se = np.floor(np.log2(safe)) - EMAX[fmt]
        code = np.where(amax > 0, np.maximum(se + 127, 0), 0)
        zeros = code == 0
    elif alg == 1:
        with np.errstate(invalid="ignore", over="ignore"):
            s = np.where(finite, amax, 0).astype(np.float32) / np.float32(DMAX[fmt])
        bits = s.view(np.uint32).astype(np.int64)
        e, m = (bits >> 23) & 0xFF, bits & 0x7FFFFF
        code = e + (((e > 0) & (e < 254) & (m > 0)) | ((e == 0) & (m > 0x400000)))
        zeros = amax == 0
    else:
        return shared_exponents(amax, fmt, alg, dst_type_max)
    code = np.where(finite, code, 255).astype(np.int64)
    factor = np.where(zeros, 0.0, np.exp2(127.0 - np.minimum(code, 254)))
    return code, np.where(code == 255, np.nan, factor)


def golden(x: torch.Tensor, fmt: str, *, axis=-1, mode="rint", bs=32, alg=0, dst_type_max=0.0,
           low=0.0):
    """(y as the op returns it (int64 codes; float4 packed), mxscale int64)."""
    v = x.to(torch.float64).numpy()
    d = v.ndim
    ax = axis % d
    moved = np.moveaxis(v, ax, -1)
    n = moved.shape[-1]
    nb = -(-n // bs)
    padded = np.zeros(moved.shape[:-1] + (nb * bs,))
    padded[..., :n] = moved
    blocks = padded.reshape(moved.shape[:-1] + (nb, bs))
    with np.errstate(invalid="ignore"):
        amax = np.abs(blocks).max(axis=-1)
    amax = np.where(np.isnan(blocks).any(axis=-1), np.nan, amax)
    if low > 0:
        amax = np.where(np.isnan(amax), amax, np.maximum(amax, np.float32(low)))
    code, factor = block_codes(amax, fmt, alg, dst_type_max)
    with np.errstate(invalid="ignore"):
        scaled = blocks * factor[..., None]
    vals = round_grid(scaled, fmt, mode)
    vals = np.where(factor[..., None] == 0, np.copysign(0.0, blocks), vals)
    vals = vals.reshape(padded.shape)[..., :n]
    elem = np.moveaxis(codes_of(vals, fmt), -1, ax)
    if fmt in FP4:                               # two codes per byte along the last dim
        elem = elem[..., 0::2] | (elem[..., 1::2] << 4)
    code = np.concatenate([code, np.zeros(code.shape[:-1] + (nb % 2,), np.int64)], axis=-1)
    pairs = code.shape[-1] // 2
    shape = list(v.shape)
    shape[ax] = pairs
    scale = np.zeros(shape + [2], np.int64)
    for i in range(pairs):
        for j in range(2):
            index = [slice(None)] * d + [j]
            index[ax] = i
            scale[tuple(index)] = code[..., 2 * i + j]
    return elem, scale


def sample(shape, dtype, seed, *, specials=True):
    """Values over a wide range of magnitudes (per element), plus a zero block, a tiny block,
    an inf and a NaN when the last dim allows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    x = x * torch.exp2(torch.randint(-6, 7, shape, generator=g).to(torch.float64))
    if specials and shape[-1] >= 64 and x.numel() >= 4 * shape[-1]:
        flat = x.view(-1, shape[-1])
        flat[0, :32] = 0.0
        flat[1, :32] *= 2.0 ** -120 if dtype == torch.float32 else 2.0 ** -12
        flat[2, 5] = float("inf")
        flat[3, 40] = float("nan")
    return x.to(dtype)


def check(x, fmt, **kw):
    op_kw = {"axis": kw.get("axis", -1), "round_mode": kw.get("mode", "rint"),
             "dst_type": DST[fmt], "block_size": kw.get("bs", 32),
             "scale_alg": kw.get("alg", 0), "dst_type_max": kw.get("dst_type_max", 0.0),
             "max_low_bound": kw.get("low", 0.0)}
    before = x.clone()
    y, scale = na.npu_dynamic_mx_quant(x, **op_kw)
    want_y, want_scale = golden(x, fmt, **kw)
    assert scale.dtype == torch.uint8 and tuple(scale.shape) == want_scale.shape
    np.testing.assert_array_equal(scale.to(torch.int64).numpy(), want_scale)
    if fmt in FP4:
        assert y.dtype == torch.uint8
        got = y.to(torch.int64).numpy()
    else:
        assert y.dtype == FP8[fmt]
        got = y.view(torch.uint8).to(torch.int64).numpy()
    assert got.shape == want_y.shape
    np.testing.assert_array_equal(got, want_y)
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)   # input untouched


FORMATS = list(DST)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_tail_axis(fmt, dtype):
    check(sample((4, 102), dtype, seed=1), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("axis,shape,bs", [(0, (70, 6), 32), (-2, (3, 67, 4), 64),
                                            (1, (2, 40, 2, 4), 32)])
def test_other_axes_interleaved_scale(fmt, axis, shape, bs):
    check(sample(shape, torch.bfloat16, seed=2, specials=False), fmt, axis=axis, bs=bs)


@pytest.mark.parametrize("fmt", FP4)
@pytest.mark.parametrize("mode", ["rint", "floor", "round"])
def test_float4_round_modes(fmt, mode):
    check(sample((4, 96), torch.float16, seed=3), fmt, mode=mode)
    check(sample((33, 4), torch.bfloat16, seed=4, specials=False), fmt, mode=mode, axis=0)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("low", [0.0, 3.0])
def test_float8_scale_alg_1(fmt, low):
    check(sample((4, 96), torch.bfloat16, seed=5), fmt, alg=1, low=low)
    check(sample((40, 3), torch.float16, seed=6, specials=False), fmt, alg=1, low=low, axis=0)


@pytest.mark.parametrize("dst_type_max", [0.0, 6.0, 7.0, 9.5])
def test_float4_scale_alg_2(dst_type_max):
    check(sample((4, 96), torch.bfloat16, seed=7), "float4_e2m1", alg=2,
          dst_type_max=dst_type_max)


def test_block_sizes_and_odd_block_counts():
    check(sample((3, 200), torch.bfloat16, seed=8), "float8_e4m3fn", bs=64)     # 4 blocks
    check(sample((3, 330), torch.float16, seed=9), "float4_e2m1", bs=128)       # 3 blocks
    check(sample((2, 40), torch.float16, seed=10), "float8_e5m2", bs=1024)      # 1 block
    check(sample((1, 2), torch.bfloat16, seed=11), "float4_e1m2")               # 1-D-ish
    check(sample((50,), torch.float16, seed=12), "float8_e4m3fn")               # 1-D


def test_non_contiguous_input():
    base = sample((96, 5), torch.bfloat16, seed=13, specials=False)
    check(base.t(), "float4_e2m1")
    check(base.t(), "float8_e4m3fn", axis=0, alg=1)
    check(base[::2], "float8_e5m2", axis=0)


def test_exact_scale_values():
    """A hand-checked block: max 3.0 -> floor(log2 3) = 1; e4m3fn emax 8 -> 2^-7 (code 120);
    scale_alg 1: 3 / 448 = 1.67 * 2^-8 -> rounded up to 2^-7 as well; e2m1 emax 2 -> 2^-1."""
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 0], x[0, 1], x[0, 2] = 3.0, -0.75, 0.001
    y, s = na.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    assert s.tolist() == [[[120, 0]]]
    assert y[0, :3].float().tolist() == [384.0, -96.0, 0.125]        # 0.128 -> 0.125
    y, s = na.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn, scale_alg=1)
    assert s.tolist() == [[[120, 0]]]
    y, s = na.npu_dynamic_mx_quant(x)                                 # float4_e2m1
    assert s.tolist() == [[[126, 0]]]
    assert y[0, 0].item() == (0b1000 | 0b0011) << 4 | 0b0111          # 6 and -1.5 codes


ERRORS = [
    ({"dst_type": 3}, ValueError, "expected dst_type one of"),
    ({"dst_type": torch.float8_e4m3fn, "round_mode": "floor"}, ValueError,
     "expected round_mode 'rint' for float8_e4m3fn output"),
    ({"round_mode": "ceil"}, ValueError, "expected round_mode one of"),
    ({"block_size": 48}, ValueError, "expected block_size a positive multiple of 32"),
    ({"block_size": 2048}, ValueError, "expected block_size a positive multiple of 32"),
    ({"scale_alg": 1}, ValueError, "expected scale_alg one of [0, 2] for float4_e2m1"),
    ({"scale_alg": 2, "dst_type": 297}, ValueError, "expected scale_alg one of [0]"),
    ({"scale_alg": 2, "dst_type": torch.float8_e5m2}, ValueError,
     "expected scale_alg one of [0, 1] for float8_e5m2"),
    ({"scale_alg": 2, "block_size": 64}, ValueError, "expected block_size 32 with scale_alg 2"),
    ({"dst_type_max": 5.0}, ValueError, "expected dst_type_max 0.0 or a value in [6.0, 12.0]"),
    ({"max_low_bound": 1.0}, ValueError, "expected max_low_bound 0.0 unless scale_alg is 1"),
    ({"max_low_bound": -1.0, "scale_alg": 1, "dst_type": torch.float8_e4m3fn}, ValueError,
     "expected max_low_bound a value >= 0"),
    ({"axis": 2}, IndexError, "expected axis in [-2, 1]"),
    ({"axis": -3}, IndexError, "expected axis in [-2, 1]"),
]


@pytest.mark.parametrize("kwargs,error,msg", ERRORS)
def test_bad_arguments(kwargs, error, msg):
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    with pytest.raises(error, match="npu_dynamic_mx_quant: " + re.escape(msg)):
        na.npu_dynamic_mx_quant(x, **kwargs)
    with pytest.raises(error, match="npu_dynamic_mx_quant: " + re.escape(msg)):
        torch.ops.npu.npu_dynamic_mx_quant(x, **kwargs)


def test_bad_inputs():
    with pytest.raises(TypeError, match="npu_dynamic_mx_quant: expected input dtype"):
        na.npu_dynamic_mx_quant(torch.ones(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="expected input an even last dim for float4_e2m1"):
        na.npu_dynamic_mx_quant(torch.ones(64, 3, dtype=torch.float16), axis=0)
    with pytest.raises(ValueError, match="expected input 1 to 7 dims"):
        na.npu_dynamic_mx_quant(torch.ones([1] * 8 + [32], dtype=torch.float16))
    with pytest.raises(ValueError, match="expected block_size 32 with scale_alg 2 or float32"):
        na.npu_dynamic_mx_quant(torch.ones(2, 64), block_size=64)
    with pytest.raises(ValueError, match="expected input a quantized axis of at least 32"):
        na.npu_dynamic_mx_quant(torch.ones(2, 16))
    # float8 outputs take an odd last dim
    y, s = na.npu_dynamic_mx_quant(torch.ones(3, 5, dtype=torch.float16),
                                   dst_type=torch.float8_e5m2)
    assert y.shape == (3, 5) and s.shape == (3, 1, 2)


def test_npu_dtype_codes_and_fake_shapes():
    x = sample((4, 64), torch.bfloat16, seed=14)
    for code, dtype in ((291, torch.float8_e5m2), (292, torch.float8_e4m3fn),
                        (23, torch.float8_e5m2), (24, torch.float8_e4m3fn)):
        y, _ = torch.ops.npu.npu_dynamic_mx_quant(x, dst_type=code)
        assert y.dtype == dtype
    if hasattr(torch, "float4_e2m1fn_x2"):
        y, _ = na.npu_dynamic_mx_quant(x, dst_type=torch.float4_e2m1fn_x2)
        assert torch.equal(y, na.npu_dynamic_mx_quant(x)[0])
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(torch.empty(3, 70, 6, dtype=torch.float16))
        y, s = torch.ops.npu.npu_dynamic_mx_quant(fx, axis=1)
        assert tuple(y.shape) == (3, 70, 3) and tuple(s.shape) == (3, 2, 6, 2)


def test_strict_products():
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    for product in ("A2", "A3"):
        with targets.strict(product), pytest.raises(
                RuntimeError, match="npu_dynamic_mx_quant: expected a product the op supports "
                                    r"\(950\)"):
            na.npu_dynamic_mx_quant(x)
    with targets.strict("950"):
        na.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn, scale_alg=1)
