"""npu_broadcast (+ .out) against numpy's broadcast_to (seed 004: size-1 dims expand, new dims
go in front, the result is contiguous)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na


def test_doc_example_and_numpy():
    x = torch.tensor([[1], [2], [3]])
    assert na.npu_broadcast(x, [3, 4]).tolist() == [[1] * 4, [2] * 4, [3] * 4]
    for dtype in (torch.float16, torch.int8, torch.bool):
        v = (torch.arange(5) % 2).to(dtype).reshape(5, 1)[::2]          # (3, 1) strided
        for size in ([3, 4], [2, 3, 4], [1, 3, 1], [2, 3, -1]):
            y = na.npu_broadcast(v, size)
            want = np.broadcast_to(v.numpy(), [s if s != -1 else 1 for s in size])
            assert y.is_contiguous() and y.dtype == dtype
            assert np.array_equal(y.numpy(), want)


def test_out_overload():
    out = torch.zeros(2, 3, dtype=torch.int64)
    assert na.npu_broadcast(torch.tensor([4, 5, 6]), [2, 3], out=out) is out
    assert out.tolist() == [[4, 5, 6], [4, 5, 6]]


@pytest.mark.parametrize("size,match", [
    ([3, 4], "npu_broadcast: expected size to keep or expand each dim"),
    ([2], r"npu_broadcast: expected size at least self.dim\(\) = 2"),
    ([-1, 3, 2], "npu_broadcast: expected size non-negative sizes for the new leading"),
])
def test_bad_sizes(size, match):
    with pytest.raises(ValueError, match=match):
        na.npu_broadcast(torch.rand(3, 2), size)
