"""Tests for npu_kronecker_quant against the CANN aclnnFlatQuant formula::

    x''            = kronecker_p1 @ (x @ kronecker_p2)
    quant_scale[k] = max(|x''[k]|) / (7 / clip_ratio)
    out            = int4(x'' / quant_scale), packed eight to an int32 (low nibble first)

The float64 golden checks the formula up to the kernel's intermediate roundings (|diff| <= 1);
the kernel-order golden (float32 / float16 steps of hicann/ops-nn
quant/flat_quant/op_kernel/flat_quant_high.h) must match bit for bit.

The float4_e2m1 (MX, Ascend 950) output is checked against a float64 golden built from
aclnnFlatQuantV2.md's formula (blocks of 32 of the flattened token) with the 950 kernel's
steps (x'' rounded to bfloat16; a code-0 block kept unless its maximum is zero or subnormal),
using the block-scale and grid-rounding helpers of mx_goldens.py.
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
from mx_goldens import e2m1_code, round_to_grid, shared_exponents, unpack_nibbles  # noqa: E402
from quant_goldens import half_even, rand, unpack_int4_bytes  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def doc_golden(x, p1, p2, clip=1.0):
    v = p1.to(torch.float64) @ (x.to(torch.float64) @ p2.to(torch.float64))
    scale = v.abs().amax(dim=(1, 2)) / (7.0 / clip)
    return v / scale[:, None, None], scale


def kernel_golden(x, p1, p2, clip=1.0):
    c = torch.tensor(clip, dtype=torch.float32)
    x1 = (x.to(torch.float64) @ p2.to(torch.float64)).to(torch.float32).to(x.dtype)
    x2 = (p1.to(torch.float64) @ x1.to(torch.float64)).to(torch.float32)
    h = x2.to(torch.float16).to(torch.float32)
    amax = h.abs().amax(dim=(1, 2))
    scale = amax * c / 7
    q = torch.where(amax != 0, (torch.tensor(7.0) / c) / amax, torch.tensor(7.0))
    t = (h * q[:, None, None]).to(torch.float16).to(torch.float32)
    return torch.round(t).clamp(-8, 7), scale


def unpacked(out):
    return unpack_int4_bytes(out).to(torch.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,m,n", [(1, 1, 8), (3, 5, 16), (4, 7, 24)])
@pytest.mark.parametrize("clip", [None, 0.7848])
def test_matches_formula(dtype, k, m, n, clip):
    x = rand((k, m, n), dtype, seed=m + n)
    p1 = rand((m, m), dtype, seed=1)
    p2 = rand((n, n), dtype, seed=2)
    out, scale = na.npu_kronecker_quant(x, p1, p2, clip)
    assert out.dtype == torch.int32 and out.shape == (k, m, n // 8)
    assert scale.dtype == torch.float32 and scale.shape == (k,)
    c = 1.0 if clip is None else clip
    exact, scale64 = doc_golden(x, p1, p2, c)
    want = half_even(exact).clamp(-8, 7)
    assert (unpacked(out) - want).abs().max() <= 1
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3     # x' is stored in x's dtype
    torch.testing.assert_close(scale.double(), scale64, rtol=tol, atol=0)
    yk, sk = kernel_golden(x, p1, p2, c)
    # float32 matmul accumulation order may move a value across a float16 rounding point:
    # allow a handful of +-1 differences
    diff = (unpacked(out) - yk.double()).abs()
    assert diff.max() <= 1 and int((diff > 0).sum()) <= max(2, diff.numel() // 200)
    torch.testing.assert_close(scale, sk, rtol=1e-3, atol=0)


def test_exact_ties_and_packing():
    # identity transforms, amax 7 -> scale 1 and q 1: x'' / scale hits .5 exactly
    row = [7.0, 2.5, 3.5, -0.5, 1.5, -2.5, 0.0, -7.0]
    x = torch.tensor([[row]], dtype=torch.float16)
    out, scale = na.npu_kronecker_quant(x, torch.eye(1, dtype=torch.float16),
                                        torch.eye(8, dtype=torch.float16))
    assert scale.tolist() == [1.0]
    assert unpacked(out).flatten().tolist() == [7, 2, 4, 0, 2, -2, 0, -7]
    # nibble j of the int32 holds element j (low nibble first)
    word = out.item() & 0xFFFFFFFF
    nibbles = [(word >> (4 * j)) & 0xF for j in range(8)]
    assert nibbles == [7, 2, 4, 0, 2, 0xE, 0, 0x9]


def test_clip_saturates():
    x = torch.tensor([[[7.0, -7.0, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0]]], dtype=torch.bfloat16)
    out, scale = na.npu_kronecker_quant(x, torch.eye(1, dtype=torch.bfloat16),
                                        torch.eye(8, dtype=torch.bfloat16), clip_ratio=0.5)
    assert scale.tolist() == [0.5]
    assert unpacked(out).flatten().tolist() == [7, -8, 6, 2, 0, 0, 0, 0]


def test_zero_token():
    x = torch.zeros(2, 2, 8, dtype=torch.float16)
    x[1, 0, 0] = 3.5
    out, scale = na.npu_kronecker_quant(x, torch.eye(2, dtype=torch.float16),
                                        torch.eye(8, dtype=torch.float16))
    assert scale[0].item() == 0.0 and out[0].eq(0).all()
    assert scale[1].item() == pytest.approx(0.5)


def test_dst_dtype_spellings():
    x, p1, p2 = rand((2, 3, 8), seed=3), rand((3, 3), seed=4), rand((8, 8), seed=5)
    ref = na.npu_kronecker_quant(x, p1, p2)
    for dst in (torch.int32, 3, 285):
        out, scale = na.npu_kronecker_quant(x, p1, p2, dst_dtype=dst, dst_type_max=0.0)
        assert torch.equal(out, ref[0]) and torch.equal(scale, ref[1])


def test_non_contiguous_and_inputs_unchanged():
    x = rand((16, 3, 2), torch.float16, seed=6).permute(2, 1, 0)        # (2, 3, 16)
    p1 = rand((3, 3), torch.float16, seed=7).t()
    p2 = rand((16, 16), torch.float16, seed=8)
    saved = [t.clone() for t in (x, p1, p2)]
    out, scale = na.npu_kronecker_quant(x, p1, p2)
    assert all(torch.equal(a, b) for a, b in zip((x, p1, p2), saved))
    out2, scale2 = na.npu_kronecker_quant(x.contiguous(), p1.contiguous(), p2)
    assert torch.equal(out, out2) and torch.equal(scale, scale2)


@pytest.mark.parametrize("shapes,kwargs,exc,msg", [
    (((2, 3, 12), (3, 3), (12, 12)), {}, ValueError, "expected x a last dim"),
    (((2, 3, 8), (2, 2), (8, 8)), {}, RuntimeError, "expected kronecker_p1 shape"),
    (((2, 3, 8), (3, 3), (8, 8)), {"clip_ratio": 0.0}, ValueError, "expected clip_ratio"),
    (((2, 3, 8), (3, 3), (8, 8)), {"clip_ratio": 1e-300}, ValueError,
     "expected clip_ratio a value whose float32 rounding gives a finite"),
    (((2, 3, 8), (3, 3), (8, 8)), {"clip_ratio": 1e-40}, ValueError,
     "expected clip_ratio a value whose float32 rounding gives a finite"),
    (((2, 3, 7), (3, 3), (7, 7)), {"dst_dtype": 296}, ValueError, "expected x an even last dim"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_dtype": 296, "dst_type_max": 5.0}, ValueError,
     "expected dst_type_max 0 or a value in"),
    (((2, 3, 8), (3, 3), (0, 0)), {}, RuntimeError, r"expected kronecker_p2 shape \(8, 8\), "),
    (((2, 3, 8), (3, 3), (4, 4)), {"dst_dtype": 296}, RuntimeError,
     r"expected kronecker_p2 shape \(8, 8\) or \(0, 0\)"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_dtype": 1}, ValueError, "expected dst_dtype one of"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_type_max": 7.0}, ValueError,
     "expected dst_type_max 0"),
    (((1, 257, 8), (257, 257), (8, 8)), {}, ValueError, "expected x shape"),
])
def test_bad_inputs(shapes, kwargs, exc, msg):
    x, p1, p2 = (torch.ones(s, dtype=torch.float16) for s in shapes)
    with pytest.raises(exc, match="npu_kronecker_quant: " + msg):
        na.npu_kronecker_quant(x, p1, p2, **kwargs)


def test_smallest_clip_ratio_with_a_finite_factor_runs():
    """clip_ratio 2.1e-38 still has a finite float32 factor 7 / clip_ratio: every nonzero
    value saturates to 7 / -8, zeros stay 0, and the scale is amax * clip_ratio / 7."""
    x = torch.tensor([[[1.0, -2.0, 0.0, 3.0, -4.0, 0.5, 0.0, -0.25]]], dtype=torch.float16)
    eye1, eye8 = torch.eye(1, dtype=torch.float16), torch.eye(8, dtype=torch.float16)
    q, scale = na.npu_kronecker_quant(x, eye1, eye8, clip_ratio=2.1e-38)
    word = int(q.flatten()[0]) & 0xFFFFFFFF          # 8 int4 values, element 0 lowest
    nibbles = [(word >> (4 * i)) & 0xF for i in range(8)]
    assert [n - 16 if n >= 8 else n for n in nibbles] == [7, -8, 0, 7, -8, 7, 0, -8]
    f32 = torch.tensor(2.1e-38, dtype=torch.float32)
    assert torch.equal(scale, torch.tensor([4.0], dtype=torch.float32) * f32 / 7.0)


def test_bad_dtypes():
    x = torch.ones(2, 3, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="npu_kronecker_quant: expected kronecker_p2 the dtype"):
        na.npu_kronecker_quant(x, torch.ones(3, 3, dtype=torch.float16), torch.ones(8, 8))
    with pytest.raises(TypeError, match="npu_kronecker_quant: expected x dtype"):
        na.npu_kronecker_quant(x.double(), torch.ones(3, 3).double(), torch.ones(8, 8).double())


def test_strict_products():
    x, p1, p2 = torch.ones(2, 3, 8), torch.ones(3, 3), torch.ones(8, 8)
    na.npu_kronecker_quant(x, p1, p2)                    # float32: default mode only
    with targets.strict("A2"):
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_kronecker_quant(x, p1, p2)
        na.npu_kronecker_quant(x.half(), p1.half(), p2.half())
    with targets.strict("310P"):
        with pytest.raises(Exception, match="npu_kronecker_quant"):
            na.npu_kronecker_quant(x.half(), p1.half(), p2.half())


def test_no_autograd():
    x = torch.ones(2, 3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_kronecker_quant: expected inputs"):
        na.npu_kronecker_quant(x, torch.ones(3, 3), torch.ones(8, 8))


# -- float4_e2m1 (MX) output -------------------------------------------------------------------

FP4 = 296


def transform_golden(x, p1, p2):
    """x'' in the 950 kernel's storage steps: x @ p2 accumulated exactly and stored in x's
    dtype (via float32), p1 @ x' stored in float32, then rounded to bfloat16; float64 out."""
    x1 = x.to(torch.float64)
    if p2.numel():
        x1 = (x1 @ p2.to(torch.float64)).to(torch.float32).to(x.dtype).to(torch.float64)
    x2 = (p1.to(torch.float64) @ x1).to(torch.float32)
    return x2.to(torch.bfloat16).to(torch.float64)


