"""npu_sort_v2 and npu_sort_v2.out against a float64 selection-sort golden."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na


def _golden(x, dim, descending):
    """Sorted lines along ``dim`` by repeated selection of the extreme (plain Python)."""
    x64 = x.double().movedim(dim, -1)
    rows = []
    for line in x64.reshape(-1, x64.shape[-1]).tolist():
        rest, out = list(line), []
        while rest:
            pick = max(rest) if descending else min(rest)
            rest.remove(pick)
            out.append(pick)
        rows.append(out)
    return torch.tensor(rows, dtype=torch.float64).reshape(x64.shape).movedim(-1, dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_against_golden(dtype):
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(3, 4, 9, generator=gen) * 5).to(dtype)
    x[1, 2, :3] = x[1, 2, 5]                       # repeated values
    for dim in (-1, 0, 1):
        for descending in (False, True):
            got = na.npu_sort_v2(x, dim, descending)
            assert got.dtype == dtype and got.shape == x.shape
            assert torch.equal(got.double(), _golden(x, dim, descending)), (dim, descending)


def test_defaults_non_contiguous_and_input_untouched():
    base = torch.randn(7, 6)
    x = base.t()[:, 1::2]                          # (6, 4) view, non-contiguous
    before = base.clone()
    assert torch.equal(na.npu_sort_v2(x).double(), _golden(x, -1, False))
    assert torch.equal(base, before)
    assert na.npu_sort_v2(torch.tensor(3.0)).item() == 3.0
    assert na.npu_sort_v2(torch.tensor([2.0])).tolist() == [2.0]


def test_out_overload_writes_and_returns_out():
    x = torch.randn(2, 5)
    out = torch.full((2, 5), 7.0)
    got = na.npu_sort_v2(x, descending=True, out=out)
    assert got is out
    assert torch.equal(out.double(), _golden(x, -1, True))
    got = getattr(torch.ops, na.library.TORCH_NPU_NS).npu_sort_v2.out(x, 0, out=out)
    assert got is out
    assert torch.equal(out.double(), _golden(x, 0, False))


def test_errors_everywhere_and_nothing_written():
    x = torch.randn(2, 3)
    op = getattr(torch.ops, na.library.TORCH_NPU_NS).npu_sort_v2
    match = r"npu_sort_v2: expected dim in the range \[-2, 1\]"
    for call in (lambda a: na.npu_sort_v2(a, 2), lambda a: op(a, 2)):
        with pytest.raises(IndexError, match=match):
            call(x)
    with FakeTensorMode() as mode:
        with pytest.raises(IndexError, match=match):
            op(mode.from_tensor(x), 2)
    out = torch.full((3, 2), 5.0)
    with pytest.raises(RuntimeError, match=r"npu_sort_v2: expected out shape \(2, 3\)"):
        na.npu_sort_v2(x, out=out)
    assert torch.equal(out, torch.full((3, 2), 5.0))
    with pytest.raises(RuntimeError, match="npu_sort_v2: expected inputs that do not require"):
        na.npu_sort_v2(torch.randn(3, requires_grad=True))
