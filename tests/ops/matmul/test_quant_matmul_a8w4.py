"""npu_quant_matmul A8W4 (int8 x1, int4 weight packed in int32), against goldens written here.

The golden follows aclnnQuantMatmulV5's formula ``out = ((x1 @ (x2 * scale)) + offset) *
pertoken_scale`` through the kernel's own steps (``quant_batch_matmul_v4_msd.h``): x1 split
into ``hi = floor(x / 16)`` and ``lo = (x mod 16) - 8``, per group of 256 along k an exact
integer product times the fp19 scale rounded to float16, the groups summed in float16, then
``16 * hi + lo + offset`` and the per-token scale in float32.  Written with numpy integer and
float16 arithmetic and Python bit twiddling, none of it from the package.  A second check
compares with the plain float64 formula (offset = 8 * sum_k(x2 * scale)) within the float16
rounding the kernel adds.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

F16, BF16 = torch.float16, torch.bfloat16


def pack_int4(w: np.ndarray) -> torch.Tensor:
    """[k, n] values in [-8, 7] -> int32 [k, n / 8], element j of eight in bits 4j..4j+3."""
    k, n = w.shape
    nib = (w.astype(np.int64) & 0xF).reshape(k, n // 8, 8)
    words = np.zeros((k, n // 8), dtype=np.int64)
    for j in range(8):
        words |= nib[:, :, j] << (4 * j)
    words = np.where(words >= 2 ** 31, words - 2 ** 32, words)
    return torch.from_numpy(words.astype(np.int32))


def word_of(scale: float) -> int:
    """npu_trans_quant_param's word: the float32 bits, low 13 mantissa bits cleared, flag bit 46."""
    bits = struct.unpack("<I", struct.pack("<f", scale))[0]
    return (bits & 0xFFFFE000) | (1 << 46)


def fp19(scale: float) -> np.float32:
    bits = struct.unpack("<I", struct.pack("<f", scale))[0] & 0xFFFFE000
    return np.float32(struct.unpack("<f", struct.pack("<I", bits))[0])


def make(m, k, n, groups, seed):
    rng = np.random.default_rng(seed)
    x1 = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-8, 8, (k, n)).astype(np.int8)
    # Scales with low mantissa bits set, so that the fp19 truncation matters.
    s = (rng.random((groups, n)) * 0.02 + 0.001).astype(np.float32)
    words = np.array([[word_of(float(v)) for v in row] for row in s], dtype=np.int64)
    offset = rng.standard_normal(n).astype(np.float32)
    pts = (rng.random(m) * 0.05).astype(np.float32)
    return x1, w, s, words, offset, pts


def golden(x1, w, s, offset, pts, group):
    m, k = x1.shape
    hi = np.floor_divide(x1.astype(np.int64), 16)
    lo = np.mod(x1.astype(np.int64), 16) - 8
    assert np.array_equal(16 * hi + lo + 8, x1)            # the split is exact
    sf = np.vectorize(fp19)(s).astype(np.float32)

    def dequant(a):
        acc = None
        for g in range(sf.shape[0]):
            ks = slice(g * group, min(k, (g + 1) * group))
            exact = a[:, ks] @ w[ks].astype(np.int64)          # integers, exact in int64
            part = (exact.astype(np.float32) * sf[g]).astype(np.float16)
            acc = part if acc is None else (acc + part).astype(np.float16)
        return acc.astype(np.float32)

    v = dequant(hi) * np.float32(16) + dequant(lo)
    v = (v + offset) * pts.reshape(m, 1)
    return torch.from_numpy(v.astype(np.float32))


CASES = [  # (m, k, n, per_group)
    (3, 512, 16, True),
    (5, 768, 8, True),
    (4, 40, 24, False),
]


@pytest.mark.parametrize("m,k,n,per_group", CASES)
@pytest.mark.parametrize("out", [F16, BF16])
def test_matches_kernel_steps(m, k, n, per_group, out):
    groups = k // 256 if per_group else 1
    x1, w, s, words, offset, pts = make(m, k, n, groups, seed=m * 100 + k + n)
    scale = torch.from_numpy(words if per_group else words[0])
    pertoken = torch.from_numpy(pts.reshape(m, 1) if per_group else pts)
    kwargs = {"offset": torch.from_numpy(offset), "pertoken_scale": pertoken,
              "output_dtype": out}
    if per_group:
        kwargs["group_sizes"] = [0, 0, 256]
    x2 = pack_int4(w)
    got = na.npu_quant_matmul(torch.from_numpy(x1), x2, scale, **kwargs)
    want = golden(x1, w, s, offset, pts, 256 if per_group else k).to(out)
    assert got.dtype == out and got.shape == (m, n)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    via_ops = torch.ops.npu.npu_quant_matmul(torch.from_numpy(x1), x2, scale, **kwargs)
    assert torch.equal(via_ops, got)


def test_doc_formula_with_compensating_offset():
    """With offset = 8 * sum_k(x2 * scale) the result is x1 @ (x2 * scale) * pertoken_scale."""
    m, k, n = 4, 512, 16
    x1, w, s, words, _, pts = make(m, k, n, 2, seed=7)
    sf = np.vectorize(fp19)(s).astype(np.float64)
    wd = w.astype(np.float64) * np.repeat(sf, 256, axis=0)        # x2 * scale, [k, n]
    offset = (8 * wd.sum(0)).astype(np.float32)
    exact = (x1.astype(np.float64) @ wd) * pts.reshape(m, 1)
    got = na.npu_quant_matmul(torch.from_numpy(x1), pack_int4(w), torch.from_numpy(words),
                              offset=torch.from_numpy(offset),
                              pertoken_scale=torch.from_numpy(pts.reshape(m, 1)),
                              output_dtype=F16, group_sizes=[0, 0, 256])
    # Each float16 partial sum is off by at most half an ulp of its magnitude (<= 2 ** -11
    # relative); bound the error by that of the largest partial.
    bound = (np.abs(x1).max() * np.abs(wd).sum(0).max() * 2 ** -9 + 1) * pts.max()
    assert np.abs(got.double().numpy() - exact).max() <= bound


