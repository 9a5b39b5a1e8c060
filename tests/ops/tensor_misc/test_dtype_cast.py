"""npu_dtype_cast / npu_dtype_cast_ / npu_dtype_cast_backward against goldens from the docs.

Seed 004 (y = input converted to dtype), op-plugin CastKernelNpuOpApi.cpp (torch_npu-only
dtypes in uint8, float4 / int4 two per byte) and test_dtype_cast.py (int32 [1, 2, 3, 4] ->
int4 bytes [33, 67]).  The hifloat8 and float4 goldens are written here from the formats'
definitions: every code decoded by hand, and a cast is the nearest representable value.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import dtypes

HIF8 = dtypes.HIFLOAT8
E2M1 = dtypes.FLOAT4_E2M1FN_X2
E1M2 = dtypes.FLOAT4_E1M2FN_X2


def hif8_value(code: int) -> float:
    """HiFloat8 code -> value, from the format's table (dot prefix, sign-magnitude exponent)."""
    sign = -1.0 if code & 0x80 else 1.0
    p = code & 0x7F
    if code == 0x80:
        return math.nan
    if p == 0x6F:
        return sign * math.inf
    if p >= 0x60:      # dot 11: 4 exponent bits (1 sign + 3), 1 mantissa bit
        es, mag, m, mb = (p >> 4) & 1, 8 + ((p >> 1) & 7), p & 1, 1
    elif p >= 0x40:    # dot 10
        es, mag, m, mb = (p >> 4) & 1, 4 + ((p >> 2) & 3), p & 3, 2
    elif p >= 0x20:    # dot 01
        es, mag, m, mb = (p >> 4) & 1, 2 + ((p >> 3) & 1), p & 7, 3
    elif p >= 0x10:    # dot 001: exponent +-1
        es, mag, m, mb = (p >> 3) & 1, 1, p & 7, 3
    elif p >= 0x08:    # dot 0001: exponent 0
        es, mag, m, mb = 0, 0, p & 7, 3
    elif p == 0:
        return 0.0
    else:              # denormal 2^(M - 23)
        return sign * 2.0 ** (p - 23)
    e = -mag if es else mag
    return sign * 2.0 ** e * (1 + m / 2 ** mb)


FINITE = sorted({abs(hif8_value(c)) for c in range(256)} - {math.inf} - {math.nan}
                - {x for x in [hif8_value(0x80)]})
FINITE = [v for v in FINITE if not math.isnan(v)]


def hif8_golden(v: float) -> float:
    a = min(abs(v), 2.0 ** 15)
    best = min(FINITE, key=lambda g: (abs(g - a), -g))       # ties: away from zero
    return math.copysign(best, v) if best else 0.0


E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1_code(v: float) -> int:
    a = min(abs(v), 6.0)
    # nearest, ties to the even code
    code = min(range(8), key=lambda c: (abs(E2M1_GRID[c] - a), c % 2))
    return code | (8 if math.copysign(1, v) < 0 else 0)


def test_doc_example_and_plain_casts():
    out = na.npu_dtype_cast(torch.tensor([0, 0.5, -1.]), dtype=torch.int)
    assert out.dtype == torch.int32 and out.tolist() == [0, 0, -1]
    x = torch.tensor([[1.7, -2.9, 1e5], [-0.4, 3.5, 7.25]], dtype=torch.float64)
    for dst in (torch.int8, torch.int32, torch.int64):
        got = na.npu_dtype_cast(x[:, :2].float(), dst)      # truncation toward zero
        assert got.tolist() == [[int(v) for v in r] for r in x[:, :2].tolist()]
    half = na.npu_dtype_cast(x.float().t(), torch.float16)          # non-contiguous input
    assert half.is_contiguous() and half.shape == (3, 2)
    assert half.tolist() == x.t().to(torch.float16).tolist()
    same = na.npu_dtype_cast(x, torch.float64)
    assert same.data_ptr() != x.data_ptr() and torch.equal(same, x)


def test_hifloat8_decode_and_encode():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    got = na.npu_dtype_cast(codes, torch.float32, dtypes.HIFLOAT8).reshape(-1).tolist()
    for c, g in enumerate(got):
        want = hif8_value(c)
        assert (math.isnan(g) and math.isnan(want)) or g == want, (hex(c), g, want)
    gen = torch.Generator().manual_seed(0)
    mags = torch.exp2(torch.rand(7, 9, generator=gen) * 44 - 26)
    x = (mags * torch.where(torch.rand(7, 9, generator=gen) < 0.5, -1.0, 1.0)).float()
    x[0, :4] = torch.tensor([1.0625, 40000.0, 1e6, 3.0])      # a tie, saturations, exact
    q = na.npu_dtype_cast(x, HIF8)
    assert q.dtype == torch.uint8 and q.shape == x.shape
    back = [hif8_value(c) for c in q.reshape(-1).tolist()]
    want = [hif8_golden(v) for v in x.reshape(-1).tolist()]
    assert back == want
    assert back[:4] == [1.125, 32768.0, 32768.0, 3.0]


