"""npu_grouped_matmul.List (``int[]? group_list``: cumulative row offsets of x) against float64
goldens written group by group from the doc's scenarios (seed 004, "group_list输入类型为
List[int]时"): 单多多 / 单多单 / 多多多 / 多多单, through every door (the overload itself, the
op packet's overload resolution, the Python function)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

SIZES = [3, 0, 5, 1]                  # an empty group, odd sizes
OFFSETS = [3, 3, 8, 9]
M, K = sum(SIZES), 12
NS = [7, 4, 5, 3]                     # per-group n (split 0/1 allows them to differ)


def _doors():
    return {"overload": lambda *a, **k: torch.ops.npu.npu_grouped_matmul.List(*a, **k),
            "packet": lambda *a, **k: torch.ops.npu.npu_grouped_matmul(*a, **k),
            "python": na.npu_grouped_matmul}


def _slices(x, sizes):
    out, start = [], 0
    for s in sizes:
        out.append(x[start:start + s])
        start += s
    return out


@pytest.mark.parametrize("door", ["overload", "packet", "python"])
@pytest.mark.parametrize("split_item", [0, 1])
def test_one_x_many_outputs(door, split_item):
    """单多多: y_i = x[o_{i-1}:o_i] @ w_i + b_i, one output per group."""
    x = torch.randn(M, K)
    ws = [torch.randn(K, n) for n in NS]
    bs = [torch.randn(n) for n in NS]
    ys = _doors()[door]([x], ws, bias=bs, group_list=OFFSETS, split_item=split_item)
    assert [tuple(y.shape) for y in ys] == [(s, n) for s, n in zip(SIZES, NS)]
    for y, xi, w, b in zip(ys, _slices(x, SIZES), ws, bs):
        assert_close_to_golden(y, xi.double() @ w.double() + b.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("split_item", [2, 3])
def test_one_x_one_output(dtype, split_item):
    """单多单: the groups' results stacked in x's row order."""
    x = torch.randn(M, K, dtype=dtype)
    ws = [torch.randn(K, 6, dtype=dtype) for _ in SIZES]
    bias_dtype = torch.float16 if dtype == torch.float16 else torch.float32
    bs = [torch.randn(6, dtype=bias_dtype) for _ in SIZES]
    y, = torch.ops.npu.npu_grouped_matmul([x], ws, bias=bs, group_list=OFFSETS,
                                          split_item=split_item)
    assert y.dtype == dtype and y.shape == (M, 6)
    golden = torch.cat([xi.double() @ w.double() + b.double()
                        for xi, w, b in zip(_slices(x, SIZES), ws, bs)])
    assert_close_to_golden(y, golden)


def test_many_x_without_group_list_multi_dim():
    """多多多: x_i @ w_i for x of up to 6 dims; group_list None or empty."""
    xs = [torch.randn(2, 3, 5), torch.randn(1, 4, 6)]
    ws = [torch.randn(5, 4), torch.randn(6, 2)]
    for group_list in (None, []):
        ys = torch.ops.npu.npu_grouped_matmul.List(xs, ws, group_list=group_list)
        for x, w, y in zip(xs, ws, ys):
            assert y.shape == (*x.shape[:-1], w.shape[1])
            assert_close_to_golden(y, x.double() @ w.double())


def test_many_x_one_output_and_strided_x():
    """多多单: several x, one output; a non-contiguous x is read as it is."""
    xs = [torch.randn(K, 2 * s)[:, ::2].T for s in (2, 4)]
    ws = [torch.randn(K, 6), torch.randn(K, 6)]
    golden = torch.cat([x.double() @ w.double() for x, w in zip(xs, ws)])
    for group_list in ([2, 6], None):
        y, = torch.ops.npu.npu_grouped_matmul.List(xs, ws, group_list=group_list, split_item=2)
        assert_close_to_golden(y, golden)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_antiquant_int8_weights(dtype):
    """y = x @ ((w + antiquant_offset) * antiquant_scale) per group."""
    x = torch.randn(M, K, dtype=dtype)
    ws = [torch.randint(-128, 128, (K, 6), dtype=torch.int8) for _ in SIZES]
    ss = [(torch.rand(6) * 0.02).to(dtype) for _ in SIZES]
    os_ = [torch.randn(6).to(dtype) for _ in SIZES]
    y, = na.npu_grouped_matmul(x, ws, antiquant_scale=ss, antiquant_offset=os_,
                               group_list=OFFSETS, split_item=3)
    def dequant(w, s, o):       # the kernel's AscendAntiQuant into x's dtype
        if dtype == torch.float16:
            return ((w.double() + o.double()).half().double() * s.double()).half().double()
        return ((w.double() + o.double()) * s.double()).bfloat16().double()

    golden = torch.cat([xi.double() @ dequant(w, s, o)
                        for xi, w, s, o in zip(_slices(x, SIZES), ws, ss, os_)])
    assert_close_to_golden(y, golden)


def test_inputs_untouched_and_the_implied_group_type_accepted():
    x, ws = torch.randn(M, K), [torch.randn(K, 3) for _ in SIZES]
    before = x.clone(), [w.clone() for w in ws]
    a = na.npu_grouped_matmul([x], ws, group_list=OFFSETS, split_item=2)
    b = na.npu_grouped_matmul([x], ws, group_list=OFFSETS, split_item=2, group_type=0,
                              group_list_type=0, act_type=0)
    assert torch.equal(a[0], b[0])
    assert torch.equal(x, before[0]) and all(map(torch.equal, ws, before[1]))


def _call(**over):
    kwargs = dict(group_list=OFFSETS, split_item=2)
    kwargs.update(over)
    x = kwargs.pop("x", [torch.randn(M, K)])
    ws = kwargs.pop("weight", [torch.randn(K, 3) for _ in SIZES])
    return torch.ops.npu.npu_grouped_matmul.List(x, ws, **kwargs)


@pytest.mark.parametrize("over,error,match", [
    ({"group_type": 2}, ValueError, "expected group_type None with a list group_list"),
    ({"group_type": -1}, ValueError, "expected group_type None .*or 0, what split_item 2"),
    ({"group_list_type": 1}, ValueError, "expected group_list_type None"),
    ({"act_type": 1}, ValueError, "expected act_type None"),
    ({"per_token_scale": [torch.ones(M)]}, ValueError, "expected per_token_scale None"),
    ({"group_list": [3, 2, 8, 9]}, ValueError,
     "expected group_list non-negative, non-decreasing cumulative offsets, but got 2 at index 1"),
    ({"group_list": [-1, 3, 8, 9]}, ValueError, "expected group_list .*, but got -1 at index 0 after 0"),
    ({"group_list": [3, 3, 8, 8]}, ValueError, "expected group_list offsets ending at x's rows"),
    ({"group_list": None}, ValueError, "expected group_list a list of offsets when x is one"),
    ({"split_item": 0, "group_list": [3, 9]}, RuntimeError,
     "expected weight one tensor per group_list entry \\(2\\)"),
    ({"split_item": 0, "x": [torch.randn(4, K), torch.randn(5, K)], "group_list": [4, 9]},
     RuntimeError, "expected x one tensor with a group_list and split_item 0 or 1"),
    ({"split_item": 5}, ValueError, "expected split_item one of"),
    ({"weight": [torch.randn(4, K, 3)]}, RuntimeError, "expected weight\\[0\\] a 2-D tensor"),
    ({"weight": [torch.zeros(K, 1, dtype=torch.int32)] * 4, "x": [torch.randn(M, K).half()],
      "antiquant_scale": [torch.ones(8).half()] * 4}, TypeError,
     "expected weight\\[0\\] float or int8 with a list group_list"),
    ({"weight": [torch.randn(K + 1, 3) for _ in SIZES]}, RuntimeError, "expected x\\[0\\]"),
])
def test_bad_inputs(over, error, match):
    with pytest.raises(error, match="npu_grouped_matmul: " + match):
        _call(**over)


def test_later_parameters_are_not_in_the_list_schema():
    """tuning_config and the dtype overrides exist only in the tensor form's schema."""
    with pytest.raises(RuntimeError, match="expected at most 17 argument.*npu_grouped_matmul.List"):
        na.npu_grouped_matmul(torch.randn(M, K), [torch.randn(K, 3) for _ in SIZES],
                              group_list=OFFSETS, split_item=2, tuning_config=[1])


def test_scale_must_be_int64():
    x, ws = torch.randint(-5, 5, (M, K), dtype=torch.int8), [
        torch.randint(-5, 5, (K, 3), dtype=torch.int8) for _ in SIZES]
    with pytest.raises(TypeError, match="npu_grouped_matmul: expected scale\\[0\\] dtype"):
        _call(x=[x], weight=ws, scale=[torch.ones(3)] * 4, output_dtype=torch.int8)


def test_strict_products_and_no_autograd():
    with na.strict("310P"), pytest.raises(RuntimeError, match="npu_grouped_matmul"):
        _call()
    with na.strict("A2"):
        assert _call()[0].shape == (M, 3)
    x = torch.randn(M, K, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward"):
        na.npu_grouped_matmul(x, [torch.randn(K, 3) for _ in SIZES], group_list=OFFSETS,
                              split_item=2)