def mx_flat_golden(v, dst_type_max):
    """(float4 codes int64 (K, L), e8m0 codes int64 (K, ceil(L / 64), 2)) of the rows of
    ``v`` (K, L): blocks of 32, scale from aclnnFlatQuantV2.md's three dst_type_max cases
    (mx_goldens: scale_alg 0 for 0, 2 otherwise); the FlatQuant 950 kernel writes a code-0
    block as zeros only when its maximum is below 2^-126 (zero or subnormal), any other
    code-0 block is multiplied by 2^127."""
    alg = 0 if dst_type_max == 0 else 2
    codes, scales = [], []
    for row in v.tolist():
        nb = -(-len(row) // 32)
        out, sc = [], []
        for b in range(nb):
            chunk = row[b * 32:(b + 1) * 32]
            finite = all(math.isfinite(t) for t in chunk)
            amax = max(abs(t) for t in chunk) if finite else math.inf
            code, factor = shared_exponents([amax], "float4_e2m1", alg, dst_type_max)
            code, factor = int(code[0]), float(factor[0])
            if code == 0 and factor == 0.0 and amax >= 2.0 ** -126:
                factor = 2.0 ** 127
            sc.append(code)
            for t in chunk:
                if code == 255:
                    out.append(0)
                else:
                    out.append(e2m1_code(round_to_grid(t * factor, "float4_e2m1", "rint")))
        codes.append(out)
        scales.append(sc + [0] * (nb % 2))
    k = v.shape[0]
    return (torch.tensor(codes, dtype=torch.int64),
            torch.tensor(scales, dtype=torch.int64).reshape(k, -1, 2))


def mx_call(x, p1, p2, **kwargs):
    out, scale = na.npu_kronecker_quant(x, p1, p2, dst_dtype=FP4, **kwargs)
    k, m, n = x.shape
    assert out.dtype == torch.uint8 and out.shape == (k, m * n // 2)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (k, -(-m * n // 64), 2)
    return unpack_nibbles(out), scale.view(torch.uint8).to(torch.int64)


def dyadic(shape, dtype, seed, scale=1.0):
    """Values on a coarse grid (a few bits), exact in every dtype, spread over exponents."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.randint(-15, 16, shape, generator=g).to(torch.float64)
    exp = torch.randint(-6, 3, shape, generator=g).to(torch.float64)
    return (mant * torch.exp2(exp) * scale).to(dtype)


DST_TYPE_MAXES = [0.0, 6.0, 7.0, 6.5, 9.75, 12.0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dst_type_max", DST_TYPE_MAXES)
@pytest.mark.parametrize("k,m,n", [(3, 5, 22), (2, 4, 16), (1, 1, 2)])
def test_mx_identity_transforms_bit_exact(dtype, dst_type_max, k, m, n):
    # identity factors make both matmuls exact: out depends on x and the MX rules only
    x = rand((k, m, n), dtype, seed=k * m + n) * 3
    codes, scale = mx_call(x, torch.eye(m, dtype=dtype), torch.eye(n, dtype=dtype),
                           dst_type_max=dst_type_max)
    v = x.to(torch.float64).to(torch.bfloat16).to(torch.float64).reshape(k, m * n)
    want_codes, want_scale = mx_flat_golden(v, dst_type_max)
    assert torch.equal(codes, want_codes)
    assert torch.equal(scale, want_scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dst_type_max", [0.0, 6.0, 10.25])
def test_mx_dyadic_transforms_bit_exact(dtype, dst_type_max):
    # few-bit values: x @ p2 and p1 @ x' are exact in float32 and x' fits x's dtype
    k, m, n = 4, 3, 12
    x = dyadic((k, m, n), dtype, seed=11)
    p1 = dyadic((m, m), dtype, seed=12)
    p2 = torch.zeros(n, n, dtype=dtype)
    p2[torch.arange(n), torch.arange(n).roll(3)] = 2.0          # permutation times 2
    p2[0, 5] = -0.5
    codes, scale = mx_call(x, p1, p2, dst_type_max=dst_type_max)
    want_codes, want_scale = mx_flat_golden(transform_golden(x, p1, p2).reshape(k, m * n),
                                            dst_type_max)
    assert torch.equal(codes, want_codes)
    assert torch.equal(scale, want_scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dst_type_max", [0.0, 7.0, 11.0])
def test_mx_random_transforms(dtype, dst_type_max):
    k, m, n = 5, 7, 24
    x, p1, p2 = rand((k, m, n), dtype, seed=21), rand((m, m), dtype, seed=22), \
        rand((n, n), dtype, seed=23)
    codes, scale = mx_call(x, p1, p2, dst_type_max=dst_type_max)
    want_codes, want_scale = mx_flat_golden(transform_golden(x, p1, p2).reshape(k, m * n),
                                            dst_type_max)
    # float32 vs exact accumulation may move a bfloat16 rounding of x'' by one ulp: a handful
    # of elements (and, rarely, a block maximum) may land on the other side of a boundary
    assert int((codes != want_codes).sum()) <= max(2, codes.numel() // 200)
    assert int((scale != want_scale).sum()) <= 1


def test_mx_hand_checked_values():
    # one block of 32 (identity factors, bfloat16 exact): amax 1.75 (bfloat16 mantissa 0x60)
    row = [1.75, -1.0, 0.3, 0.5, -0.125, 0.875] + [0.0] * 26
    x = torch.tensor([[row]], dtype=torch.bfloat16)
    eye1, eye32 = torch.eye(1, dtype=torch.bfloat16), torch.eye(32, dtype=torch.bfloat16)
    # dst_type_max 0: shared_exp = floor(log2 1.75) - 2 = -2 (code 125), values * 4:
    # 7 -> 6 (saturate), -4, 1.2 -> 1, 2, -0.5, 3.5 -> 4 (tie to the even code)
    codes, scale = mx_call(x, eye1, eye32)
    assert scale.flatten().tolist() == [125, 0]
    assert codes[0, :6].tolist() == [0x7, 0xE, 0x2, 0x4, 0x9, 0x6]
    # dst_type_max 6: mantissa 0x60 > 0x40 rounds the exponent up (code 126), values * 2:
    # 3.5 -> 4, -2, 0.6 -> 0.5, 1, -0.25 -> -0 (tie to even), 1.75 -> 2
    codes, scale = mx_call(x, eye1, eye32, dst_type_max=6.0)
    assert scale.flatten().tolist() == [126, 0]
    assert codes[0, :6].tolist() == [0x6, 0xC, 0x1, 0x2, 0x8, 0x4]
    # dst_type_max 7: 0x60 is not above 0x60 -> as dst_type_max 0
    assert mx_call(x, eye1, eye32, dst_type_max=7.0)[1].flatten().tolist() == [125, 0]
    # dst_type_max 8: 1.75 / 8 = 0.21875 = 1.75 * 2^-3, exponent rounded up -> 2^-2 (125)
    assert mx_call(x, eye1, eye32, dst_type_max=8.0)[1].flatten().tolist() == [125, 0]
    # packing: element 2i in the low nibble of byte i
    out, _ = na.npu_kronecker_quant(x, eye1, eye32, dst_dtype=FP4)
    assert out[0, :3].tolist() == [0xE7, 0x42, 0x69]


def test_mx_tiny_and_special_blocks():
    # token 0: block 0 max 1.5 * 2^-125 (scale code 0, still quantized with 2^127), block 1
    # subnormal (written as zeros, code 0); token 1: one inf -> NaN everywhere after the
    # identity matmuls (inf * 0), every block code 255, values +0
    x = torch.zeros(2, 1, 64, dtype=torch.bfloat16)
    x[0, 0, 0] = 1.5 * 2.0 ** -125
    x[0, 0, 1] = -(2.0 ** -126)
    x[0, 0, 32] = 2.0 ** -130
    x[1, 0, 0] = float("inf")
    codes, scale = mx_call(x, torch.eye(1, dtype=torch.bfloat16),
                           torch.eye(64, dtype=torch.bfloat16))
    assert scale[0].flatten().tolist() == [0, 0]
    assert codes[0, :2].tolist() == [0x7, 0xC]                    # 6 and -2
    assert codes[0, 32:].eq(0).all()
    assert scale[1].flatten().tolist() == [255, 255] and codes[1].eq(0).all()
    want_codes, want_scale = mx_flat_golden(x.double().reshape(2, 64)[:1], 0.0)
    assert torch.equal(codes[:1], want_codes) and torch.equal(scale[:1], want_scale)


def test_mx_without_p2_and_clip_ignored():
    x, p1 = rand((3, 4, 10), torch.float16, seed=31), rand((4, 4), torch.float16, seed=32)
    empty = torch.empty(0, 0, dtype=torch.float16)
    eye = torch.eye(10, dtype=torch.float16)
    a = na.npu_kronecker_quant(x, p1, empty, dst_dtype=FP4)
    b = na.npu_kronecker_quant(x, p1, eye, dst_dtype=FP4, clip_ratio=0.25)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8),
                                                   b[1].view(torch.uint8))
    want_codes, want_scale = mx_flat_golden(transform_golden(x, p1, empty).reshape(3, 40), 0.0)
    codes, scale = mx_call(x, p1, empty)
    assert int((codes != want_codes).sum()) <= 2 and int((scale != want_scale).sum()) <= 1


def test_mx_non_contiguous_and_inputs_unchanged():
    x = rand((12, 3, 2), torch.bfloat16, seed=41).permute(2, 1, 0)       # (2, 3, 12)
    p1 = rand((3, 3), torch.bfloat16, seed=42).t()
    p2 = rand((12, 12), torch.bfloat16, seed=43).t()
    saved = [t.clone() for t in (x, p1, p2)]
    out, scale = na.npu_kronecker_quant(x, p1, p2, dst_dtype=FP4, dst_type_max=9.0)
    assert all(torch.equal(a, b) for a, b in zip((x, p1, p2), saved))
    out2, scale2 = na.npu_kronecker_quant(x.contiguous(), p1.contiguous(), p2.contiguous(),
                                          dst_dtype=FP4, dst_type_max=9.0)
    assert torch.equal(out, out2) and torch.equal(scale.view(torch.uint8),
                                                  scale2.view(torch.uint8))


def test_mx_strict_products():
    x, p1, p2 = (torch.ones(2, 3, 8, dtype=torch.float16), torch.eye(3, dtype=torch.float16),
                 torch.eye(8, dtype=torch.float16))
    for product in ("A2", "A3"):
        with targets.strict(product):
            with pytest.raises(ValueError, match="npu_kronecker_quant: expected dst_dtype "
                               "torch.int32 or torch_npu.int4 on .*Ascend 950 only"):
                na.npu_kronecker_quant(x, p1, p2, dst_dtype=FP4)
            na.npu_kronecker_quant(x, p1, p2)
    with targets.strict("950"):
        na.npu_kronecker_quant(x, p1, p2, dst_dtype=FP4, dst_type_max=6.0)
        na.npu_kronecker_quant(x, p1, torch.empty(0, 0, dtype=torch.float16), dst_dtype=FP4)
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_kronecker_quant(x.float(), p1.float(), p2.float(), dst_dtype=FP4)
