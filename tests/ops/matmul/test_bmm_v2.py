"""npu_bmmV2 against ``self @ mat2`` in float64 (numpy-style broadcasting)."""

from __future__ import annotations

import torch

import npu_anywhere


def test_broadcast_matches_formula():
    a, b = torch.randn(2, 1, 3, 4), torch.randn(5, 4, 6)
    out = npu_anywhere.npu_bmmV2(a, b, [])
    golden = torch.from_numpy(a.double().numpy() @ b.double().numpy())
    assert out.shape == (2, 5, 3, 6)
    torch.testing.assert_close(out.double(), golden, rtol=1e-5, atol=1e-5)


def test_output_sizes_reduces_batch():
    a, b = torch.randn(4, 3, 5), torch.randn(5, 2)
    out = npu_anywhere.npu_bmmV2(a, b, [1, 3, 2])
    golden = sum(a[i].double() @ b.double() for i in range(4)).reshape(1, 3, 2)
    torch.testing.assert_close(out.double(), golden, rtol=1e-5, atol=1e-5)


def test_fp16_rounds_once():
    a, b = torch.randn(3, 2, 40).half(), torch.randn(3, 40, 7).half()
    out = npu_anywhere.npu_bmmV2(a, b, [])
    torch.testing.assert_close(out, (a.double() @ b.double()).half(), rtol=1e-3, atol=1e-3)


def test_gradcheck_broadcast():
    a = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda a, b: npu_anywhere.npu_bmmV2(a, b, []), (a, b))
