"""npu_confusion_transpose and its backward against numpy goldens of the doc formula.

Seed 004 / op-plugin （beta）torch_npu-npu_confusion_transpose.md: transpose_first=True is
``permute(perm)`` then ``reshape(shape)``, False is ``reshape(shape)`` then ``permute(perm)``
(op-plugin's golden test_confusion_transpose.py does the same with ``view``).  The backward
(derivatives.yaml) is checked by gradcheck / gradgradcheck and against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na


def golden(x, perm, shape, transpose_first):
    a = x.numpy()
    if transpose_first:
        return np.ascontiguousarray(np.transpose(a, perm)).reshape(shape)
    return np.transpose(a.reshape(shape), perm)


CASES = [((2, 3, 4, 6), (0, 2, 1, 3), (2, 4, 18), True),      # the doc's two examples
         ((2, 3, 4, 6), (0, 2, 1), (2, 12, 6), False),
         ((1, 7, 10), (0, 2, 1, 3), (1, 7, 2, 5), False),       # op-plugin's BSH -> BNSD shape
         ((3, 5), (1, 0), (5, 3), True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.uint8])
def test_matches_golden(dtype):
    for xs, perm, shape, tf in CASES:
        x = (torch.arange(int(np.prod(xs))) % 251).to(dtype).reshape(xs)
        y = na.npu_confusion_transpose(x, perm, shape, tf)
        want = golden(x, perm, shape, tf)
        assert y.is_contiguous() and y.dtype == dtype and tuple(y.shape) == want.shape
        assert np.array_equal(y.numpy(), want)
    assert na.npu_confusion_transpose(torch.rand(2, 3, 4, 6), (0, 2, 1), (2, 12, 6),
                                      False).shape == (2, 6, 12)


def test_noncontiguous_input_and_no_alias():
    base = torch.randn(6, 8)
    x = base.t()[:, ::2]                                   # (8, 3), strided
    y = na.npu_confusion_transpose(x, [1, 0], [4, 6], True)
    assert np.array_equal(y.numpy(), golden(x.contiguous(), [1, 0], [4, 6], True))
    y.zero_()
    assert base.abs().sum() > 0


@pytest.mark.parametrize("xs,perm,shape,tf", [((2, 3, 2, 2), (0, 2, 1, 3), (2, 2, 6), True),
                                               ((2, 6), (0, 2, 1), (2, 3, 2), False)])
def test_gradients(xs, perm, shape, tf):
    x = torch.rand(*xs, dtype=torch.float64, requires_grad=True)
    f = lambda t: na.npu_confusion_transpose(t, perm, shape, tf)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))
    g = torch.rand(*f(x).shape, dtype=torch.float64)
    gx = na.npu_confusion_transpose_backward(g, perm, list(xs), not tf)
    # the adjoint of a permutation of elements: scatter g back through the same index map
    idx = torch.arange(x.numel()).reshape(xs)
    moved = torch.from_numpy(golden(idx, perm, shape, tf).copy()).reshape(-1)
    want = torch.zeros(x.numel(), dtype=torch.float64)
    want[moved] = g.reshape(-1)
    assert torch.equal(gx.reshape(-1), want) and tuple(gx.shape) == xs


def test_fp16_backward_through_autograd():
    x = torch.rand(1, 4, 6, dtype=torch.float16, requires_grad=True)
    y = na.npu_confusion_transpose(x, (0, 2, 1, 3), (1, 4, 2, 3), False)
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == torch.float16 and torch.equal(x.grad, torch.ones_like(x))


@pytest.mark.parametrize("args,match", [
    (((0, 1), (6, 4), True), "npu_confusion_transpose: expected perm a permutation of 0..2"),
    (((0, 2, 1), (2, 3, 5), False), "npu_confusion_transpose: expected shape 24 elements"),
    (((0, 3, 1), (2, 3, 4), False), "npu_confusion_transpose: expected perm a permutation"),
    (((0, -1, 1), (2, 3, 4), False), "npu_confusion_transpose: expected perm a permutation"),
])
def test_bad_inputs(args, match):
    x = torch.rand(2, 3, 4)
    keep = x.clone()
    with pytest.raises(ValueError, match=match):
        na.npu_confusion_transpose(x, *args)
    with pytest.raises(ValueError, match=match):
        torch.ops.npu.npu_confusion_transpose(x, *args)
    assert torch.equal(x, keep)
