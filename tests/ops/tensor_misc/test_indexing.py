"""npu_indexing (+ .out) against Python slicing, which has StridedSlice's semantics (seed 004:
``[begin, end)`` with strides; masks as TensorFlow's StridedSlice, op-plugin
IndexingKernelNpuOpApi.cpp and its test_npu_indexing.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import npu_anywhere as na


def python_index(entries, begin, end, strides, bm, em, ell, new, shrink):
    key = []
    for i in range(entries):
        if (ell >> i) & 1:
            key.append(Ellipsis)
        elif (new >> i) & 1:
            key.append(None)
        elif (shrink >> i) & 1:
            key.append(begin[i])
        else:
            key.append(slice(None if (bm >> i) & 1 else begin[i],
                             None if (em >> i) & 1 else end[i], strides[i]))
    return tuple(key)


def test_doc_example():
    x = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=torch.int32)
    y = na.npu_indexing(x, [0, 0], [2, 2], [1, 1])
    assert y.dtype == torch.int32 and y.tolist() == [[1, 2], [5, 6]]


def test_random_slices_with_masks_match_python():
    rng = random.Random(0)
    a = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    x = torch.from_numpy(a).to(torch.float16)
    for _ in range(150):
        k = rng.randint(1, 4)
        begin = [rng.randint(-6, 6) for _ in range(k)]
        end = [rng.randint(-6, 6) for _ in range(k)]
        strides = [rng.choice([-3, -2, -1, 1, 2, 3]) for _ in range(k)]
        bm, em = rng.randint(0, 15), rng.randint(0, 15)
        ell = 1 << rng.randrange(k) if rng.random() < 0.3 else 0
        new = rng.randint(0, 15) & ~ell if rng.random() < 0.3 else 0
        shrink = 0
        for i in range(k):       # shrink only on in-range positive-stride plain entries
            if rng.random() < 0.2 and not ((ell | new) >> i) & 1 and strides[i] > 0:
                shrink |= 1 << i
                begin[i] = rng.randint(-2, 1)
        key = python_index(k, begin, end, strides, bm, em, ell, new, shrink)
        try:
            want = a[key]
        except IndexError:
            continue          # a shrink on a dim the ellipsis pushed elsewhere went out of range
        got = na.npu_indexing(x, begin, end, strides, bm, em, ell, new, shrink)
        assert got.shape == want.shape, (key, got.shape, want.shape)
        assert np.array_equal(got.float().numpy(), want)


def test_noncontiguous_out_and_empty():
    base = torch.arange(48.).reshape(6, 8)
    x = base.t()                                                       # (8, 6) strided
    out = torch.zeros(3, 2)
    assert na.npu_indexing(x, [1, 0], [8, 6], [3, 4], out=out) is out
    assert np.array_equal(out.numpy(), x.numpy()[1:8:3, 0:6:4])
    assert na.npu_indexing(base, [1, 0], [0, 8], [1, 1]).shape == (0, 8)
    assert torch.equal(torch.ops.npu.npu_indexing(x, [0], [2], [1]), x[:2])


@pytest.mark.parametrize("args,kwargs,error,match", [
    (([0, 0], [2, 2], [1, 0]), {}, ValueError, "expected strides non-zero"),
    (([0, 0, 0], [2, 2], [1, 1]), {}, ValueError, "expected begin, end and strides lists"),
    (([0, 0], [2, 2], [1, 1]), dict(ellipsis_mask=3), ValueError, "expected ellipsis_mask at most one bit"),
    (([0, 4], [2, 5], [1, 1]), dict(shrink_axis_mask=2), IndexError, "expected begin an index"),
    (([0, 1], [2, 2], [1, -1]), dict(shrink_axis_mask=2), ValueError, "expected strides a positive stride"),
    (([0, 0, 0], [2, 3, 4], [1, 1, 1]), {}, ValueError, "expected begin at most 2 entries"),
])
def test_bad_inputs(args, kwargs, error, match):
    x = torch.rand(2, 3)
    with pytest.raises(error, match="npu_indexing: " + match):
        na.npu_indexing(x, *args, **kwargs)
