"""npu_quant_matmul against goldens written from aclnnQuantMatmulV4's formulas in float64.

The int32 accumulation is computed here in float64 (exact for these sizes), int4 words are
unpacked with explicit shifts, and the fp19 truncation a float32 scale undergoes on the int8 /
float16 paths is redone with the float32 bit pattern.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

OP = "npu_quant_matmul"


def _i8(*shape, lo=-128, hi=128):
    return torch.randint(lo, hi, shape, dtype=torch.int8)


def _acc(x1, x2):
    return x1.to(torch.float64) @ x2.to(torch.float64)


def _fp19(scale: torch.Tensor) -> torch.Tensor:
    bits = scale.to(torch.float32).numpy().view(np.uint32) & np.uint32(0xFFFFE000)
    return torch.from_numpy(bits.view(np.float32).astype(np.float64))


def _round_int8(v: torch.Tensor) -> torch.Tensor:
    return torch.round(v).clamp(-128, 127).to(torch.int8)


def _unpack_int4(words: torch.Tensor) -> torch.Tensor:
    """int32 words -> int4 values along the last dim, word bits 4j..4j+3 being element j."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    parts = [((w >> (4 * j)) & 0xF) for j in range(8)]
    nib = torch.stack(parts, dim=-1).reshape(*words.shape[:-1], words.shape[-1] * 8)
    return torch.where(nib >= 8, nib - 16, nib)


def _pack_int4(vals: torch.Tensor) -> torch.Tensor:
    v = vals.to(torch.int64) & 0xF
    v = v.reshape(*vals.shape[:-1], vals.shape[-1] // 8, 8)
    word = sum(v[..., j] << (4 * j) for j in range(8))
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word).to(torch.int32)


@pytest.mark.parametrize("shape1,shape2", [((5, 24), (24, 7)), ((2, 3, 17), (17, 9)),
                                           ((2, 1, 3, 8), (3, 8, 5))])
def test_int8_output_float32_scale_offset_int32_bias(shape1, shape2):
    x1, x2 = _i8(*shape1), _i8(*shape2)
    n = shape2[-1]
    scale, offset = torch.rand(n) * 0.004, torch.randn(n) * 3
    bias = torch.randint(-500, 500, (n,), dtype=torch.int32)
    out = npu_anywhere.npu_quant_matmul(x1, x2, scale, offset=offset, bias=bias)
    # The kernel's float32 steps: the exact int32 sum (acc + bias) converted once, times the
    # fp19 scale, plus the offset rounded to an integer (npu_trans_quant_param's int9 field).
    acc = (_acc(x1, x2) + bias.double()).to(torch.float32)
    golden = _round_int8(acc * _fp19(scale).to(torch.float32) + torch.round(offset))
    assert out.dtype == torch.int8
    torch.testing.assert_close(out, golden, rtol=0, atol=0)


def test_int64_word_equals_float_scale_path():
    x1, x2 = _i8(4, 32), _i8(32, 6)
    scale, offset = torch.rand(6) * 0.01, torch.randint(-4, 4, (6,)).float()
    word = npu_anywhere.npu_trans_quant_param(scale, offset)
    a = npu_anywhere.npu_quant_matmul(x1, x2, word)
    b = npu_anywhere.npu_quant_matmul(x1, x2, scale, offset=offset)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("transposed", [False, True])
def test_bf16_output_pertoken_and_float_bias(transposed):
    m, k, n = 7, 40, 11
    x1 = _i8(m, k)
    x2 = _i8(n, k).t() if transposed else _i8(k, n)
    scale = torch.rand(n).to(torch.bfloat16)
    pertoken = torch.rand(m)
    bias = torch.randn(n).to(torch.bfloat16)
    out = npu_anywhere.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, bias=bias,
                                        output_dtype=torch.bfloat16)
    golden = _acc(x1, x2) * scale.double() * pertoken.double()[:, None] + bias.double()
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -7, atol=1e-3)


def test_pertoken_int32_bias_added_before_dequant():
    x1, x2 = _i8(3, 16), _i8(16, 4)
    scale, pertoken = torch.rand(4), torch.rand(3)
    bias = torch.randint(-1000, 1000, (4,), dtype=torch.int32)
    out = npu_anywhere.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, bias=bias,
                                        output_dtype=torch.float16)
    golden = (_acc(x1, x2) + bias.double()) * scale.double() * pertoken.double()[:, None]
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -10, atol=1e-3)


