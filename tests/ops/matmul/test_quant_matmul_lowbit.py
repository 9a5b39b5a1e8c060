"""npu_quant_matmul with float8 / hifloat8 / MX float8 / MX float4 inputs (Ascend 950), against
goldens written here from aclnnQuantMatmulV5 (hicann/ops-nn ``matmul/quant_batch_matmul_v4/
docs/aclnnQuantMatmulV5.md``)::

    static T-C:   out = (x1 @ x2 + bias) * fp19(scale)       (float32 scale, no pertoken_scale)
    dynamic K-C:  out = x1 @ x2 * scale * pertoken_scale + bias
    MX:           out[m, n] = sum_k x1[m, k] x1s[m, k // 32] x2[k, n] x2s[k // 32, n] + bias[n]

Every operand is decoded here from its bit patterns by the formats' definitions (float8 e4m3fn /
e5m2 field by field, hifloat8 from the dot-prefix table, float4_e2m1 from the OCP table, e8m0 as
2^(code - 127)); the dot products are correctly rounded float64 sums (math.fsum) rounded once
to float32, then the dequantization steps in float32 in the doc's order.  The test data keep
every sum exact in float64, so the comparisons are bit-exact.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

HIF8, E5M2, E4M3, E8M0, FP4 = 290, 291, 292, 293, 296
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# -- decoders, written from the format definitions -------------------------------------------------

def fp8_value(code: int, fmt: str) -> float:
    ebits, mbits, bias = (4, 3, 7) if fmt == "e4m3fn" else (5, 2, 15)
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if fmt == "e4m3fn" and e == 15 and m == 7:
        return math.nan
    if fmt == "e5m2" and e == 31:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * m / (1 << mbits) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def hif8_value(code: int) -> float:
    """HiFloat8: sign, dot prefix (11 / 10 / 01 / 001 / 0001 / 0000), sign-magnitude exponent
    with an implicit leading 1, mantissa; 0x00 zero, 0x80 NaN, 0x6F / 0xEF inf."""
    if code == 0x80:
        return math.nan
    sign = -1.0 if code & 0x80 else 1.0
    p = code & 0x7F
    bits = f"{p:07b}"
    if bits.startswith("11"):
        d, rest = 4, bits[2:]
    elif bits.startswith("10"):
        d, rest = 3, bits[2:]
    elif bits.startswith("01"):
        d, rest = 2, bits[2:]
    elif bits.startswith("001"):
        d, rest = 1, bits[3:]
    elif bits.startswith("0001"):
        d, rest = 0, bits[4:]
    else:                                                    # 0000 MMM: 2^(M - 23)
        mm = int(bits[4:], 2)
        return 0.0 if mm == 0 else sign * 2.0 ** (mm - 23)
    if d == 0:
        e, mant = 0, rest
    else:
        esign = -1 if rest[0] == "1" else 1
        mag = int("1" + rest[1:d], 2)                        # implicit leading 1
        e, mant = esign * mag, rest[d:]
    if d == 4 and e == 15 and mant == "1":
        return sign * math.inf
    frac = int(mant, 2) / (1 << len(mant)) if mant else 0.0
    return sign * (1 + frac) * 2.0 ** e


def decode(codes: torch.Tensor, fmt: str) -> np.ndarray:
    c = codes.to(torch.int64).numpy() & 0xFF
    if fmt == "hif8":
        table = [hif8_value(i) for i in range(256)]
    elif fmt == "e2m1":
        table = E2M1 + [-v for v in E2M1]
        return np.array(table)[c & 0xF]
    else:
        table = [fp8_value(i, fmt) for i in range(256)]
    return np.array(table)[c]


def e8m0(codes: torch.Tensor) -> np.ndarray:
    c = codes.to(torch.int64).numpy()
    return np.where(c == 255, np.nan, np.exp2(c.astype(np.float64) - 127))


def dot32(a: np.ndarray, b: np.ndarray, *, exact_in_float64: bool = False) -> np.ndarray:
    """float32 of the correctly rounded sum of the exact products: a (..., m, k) @ (..., k, n).

    ``exact_in_float64``: the caller's data keep every partial sum exact in float64 (so any
    summation order gives the exact sum), and a float64 matmul is used instead of fsum."""
    if exact_in_float64:
        return np.matmul(a, b).astype(np.float32)
    a, b = np.broadcast_arrays(a[..., :, :, None], b[..., None, :, :])
    flat_a = a.reshape(-1, a.shape[-2], a.shape[-1])
    flat_b = b.reshape(-1, b.shape[-2], b.shape[-1])
    out = np.empty((flat_a.shape[0], flat_a.shape[-1]))
    for i in range(flat_a.shape[0]):
        for j in range(flat_a.shape[-1]):
            col = flat_a[i, :, j] * flat_b[i, :, j]
            out[i, j] = math.fsum(col) if np.isfinite(col).all() else col.sum()
    return out.reshape(a.shape[:-3] + (a.shape[-3], a.shape[-1])).astype(np.float32)


def t32(x) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float32))


def check_equal(got: torch.Tensor, want32: torch.Tensor, out_dtype) -> None:
    want = want32.to(out_dtype)
    assert got.dtype == out_dtype and got.shape == want.shape
    assert torch.equal(got.float().nan_to_num(nan=7.5), want.float().nan_to_num(nan=7.5))


# -- data ------------------------------------------------------------------------------------------

def fp8_codes(shape, fmt: str, seed: int, lo: int = -6, hi: int = 6) -> torch.Tensor:
    """Random float8 bit patterns with exponents in [lo, hi] (sums stay exact in float64)."""
    g = torch.Generator().manual_seed(seed)
    bias, mbits = (7, 3) if fmt == "e4m3fn" else (15, 2)
    e = torch.randint(lo + bias, hi + bias + 1, shape, generator=g)
    m = torch.randint(0, 1 << mbits, shape, generator=g)
    s = torch.randint(0, 2, shape, generator=g)
    return ((s << 7) | (e << mbits) | m).to(torch.uint8)


def as_fp8(codes: torch.Tensor, fmt: str) -> torch.Tensor:
    return codes.view(torch.float8_e4m3fn if fmt == "e4m3fn" else torch.float8_e5m2)


def hif8_codes(shape, seed: int) -> torch.Tensor:
    """hifloat8 codes of the 3-bit-mantissa tiers (|e| <= 3) and the 2-bit tier (|e| 4..7)."""
    g = torch.Generator().manual_seed(seed)
    codes = [c for c in range(1, 256) if c != 0x80 and abs(hif8_value(c)) <= 2 ** 7
             and abs(hif8_value(c)) >= 2 ** -7]
    idx = torch.randint(0, len(codes), shape, generator=g)
    return torch.tensor(codes, dtype=torch.uint8)[idx]


def rand_f32(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) + 0.5


# -- float8 / hifloat8, T-C / K-C ------------------------------------------------------------------

@pytest.mark.parametrize("f1,f2", [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"), ("e5m2", "e5m2")])
@pytest.mark.parametrize("out", [F16, BF16, F32])
def test_float8_dynamic_per_channel_per_token(f1, f2, out):
    m, k, n = 5, 40, 7
    c1, c2 = fp8_codes((m, k), f1, 1), fp8_codes((k, n), f2, 2)
    scale, pertoken, bias = rand_f32(n, 3), rand_f32(m, 4), rand_f32(n, 5) - 1
    x1, x2 = as_fp8(c1, f1), as_fp8(c2, f2)
    got = na.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, bias=bias,
                              output_dtype=out)
    acc = t32(dot32(decode(c1, f1), decode(c2, f2)))
    check_equal(got, acc * scale * pertoken[:, None] + bias, out)


@pytest.mark.parametrize("out", [F16, BF16, F32])
def test_float8_static_scale_fp19_and_int64_word(out):
    m, k, n = 4, 33, 6
    c1, c2 = fp8_codes((m, k), "e4m3fn", 6), fp8_codes((k, n), "e5m2", 7)
    x1, x2 = as_fp8(c1, "e4m3fn"), as_fp8(c2, "e5m2")
    scale = rand_f32(n, 8) * 1.2345678
    bias = rand_f32(n, 9)
    acc = t32(dot32(decode(c1, "e4m3fn"), decode(c2, "e5m2")))
    fp19 = (scale.view(torch.int32) & -8192).view(torch.float32)   # low 13 mantissa bits cut
    want = (acc + bias) * fp19
    check_equal(na.npu_quant_matmul(x1, x2, scale, bias=bias, output_dtype=out), want, out)
    word = (fp19.view(torch.int32).to(torch.int64) & 0xFFFFFFFF) | (1 << 46)
    check_equal(na.npu_quant_matmul(x1, x2, word, bias=bias, output_dtype=out), want, out)


@pytest.mark.parametrize("carrier", [torch.uint8, torch.int8])
def test_hifloat8_codes(carrier):
    m, k, n = 6, 20, 5
    c1, c2 = hif8_codes((m, k), 10), hif8_codes((k, n), 11)
    scale, pertoken = rand_f32(1, 12), rand_f32(1, 13)
    x1, x2 = c1.view(carrier), c2.view(carrier)
    acc = t32(dot32(decode(c1, "hif8"), decode(c2, "hif8")))
    got = na.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, x1_dtype=HIF8,
                              x2_dtype=HIF8, output_dtype=F32)
    check_equal(got, acc * scale * pertoken, F32)
    got = torch.ops.npu.npu_quant_matmul(x1, x2, scale, x1_dtype=HIF8, x2_dtype=HIF8,
                                         output_dtype=BF16)
    fp19 = (scale.view(torch.int32) & -8192).view(torch.float32)
    check_equal(got, acc * fp19, BF16)


def test_hifloat8_special_codes_propagate():
    """inf and NaN codes (0x6F, 0x80) reach the output as inf / NaN."""
    x1 = torch.full((2, 4), 0x08, dtype=torch.uint8)         # 1.0 (dot 0001)
    x2 = torch.full((4, 3), 0x08, dtype=torch.uint8)
    x1[0, 1] = 0x6F
    x2[2, 2] = 0x80
    got = na.npu_quant_matmul(x1, x2, torch.ones(1), pertoken_scale=torch.ones(1),
                              x1_dtype=HIF8, x2_dtype=HIF8, output_dtype=F32)
    want = t32(dot32(decode(x1, "hif8"), decode(x2, "hif8")))
    check_equal(got, want, F32)
    assert torch.isinf(got[0, 0]) and torch.isnan(got[1, 2]) and got[1, 0] == 4.0


def test_float8_layouts_batch_and_carriers():
    """Transposed views, broadcast batch dims, uint8 carriers with x1_dtype / x2_dtype."""
    b, m, k, n = 3, 4, 24, 5
    c1 = fp8_codes((b, k, m), "e4m3fn", 14).transpose(-1, -2)       # (b, m, k) view
    c2 = fp8_codes((n, k), "e4m3fn", 15).t()                        # (k, n) view
    scale, pertoken = rand_f32(n, 16), rand_f32(m, 17)
    got = na.npu_quant_matmul(as_fp8(c1, "e4m3fn"), as_fp8(c2, "e4m3fn"), scale,
                              pertoken_scale=pertoken, output_dtype=BF16)
    acc = t32(dot32(decode(c1, "e4m3fn"), decode(c2, "e4m3fn")))
    want = acc * scale * pertoken[:, None]
    check_equal(got, want, BF16)
    got = na.npu_quant_matmul(c1, c2, scale, pertoken_scale=pertoken, output_dtype=BF16,
                              x1_dtype=E4M3, x2_dtype=torch.float8_e4m3fn)
    check_equal(got, want, BF16)


# -- MX --------------------------------------------------------------------------------------------

def mx_codes(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(120, 135, shape, generator=g, dtype=torch.uint8)


def block_scale_rows(codes: torch.Tensor, k: int) -> np.ndarray:
    """(..., r, kb, 2) codes -> per-element factors (..., r, k): block j = 2i + jj."""
    v = e8m0(codes)
    v = v.reshape(v.shape[:-2] + (-1,))
    return np.repeat(v, 32, axis=-1)[..., :k]


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("k", [64, 80, 150])
def test_mx_float8(fmt, k):
    m, n = 3, 5
    kb = -(-k // 64)
    c1, w = fp8_codes((m, k), fmt, 20), fp8_codes((n, k), fmt, 21)
    s1, sw = mx_codes((m, kb, 2), 22), mx_codes((n, kb, 2), 23)
    bias = rand_f32(n, 24)
    got = na.npu_quant_matmul(as_fp8(c1, fmt), as_fp8(w, fmt).t(), sw.transpose(0, 1),
                              pertoken_scale=s1, bias=bias, scale_dtype=E8M0,
                              pertoken_scale_dtype=E8M0, output_dtype=BF16,
                              group_sizes=[1, 1, 32])
    a = decode(c1, fmt) * block_scale_rows(s1, k)
    bt = decode(w, fmt) * block_scale_rows(sw, k)                    # (n, k)
    want = t32(dot32(a, bt.T)) + bias
    check_equal(got, want, BF16)


def test_mx_float8_contiguous_weight_batch_and_e8m0_dtype():
    b, m, k, n = 2, 3, 96, 4
    kb = -(-k // 64)
    c1 = fp8_codes((b, m, k), "e4m3fn", 25)
    c2 = fp8_codes((k, n), "e5m2", 26)
    s1 = mx_codes((b, m, kb, 2), 27)
    s2 = mx_codes((kb, n, 2), 28)                                   # (kb, n, 2) contiguous
    got = na.npu_quant_matmul(as_fp8(c1, "e4m3fn"), as_fp8(c2, "e5m2"),
                              s2.view(torch.float8_e8m0fnu),
                              pertoken_scale=s1.view(torch.float8_e8m0fnu), output_dtype=F32,
                              group_sizes=[0, 0, 32])
    a = decode(c1, "e4m3fn") * block_scale_rows(s1, k)
    s2t = np.swapaxes(e8m0(s2), 0, 1).reshape(n, -1)                # (n, 2 kb)
    bmat = decode(c2, "e5m2") * np.repeat(s2t, 32, axis=-1)[:, :k].T
    check_equal(got, t32(dot32(a, bmat)), F32)


def pack_rows(codes: torch.Tensor) -> torch.Tensor:
    """float4 codes (..., 2j) -> bytes, element 2i low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


