"""npu_reshape (+ .out): values unchanged in row-major order (seed 004); ``can_refresh`` with
``out`` keeps out's values (op-plugin ReshapeKernelNpu.cpp)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def test_values_and_copy():
    x = torch.arange(16.).reshape(2, 8)
    for refresh in (False, True):
        y = na.npu_reshape(x, (4, 4), refresh)
        assert y.tolist() == [[4 * r + c for c in range(4)] for r in range(4)]
        assert y.data_ptr() != x.data_ptr()
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()          # non-contiguous
    assert na.npu_reshape(t, [2, 6]).reshape(-1).tolist() == [
        v for row in t.tolist() for v in row]


def test_out_overload_modes():
    x = torch.arange(6.).reshape(2, 3)
    out = torch.full((3, 2), -1.0)
    assert na.npu_reshape(x, [3, 2], out=out) is out
    assert out.reshape(-1).tolist() == list(range(6))
    kept = torch.full((3, 2), -1.0)
    na.npu_reshape(x, [3, 2], True, out=kept)
    assert (kept == -1).all()


@pytest.mark.parametrize("shape,match", [([4, 5], "npu_reshape: expected shape 16 elements"),
                                         ([-1, 4], "npu_reshape: expected shape values >= 0")])
def test_bad_shape(shape, match):
    with pytest.raises(ValueError, match=match):
        na.npu_reshape(torch.rand(2, 8), shape)
