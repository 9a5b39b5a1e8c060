"""npu_quant_matmul_reduce_sum against the seed formula in float64."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere
from npu_anywhere import targets


def _i8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


@pytest.mark.parametrize("b,m,k,n", [(2, 3, 4, 5), (3, 7, 33, 9)])
def test_matches_formula(b, m, k, n):
    x1, x2 = _i8(b, m, k), _i8(b, k, n)
    s1, s2 = torch.rand(b, m), torch.rand(n).to(torch.bfloat16)
    out = npu_anywhere.npu_quant_matmul_reduce_sum(x1, x2, x1_scale=s1, x2_scale=s2)
    golden = torch.zeros(m, n, dtype=torch.float64)
    for i in range(b):
        golden += (x1[i].double() @ x2[i].double()) * s1[i].double()[:, None] * s2.double()[None]
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    torch.testing.assert_close(out.double(), golden, rtol=2 ** -8, atol=1e-2)


def test_seed_example_ones():
    b, m, k, n = 2, 3, 4, 5
    out = npu_anywhere.npu_quant_matmul_reduce_sum(
        torch.ones(b, m, k, dtype=torch.int8), torch.ones(b, k, n, dtype=torch.int8),
        x1_scale=torch.ones(b, m), x2_scale=torch.ones(n, dtype=torch.bfloat16))
    assert torch.equal(out, torch.full((m, n), 8.0, dtype=torch.bfloat16))


def test_strict_products():
    args = (_i8(1, 2, 8), _i8(1, 8, 3))
    kw = {"x1_scale": torch.rand(1, 2), "x2_scale": torch.rand(3).to(torch.bfloat16)}
    with targets.strict("A3"):
        npu_anywhere.npu_quant_matmul_reduce_sum(*args, **kw)
    with targets.strict("310P"), pytest.raises(RuntimeError, match="npu_quant_matmul_reduce_sum"):
        npu_anywhere.npu_quant_matmul_reduce_sum(*args, **kw)
