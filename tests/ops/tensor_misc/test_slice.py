"""npu_slice (+ .out): ``y = x[o0:o0+s0, o1:o1+s1, ...]`` (seed 004), checked element by element."""

from __future__ import annotations

import itertools

import pytest
import torch

import npu_anywhere as na


def test_doc_example():
    x = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], dtype=torch.float16)
    y = na.npu_slice(x, [0, 0], [2, 2])
    assert y.dtype == torch.float16 and y.tolist() == [[1, 2], [6, 7]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int16, torch.bool])
def test_blocks_match_loops(dtype):
    x = (torch.arange(3 * 5 * 4) % 5).reshape(3, 5, 4).to(dtype).transpose(0, 2)   # (4, 5, 3)
    offsets, size = [1, 2, 0], [3, 2, 3]
    y = na.npu_slice(x, offsets, size)
    assert y.shape == tuple(size) and y.is_contiguous()
    for i, j, k in itertools.product(*(range(s) for s in size)):
        assert y[i, j, k] == x[i + 1, j + 2, k]
    out = torch.zeros(size, dtype=dtype)
    assert na.npu_slice(x, offsets, size, out=out) is out and torch.equal(out, y)
    assert na.npu_slice(x, [4, 0, 0], [0, 5, 3]).shape == (0, 5, 3)


@pytest.mark.parametrize("offsets,size,match", [
    ([0, 4], [2, 2], "expected size offsets \\+ size within"),
    ([0], [2, 2], "expected offsets 2 entries"),
    ([0, -1], [2, 2], "expected offsets values >= 0"),
    ([0, 0], [2, -1], "expected size values >= 0"),
])
def test_bad_inputs(offsets, size, match):
    with pytest.raises(ValueError, match="npu_slice: " + match):
        na.npu_slice(torch.rand(2, 5), offsets, size)
