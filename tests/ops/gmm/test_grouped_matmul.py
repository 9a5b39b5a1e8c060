"""npu_grouped_matmul against float64 goldens written group by group from the doc formulas.

Seed 004 / op-plugin's npu_grouped_matmul page: ``y_i = x_i @ w_i + b_i``; m-axis groups
(group_type 0) are row slices of x, k-axis groups (group_type 2) column slices of x with the
matching rows of weight; group_list as cumsum (0), sizes (1) or [index, size] rows (2).
Quant goldens follow op-plugin's CPU golden: int32 accumulation, float32 dequantization,
round half to even and saturation for int8 output.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

gmm = na.npu_grouped_matmul
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [3, 0, 5, 1]            # an empty group, odd sizes
M, K, N, E = sum(SIZES), 12, 7, len(SIZES)


def _group_list(sizes, group_list_type):
    if group_list_type == 0:
        return torch.tensor(sizes).cumsum(0)
    if group_list_type == 1:
        return torch.tensor(sizes)
    return torch.tensor([[e, s] for e, s in enumerate(sizes)])


def _golden_m(x, ws, sizes, bias=None, experts=None):
    """float64: each row slice times its group's weight, bias added per group."""
    out, start = [], 0
    for j, size in enumerate(sizes):
        e = j if experts is None else experts[j]
        y = x[start:start + size].double() @ ws[e].double()
        if bias is not None:
            y = y + bias[e].double()
        out.append(y)
        start += size
    return torch.cat(out)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("split_item", [2, 3])
@pytest.mark.parametrize("group_list_type", [0, 1])
@pytest.mark.parametrize("single_weight", [True, False])
def test_m_grouped_float(dtype, split_item, group_list_type, single_weight):
    x = torch.randn(M, K, dtype=dtype)
    w = torch.randn(E, K, N, dtype=dtype)
    bias_dtype = torch.float16 if dtype == torch.float16 else torch.float32
    b = torch.randn(E, N, dtype=bias_dtype)
    weight = [w] if single_weight else list(w.unbind(0))
    bias = [b] if single_weight else list(b.unbind(0))
    y, = gmm([x], weight, bias=bias, group_list=_group_list(SIZES, group_list_type),
             split_item=split_item, group_type=0, group_list_type=group_list_type)
    assert y.dtype == dtype and y.shape == (M, N)
    assert_close_to_golden(y, _golden_m(x, w, SIZES, b))


def test_m_grouped_transposed_weight_and_strided_x():
    x = torch.randn(K, 2 * M)[:, ::2].T            # non-contiguous x
    w = torch.randn(E, N, K).transpose(1, 2)        # column-major weight, as NPU code makes
    y, = torch.ops.npu.npu_grouped_matmul([x], [w], group_list=torch.tensor(SIZES),
                                          split_item=3, group_type=0, group_list_type=1)
    assert_close_to_golden(y, _golden_m(x, w, SIZES))


def test_m_grouped_x_list_and_rows_past_groups():
    xs = [torch.randn(s, K) for s in SIZES]
    ws = [torch.randn(K, N) for _ in SIZES]
    y, = gmm(xs, ws, split_item=2, group_type=0)
    assert_close_to_golden(y, _golden_m(torch.cat(xs), ws, SIZES))
    # group_list covering fewer rows than x: the rows past the last group are zero.
    x = torch.randn(M + 2, K)
    y, = gmm([x], ws, group_list=torch.tensor(SIZES), split_item=2, group_type=0,
             group_list_type=1)
    assert_close_to_golden(y[:M], _golden_m(x, ws, SIZES))
    assert (y[M:] == 0).all()


def test_m_grouped_x_list_with_a_k_per_group():
    # x as a list pairs x[i] with weight[i]: every group may have its own k (op-plugin's
    # "multi-multi-single" case); the rows come out stacked in x's order.
    ks = [4, 9, 6]
    xs = [torch.randn(s, k) for s, k in zip([2, 0, 3], ks)]
    ws = [torch.randn(k, N) for k in ks]
    bs = [torch.randn(N) for _ in ks]
    y, = gmm(xs, ws, bias=bs, split_item=2, group_type=0)
    golden = torch.cat([x.double() @ w.double() + b.double() for x, w, b in zip(xs, ws, bs)])
    assert_close_to_golden(y, golden)
    with pytest.raises(RuntimeError, match="expected x\\[1\\] k = 9 columns"):
        gmm([xs[0], torch.randn(1, 4), xs[2]], ws, split_item=2, group_type=0)


