"""Tests for npu_anti_quant against the doc formula (seed 004)::

    anti_quant(x) = (x + offset) * scale          cast to dst_dtype (float16 by default)

int32 x holds 8 int4 values per element, unpacked here with op-plugin's golden rule
(test_npu_anti_quant.py unpack_int4: bytes, shifts [0, 4], low nibble first).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import rand, unpack_int4_bytes  # noqa: E402


def golden(q, scale, offset):
    """float64 value of (q + offset) * scale; the result is rounded once to the output dtype,
    which the float64 -> float16/bfloat16 conversion of this (exact for these inputs up to
    float32 products) reproduces within one rounding."""
    v = q.to(torch.float64)
    if offset is not None:
        v = v + offset.to(torch.float64)
    return v * scale.to(torch.float64)


def _i8(shape, seed):
    return torch.randint(-128, 128, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.int8)


def _packed(shape, seed):
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape,
                         generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def test_doc_example():
    x = torch.tensor([1, 2, 3, 4], dtype=torch.int8)
    out = na.npu_anti_quant(x, torch.tensor([2.0]), offset=torch.tensor([2.0]),
                            dst_dtype=torch.float16)
    assert out.dtype == torch.float16
    assert out.tolist() == [6.0, 8.0, 10.0, 12.0]


@pytest.mark.parametrize("dst", [None, torch.float16, torch.bfloat16, 5, 15])
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_offset", [False, True])
def test_int8(dst, scale_dtype, with_offset):
    x = _i8((4, 3, 10), seed=1)
    scale = rand((10,), scale_dtype, seed=2)
    offset = rand((10,), scale_dtype, seed=3) * 5 if with_offset else None
    out = na.npu_anti_quant(x, scale, offset=offset, dst_dtype=dst)
    want_dtype = torch.bfloat16 if dst in (torch.bfloat16, 15) else torch.float16
    assert out.dtype == want_dtype and out.shape == x.shape
    # float32 computation then one rounding: compare with the float32 evaluation exactly and
    # with the float64 golden within the output dtype's rounding
    v32 = x.to(torch.float32)
    if offset is not None:
        v32 = v32 + offset.to(torch.float32)
    v32 = v32 * scale.to(torch.float32)
    assert torch.equal(out, v32.to(want_dtype))
    g = golden(x, scale, offset)
    tol = 2 ** -8 if want_dtype == torch.bfloat16 else 2 ** -11
    torch.testing.assert_close(out.double(), g, rtol=tol, atol=1e-6)


@pytest.mark.parametrize("src", [None, torch.quint4x2, 285])
def test_int4_packed(src):
    x = _packed((3, 2), seed=4)
    scale = rand((16,), torch.float32, seed=5)
    offset = rand((16,), torch.float32, seed=6)
    out = na.npu_anti_quant(x, scale, offset=offset, src_dtype=src)
    assert out.shape == (3, 16) and out.dtype == torch.float16
    q = unpack_int4_bytes(x)
    torch.testing.assert_close(out.double(), golden(q, scale, offset), rtol=2 ** -11, atol=1e-6)


def test_int4_by_hand():
    # 0x87654321 -> nibbles 1, 2, 3, 4, 5, 6, 7, -8 (low nibble first)
    x = torch.tensor([0x87654321 - 2 ** 32], dtype=torch.int32)
    out = na.npu_anti_quant(x, torch.tensor([0.5]), offset=torch.tensor([1.0]))
    assert out.tolist() == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, -3.5]


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_x(fp8):
    x = rand((5, 8), torch.float32, seed=7).to(fp8)
    scale = rand((8,), torch.float32, seed=8)
    out = na.npu_anti_quant(x, scale, dst_dtype=torch.bfloat16, src_dtype=fp8)
    assert torch.equal(out, (x.float() * scale).to(torch.bfloat16))


@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16])
def test_hifloat8_x_all_codes(dst):
    # uint8 x holds torch_npu.hifloat8 codes; en_dtypes decodes them for the golden, which the
    # float32 kernel order (x + offset) * scale then rounds once to dst.
    import en_dtypes
    import numpy as np

    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(32, 8)
    scale = rand((8,), torch.float32, seed=12)
    offset = rand((8,), torch.float32, seed=13)
    out = na.npu_anti_quant(codes, scale, offset=offset, dst_dtype=dst, src_dtype=290)
    values = torch.from_numpy(codes.numpy().view(en_dtypes.hifloat8).astype(np.float32))
    want = ((values + offset) * scale).to(dst)
    assert out.dtype == dst and out.shape == codes.shape
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.nan_to_num(), want.nan_to_num())


def test_hifloat8_x_by_hand():
    x = torch.tensor([0x08, 0x09, 0xAF, 0x6E, 0xEF, 0x01, 0x80], dtype=torch.uint8)
    out = na.npu_anti_quant(x, torch.tensor([2.0]), dst_dtype=torch.bfloat16)
    assert out[:6].tolist() == [2.0, 2.25, -30.0, 65536.0, float("-inf"), 2.0 ** -21]
    assert out[6].isnan()


def test_rounding_and_overflow_of_the_output():
    x = torch.tensor([1, 127, -128], dtype=torch.int8)
    # 1 * (1 + 2**-11) is a tie between 1 and 1 + 2**-10 in float16 -> even (1.0)
    out = na.npu_anti_quant(x[:1], torch.tensor([1.0 + 2 ** -11]))
    assert out.item() == 1.0
    big = na.npu_anti_quant(x, torch.tensor([1000.0]))
    assert big.tolist() == [1000.0, float("inf"), float("-inf")]


def test_scalar_and_non_contiguous_x():
    out = na.npu_anti_quant(torch.tensor(5, dtype=torch.int8), torch.tensor([0.5]))
    assert out.shape == () and out.item() == 2.5
    base = _i8((8, 6), seed=9)
    x = base.t()
    scale = rand((8,), torch.float32, seed=10)
    before = x.clone()
    out = na.npu_anti_quant(x, scale)
    assert out.is_contiguous()
    assert torch.equal(out, na.npu_anti_quant(x.contiguous(), scale))
    assert torch.equal(x, before)


@pytest.mark.parametrize("args,kwargs,error,match", [
    ((_i8((2, 4), 0), torch.ones(4, dtype=torch.float16)), {}, TypeError,
     "expected scale dtype in"),
    ((_i8((2, 4), 0), torch.ones(8)), {}, RuntimeError, "expected scale size 1 or the"),
    ((_i8((2, 4), 0), torch.ones(4)), {"offset": torch.ones(1)}, RuntimeError,
     "expected offset the shape of scale"),
    ((_i8((2, 4), 0), torch.ones(4)), {"src_dtype": torch.float8_e4m3fn}, TypeError,
     "expected src_dtype the format of x"),
    ((_packed((2, 1), 0), torch.ones(8)), {"src_dtype": torch.int8}, TypeError,
     "expected src_dtype the format of x"),
    ((torch.ones(2, 8).to(torch.float8_e5m2), torch.ones(8, dtype=torch.bfloat16)), {},
     TypeError, "expected scale dtype float32 when x is float8"),
    ((torch.ones(2, 8, dtype=torch.uint8), torch.ones(8, dtype=torch.bfloat16)), {},
     TypeError, r"expected scale dtype float32 when x is float8 or hifloat8 \(uint8\)"),
    ((torch.ones(2, 8, dtype=torch.uint8), torch.ones(8)), {"src_dtype": torch.uint8},
     TypeError, "expected src_dtype the format of x"),
    ((_i8((2, 4), 0), torch.ones(4)), {"dst_dtype": torch.int8}, ValueError,
     "expected dst_dtype torch.float16 or torch.bfloat16"),
    # a code naming no dtype keeps torch_npu's wording too (op-plugin's test matches on it)
    ((_i8((4,), 0), torch.ones(1)), {"dst_dtype": -10}, ValueError,
     r"expected dst_dtype torch.float16 or torch.bfloat16, but got dtype code -10 "
     r"\(Input dst_type must be valid, but got UNKNOWN_SCALAR\)"),
    ((_packed((), 0), torch.ones(1)), {}, ValueError, "expected x at least 1 dim"),
])
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=f"^npu_anti_quant: {match}"):
        na.npu_anti_quant(*args, **kwargs)


def test_strict_mode_rules():
    x = _i8((2, 4), 11)
    with na.strict("310P"):
        na.npu_anti_quant(x, torch.ones(4))
        with pytest.raises(TypeError, match="expected scale float32 on 310P"):
            na.npu_anti_quant(x, torch.ones(4, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="expected dst_dtype torch.float16 on 310P"):
            na.npu_anti_quant(x, torch.ones(4), dst_dtype=torch.bfloat16)
        with pytest.raises(TypeError, match="expected x int8 or int32"):
            na.npu_anti_quant(x.float().to(torch.float8_e4m3fn), torch.ones(4))
    with na.strict("A3"):
        with pytest.raises(TypeError, match="expected x int8 or int32"):
            na.npu_anti_quant(x.to(torch.uint8), torch.ones(4))
    with na.strict("A2"):
        na.npu_anti_quant(_packed((2, 1), 1), torch.ones(8), dst_dtype=torch.bfloat16)
    with na.strict("950"):
        na.npu_anti_quant(x.float().to(torch.float8_e4m3fn), torch.ones(4))
        na.npu_anti_quant(x.to(torch.uint8), torch.ones(4), src_dtype=290)
