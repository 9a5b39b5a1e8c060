"""npu_max / npu_min (.dim) and npu_max_backward / npu_min_backward against float64 goldens."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def _golden(x, dim, keepdim, largest):
    """Per line along ``dim``: the first position holding the extreme value (plain loop)."""
    x64 = x.double().movedim(dim, -1)
    lines = x64.reshape(-1, x64.shape[-1]).tolist()
    values, indices = [], []
    for line in lines:
        best = 0
        for k, v in enumerate(line):
            if (v > line[best]) if largest else (v < line[best]):
                best = k
        values.append(line[best])
        indices.append(best)
    shape = x64.shape[:-1]
    v = torch.tensor(values, dtype=torch.float64).reshape(shape)
    i = torch.tensor(indices, dtype=torch.int32).reshape(shape)
    if keepdim:
        v, i = v.unsqueeze(dim), i.unsqueeze(dim)
    return v, i


def _raises_everywhere(fn, op, error, match, *args):
    with pytest.raises(error, match=match):
        fn(*args)
    with pytest.raises(error, match=match):
        op(*args)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(error, match=match):
            op(*fake)


@pytest.mark.parametrize("name,largest", [("npu_max", True), ("npu_min", False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_against_loop_golden(name, largest, dtype):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 5, 7, generator=gen) * 4).to(dtype)
    x[0, 1, 2] = x[0, 3, 2]                          # a tie: the first index wins
    fn = getattr(na, name)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            v, i = fn(x, dim, keepdim)
            gv, gi = _golden(x, dim % 3, keepdim, largest)
            assert v.dtype == dtype and i.dtype == torch.int32
            assert torch.equal(v.double(), gv) and torch.equal(i, gi), (dim, keepdim)


@pytest.mark.parametrize("name,largest", [("npu_max", True), ("npu_min", False)])
def test_non_contiguous_odd_and_zero_d(name, largest):
    fn = getattr(na, name)
    base = torch.randn(5, 9, dtype=torch.float64)
    x = base.t()[::2]                                # (5, 5) view, non-contiguous
    before = base.clone()
    v, i = fn(x, 1)
    gv, gi = _golden(x, 1, False, largest)
    assert torch.equal(v, gv) and torch.equal(i, gi)
    assert torch.equal(base, before)
    v, i = fn(torch.tensor(2.5), 0)
    assert v.item() == 2.5 and i.item() == 0 and i.dtype == torch.int32
    v, i = fn(torch.tensor([[4.0]]), -1, True)
    assert v.shape == (1, 1) and i.item() == 0


@pytest.mark.parametrize("name", ["npu_max", "npu_min"])
def test_gradcheck_and_backward_golden(name):
    fn = getattr(na, name)
    small = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: fn(t, -1, True)[0], (small,))
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    v, i = fn(x, 1)
    g = torch.randn_like(v)
    (dx,) = torch.autograd.grad(v, x, g)
    want = torch.zeros(3, 4, 5, dtype=torch.float64)
    for a in range(3):
        for c in range(5):
            want[a, int(i[a, c]), c] = g[a, c]
    assert torch.equal(dx, want)
    backward = getattr(na, f"{name}_backward")
    assert torch.equal(backward(g, 1, i.long(), [3, 4, 5], False), want)
    assert torch.equal(backward(g.unsqueeze(1), 1, i.unsqueeze(1), [3, 4, 5], True), want)


@pytest.mark.parametrize("name", ["npu_max", "npu_min"])
def test_errors_everywhere(name):
    op = getattr(torch.ops, na.library.TORCH_NPU_NS)
    fwd = getattr(op, name).dim
    x = torch.randn(2, 3)
    before = x.clone()
    _raises_everywhere(getattr(na, name), fwd, IndexError,
                       rf"{name}: expected dim in the range \[-2, 1\]", x, -3)
    _raises_everywhere(getattr(na, name), fwd, ValueError,
                       f"{name}: expected self a non-empty dim 1", torch.zeros(2, 0), 1)
    bw = getattr(op, f"{name}_backward").default
    _raises_everywhere(getattr(na, f"{name}_backward"), bw, RuntimeError,
                       f"{name}_backward: expected indices the shape of grad",
                       torch.zeros(2), 1, torch.zeros(3, dtype=torch.int32), [2, 3], False)
    assert torch.equal(x, before)


def test_backward_has_no_backward():
    g = torch.randn(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_max_backward: expected inputs that do not"):
        na.npu_max_backward(g, 1, torch.zeros(2, dtype=torch.int32), [2, 3], False)