@pytest.mark.parametrize("split_item", [0, 1])
def test_ungrouped_lists_multi_dim(split_item):
    xs = [torch.randn(2, 3, 5), torch.randn(1, 4, 6), torch.randn(2, 1, 3)]
    ws = [torch.randn(5, 4), torch.randn(6, 2), torch.randn(3, 9)]
    bs = [torch.randn(4), torch.randn(2), torch.randn(9)]
    ys = gmm(xs, ws, bias=bs, split_item=split_item, group_type=-1)
    assert len(ys) == 3
    for x, w, b, y in zip(xs, ws, bs, ys):
        assert y.shape == (*x.shape[:-1], w.shape[1])
        assert_close_to_golden(y, x.double() @ w.double() + b.double())


def test_list_group_list_overload_forms():
    x, ws = torch.randn(M, K), [torch.randn(K, N) for _ in SIZES]
    offsets = torch.tensor(SIZES).cumsum(0).tolist()
    ys = gmm(x, ws, group_list=offsets, split_item=0)          # "单多多": one output per group
    assert [y.shape[0] for y in ys] == SIZES
    assert_close_to_golden(torch.cat(ys), _golden_m(x, ws, SIZES))
    y, = gmm(x, ws, group_list=offsets, split_item=2)           # "单多单"
    assert_close_to_golden(y, _golden_m(x, ws, SIZES))


