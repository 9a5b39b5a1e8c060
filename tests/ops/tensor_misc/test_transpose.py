"""npu_transpose (+ .out) against numpy's transpose (seed 004: a permuted, contiguous copy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_matches_numpy(dtype):
    x = (torch.arange(2 * 3 * 5) % 7).reshape(2, 3, 5).to(dtype)
    for perm in ((2, 0, 1), (0, 1, 2), (1, 2, 0)):
        for rc in (True, False):
            y = na.npu_transpose(x, perm, rc)
            assert y.is_contiguous() and y.dtype == dtype
            assert np.array_equal(y.float().numpy(), np.transpose(x.float().numpy(), perm))
    assert y.data_ptr() != x.data_ptr()


def test_noncontiguous_and_out():
    x = torch.randn(4, 7)[:, 1::2]                       # (4, 3) strided
    want = np.transpose(x.numpy(), (1, 0))
    assert np.array_equal(na.npu_transpose(x, [1, 0]).numpy(), want)
    out = torch.zeros(3, 4)
    assert na.npu_transpose(x, [1, 0], out=out) is out
    assert np.array_equal(out.numpy(), want)
    bad = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match=r"npu_transpose: expected out shape \(3, 4\)"):
        na.npu_transpose(x, [1, 0], out=bad)
    assert not bad.any()


@pytest.mark.parametrize("perm", [[0, 0], [0], [0, 2], [-1, 0]])
def test_bad_perm(perm):
    with pytest.raises(ValueError, match="npu_transpose: expected perm a permutation of 0..1"):
        na.npu_transpose(torch.rand(2, 3), perm)
