"""npu_gemma_rms_norm against a float64 golden of the aclnnGemmaRmsNorm formula::

    y_i = x_i / sqrt(mean(x^2) + eps) * (1 + g_i);   rstd = 1 / sqrt(mean(x^2) + eps)
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).to(dtype)


def golden(x, gamma, eps=1e-6):
    x, g = x.double(), gamma.double()
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    rms = torch.sqrt((x * x).mean(dims, keepdim=True) + eps)
    return x / rms * (1.0 + g), 1.0 / rms


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,k", [((20, 10, 64), 1), ((3, 4, 5), 2), ((9,), 1), ((1, 31), 1)])
def test_forward_matches_doc_formula(shape, k, dtype):
    x = make(shape, dtype, 1)
    gamma = make(shape[len(shape) - k:], dtype, 2)
    x0 = x.clone()
    y, rstd = na.npu_gemma_rms_norm(x, gamma, 1e-5)
    want_y, want_rstd = golden(x, gamma, 1e-5)
    assert y.dtype == dtype and rstd.dtype == (F64 if dtype == F64 else F32)
    assert rstd.shape == tuple(shape[:len(shape) - k]) + (1,) * k
    assert_close_to_golden(y, want_y, dtype=dtype)
    assert_close_to_golden(rstd, want_rstd, rtol=1e-5 if dtype != F64 else None)
    assert torch.equal(x, x0)


def test_gamma_zero_is_plain_normalization_and_differs_from_rms_norm():
    x = make((4, 8), F64, 3)
    gamma = make((8,), F64, 4)
    y0, _ = na.npu_gemma_rms_norm(x, torch.zeros(8, dtype=F64))
    assert_close_to_golden(y0, x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6))
    y, _ = na.npu_gemma_rms_norm(x, gamma)
    assert_close_to_golden(y, na.npu_rms_norm(x, 1.0 + gamma)[0])
    assert not torch.allclose(y, na.npu_rms_norm(x, gamma)[0])


def test_self_alias_and_default_epsilon():
    x, g = make((2, 6), F64, 5), make((6,), F64, 6)
    y, rstd = na.npu_gemma_rms_norm(self=x, gamma=g)
    assert_close_to_golden(y, golden(x, g, 1e-6)[0])
    with pytest.raises(TypeError, match="both 'input' and its alias 'self'"):
        na.npu_gemma_rms_norm(x, g, self=x)


def test_non_contiguous():
    base = make((8, 6, 20), F32, 7)
    x = base.transpose(0, 1)[:, :, 2:18]
    g = make((16,), F32, 8)
    assert_close_to_golden(na.npu_gemma_rms_norm(x, g)[0], golden(x, g)[0])


def test_no_autograd():
    x = make((2, 8), F64, 9).requires_grad_(True)
    with pytest.raises(RuntimeError, match="npu_gemma_rms_norm: expected inputs that do not "
                                           "require grad"):
        na.npu_gemma_rms_norm(x, make((8,), F64, 10))
    with torch.no_grad():
        na.npu_gemma_rms_norm(x, make((8,), F64, 10))


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(4, 16, dtype=F16), torch.randn(16)), TypeError, "expected gamma dtype in"),
    ((torch.randn(4, 16), torch.randn(4, 16, 1)), ValueError, "expected gamma a 1-D to 2-D"),
    ((torch.randn(4, 16), torch.randn(4)), RuntimeError, "expected gamma the trailing dims"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_gemma_rms_norm: " + match):
        na.npu_gemma_rms_norm(*args)


def test_strict_products_and_empty():
    x, g = torch.randn(2, 16, dtype=BF16), torch.randn(16, dtype=BF16)
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            na.npu_gemma_rms_norm(x, g)
    for product in ("310P", "910"):
        with na.strict(product), pytest.raises(RuntimeError, match="expected a product"):
            na.npu_gemma_rms_norm(x, g)
    empty = torch.empty(0, 16)
    assert na.npu_gemma_rms_norm(empty, torch.ones(16))[0].shape == (0, 16)
    with na.strict("A2"), pytest.raises(ValueError, match="expected input a non-empty"):
        na.npu_gemma_rms_norm(empty, torch.ones(16))
