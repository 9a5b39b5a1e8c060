"""one_: fill self with ones in place (seed 004)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.bool])
def test_fills_exactly_self(dtype):
    base = torch.zeros(4, 6, dtype=dtype)
    view = base[:, 1::2]                                     # only these elements change
    assert na.one_(view) is view
    assert view.to(torch.int32).eq(1).all()
    assert base[:, ::2].to(torch.int32).eq(0).all()


def test_expanded_target_is_rejected_untouched():
    base = torch.zeros(1)
    with pytest.raises(RuntimeError, match="one_: expected self a tensor whose elements"):
        na.one_(base.expand(3))
    assert base.item() == 0

