"""Tests for npu_gelu_mul against a golden written from seed 004::

    x1 = input[..., :d], x2 = input[..., d:]
    tanh: GELU(x) = 0.5 * x * [1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))]
    none: GELU(x) = 0.5 * x * [1 + erf(x / sqrt(2))]
    out = GELU(x1) * x2
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def golden(x, approximate="none"):
    x = x.double()
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    if approximate == "tanh":
        g = 0.5 * x1 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x1 + 0.044715 * x1 ** 3)))
    else:
        g = 0.5 * x1 * (1 + torch.erf(x1 / math.sqrt(2)))
    return g * x2


def make(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(100, 400), (3, 5, 18), (1, 2), (2, 1, 1, 1, 1, 1, 1, 1024)])
def test_matches_doc_formula(shape, mode, dtype):
    x = make(shape, dtype, seed=len(shape))
    before = x.clone()
    out = na.npu_gelu_mul(x, approximate=mode)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == dtype
    assert_close_to_golden(out, golden(x, mode), dtype=dtype)
    assert torch.equal(x, before)


def test_default_is_erf_and_modes_differ():
    x = make((4, 6), torch.float64, seed=1)
    torch.testing.assert_close(na.npu_gelu_mul(x), golden(x, "none"), rtol=1e-12, atol=1e-14)
    assert not torch.allclose(na.npu_gelu_mul(x), golden(x, "tanh"), rtol=1e-9, atol=0)


def test_noncontiguous_and_empty():
    x = make((8, 6), torch.float32, seed=2).t()
    assert_close_to_golden(na.npu_gelu_mul(x, approximate="tanh"), golden(x, "tanh"))
    assert na.npu_gelu_mul(torch.empty(0, 4)).shape == (0, 2)


def test_left_half_is_activated():
    x = torch.tensor([[1.0, -2.0, 3.0, 4.0]], dtype=torch.float64)
    out = na.npu_gelu_mul(x)
    assert_close_to_golden(out, golden(x))
    assert not torch.allclose(out, golden(x.flip(-1)).flip(-1))


def test_no_autograd():
    with pytest.raises(RuntimeError, match="npu_gelu_mul: expected inputs that do not require"):
        na.npu_gelu_mul(torch.randn(2, 4, requires_grad=True))


@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_gelu_mul(torch.randn(2, 4), approximate="erf"), ValueError,
     "npu_gelu_mul: expected approximate one of"),
    (lambda: na.npu_gelu_mul(torch.randn(4)), ValueError, "npu_gelu_mul: expected input a tensor"),
    (lambda: na.npu_gelu_mul(torch.randn(2, 5)), ValueError,
     "npu_gelu_mul: expected input an even last dim"),
    (lambda: na.npu_gelu_mul(torch.randn(2, 1026)), ValueError,
     "npu_gelu_mul: expected input a last dim <= 1024"),
    (lambda: na.npu_gelu_mul(torch.zeros(200001, 2)), ValueError,
     "npu_gelu_mul: expected input a product"),
    (lambda: na.npu_gelu_mul(torch.ones(2, 4, dtype=torch.int8)), TypeError,
     "npu_gelu_mul: expected input dtype"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_limits_are_inclusive():
    assert na.npu_gelu_mul(torch.zeros(200000, 2)).shape == (200000, 1)
    assert na.npu_gelu_mul(torch.zeros(1, 1024)).shape == (1, 512)


def test_strict_mode():
    x = torch.randn(2, 4)
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            na.npu_gelu_mul(x)
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(RuntimeError, match="npu_gelu_mul: expected a "
                                                                  "product"):
            na.npu_gelu_mul(x)