def _args(m=3, k=512, n=8, per_group=True):
    x1 = torch.zeros(m, k, dtype=torch.int8)
    x2 = torch.zeros(k, n // 8, dtype=torch.int32)
    g = -(-k // 256)
    scale = torch.zeros(g, n, dtype=torch.int64) if per_group else torch.zeros(n, dtype=torch.int64)
    kw = {"offset": torch.zeros(n), "output_dtype": F16,
          "pertoken_scale": torch.ones(m, 1) if per_group else torch.ones(m)}
    if per_group:
        kw["group_sizes"] = [0, 0, 256]
    return (x1, x2, scale), kw


def _with(**changes):
    def make_args():
        args, kw = _args()
        args = list(args)
        for key, value in changes.items():
            if key in ("x1", "x2", "scale"):
                args[("x1", "x2", "scale").index(key)] = value
            elif value is None:
                kw.pop(key, None)
            else:
                kw[key] = value
        return tuple(args), kw
    return make_args


ERRORS = [
    (_with(output_dtype=None), ValueError, "expected output_dtype torch.float16 or torch.bfloat16"),
    (_with(offset=None), ValueError, "expected offset a float32 (n,) tensor for A8W4"),
    (_with(pertoken_scale=None), ValueError, "expected pertoken_scale a float32 tensor"),
    (_with(scale=torch.zeros(2, 8)), TypeError, "expected scale dtype in ['int64']"),
    (_with(scale=torch.zeros(3, 8, dtype=torch.int64)), ValueError,
     "expected scale shape (2, 8) for A8W4 K-G"),
    (_with(pertoken_scale=torch.ones(3)), ValueError,
     "expected pertoken_scale shape (3, 1) for A8W4 K-G"),
    (_with(group_sizes=[0, 0, 128]), ValueError, "expected group_sizes [0, 0, 256]"),
    (_with(group_sizes=None), ValueError, "expected group_sizes [0, 0, 256]"),
    (_with(bias=torch.zeros(8, dtype=torch.int32)), ValueError, "expected bias None for A8W4"),
    (_with(offset=torch.zeros(4)), ValueError, "expected offset shape (8,)"),
    (_with(x2=torch.zeros(256, 1, dtype=torch.int32)), RuntimeError,
     "expected x2 a k dim equal to x1's (512)"),
    (_with(x2=torch.zeros(2, 512, dtype=torch.int32).t()), ValueError,
     "expected x2 a contiguous (k, n // 8) tensor"),
    (_with(x1=torch.zeros(1, 3, 512, dtype=torch.int8)), ValueError,
     "expected x1 a 2-D tensor for A8W4"),
]


@pytest.mark.parametrize("make_args,error,msg", ERRORS)
def test_bad_inputs(make_args, error, msg):
    args, kw = make_args()
    for fn in (na.npu_quant_matmul, torch.ops.npu.npu_quant_matmul):
        with pytest.raises(error, match="npu_quant_matmul: " + re.escape(msg)):
            fn(*args, **kw)


def test_per_channel_shapes_checked():
    args, kw = _args(per_group=False)
    kw["pertoken_scale"] = torch.ones(3, 1)
    with pytest.raises(ValueError, match=re.escape("expected pertoken_scale shape (3,) for A8W4 K-C")):
        na.npu_quant_matmul(*args, **kw)


def test_strict_products():
    args, kw = _args()
    with targets.strict("A2"):
        assert na.npu_quant_matmul(*args, **kw).shape == (3, 8)
    with targets.strict("950"), pytest.raises(TypeError, match="A8W4 runs on A2 / A3 only"):
        na.npu_quant_matmul(*args, **kw)


def test_single_word_weight_with_odd_strides():
    """A (k, 1) packed weight counts as contiguous whatever its last stride (here k)."""
    x1, w, s, words, offset, pts = make(2, 256, 8, 1, seed=3)
    x2 = pack_int4(w)
    odd = torch.as_strided(x2, x2.shape, (1, x2.shape[0]))
    assert odd.is_contiguous() and odd.stride(-1) != 1
    kw = {"offset": torch.from_numpy(offset), "pertoken_scale": torch.from_numpy(pts),
          "output_dtype": F16}
    args = (torch.from_numpy(x1), torch.from_numpy(words[0]))
    got = na.npu_quant_matmul(args[0], odd, args[1], **kw)
    assert torch.equal(got, na.npu_quant_matmul(args[0], x2, args[1], **kw))
    assert torch.equal(got, golden(x1, w, s, offset, pts, 256).to(F16))


def test_msd_split_covers_every_int8_value():
    # The shared MSD pre-step (ops/matmul/_msd.py, used by every A8W4 op): two int4 halves.
    from npu_anywhere.ops.matmul import _msd

    x = torch.arange(-128, 128, dtype=torch.int8).reshape(16, 16)
    hi, lo = _msd.split(x)
    assert hi.dtype == lo.dtype == torch.int8
    assert int(hi.min()) >= -8 and int(hi.max()) <= 7
    assert int(lo.min()) >= -8 and int(lo.max()) <= 7
    assert torch.equal(hi.int() * 16 + lo.int() + 8, x.int())
