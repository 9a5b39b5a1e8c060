"""npu_one_hot against a Python-loop golden of the doc formula (seed 004: on_value where the
index equals the class, off_value elsewhere; op-plugin OnehotNpu.cpp: float32 result, the class
dim at ``num_classes``)."""

from __future__ import annotations

import itertools

import pytest
import torch

import npu_anywhere as na


def golden(x, num_classes, depth, on, off):
    ids = x.to(torch.int32).tolist()
    shape = list(x.shape)
    axis = len(shape) if num_classes == -1 else num_classes
    out_shape = shape[:axis] + [depth] + shape[axis:]
    y = torch.full(out_shape, float(off), dtype=torch.float64)
    for pos in itertools.product(*(range(s) for s in shape)):
        v = ids
        for p in pos:
            v = v[p]
        if 0 <= v < depth:
            y[pos[:axis] + (v,) + pos[axis:]] = float(on)
    return y


def test_doc_example():
    y = na.npu_one_hot(torch.IntTensor([5, 3, 2, 1]), depth=5)
    assert y.dtype == torch.float32
    assert y.tolist() == [[0] * 5, [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 0]]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.float32])
@pytest.mark.parametrize("num_classes", [-1, 0, 1, 2])
def test_matches_golden(dtype, num_classes):
    x = torch.tensor([[0, 3, 1], [4, 2, 7]]).to(dtype)
    if dtype == torch.float32:
        x = x + 0.6                                             # truncated to int32 first
    y = na.npu_one_hot(x, num_classes, 5, 2.5, -1)
    assert y.dtype == torch.float32
    assert torch.equal(y.double(), golden(x, num_classes, 5, 2.5, -1))


def test_op_plugin_golden_and_noncontiguous():
    x = torch.arange(0, 10).to(torch.int32)
    assert torch.equal(na.npu_one_hot(x, depth=12).to(torch.int32),
                       torch.nn.functional.one_hot(x.long(), 12).to(torch.int32))
    t = torch.tensor([[1, -1], [0, 2]]).t()
    assert torch.equal(na.npu_one_hot(t, depth=3).double(), golden(t, -1, 3, 1, 0))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(depth=-1), NotImplementedError, "expected depth a given depth"),
    (dict(depth=0), ValueError, "expected depth >= 1"),
    (dict(num_classes=3, depth=2), ValueError, "expected num_classes the position"),
    (dict(num_classes=-2, depth=2), ValueError, "expected num_classes the position"),
])
def test_bad_inputs(kwargs, error, match):
    with pytest.raises(error, match="npu_one_hot: " + match):
        na.npu_one_hot(torch.tensor([[1, 2]]), **kwargs)
