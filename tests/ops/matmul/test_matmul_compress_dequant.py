"""npu_matmul_compress_dequant against the aclnn formula in float64 (uncompressed weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

I8, I32 = torch.int8, torch.int32
OP = npu_anywhere.npu_matmul_compress_dequant


def _i8(*shape):
    return torch.randint(-128, 128, shape, dtype=I8)


def _fp19(scale: torch.Tensor) -> torch.Tensor:
    """The scale npu_trans_quant_param's word carries: float32 with 13 low mantissa bits zero."""
    bits = scale.numpy().astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return torch.from_numpy(bits.view(np.float32).copy())


def _golden(x1, x2, bias, scale):
    acc = x1.double() @ x2.double() + bias.double()           # exact in float64 here
    return acc * scale.double()


@pytest.mark.parametrize("m,k,n", [(1, 16, 1), (5, 33, 7), (16, 256, 128)])
def test_float32_scale_matches_formula(m, k, n):
    x1, x2 = _i8(m, k), _i8(k, n)
    bias = torch.randint(-5000, 5000, (1, n), dtype=I32)
    scale = torch.rand(1, n) * 0.01
    out = OP(x1, x2, torch.zeros(8, dtype=I8), bias, scale)
    assert out.dtype == torch.float16 and out.shape == (m, n)
    golden = _golden(x1, x2, bias, scale)
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -10, atol=2 ** -24)


@pytest.mark.parametrize("dtype", [torch.uint64, torch.int64])
def test_scale_words_use_the_fp19_field(dtype):
    x1, x2 = _i8(8, 24), _i8(24, 16)
    bias = torch.randint(-99, 99, (1, 16), dtype=I32)
    scale = torch.rand(1, 16) * 0.05 + 0.01             # |out| stays below 65504
    word = npu_anywhere.npu_trans_quant_param(scale).to(dtype)
    out = OP(x1, x2, torch.zeros(8, dtype=I8), bias, word)
    # The kernel's steps: exact int32 sum, one float32 product, one float16 rounding.
    golden = _golden(x1, x2, bias, _fp19(scale)).float().half()
    assert torch.equal(out, golden)
    assert not torch.equal(out, _golden(x1, x2, bias, scale).float().half())   # fp19 matters
    per_tensor = OP(x1, x2, torch.zeros(8, dtype=I8), bias, word[:, :1])
    torch.testing.assert_close(per_tensor.double(), _golden(x1, x2, bias, _fp19(scale[:, :1])),
                               rtol=2 ** -10, atol=0)


def test_seed_example_and_noncontiguous_weight():
    m, k, n = 16, 256, 128
    out = OP(torch.ones((m, k), dtype=I8), torch.zeros((k, n), dtype=I8),
             torch.zeros(8, dtype=I8), torch.zeros((1, n), dtype=I32),
             torch.ones((1, n), dtype=torch.float32))
    assert out.shape == (16, 128) and out.dtype == torch.float16 and not out.any()
    x1, w = _i8(3, 40), _i8(6, 40)
    bias, scale = torch.zeros(1, 6, dtype=I32), torch.full((1, 6), 0.125)
    out = OP(x1, w.t(), torch.zeros(8, dtype=I8), bias, scale)
    assert torch.equal(out, OP(x1, w.t().contiguous(), torch.zeros(8, dtype=I8), bias, scale))
    torch.testing.assert_close(out.double(), _golden(x1, w.t(), bias, scale), rtol=2 ** -10,
                               atol=0)


def test_compressed_weight_is_not_emulated():
    # op-plugin's test passes a 1-D msModelSlim blob with compress_index [51, -128, 0, ...].
    args = (torch.ones(16, 256, dtype=I8), torch.zeros(1000, dtype=I8),
            torch.tensor([51, -128, 0, 0, 0, 0, 0, 0], dtype=I8),
            torch.zeros(1, 128, dtype=I32), torch.ones(1, 128))
    with pytest.raises(NotImplementedError, match="weight_compression format .* is not public"):
        OP(*args)
    with pytest.raises(NotImplementedError, match="npu_matmul_compress_dequant: expected x2"):
        torch.ops.npu.npu_matmul_compress_dequant(*args)


def test_bad_inputs():
    x1, x2 = _i8(2, 8), _i8(8, 3)
    idx, bias, scale = torch.zeros(8, dtype=I8), torch.zeros(1, 3, dtype=I32), torch.ones(1, 3)
    with pytest.raises(ValueError, match="expected offsetW None"):
        OP(x1, x2, idx, bias, scale, offsetW=torch.zeros(8, 3, dtype=I8))
    with pytest.raises(ValueError, match="expected offsetX 0"):
        OP(x1, x2, idx, bias, scale, offsetX=2)
    with pytest.raises(ValueError, match="expected bias a 2-D tensor"):
        OP(x1, x2, idx, torch.zeros(3, dtype=I32), scale)
    with pytest.raises(ValueError, match="expected bias shape"):
        OP(x1, x2, idx, torch.zeros(2, 3, dtype=I32), scale)
    with pytest.raises(TypeError, match="expected x1 dtype in"):
        OP(x1.float(), x2, idx, bias, scale)
    with pytest.raises(TypeError, match="expected scale dtype in"):
        OP(x1, x2, idx, bias, scale.half())
    with pytest.raises(RuntimeError, match="expected x2 shape"):
        OP(x1, _i8(8, 4), idx, bias, scale)
    assert torch.equal(OP(x1, x2, idx, bias, scale, offsetX=0), OP(x1, x2, idx, bias, scale))


def test_strict_products():
    args = (_i8(2, 8), _i8(8, 3), torch.zeros(8, dtype=I8), torch.zeros(1, 3, dtype=I32),
            torch.ones(1, 3))
    with targets.strict("310P"):
        OP(*args)
    with targets.strict("A2"), pytest.raises(RuntimeError, match="expected a product"):
        OP(*args)