def test_float16_output_uses_fp19_scale():
    x1, x2 = _i8(6, 64), _i8(64, 3)
    scale = torch.tensor([0.0123456789])           # low mantissa bits set: truncation shows
    out = npu_anywhere.npu_quant_matmul(x1, x2, scale, output_dtype=torch.float16)
    golden = (_acc(x1, x2) * _fp19(scale)).to(torch.float16)
    torch.testing.assert_close(out, golden, rtol=1e-3, atol=0)


def test_int32_output_ignores_scale():
    x1, x2 = _i8(2, 3, 10), _i8(2, 10, 5)
    bias = torch.randint(-9, 9, (2, 1, 5), dtype=torch.int32)
    out = npu_anywhere.npu_quant_matmul(x1, x2, torch.rand(5), bias=bias,
                                        output_dtype=torch.int32)
    assert out.dtype == torch.int32
    assert torch.equal(out.to(torch.float64), _acc(x1, x2) + bias.double())


def test_int32_accumulation_exact_at_int8_extremes():
    # 4100 * 128 * 128 > 2**26: a plain float32 matmul would round these sums.
    k = 4100
    x1 = torch.full((3, k), -128, dtype=torch.int8)
    x1[1] = 127
    x1[2, ::2] = 127
    x2 = torch.full((k, 2), -128, dtype=torch.int8)
    x2[:, 1] = 127
    x2[1, 1] = -127
    out = npu_anywhere.npu_quant_matmul(x1, x2, torch.rand(1), output_dtype=torch.int32)
    golden = torch.tensor(_acc(x1, x2).numpy().round().astype(np.int64))
    assert torch.equal(out.to(torch.int64), golden)
    assert golden.abs().max() > 2 ** 26


@pytest.mark.parametrize("x2_layout", ["kn", "nk_transposed"])
def test_int4_packed(x2_layout):
    m, k, n = 3, 32, 16
    a = torch.randint(-8, 8, (m, k))
    b = torch.randint(-8, 8, (k, n))
    x1 = _pack_int4(a)
    x2 = _pack_int4(b) if x2_layout == "kn" else _pack_int4(b.t().contiguous()).t()
    assert torch.equal(_unpack_int4(x1), a)
    scale = torch.rand(n) * 0.1
    out = npu_anywhere.npu_quant_matmul(x1, x2, scale, output_dtype=torch.float16)
    golden = (a.double() @ b.double()) * _fp19(scale)
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -10, atol=1e-3)


def test_noncontiguous_int8_inputs_and_untouched():
    x1 = _i8(8, 40)[::2, 3:27]
    x2 = _i8(30, 10)[2:26, ::2]
    before = (x1.clone(), x2.clone())
    out = npu_anywhere.npu_quant_matmul(x1, x2, torch.ones(1), output_dtype=torch.int32)
    assert torch.equal(out.double(), _acc(x1, x2))
    assert torch.equal(x1, before[0]) and torch.equal(x2, before[1])


def test_ops_path_identical():
    x1, x2, s = _i8(3, 8), _i8(8, 4), torch.rand(4)
    a = npu_anywhere.npu_quant_matmul(x1, x2, s, output_dtype=torch.bfloat16)
    b = torch.ops.npu.npu_quant_matmul(x1, x2, s, output_dtype=torch.bfloat16)
    assert torch.equal(a, b)


def test_batch_not_broadcastable():
    with pytest.raises(RuntimeError, match="npu_quant_matmul: expected x2 batch dims"):
        npu_anywhere.npu_quant_matmul(_i8(2, 3, 8), _i8(3, 8, 4), torch.rand(4))


def test_last_dim_limit():
    with pytest.raises(ValueError, match="npu_quant_matmul: expected x1 a last dim <= 65535"):
        npu_anywhere.npu_quant_matmul(torch.zeros(1, 65536, dtype=torch.int8),
                                      torch.zeros(65536, 1, dtype=torch.int8), torch.rand(1))


def test_strict_310p_rules():
    with targets.strict("310P"):
        npu_anywhere.npu_quant_matmul(_i8(3, 8), _i8(8, 4), torch.rand(4),
                                      output_dtype=torch.float16)
        with pytest.raises(ValueError, match="expected output_dtype torch.int8 or torch.float16 on 310P"):
            npu_anywhere.npu_quant_matmul(_i8(3, 8), _i8(8, 4), torch.rand(4),
                                          output_dtype=torch.int32)
    with targets.strict("910"), pytest.raises(RuntimeError, match="npu_quant_matmul"):
        npu_anywhere.npu_quant_matmul(_i8(3, 8), _i8(8, 4), torch.rand(4))