@pytest.mark.parametrize("k", [64, 96])
@pytest.mark.parametrize("x2_transposed", [True, False])
def test_mx_float4(k, x2_transposed):
    m, n = 3, 6
    kb = -(-k // 64)
    g = torch.Generator().manual_seed(30)
    c1 = torch.randint(0, 16, (m, k), generator=g, dtype=torch.uint8)
    c2 = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    s1, sw = mx_codes((m, kb, 2), 31), mx_codes((n, kb, 2), 32)
    x1 = pack_rows(c1)                                              # (m, k / 2)
    if x2_transposed:
        x2 = pack_rows(c2.t().contiguous()).t()                     # view (k / 2, n)
    else:
        x2 = pack_rows(c2)                                          # (k, n / 2)
    got = na.npu_quant_matmul(x1, x2, sw.transpose(0, 1), pertoken_scale=s1, x1_dtype=FP4,
                              x2_dtype=FP4, scale_dtype=E8M0, pertoken_scale_dtype=E8M0,
                              output_dtype=F16)
    a = decode(c1, "e2m1") * block_scale_rows(s1, k)
    bmat = decode(c2, "e2m1") * block_scale_rows(sw, k).T
    check_equal(got, t32(dot32(a, bmat)), F16)
    if hasattr(torch, "float4_e2m1fn_x2"):               # torch's float4 / e8m0 dtypes
        fp4 = torch.float4_e2m1fn_x2
        got = torch.ops.npu.npu_quant_matmul(
            x1.view(fp4), x2.view(fp4), sw.transpose(0, 1).view(torch.float8_e8m0fnu),
            pertoken_scale=s1.view(torch.float8_e8m0fnu), output_dtype=F16)
        check_equal(got, t32(dot32(a, bmat)), F16)


@pytest.mark.parametrize("out", [BF16, F16])
def test_mx_float8_x_float4_pseudo_quant(out):
    """float8_e4m3fn activations with a float4 weight (the W4A8 MXFP pattern): group_sizes
    [0, 0, 32], bias (1, n) in the output dtype, added in float32."""
    m, k, n = 4, 96, 5
    kb = -(-k // 64)
    g = torch.Generator().manual_seed(34)
    c1 = fp8_codes((m, k), "e4m3fn", 35)
    cw = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    s1, sw = mx_codes((m, kb, 2), 36), mx_codes((n, kb, 2), 37)
    bias = (rand_f32((1, n), 38) - 1).to(out)
    got = na.npu_quant_matmul(as_fp8(c1, "e4m3fn"), pack_rows(cw).t(), sw.transpose(0, 1),
                              pertoken_scale=s1, bias=bias, x2_dtype=FP4, scale_dtype=E8M0,
                              pertoken_scale_dtype=E8M0, output_dtype=out, group_sizes=[0, 0, 32])
    a = decode(c1, "e4m3fn") * block_scale_rows(s1, k)
    bt = decode(cw, "e2m1") * block_scale_rows(sw, k)
    check_equal(got, t32(dot32(a, bt.T)) + bias.float(), out)


def test_mx_with_dynamic_mx_quant_round_trip():
    """npu_dynamic_mx_quant's (y, mxscale) feed the MX matmul directly (the MindSpeed pattern);
    the result is the matmul of the dequantized operands."""
    g = torch.Generator().manual_seed(33)
    x, w = torch.randn(4, 70, generator=g), torch.randn(6, 70, generator=g)
    xq, xs = na.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)
    wq, ws = na.npu_dynamic_mx_quant(w, dst_type=torch.float8_e4m3fn)
    got = na.npu_quant_matmul(xq, wq.t(), ws.transpose(0, 1), pertoken_scale=xs,
                              scale_dtype=E8M0, pertoken_scale_dtype=E8M0, output_dtype=F32)
    a = decode(xq.view(torch.uint8), "e4m3fn") * block_scale_rows(xs, 70)
    bt = decode(wq.view(torch.uint8), "e4m3fn") * block_scale_rows(ws, 70)
    check_equal(got, t32(dot32(a, bt.T)), F32)
    assert (got - x @ w.t()).abs().max() < 0.15 * (x @ w.t()).abs().max()


# -- G-B / B-B per-block float32 scales ------------------------------------------------------------

def per_block_golden(d1: np.ndarray, d2: np.ndarray, s1: np.ndarray, s2: np.ndarray, gm: int):
    """sum_j float32(group dot) * float32(s1[m // gm, j] * s2[j, n // 128]), float32 adds in
    j order."""
    m, k = d1.shape
    n = d2.shape[1]
    acc = np.zeros((m, n), np.float32)
    for j in range(-(-k // 128)):
        # <= 128 products of values with exponents in [-7, 7] and <= 4 significant bits:
        # every partial sum is exact in float64
        part = dot32(d1[:, j * 128:(j + 1) * 128], d2[j * 128:(j + 1) * 128],
                     exact_in_float64=True)
        r = s1[np.arange(m) // gm, j].astype(np.float32)[:, None]
        c = s2[j, np.arange(n) // 128].astype(np.float32)[None, :]
        acc = (acc + part * (r * c)).astype(np.float32)
    return acc


@pytest.mark.parametrize("mode", ["G-B", "B-B"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "hif8"])
def test_per_block_scales(mode, fmt):
    m, k, n = 130, 300, 140                  # partial last groups along m, k and n
    gm = 1 if mode == "G-B" else 128
    if fmt == "hif8":
        c1, c2 = hif8_codes((m, k), 50), hif8_codes((k, n), 51)
        kw = {"x1_dtype": HIF8, "x2_dtype": HIF8}
        x1, x2 = c1, c2
    else:
        c1, c2 = fp8_codes((m, k), fmt, 50), fp8_codes((n, k), fmt, 51).t()
        kw = {}
        x1, x2 = as_fp8(c1, fmt), as_fp8(c2, fmt)
    s1 = rand_f32((-(-m // gm), 3), 52)
    s2 = rand_f32((3, 2), 53)
    gs = [gm, 128, 128] if mode == "B-B" else None
    got = na.npu_quant_matmul(x1, x2, s2, pertoken_scale=s1, output_dtype=F32,
                              group_sizes=gs, **kw)
    want = per_block_golden(decode(c1, fmt), decode(c2, fmt), s1.numpy(), s2.numpy(), gm)
    check_equal(got, t32(want), F32)


def test_int8_per_block_g_b_with_bias():
    """int8 G-B: exact int8 group dot products, the same per-group sum, float32 bias, bf16."""
    g = torch.Generator().manual_seed(60)
    m, k, n = 3, 300, 140
    x1 = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    x2 = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).t()
    s1, s2, bias = rand_f32((m, 3), 61), rand_f32((3, 2), 62), rand_f32(n, 63) - 1
    got = na.npu_quant_matmul(x1, x2, s2, pertoken_scale=s1, bias=bias, output_dtype=BF16,
                              group_sizes=[1, 128, 128])
    want = per_block_golden(x1.double().numpy(), x2.double().numpy(), s1.numpy(), s2.numpy(),
                            1)
    check_equal(got, t32(want) + bias, BF16)
    i8 = {"dtype": torch.int8}
    with pytest.raises(ValueError, match=re.escape(
            "npu_quant_matmul: expected output_dtype torch.bfloat16 for int8 inputs with "
            "per-block scales")):
        na.npu_quant_matmul(torch.ones(3, 256, **i8), torch.ones(256, 4, **i8),
                            torch.rand(2, 1), pertoken_scale=torch.rand(3, 2), output_dtype=F16)
    with pytest.raises(ValueError, match=re.escape(
            "npu_quant_matmul: expected pertoken_scale (200, 2) (G-B; int8 has no B-B)")):
        na.npu_quant_matmul(torch.ones(200, 256, **i8), torch.ones(256, 4, **i8),
                            torch.rand(2, 1), pertoken_scale=torch.rand(2, 2), output_dtype=BF16)
    with targets.strict("A2"), pytest.raises(ValueError, match=re.escape(
            "npu_quant_matmul: expected x1 a k that is a multiple of 4 * 128 on A2 (G-B)")):
        na.npu_quant_matmul(torch.ones(3, 256, **i8), torch.ones(256, 4, **i8),
                            torch.rand(2, 1), pertoken_scale=torch.rand(3, 2), output_dtype=BF16)


def pack_int4_words(v: torch.Tensor) -> torch.Tensor:
    """int4 values (..., 8j) -> int32 words, element i of each eight in bits 4i .. 4i + 3."""
    nib = (v.to(torch.int64) & 0xF).reshape(*v.shape[:-1], -1, 8)
    word = sum(nib[..., i] << (4 * i) for i in range(8))
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word).to(torch.int32)


@pytest.mark.parametrize("out", [BF16, F16])
def test_int4_per_group_k_g(out):
    """K-G: out = x1s * sum_g float32(x1_g @ (x2_g - off_g)) * x2s_g, groups of 256 along k."""
    g = torch.Generator().manual_seed(70)
    m, k, n = 3, 1024, 256
    v1 = torch.randint(-8, 8, (m, k), generator=g)
    w = torch.randint(-8, 8, (n, k), generator=g)                 # weight (n, k)
    scale = rand_f32((k // 256, n), 71) * 0.01
    offset = torch.randint(-3, 4, (k // 256, n), generator=g).to(F16) + 0.5
    pertoken = rand_f32((m, 1), 72)
    got = na.npu_quant_matmul(pack_int4_words(v1), pack_int4_words(w).t(), scale,
                              offset=offset, pertoken_scale=pertoken, output_dtype=out,
                              group_sizes=[1, 1, 256])
    a, bm = v1.double().numpy(), w.double().numpy().T
    acc = np.zeros((m, n), np.float32)
    for j in range(k // 256):
        xa, xb = a[:, j * 256:(j + 1) * 256], bm[j * 256:(j + 1) * 256]
        exact = xa @ xb - xa.sum(1, keepdims=True) * offset[j].double().numpy()   # exact
        acc = (acc + exact.astype(np.float32) * scale[j].numpy()).astype(np.float32)
    check_equal(got, t32(acc) * pertoken, out)
    with pytest.raises(ValueError, match=re.escape(
            "npu_quant_matmul: expected offset the float16 (ceil(k / 256), n) weight offset")):
        na.npu_quant_matmul(pack_int4_words(v1), pack_int4_words(w).t(), scale,
                            pertoken_scale=pertoken, output_dtype=out)
    with targets.strict("A2"), pytest.raises(ValueError, match=re.escape(
            "npu_quant_matmul: expected output_dtype torch.bfloat16 on A2 (K-G)")):
        na.npu_quant_matmul(pack_int4_words(v1), pack_int4_words(w).t(), scale, offset=offset,
                            pertoken_scale=pertoken, output_dtype=F16)


# -- errors and products ---------------------------------------------------------------------------

def _fp8(*shape):
    return torch.zeros(shape).to(torch.float8_e4m3fn)


def _u8(*shape, v=127):
    return torch.full(shape, v, dtype=torch.uint8)


ERRORS = [
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)), {}), ValueError,
     "expected output_dtype torch.float16, torch.bfloat16 or torch.float32 for float8"),
    (lambda: ((_fp8(3, 8), torch.zeros(8, 4, dtype=torch.int8), torch.rand(4)),
              {"output_dtype": BF16}), TypeError, "expected x2 a float8 / hifloat8 / float4"),
    (lambda: ((_u8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"x1_dtype": HIF8, "output_dtype": BF16}), TypeError,
     "expected x2 a format matching x1's hifloat8"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"offset": torch.rand(4), "output_dtype": BF16}), ValueError,
     "expected offset None for float8"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"bias": torch.rand(4).bfloat16(), "output_dtype": BF16}), TypeError,
     "expected bias dtype in"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(5)), {"output_dtype": BF16}), ValueError,
     "expected scale a 1-D tensor of size 1 or 4"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"pertoken_scale": torch.rand(2), "output_dtype": BF16}), ValueError,
     "expected pertoken_scale a 1-D tensor of size 1 or 3"),
    (lambda: ((_fp8(3, 8), _fp8(9, 4), torch.rand(4)), {"output_dtype": BF16}), RuntimeError,
     "expected x2 a k dim equal to x1's (8)"),
    (lambda: ((torch.zeros(3, 4, dtype=torch.uint8), torch.zeros(8, 4, dtype=torch.uint8),
               _u8(1, 4, 2)), {"x1_dtype": FP4, "x2_dtype": FP4, "output_dtype": BF16}),
     ValueError, "expected scale e8m0 MX scales"),
    (lambda: ((_fp8(3, 64), _fp8(64, 4), _u8(1, 4, 2)),
              {"pertoken_scale": _u8(3, 2, 2), "scale_dtype": E8M0,
               "pertoken_scale_dtype": E8M0, "output_dtype": BF16}), ValueError,
     "expected pertoken_scale (3, 1, 2)"),
    (lambda: ((_fp8(3, 64), _fp8(64, 4), torch.rand(1, 4, 2)),
              {"pertoken_scale": _u8(3, 1, 2), "scale_dtype": E8M0,
               "pertoken_scale_dtype": E8M0, "output_dtype": BF16}), TypeError,
     "expected scale uint8 / int8 e8m0 codes"),
    (lambda: ((_fp8(3, 64), _fp8(64, 4), _u8(1, 4, 2)),
              {"pertoken_scale": _u8(3, 1, 2), "scale_dtype": E8M0,
               "pertoken_scale_dtype": E8M0, "output_dtype": BF16,
               "group_sizes": [1, 1, 64]}), ValueError, "expected group_sizes [1, 1, 32]"),
    (lambda: ((_fp8(3, 64), _fp8(64, 4), _u8(1, 4, 2)), {"scale_dtype": E8M0,
                                                         "output_dtype": BF16}),
     ValueError, "expected pertoken_scale the x1 e8m0 scale in the MX mode"),
    (lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 1)),
              {"pertoken_scale": torch.rand(3, 3), "output_dtype": BF16}), ValueError,
     "expected pertoken_scale (3, 2) (G-B) or (1, 2) (B-B)"),
    (lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 2)),
              {"pertoken_scale": torch.rand(3, 2), "output_dtype": BF16}), ValueError,
     "expected scale (2, 1) (ceil(k / 128), ceil(n / 128))"),
    (lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 1)),
              {"pertoken_scale": torch.rand(3, 2), "output_dtype": BF16,
               "group_sizes": [128, 128, 128]}), ValueError, "expected group_sizes [1, 128, 128]"),
    (lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 1)),
              {"pertoken_scale": torch.rand(3, 2), "output_dtype": BF16,
               "bias": torch.rand(4)}), ValueError, "expected bias None in the G-B / B-B"),
    (lambda: ((_fp8(3, 256), _fp8(256, 4), torch.rand(2, 1)), {"output_dtype": BF16}),
     ValueError, "expected pertoken_scale a 2-D (or batched) float32 x1 scale"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"output_dtype": BF16, "group_sizes": [1, 1, 32]}), ValueError,
     "expected group_sizes None with 1-D scales"),
    (lambda: ((_fp8(3, 64), _u8(4, 32).t(), _u8(1, 4, 2)),
              {"pertoken_scale": _u8(3, 1, 2), "x2_dtype": FP4, "scale_dtype": E8M0,
               "pertoken_scale_dtype": E8M0, "output_dtype": BF16, "bias": torch.rand(4)}),
     TypeError, "expected bias dtype torch.bfloat16 (the output's) for float8 x float4"),
    (lambda: ((_fp8(3, 64), _u8(64, 2), _u8(1, 4, 2)),
              {"pertoken_scale": _u8(3, 1, 2), "x2_dtype": FP4, "scale_dtype": E8M0,
               "pertoken_scale_dtype": E8M0, "output_dtype": BF16}), ValueError,
     "expected x2 the transpose of a contiguous (n, k / 2) weight"),
    (lambda: ((_fp8(3, 8), _fp8(8, 4), torch.rand(4)),
              {"y_scale": torch.ones(1, 4, dtype=torch.int64), "output_dtype": BF16}),
     NotImplementedError, "expected y_scale None"),
    (lambda: ((torch.zeros(3, 16, dtype=torch.int8), torch.zeros(16, 4, dtype=torch.int32),
               torch.rand(32)), {"group_sizes": [0, 0, 16]}),
     ValueError, "expected output_dtype torch.float16 or torch.bfloat16 for A8W4"),
    (lambda: ((_u8(3, 8), _u8(8, 4), torch.rand(4)), {"x1_dtype": 3, "output_dtype": BF16}),
     ValueError, "expected x1_dtype one of"),
    (lambda: ((torch.zeros(3, 8, dtype=torch.int8), torch.zeros(8, 4, dtype=torch.int8),
               torch.rand(4)), {"scale_dtype": E8M0, "output_dtype": BF16}), TypeError,
     "expected x1 a float8 / hifloat8 / float4 operand"),
    (lambda: ((torch.zeros(3, 8, dtype=torch.int8), torch.zeros(8, 4, dtype=torch.int8),
               torch.rand(4)), {"pertoken_scale_dtype": E8M0, "output_dtype": BF16}),
     ValueError, "expected pertoken_scale_dtype None for int8 / int4 inputs"),
]


