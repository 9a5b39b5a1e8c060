"""npu_masked_fill_range against op-plugin's golden (test_masked_fill_range.py), written here as
its loops: for each group i and column j, positions start[i, j] <= k < end[i, j] along axis get
value[i]; on the last axis of a 2-D / 3-D input only row j is filled."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def golden(x, start, end, value, axis):
    out = x.clone().double()
    n = x.dim()
    ax = axis % n
    for i in range(start.shape[0]):
        for j in range(start.shape[1]):
            for k in range(max(int(start[i, j]), 0), min(int(end[i, j]), x.shape[ax])):
                if n == 1:
                    out[k] = float(value[i])
                elif ax == n - 1:
                    out[j, ..., k] = float(value[i])
                else:
                    idx = [slice(None)] * n
                    idx[ax] = k
                    out[tuple(idx)] = float(value[i])
    return out


def test_doc_example():
    a = torch.rand(4, 4)
    start = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    end = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    out = na.npu_masked_fill_range(a, start, end, torch.tensor([1.]), 1)
    want = a.clone()
    want[0, 0] = want[1, 1] = want[2, 2] = 1
    assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.int8])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((5, 6), 0), ((5, 6), -1), ((3, 5, 6), 0),
                                        ((3, 5, 6), 1), ((3, 5, 6), 2), ((3, 5, 6), -2)])
def test_matches_golden(dtype, shape, axis):
    gen = torch.Generator().manual_seed(len(shape) * 10 + axis)
    x = (torch.rand(shape, generator=gen) * 50).to(dtype)
    size = shape[axis]
    rows = 3
    start = torch.randint(-1, size, (2, rows), generator=gen, dtype=torch.int32)
    end = start + torch.randint(0, 4, (2, rows), generator=gen, dtype=torch.int32)
    value = torch.tensor([-7, 9]).to(dtype)
    keep = x.clone()
    out = na.npu_masked_fill_range(x, start, end, value, axis)
    assert out.dtype == dtype and torch.equal(x, keep)
    assert torch.equal(out.double(), golden(x, start, end, value, axis))


def test_noncontiguous_self():
    x = torch.arange(40.).reshape(8, 5).t()                 # (5, 8)
    start = torch.tensor([[1, 0], [6, 2]], dtype=torch.int32)
    end = torch.tensor([[4, 1], [8, 3]], dtype=torch.int32)
    out = na.npu_masked_fill_range(x, start, end, torch.tensor([-1., -2.]))
    assert torch.equal(out.double(), golden(x, start, end, torch.tensor([-1., -2.]), -1))


def _bad(**kw):
    args = dict(self=torch.rand(4, 5), start=torch.zeros(1, 2, dtype=torch.int32),
                end=torch.ones(1, 2, dtype=torch.int32), value=torch.ones(1), axis=-1)
    args.update(kw)
    return args


@pytest.mark.parametrize("kw,error,match", [
    (dict(axis=2), IndexError, "expected axis in \\[-2, 1\\]"),
    (dict(value=torch.ones(1, dtype=torch.float16)), TypeError, "expected value self's dtype"),
    (dict(value=torch.ones(2)), RuntimeError, "expected value one value per range group"),
    (dict(end=torch.ones(1, 3, dtype=torch.int32)), RuntimeError, "expected end start's shape"),
    (dict(start=torch.zeros(2, dtype=torch.int32)), ValueError, "expected start a 2-D"),
    (dict(start=torch.zeros(1, 2)), TypeError, "expected start dtype in \\['int32'\\]"),
    (dict(self=torch.rand(2, 2, 2, 2)), ValueError, "expected self a tensor with one of"),
    (dict(start=torch.zeros(1, 5, dtype=torch.int32), end=torch.ones(1, 5, dtype=torch.int32)),
     RuntimeError, "expected start at most self.size\\(0\\) = 4 columns"),
])
def test_bad_inputs(kw, error, match):
    args = _bad(**kw)
    with pytest.raises(error, match="npu_masked_fill_range: " + match):
        na.npu_masked_fill_range(args["self"], args["start"], args["end"], args["value"],
                                 args["axis"])
