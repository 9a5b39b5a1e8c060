"""Tests for npu_clipped_swiglu against a golden written from seed 004::

    (1) x viewed as [pre, cut * after] around dim
    (2) x = x[:sum(group_index), :]              (when group_index is given)
    (3) interleaved: A = x[:, ::2], B = x[:, 1::2];  else h = x.shape[1] // 2, A = x[:, :h], B = x[:, h:]
    (4) A = A.clamp(max=limit), B = B.clamp(-limit, limit)
        y_glu = A * sigmoid(alpha * A);  y = y_glu * (B + bias)
    (5) y back to x's rank, dim halved

Rows the doc does not compute (past sum(group_index)) are zeros in op-plugin's golden
(test/test_custom_ops/test_npu_clipped_swiglu.py); the tests check that too.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def golden(x, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0, interleaved=True):
    shape = list(x.shape)
    d = dim % len(shape)
    pre = math.prod(shape[:d])
    x2 = x.double().reshape(pre, math.prod(shape[d:]))
    rows = pre if group_index is None else min(int(group_index.sum()), pre)
    xs = x2[:rows]
    if interleaved:
        a, b = xs[:, ::2], xs[:, 1::2]
    else:
        h = xs.shape[1] // 2
        a, b = xs[:, :h], xs[:, h:]
    a = a.clamp(max=limit)
    b = b.clamp(min=-limit, max=limit)
    y = a * (1 / (1 + torch.exp(-alpha * a))) * (b + bias)
    full = torch.zeros(pre, x2.shape[1] // 2, dtype=torch.float64)
    full[:rows] = y
    shape[d] //= 2
    return full.reshape(shape)


def make(shape, dtype, seed=0, scale=5.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("shape,dim", [((9, 16), -1), ((4, 6, 2), 1), ((6, 3), 0),
                                       ((2, 3, 4, 10), -1), ((1, 2), 1), ((12,), 0)])
def test_matches_doc_formula(shape, dim, interleaved, dtype):
    x = make(shape, dtype, seed=len(shape) + dim)
    before = x.clone()
    out = na.npu_clipped_swiglu(x, dim=dim, interleaved=interleaved)
    want = golden(x, dim=dim, interleaved=interleaved)
    assert out.shape == want.shape and out.dtype == dtype
    assert_close_to_golden(out, want, dtype=dtype)
    assert torch.equal(x, before)


@pytest.mark.parametrize("groups", [[2, 3], [0], [1, 1, 1], [20, 30]])
def test_group_index_rows(groups):
    x = make((7, 8), torch.float32, seed=1)
    gi = torch.tensor(groups, dtype=torch.int64)
    out = na.npu_clipped_swiglu(x, group_index=gi)
    want = golden(x, group_index=gi)
    assert_close_to_golden(out, want)
    rows = min(sum(groups), 7)
    assert torch.count_nonzero(out[rows:]) == 0


def test_group_index_on_pre_axis_of_3d_input():
    x = make((3, 4, 6), torch.float32, seed=2)
    gi = torch.tensor([2], dtype=torch.int64)
    out = na.npu_clipped_swiglu(x, group_index=gi, dim=1, interleaved=False)
    assert_close_to_golden(out, golden(x, gi, dim=1, interleaved=False))
    assert torch.count_nonzero(out[2:]) == 0 and torch.count_nonzero(out[:2]) > 0


def test_non_default_parameters():
    x = make((5, 12), torch.float32, seed=3)
    kw = dict(alpha=0.7, limit=1.0, bias=1.2, interleaved=False)
    assert_close_to_golden(na.npu_clipped_swiglu(x, **kw), golden(x, **kw))


@pytest.mark.parametrize("name", ["alpha", "limit", "bias"])
@pytest.mark.parametrize("value", [1e300, -1e39])
def test_float_attribute_beyond_float32_is_one_error_in_eager_and_fake(name, value):
    """The kernel's alpha / limit / bias are float32: a finite value beyond float32's range
    raises the same ValueError in eager and under FakeTensor (eager clamp used to overflow,
    FakeTensor to accept it)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = make((4, 8), torch.float32, seed=1)
    with pytest.raises(ValueError, match=f"npu_clipped_swiglu: expected {name} a value within "
                       "float32's range") as eager:
        na.npu_clipped_swiglu(x, **{name: value})
    with FakeTensorMode() as fm, pytest.raises(ValueError) as fake:
        na.npu_clipped_swiglu(fm.from_tensor(x), **{name: value})
    assert str(fake.value) == str(eager.value)