@pytest.mark.parametrize("make,error,msg", ERRORS)
def test_bad_inputs(make, error, msg):
    args, kwargs = make()
    for fn in (na.npu_quant_matmul, torch.ops.npu.npu_quant_matmul):
        with pytest.raises(error, match="npu_quant_matmul: " + re.escape(msg)):
            fn(*args, **kwargs)


def test_inputs_untouched_and_products():
    c1, c2 = fp8_codes((3, 32), "e4m3fn", 40), fp8_codes((32, 4), "e4m3fn", 41)
    x1, x2, scale = as_fp8(c1, "e4m3fn"), as_fp8(c2, "e4m3fn"), rand_f32(4, 42)
    before = (c1.clone(), c2.clone(), scale.clone())
    with targets.strict("950"):
        na.npu_quant_matmul(x1, x2, scale, output_dtype=BF16)
    assert torch.equal(c1, before[0]) and torch.equal(c2, before[1])
    assert torch.equal(scale, before[2])
    for product in ("A2", "A3"):
        with targets.strict(product), pytest.raises(
                RuntimeError, match="npu_quant_matmul: expected a product the op supports"):
            na.npu_quant_matmul(x1, x2, scale, output_dtype=BF16)
    with targets.strict("A2"):                           # int8 stays fine on A2
        na.npu_quant_matmul(torch.ones(2, 8, dtype=torch.int8),
                            torch.ones(8, 4, dtype=torch.int8), torch.ones(4),
                            output_dtype=F16)


