"""npu_scatter (CANN ArgMaxGrad) against a golden written from the seed example and the
ArgMaxGrad prototype: indices/updates have self's shape without ``dim``, and::

    out = copy of self;  out[p with indices[p] inserted at dim] = updates[p]
"""

from __future__ import annotations

import itertools

import pytest
import torch

import npu_anywhere as na

OP = "npu_scatter: expected"
DTYPES = [torch.float16, torch.float32, torch.int32, torch.int8, torch.float64]


def golden(x, indices, updates, dim):
    d = dim % x.dim()
    out = x.clone()
    for p in itertools.product(*(range(n) for n in indices.shape)):
        target = p[:d] + (int(indices[p]),) + p[d:]
        out[target] = updates[p]
    return out


def make(dtype=torch.float32, shape=(3, 4, 5), dim=1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randint(-50, 50, shape, generator=gen)).to(dtype)
    d = dim % len(shape)
    rest = shape[:d] + shape[d + 1:]
    indices = torch.randint(0, shape[d], rest, generator=gen, dtype=torch.int32)
    updates = torch.randint(-50, 50, rest, generator=gen).to(dtype)
    return x, indices, updates


def test_seed_example():
    x = torch.tensor([[1.6279, 0.1226], [0.9041, 1.0980]])
    out = na.npu_scatter(x, torch.tensor([0, 1], dtype=torch.int32),
                         torch.tensor([-1.1993, -1.5247]), 0)
    assert torch.equal(out, torch.tensor([[-1.1993, 0.1226], [0.9041, -1.5247]]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", [((3, 4, 5), 1), ((3, 4, 5), 0), ((3, 4, 5), -1),
                                       ((7,), 0), ((2, 1, 3, 2), 2), ((1, 6), -2)], ids=str)
def test_matches_golden(dtype, shape, dim):
    x, indices, updates = make(dtype, shape, dim, seed=len(shape) + dim)
    x0 = x.clone()
    out = na.npu_scatter(x, indices, updates, dim)
    assert out.dtype == dtype and torch.equal(out, golden(x, indices, updates, dim))
    assert torch.equal(x, x0)


def test_max_backward_usage():
    """op-plugin's npu_max_backward: npu_scatter(zeros(sizes), argmax, grad, dim)."""
    x = torch.randn(4, 6, 3)
    values, argmax = x.max(dim=1)
    grad = torch.randn_like(values)
    out = na.npu_scatter(torch.zeros_like(x), argmax.int(), grad, 1)
    expected = torch.zeros_like(x).scatter_(1, argmax[:, None], grad[:, None])
    assert torch.equal(out, expected)


def test_empty_indices_return_self_unchanged():
    x = torch.randn(3, 4)
    out = na.npu_scatter(x, torch.zeros(0, dtype=torch.int32), torch.zeros(0), 0)
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_non_contiguous_self_keeps_its_strides():
    x, indices, updates = make(shape=(4, 5, 6), dim=2)
    x_nc = x.transpose(0, 1).contiguous().transpose(0, 1)
    out = na.npu_scatter(x_nc, indices, updates, 2)
    assert out.stride() == x_nc.stride()
    assert torch.equal(out, golden(x, indices, updates, 2))


@pytest.mark.parametrize("value", [5, -1])
def test_out_of_range_raises(value):
    x, indices, updates = make(shape=(3, 5), dim=1)
    indices[-1] = value
    with pytest.raises(IndexError, match=f"{OP} indices values \\(positions along dim 1\\) in "
                       "\\[0, 4\\]"):
        na.npu_scatter(x, indices, updates, 1)


@pytest.mark.parametrize("change,error,match", [
    ("int64_indices", TypeError, "indices dtype in \\['int32'\\]"),
    ("bf16", TypeError, "self dtype in"),
    ("mixed", TypeError, "updates the same dtype as self"),
    ("keepdim", RuntimeError, "indices self's shape without dim 1"),
    ("updates_shape", RuntimeError, "updates the shape of indices"),
    ("dim", ValueError, "dim in \\[-3, 2\\]"),
    ("scalar", ValueError, "self at least 1 dim"),
])
def test_bad_metadata(change, error, match):
    x, indices, updates = make()
    dim = 1
    if change == "int64_indices":
        indices = indices.long()
    elif change == "bf16":
        x, updates = x.bfloat16(), updates.bfloat16()
    elif change == "mixed":
        updates = updates.half()
    elif change == "keepdim":
        indices, updates = indices[:, None], updates[:, None]
    elif change == "updates_shape":
        updates = updates[:, :4]
    elif change == "dim":
        dim = 3
    else:
        x = torch.tensor(1.0)
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_scatter(x, indices, updates, dim)


def test_strict_mode_and_autograd():
    x, indices, updates = make()
    with na.strict("910"):
        na.npu_scatter(x, indices, updates, 1)
        with pytest.raises(TypeError, match=f"{OP} self dtype in"):
            na.npu_scatter(x.double(), indices, updates.double(), 1)
    with na.strict("A2"), pytest.raises(RuntimeError, match=f"{OP} a product the op supports "
                                                            "\\(910\\)"):
        na.npu_scatter(x, indices, updates, 1)
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.npu_scatter(x.requires_grad_(), indices, updates, 1)
