"""npu_format_cast / npu_format_cast_ / get_npu_format (seed 004 examples and semantics)."""

import pytest
import torch

import npu_anywhere as na


def test_doc_example_format_cast():
    x = torch.rand(2, 3, 4, 5)
    assert na.get_npu_format(x) == 0                 # 4-D tensors start NCHW
    x1 = na.npu_format_cast(x, 29)
    assert na.get_npu_format(x1) == 29
    assert na.get_npu_format(x) == 0                 # the source keeps its format
    assert torch.equal(x1, x)                        # identity on values


def test_doc_example_format_cast_inplace():
    x = torch.rand(2, 3, 4, 5)
    out = na.npu_format_cast_(x, 29)
    assert out is x and na.get_npu_format(x) == 29


@pytest.mark.parametrize("shape,expected", [((3,), 2), ((2, 3), 2), ((1, 2, 3, 4), 0),
                                            ((1, 1, 2, 3, 4), 30)])
def test_default_formats(shape, expected):
    assert na.get_npu_format(torch.zeros(shape)) == expected


def test_same_format_returns_self_and_tensor_source():
    x = torch.rand(4, 8)
    assert na.npu_format_cast(x, 2) is x
    y = na.npu_format_cast(torch.rand(4, 8), 29)
    assert na.get_npu_format(na.npu_format_cast_(x, y)) == 29


@pytest.mark.parametrize("bad,error", [("29", TypeError), (-1, ValueError), (True, TypeError)])
def test_bad_format_codes(bad, error):
    with pytest.raises(error, match="npu_format_cast: expected acl_format"):
        na.npu_format_cast(torch.rand(2), bad)
