"""npu_pad: zeros around the input, ``paddings = [before0, after0, before1, after1, ...]`` from
dim 0 (seed 004; op-plugin pad_npu_output_size), against numpy.pad."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na


def golden(x, paddings):
    p = list(paddings) + [0] * (2 * x.dim() - len(paddings))
    return np.pad(x.numpy(), [(p[2 * d], p[2 * d + 1]) for d in range(x.dim())])


def test_doc_example_and_op_plugin_golden():
    x = torch.tensor([[20, 20, 10, 10]], dtype=torch.float16)
    y = na.npu_pad(x, [1, 1, 1, 1])
    assert y.dtype == torch.float16
    assert y.tolist() == [[0] * 6, [0, 20, 20, 10, 10, 0], [0] * 6]
    assert na.npu_pad(torch.ones(2, 2), (1, 1, 1, 1)).tolist() == [
        [0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("paddings", [[0, 2, 1], [2, 0, 0, 1, 3, 0], [], [1]])
def test_partial_lists_and_dtypes(paddings):
    for dtype in (torch.float32, torch.int32, torch.uint8):
        x = (torch.arange(24) % 9 + 1).to(dtype).reshape(2, 4, 3)[:, ::2]   # (2, 2, 3) strided
        y = na.npu_pad(x, paddings)
        assert y.dtype == dtype and np.array_equal(y.numpy(), golden(x, paddings))


@pytest.mark.parametrize("paddings,match", [([1, -1], "expected paddings values >= 0"),
                                            ([1] * 5, "expected paddings at most 2 \\*")])
def test_bad_paddings(paddings, match):
    with pytest.raises(ValueError, match="npu_pad: " + match):
        na.npu_pad(torch.rand(2, 2), paddings)
