"""npu_stride_add against a loop golden: channel blocks of 16 (C0) from each input, zero past
the input's C, added (seed 004; op-plugin StrideAddKernelNpu.cpp output dim 1 = 16 * c1_len;
test_strideadd.py's golden [2, 0, ..., 0] for a 1-element input)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def golden(x1, x2, o1, o2, c1_len):
    shape = list(x1.shape)
    shape[1] = 16 * c1_len
    y = torch.zeros(shape, dtype=torch.float64)
    for c in range(16 * c1_len):
        a = x1[:, 16 * o1 + c].double() if 16 * o1 + c < x1.shape[1] else 0.0
        b = x2[:, 16 * o2 + c].double() if 16 * o2 + c < x2.shape[1] else 0.0
        y[:, c] = a + b
    return y


def test_op_plugin_golden():
    a = torch.tensor([[[[[1.]]]]])
    y = na.npu_stride_add(a, a, 0, 0, 1)
    assert y.shape == (1, 16, 1, 1, 1)
    assert y.reshape(-1).tolist() == [2.0] + [0.0] * 15


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("c1,c2,o1,o2,n", [(40, 20, 1, 0, 2), (33, 48, 2, 1, 1), (16, 16, 0, 0, 1)])
def test_matches_golden(dtype, c1, c2, o1, o2, n):
    gen = torch.Generator().manual_seed(c1 + c2)
    x1 = torch.randn(2, c1, 3, 2, generator=gen).to(dtype)
    x2 = torch.randn(2, c2, 3, 2, generator=gen).to(dtype)
    y = na.npu_stride_add(x1, x2, o1, o2, n)
    assert y.dtype == dtype
    # one rounding of the exact sum of two values of dtype
    assert torch.equal(y, golden(x1, x2, o1, o2, n).to(dtype))


def test_noncontiguous():
    x1 = torch.randn(3, 20, 2).transpose(0, 2)               # (2, 20, 3)
    x2 = torch.randn(2, 18, 3)
    assert torch.equal(na.npu_stride_add(x1, x2, 0, 0, 2), golden(x1, x2, 0, 0, 2).float())


@pytest.mark.parametrize("args,error,match", [
    ((torch.rand(1, 20, 2), torch.rand(1, 20, 2), 1, 0, 2), ValueError,
     "expected c1_len <= C1 - offset of self"),
    ((torch.rand(1, 20, 2), torch.rand(1, 20, 3), 0, 0, 1), RuntimeError,
     "expected other self's shape"),
    ((torch.rand(1, 20, 2), torch.rand(1, 20, 2).half(), 0, 0, 1), TypeError,
     "expected other the same dtype as self"),
    ((torch.rand(1, 20, 2), torch.rand(1, 20, 2), -1, 0, 1), ValueError,
     "expected offset1 a non-negative integer"),
    ((torch.rand(20), torch.rand(20), 0, 0, 1), ValueError, "expected self at least 2 dims"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="npu_stride_add: " + match):
        na.npu_stride_add(*args)