def test_infinite_limit_clips_nothing():
    x = make((4, 8), torch.float32, seed=2) * 20
    assert_close_to_golden(na.npu_clipped_swiglu(x, limit=math.inf), golden(x, limit=math.inf))


def test_clamping_is_one_sided_on_gate():
    # A = -20 (below -limit) stays -20; B = 20 clamps to 7; A = 20 clamps to 7.
    x = torch.tensor([[-20.0, 20.0, 20.0, 20.0]], dtype=torch.float64)
    out = na.npu_clipped_swiglu(x)
    a = torch.tensor([-20.0, 7.0], dtype=torch.float64)
    want = a * torch.sigmoid(1.702 * a) * (7.0 + 1.0)
    torch.testing.assert_close(out[0], want, rtol=1e-12, atol=1e-300)


def test_interleaved_split_is_over_the_flattened_cut_axis():
    # dim=0 of a (4, 2) tensor: pre = 1, row = all 8 values, A = even positions of the row.
    x = torch.arange(8, dtype=torch.float64).reshape(4, 2) / 4
    out = na.npu_clipped_swiglu(x, dim=0)
    flat = x.reshape(-1)
    a, b = flat[::2], flat[1::2]
    want = (a * torch.sigmoid(1.702 * a) * (b + 1.0)).reshape(2, 2)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=0)


def test_noncontiguous():
    x = make((8, 6), torch.float32, seed=4).t()
    assert_close_to_golden(na.npu_clipped_swiglu(x), golden(x))


def test_no_autograd():
    with pytest.raises(RuntimeError, match="npu_clipped_swiglu: expected inputs that do not"):
        na.npu_clipped_swiglu(torch.randn(2, 4, requires_grad=True))


@pytest.mark.parametrize("fn,exc,prefix", [
    (lambda: na.npu_clipped_swiglu(torch.randn(3, 5)), ValueError,
     "npu_clipped_swiglu: expected x an even size"),
    (lambda: na.npu_clipped_swiglu(torch.randn(3, 4), dim=-3), IndexError,
     "npu_clipped_swiglu: expected dim"),
    (lambda: na.npu_clipped_swiglu(torch.randn(3, 4), group_index=torch.tensor([1.0])),
     TypeError, "npu_clipped_swiglu: expected group_index dtype"),
    (lambda: na.npu_clipped_swiglu(torch.randn(3, 4), group_index=torch.tensor(1)), ValueError,
     "npu_clipped_swiglu: expected group_index a 1-D"),
    (lambda: na.npu_clipped_swiglu(torch.ones(3, 4, dtype=torch.int32)), TypeError,
     "npu_clipped_swiglu: expected x dtype"),
])
def test_bad_inputs(fn, exc, prefix):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)


def test_strict_mode():
    with na.strict("A2"):
        na.npu_clipped_swiglu(torch.randn(2, 4))
        with pytest.raises(ValueError, match="npu_clipped_swiglu: expected x at least 2 dims"):
            na.npu_clipped_swiglu(torch.randn(4))
    assert na.npu_clipped_swiglu(torch.randn(4)).shape == (2,)       # default mode: 1-D ok
    for product in ("910", "310P", "950"):
        with na.strict(product), pytest.raises(RuntimeError, match="expected a product"):
            na.npu_clipped_swiglu(torch.randn(2, 4))