@pytest.mark.parametrize("split_item", [0, 1, 2, 3])
@pytest.mark.parametrize("group_list_type", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_k_grouped_weight_gradient_form(split_item, group_list_type, dtype):
    tokens, h = M, 6
    x = torch.randn(tokens, h, dtype=dtype)
    dy = torch.randn(tokens, N, dtype=dtype)
    ys = gmm([x.T], [dy], group_list=_group_list(SIZES, group_list_type),
             split_item=split_item, group_type=2, group_list_type=group_list_type)
    golden, start = [], 0
    for size in SIZES:       # dW_e = x_e^T @ dy_e; an empty group gives zeros
        golden.append(x[start:start + size].double().T @ dy[start:start + size].double())
        start += size
    golden = torch.stack(golden)
    if split_item in (2, 3):
        assert len(ys) == 1 and ys[0].shape == (E, h, N)
        got = ys[0]
    else:
        assert len(ys) == E and all(y.shape == (h, N) for y in ys)
        got = torch.stack(ys)
    assert got.dtype == dtype
    assert_close_to_golden(got, golden)
    assert (got[1] == 0).all()


def test_inputs_untouched_and_no_autograd():
    x, w = torch.randn(M, K), torch.randn(E, K, N)
    x0, w0 = x.clone(), w.clone()
    gmm([x], [w], group_list=torch.tensor(SIZES), split_item=3, group_type=0,
        group_list_type=1)
    assert torch.equal(x, x0) and torch.equal(w, w0)
    with pytest.raises(RuntimeError, match="npu_grouped_matmul: expected inputs that do not"):
        gmm([x.requires_grad_()], [w], group_list=torch.tensor(SIZES), split_item=3,
            group_type=0, group_list_type=1)


# -- quant (int8 x and weight) -----------------------------------------------------------------

def _int8(*shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8)


def _acc(x, ws, sizes, bias=None, experts=None):
    """Exact int64 accumulators per group (python-int exact: int64 matmul)."""
    out, start = [], 0
    for j, size in enumerate(sizes):
        e = j if experts is None else experts[j]
        a = x[start:start + size].long() @ ws[e].long()
        if bias is not None:
            a = a + bias[e].long()
        out.append(a)
        start += size
    return torch.cat(out)


@pytest.mark.parametrize("group_list_type", [0, 1, 2])
def test_quant_per_channel_int8_output_bit_exact(group_list_type):
    x, w = _int8(M, K), _int8(E, K, N)
    b = torch.randint(-500, 500, (E, N), dtype=torch.int32)
    s32 = torch.rand(E, N) * 0.004 + 0.001
    off = torch.randint(-5, 6, (E, N)).float()
    words = torch.stack([na.npu_trans_quant_param(s32[e], off[e]) for e in range(E)])
    sizes, experts = SIZES, None
    gl = _group_list(SIZES, group_list_type)
    if group_list_type == 2:      # [index, size] rows, experts out of order
        experts, sizes = [2, 0, 3], [4, 2, 3]
        gl = torch.tensor([[e, s] for e, s in zip(experts, sizes)])
    y, = gmm([x], [w], bias=[b], scale=[words], group_list=gl, split_item=3, group_type=0,
             group_list_type=group_list_type)
    assert y.dtype == torch.int8
    # Kernel steps: the scale keeps float32's top 10 mantissa bits (npu_trans_quant_param),
    # float32 product plus offset, round half to even, saturate.
    s19 = (s32.view(torch.int32) & -8192).view(torch.float32)
    acc = _acc(x, w, sizes, b, experts)
    rows = torch.repeat_interleave(torch.tensor(experts or list(range(E))),
                                   torch.tensor(sizes))
    v = acc.float() * s19[rows] + off[rows]
    golden = torch.round(v).clamp(-128, 127).to(torch.int8)
    assert torch.equal(y, golden)


def test_quant_int32_output_exact():
    x, w = _int8(M, K), _int8(E, K, N)
    y, = gmm([x], [w], group_list=torch.tensor(SIZES), split_item=3, group_type=0,
             group_list_type=1, output_dtype=torch.int32)
    assert y.dtype == torch.int32
    assert torch.equal(y.long(), _acc(x, w, SIZES))


@pytest.mark.parametrize("out_dtype,scale_dtype", [(torch.bfloat16, torch.bfloat16),
                                                   (torch.float16, torch.float32)])
@pytest.mark.parametrize("act_type", [0, 1, 2, 4, 5])
def test_quant_per_token(out_dtype, scale_dtype, act_type):
    x, w = _int8(M, K), _int8(E, K, N)
    scale = (torch.rand(E, N) * 0.01).to(scale_dtype)
    pts = torch.rand(M) * 0.1
    y, = gmm([x], [w], scale=[scale], per_token_scale=[pts], group_list=torch.tensor(SIZES),
             split_item=3, group_type=0, group_list_type=1, output_dtype=out_dtype,
             act_type=act_type)
    assert y.dtype == out_dtype
    rows = torch.repeat_interleave(torch.arange(E), torch.tensor(SIZES))
    v = _acc(x, w, SIZES).double() * scale.double()[rows] * pts.double()[:, None]
    acts = {0: lambda t: t, 1: torch.relu,
            2: lambda t: 0.5 * t * (1 + torch.tanh(0.7978845608028654 * (t + 0.044715 * t ** 3))),
            4: lambda t: t / (1 + torch.exp(-1.702 * t)), 5: lambda t: t / (1 + torch.exp(-t))}
    assert_close_to_golden(y, acts[act_type](v))


# -- antiquant (float x, int8 / int4 weight) ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_antiquant_int8_per_channel(dtype):
    x, w = torch.randn(M, K, dtype=dtype), _int8(E, K, N)
    s = (torch.rand(E, N) * 0.02).to(dtype)
    o = torch.randn(E, N).to(dtype)
    b = torch.randn(E, N, dtype=torch.float16 if dtype == torch.float16 else torch.float32)
    y, = gmm([x], [w], bias=[b], antiquant_scale=[s], antiquant_offset=[o],
             group_list=torch.tensor(SIZES), split_item=3, group_type=0, group_list_type=1)
    assert y.dtype == dtype
    # The kernel's weight dequantization (AscendAntiQuant into x's dtype): float16 rounds the
    # sum and the product; bfloat16 computes in float32 and rounds once.
    if dtype == torch.float16:
        wd = ((w.double() + o.double()[:, None, :]).half().double()
              * s.double()[:, None, :]).half().double()
    else:
        wd = ((w.double() + o.double()[:, None, :]) * s.double()[:, None, :]).bfloat16().double()
    assert_close_to_golden(y, _golden_m(x, wd, SIZES, b))


def test_antiquant_int4_per_group_packed():
    n, groups = 16, 3
    x = torch.randn(M, K, dtype=torch.float16)
    vals = torch.randint(-8, 8, (E, K, n), dtype=torch.int32)
    packed = torch.stack([na.npu_convert_weight_to_int4pack(vals[e]) for e in range(E)])
    s = (torch.rand(E, groups, n) * 0.1).half()
    y, = gmm([x], [packed], antiquant_scale=[s], group_list=torch.tensor(SIZES),
             split_item=2, group_type=0, group_list_type=1)
    assert y.shape == (M, n)
    wd = (vals.double() * s.double().repeat_interleave(K // groups, dim=1)).half().double()
    assert_close_to_golden(y, _golden_m(x, wd, SIZES))


# -- bad inputs --------------------------------------------------------------------------------

def _call(**over):
    args = dict(x=[torch.randn(M, K)], weight=[torch.randn(E, K, N)],
                group_list=torch.tensor(SIZES), split_item=3, group_type=0, group_list_type=1)
    args.update(over)
    return gmm(**args)


@pytest.mark.parametrize("over,error,match", [
    ({"group_type": 1}, ValueError, "expected group_type one of .*The group type must be"),
    ({"group_type": None}, ValueError, "expected group_type .*Requires manual passing group_type"),
    ({"split_item": 4}, ValueError, "expected split_item one of"),
    ({"split_item": 0}, ValueError, "expected split_item 2 or 3 when group_type is 0"),
    ({"group_list": None}, ValueError, "expected group_list a tensor"),
    ({"group_list": torch.tensor([3, -1, 5, 1])}, ValueError, "expected group_list non-negative group sizes"),
    ({"group_list": torch.tensor([3, 2, 8, 9]), "group_list_type": 0}, ValueError,
     "expected group_list a non-negative, non-decreasing cumsum"),
    ({"group_list": torch.tensor([3, 0, 5, 9])}, ValueError, "expected group_list groups covering at most the 9"),
    ({"group_list": torch.tensor([3, 6])}, ValueError, "expected group_list one entry per weight"),
    ({"group_list": torch.tensor(SIZES, dtype=torch.int32)}, TypeError,
     "expected group_list dtype in"),
    ({"weight": [torch.randn(E, K + 1, N)]}, RuntimeError, "expected x\\[0\\] k = 13 columns"),
    ({"weight": [torch.randn(E, K, N).half()]}, TypeError, "expected weight dtype in"),
    ({"act_type": 3}, ValueError, "expected act_type one of"),
    ({"group_list_type": 2, "group_list": torch.tensor([[0, 9]])}, ValueError,
     "expected group_list_type 0 or 1 unless x and weight are int8"),
    ({"bias": [torch.randn(E, N).half()]}, TypeError, "expected bias\\[0\\] dtype in"),
    ({"offset": [torch.randn(N)]}, ValueError, "expected offset None"),
    ({"x_dtype": 290}, NotImplementedError, "expected x_dtype None"),
    ({"output_dtype": torch.float16}, ValueError, "expected output_dtype None or x's dtype"),
])
def test_bad_inputs(over, error, match):
    with pytest.raises(error, match="npu_grouped_matmul: " + match):
        _call(**over)


def test_bad_quant_inputs():
    x, w = _int8(M, K), _int8(E, K, N)
    gl = torch.tensor(SIZES)
    with pytest.raises(ValueError, match="expected scale a list of tensors unless"):
        gmm([x], [w], group_list=gl, split_item=3, group_type=0, group_list_type=1)
    with pytest.raises(ValueError, match="expected output_dtype bfloat16 or float16"):
        gmm([x], [w], scale=[torch.rand(E, N)], group_list=gl, split_item=3, group_type=0,
            group_list_type=1)
    with pytest.raises(ValueError, match="expected act_type 0 unless per_token_scale"):
        gmm([x], [w], scale=[torch.rand(E, N)], group_list=gl, split_item=3, group_type=0,
            group_list_type=1, output_dtype=torch.bfloat16, act_type=1)
    with pytest.raises(ValueError, match="expected group_type -1 or 0 for quantized"):
        gmm([x.T], [_int8(M, N)], group_list=gl, split_item=3, group_type=2,
            group_list_type=1)
    with pytest.raises(ValueError, match="expected group_list group indices in"):
        gmm([x], [w], scale=[torch.rand(E, N)], output_dtype=torch.bfloat16,
            group_list=torch.tensor([[7, 9]]), split_item=3, group_type=0, group_list_type=2)


def test_strict_310p_and_float64():
    x, w = torch.randn(M, K, dtype=torch.float64), torch.randn(E, K, N, dtype=torch.float64)
    y, = gmm([x], [w], group_list=torch.tensor(SIZES), split_item=3, group_type=0,
             group_list_type=1)
    assert y.dtype == torch.float64
    with na.strict("A2"), pytest.raises(TypeError, match="expected x dtype in"):
        gmm([x], [w], group_list=torch.tensor(SIZES), split_item=3, group_type=0,
            group_list_type=1)
    with na.strict("310P"), pytest.raises(ValueError, match="n a multiple of 16"):
        gmm([x.half()], [w.half()], group_list=torch.tensor(SIZES), split_item=3,
            group_type=0, group_list_type=1)
