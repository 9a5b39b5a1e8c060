"""npu_gather_sparse_index (+ backward) against plain-loop float64 goldens."""

import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def _golden(inp, index):
    """out[i..., r...] = inp[index[i...], r...], element by element."""
    out = torch.empty(*index.shape, *inp.shape[1:], dtype=inp.dtype)
    for pos in itertools.product(*(range(s) for s in index.shape)):
        out[pos] = inp[int(index[pos])]
    return out


def _grad_golden(grad, sizes, index):
    out = torch.zeros(sizes, dtype=torch.float64)
    for pos in itertools.product(*(range(s) for s in index.shape)):
        out[int(index[pos])] += grad[pos].double()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8,
                                   torch.bool, torch.complex64, torch.float64])
def test_forward_dtypes(dtype):
    gen = torch.Generator().manual_seed(0)
    inp = (torch.randn(9, 3, generator=gen) * 3).to(dtype)
    for shape in ((5,), (2, 3), (1, 2, 2)):
        for idt in (torch.int64, torch.int32):
            index = torch.randint(0, 9, shape, generator=gen, dtype=idt)
            got = na.npu_gather_sparse_index(inp, index)
            assert got.dtype == dtype and got.shape == (*shape, 3)
            assert torch.equal(got, _golden(inp, index))


def test_odd_shapes_non_contiguous_embedding_and_untouched():
    base = torch.randn(5, 8, 3)
    inp = base.transpose(0, 1)                    # (8, 5, 3) non-contiguous
    index = torch.tensor([[7, 0, 7], [2, 2, 5]]).t()   # non-contiguous index too
    before = base.clone()
    got = na.npu_gather_sparse_index(inp, index)
    assert torch.equal(got, _golden(inp, index)) and got.shape == (3, 2, 5, 3)
    assert torch.equal(base, before)
    weight = torch.randn(6, 4)
    idx = torch.tensor([[1, 5], [0, 0]])
    assert torch.equal(na.npu_gather_sparse_index(weight, idx),
                       torch.nn.functional.embedding(idx, weight))
    scalar = torch.tensor(2.5)
    assert na.npu_gather_sparse_index(scalar, torch.tensor([0, 0])).shape == ()
    assert na.npu_gather_sparse_index(weight, torch.zeros(0, 2, dtype=torch.int64)).shape \
        == (0, 2, 4)


def test_gradcheck_and_backward_golden():
    inp = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    index = torch.tensor([[0, 3, 0], [3, 3, 1]])
    torch.autograd.gradcheck(lambda t: na.npu_gather_sparse_index(t, index), (inp,))
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 8e-3), (torch.float16, 1e-3)):
        g = torch.randn(2, 3, 3).to(dtype)
        got = na.npu_gather_sparse_index_backward(g, [4, 3], index)
        want = _grad_golden(g, [4, 3], index)
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    x = torch.randn(4, 3, requires_grad=True)
    out = na.npu_gather_sparse_index(x, index)
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad, _grad_golden(torch.ones(2, 3, 3), [4, 3], index).float())


def _raises_everywhere(error, match, *args):
    op = getattr(torch.ops, na.library.TORCH_NPU_NS).npu_gather_sparse_index
    with pytest.raises(error, match=match):
        na.npu_gather_sparse_index(*args)
    with pytest.raises(error, match=match):
        op(*args)
    with FakeTensorMode() as mode:
        with pytest.raises(error, match=match):
            op(*[mode.from_tensor(a) for a in args])


def test_errors():
    inp = torch.randn(4, 3)
    _raises_everywhere(TypeError, "npu_gather_sparse_index: expected index dtype in",
                       inp, torch.zeros(2, dtype=torch.int16))
    _raises_everywhere(ValueError, "npu_gather_sparse_index: expected index at most 8 dims",
                       inp, torch.zeros([1] * 9, dtype=torch.int64))
    for bad in ([0, 4], [-1, 2]):
        with pytest.raises(IndexError, match=r"npu_gather_sparse_index: expected index values "
                                             r"in \[0, 3\]"):
            na.npu_gather_sparse_index(inp, torch.tensor(bad))
    with na.strict("910"):
        with pytest.raises(RuntimeError, match="npu_gather_sparse_index"):
            na.npu_gather_sparse_index(inp, torch.tensor([0]))