def test_fake_tensors_with_torch_float8_inputs():
    """The torch float8 dtypes (the op database carries float8 as uint8 codes, since opcheck
    cannot compare float8 tensors on CPU) and the float4 packing under FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        x1 = mode.from_tensor(torch.empty(2, 5, 64, dtype=torch.float8_e4m3fn))
        x2 = mode.from_tensor(torch.empty(7, 64, dtype=torch.float8_e5m2)).t()
        y = torch.ops.npu.npu_quant_matmul(x1, x2, torch.ones(7), pertoken_scale=torch.ones(5),
                                           output_dtype=BF16)
        assert tuple(y.shape) == (2, 5, 7) and y.dtype == BF16
        s1 = mode.from_tensor(torch.empty(2, 5, 1, 2, dtype=torch.float8_e8m0fnu))
        s2 = mode.from_tensor(torch.empty(1, 7, 2, dtype=torch.float8_e8m0fnu))
        y = torch.ops.npu.npu_quant_matmul(x1, x2, s2, pertoken_scale=s1, output_dtype=F32)
        assert tuple(y.shape) == (2, 5, 7) and y.dtype == F32
        p1 = mode.from_tensor(torch.empty(5, 32, dtype=torch.uint8))
        p2 = mode.from_tensor(torch.empty(7, 32, dtype=torch.uint8)).t()
        y = torch.ops.npu.npu_quant_matmul(p1, p2, s2[0].unsqueeze(0), pertoken_scale=s1[0],
                                           x1_dtype=FP4, x2_dtype=FP4, output_dtype=F16)
        assert tuple(y.shape) == (5, 7)
        y = torch.ops.npu.npu_quant_matmul(x1[0], p2, s2[0].unsqueeze(0),
                                           pertoken_scale=s1[0], x2_dtype=FP4,
                                           output_dtype=BF16, group_sizes=[0, 0, 32])
        assert tuple(y.shape) == (5, 7) and y.dtype == BF16
        h1 = mode.from_tensor(torch.empty(3, 24, dtype=torch.uint8))
        h2 = mode.from_tensor(torch.empty(24, 4, dtype=torch.uint8))
        y = torch.ops.npu.npu_quant_matmul(h1, h2, torch.ones(4), x1_dtype=HIF8, x2_dtype=HIF8,
                                           output_dtype=F16)
        assert tuple(y.shape) == (3, 4) and y.dtype == F16
        y = torch.ops.npu.npu_quant_matmul(x1, x2, torch.ones(1, 1), output_dtype=BF16,
                                           pertoken_scale=torch.ones(2, 1, 1),
                                           group_sizes=[128, 128, 128])
        assert tuple(y.shape) == (2, 5, 7)