def test_float4_pack_and_unpack():
    x = torch.tensor([[0.25, 0.75, 1.25, -2.5, 5.0, 7.0, -0.1, 2.9]], dtype=torch.bfloat16)
    q = na.npu_dtype_cast(x, E2M1)
    assert q.dtype == torch.uint8 and q.shape == (1, 4)
    codes = [e2m1_code(v) for v in x.float().reshape(-1).tolist()]
    assert q.reshape(-1).tolist() == [codes[2 * i] | (codes[2 * i + 1] << 4) for i in range(4)]
    back = na.npu_dtype_cast(q, torch.float32, E2M1)
    assert back.shape == (1, 8)
    assert back.reshape(-1).tolist() == [math.copysign(E2M1_GRID[c & 7], -1 if c & 8 else 1)
                                         for c in codes]
    e1 = na.npu_dtype_cast(torch.tensor([[0x21, 0x8F]], dtype=torch.uint8), torch.float32, E1M2)
    assert e1.tolist() == [[0.25, 0.5, -1.75, -0.0]]


def test_int4_and_float8_and_reinterpret():
    got = na.npu_dtype_cast(torch.tensor([1, 2, 3, 4], dtype=torch.int32), dtypes.INT4,
                            torch.int32)
    assert got.tolist() == [33, 67] and got.dtype == torch.uint8
    neg = na.npu_dtype_cast(torch.tensor([[-1, 7, -8, 0]], dtype=torch.int8), torch.quint4x2)
    assert neg.tolist() == [[0x7F, 0x08]]
    f8 = na.npu_dtype_cast(torch.tensor([-5, 3, 1000, -1000]), torch.float8_e4m3fn)
    assert f8.dtype == torch.float8_e4m3fn and f8.float().tolist() == [-5, 3, 448, -448]
    f8b = na.npu_dtype_cast(torch.tensor([2.5, 1e6]), dtypes.FLOAT8_E5M2)
    assert f8b.dtype == torch.float8_e5m2 and f8b.float().tolist() == [2.5, 57344.0]
    as_u8 = na.npu_dtype_cast(torch.tensor([-1, 5, -128], dtype=torch.int8), torch.int32,
                              torch.uint8)
    assert as_u8.tolist() == [255, 5, 128]


def test_autograd_and_backward_op():
    a = torch.rand(3, 4, dtype=torch.float32, requires_grad=True)
    b = na.npu_dtype_cast(a, torch.half)
    assert b.requires_grad and b.dtype == torch.float16
    g = torch.rand(3, 4, dtype=torch.float16)
    b.backward(g)
    assert a.grad.dtype == torch.float32 and a.grad.tolist() == g.float().tolist()
    x = torch.rand(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: na.npu_dtype_cast(t, torch.float64), (x,))
    gb = na.npu_dtype_cast_backward(torch.tensor([1.5, -2.0], dtype=torch.float16),
                                    torch.float32, 5)
    assert gb.dtype == torch.float32 and gb.tolist() == [1.5, -2.0]
    ints = na.npu_dtype_cast(a, torch.int32)
    assert not ints.requires_grad


def test_inplace_writes_self_only():
    y = torch.zeros(4, 2, dtype=torch.int32).t()                   # non-contiguous target
    src = torch.tensor([[1.5, 2.5, -3.7, 9.9], [0.2, -0.2, 4.0, 5.5]])
    keep = src.clone()
    assert na.npu_dtype_cast_(y, src) is y
    assert y.tolist() == [[int(v) for v in r] for r in src.tolist()]
    assert torch.equal(src, keep)
    same = torch.ones(3)
    na.npu_dtype_cast_(same, torch.zeros(3))       # same dtype: op-plugin writes nothing
    assert same.tolist() == [1.0, 1.0, 1.0]


def test_bad_inputs_raise_and_change_nothing():
    y = torch.zeros(2, 3)
    with pytest.raises(RuntimeError, match="npu_dtype_cast_: expected src self's shape"):
        na.npu_dtype_cast_(y, torch.ones(3, 2, dtype=torch.float16))
    assert not y.any()
    with pytest.raises(ValueError, match="npu_dtype_cast: expected self an even last dim"):
        na.npu_dtype_cast(torch.rand(3), E1M2)
    with pytest.raises(NotImplementedError, match="npu_dtype_cast: expected self integer"):
        na.npu_dtype_cast(torch.rand(4), dtypes.INT4)
    with pytest.raises(TypeError, match="npu_dtype_cast: expected self uint8 storage"):
        na.npu_dtype_cast(torch.rand(4), torch.float32, HIF8)
    with pytest.raises(ValueError, match="npu_dtype_cast: expected dtype a torch dtype"):
        torch.ops.npu.npu_dtype_cast(torch.rand(4), 12345)
