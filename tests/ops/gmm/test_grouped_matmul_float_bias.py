"""npu_grouped_matmul formulas 2-2 / 3-2: int8 x with a float bias added after dequantization.

    2-2: y = act(float32(x @ w) * scale + bias)
    3-2: y = act(float32(x @ w) * scale * per_token_scale + bias)

The golden follows the epilogue's steps (Ascend 950 ``gqmm_mix_online_dynamic.h``, A2's
``grouped_matmul_quant_mixcore.h``): the exact integer accumulator, each product and the bias
sum rounded to float32, the activation, one rounding half to even to the output dtype.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na

gmm = na.npu_grouped_matmul
SIZES = [3, 0, 4]
E, M, K, N = len(SIZES), sum(SIZES) + 1, 16, 8      # one row past the groups
ROWS = torch.repeat_interleave(torch.arange(E), torch.tensor(SIZES))


def _f32(t: torch.Tensor) -> torch.Tensor:
    """Round float64 values to float32 and back (one float32 operation's rounding)."""
    return t.float().double()


def _inputs(scale_dtype, bias_dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (E, K, N), dtype=torch.int8, generator=g)
    scale = (torch.rand(E, N, generator=g) * 0.01).to(scale_dtype)
    pts = torch.rand(M, generator=g)
    bias = (torch.randn(E, N, generator=g) * 4).to(bias_dtype)
    return x, w, scale, pts, bias


def _golden(x, w, scale, pts, bias, act_type, out_dtype):
    rows = M - 1
    acc = torch.stack([x[r].long() @ w[int(ROWS[r])].long() for r in range(rows)])
    e = ROWS
    v = _f32(acc.double() * scale[e].double())            # |acc| < 2**24: exact in float32
    if pts is not None:
        v = _f32(v * pts[:rows, None].double())
    v = _f32(v + bias[e].double())
    if act_type == 5:
        v = v / (1 + torch.exp(-v))
    return v.to(out_dtype)


@pytest.mark.parametrize("out_dtype,scale_dtype,bias_dtype", [
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32, torch.float32),
    (torch.float16, torch.float32, torch.float16),
    (torch.float16, torch.float32, torch.float32),
])
@pytest.mark.parametrize("per_token", [False, True])
def test_float_bias_after_dequantization(out_dtype, scale_dtype, bias_dtype, per_token):
    x, w, scale, pts, bias = _inputs(scale_dtype, bias_dtype)
    pts = pts if per_token else None
    y, = gmm([x], [w], bias=[bias], scale=[scale],
             per_token_scale=None if pts is None else [pts], group_list=torch.tensor(SIZES),
             split_item=3, group_type=0, group_list_type=1, output_dtype=out_dtype)
    assert y.dtype == out_dtype
    assert torch.equal(y[:M - 1], _golden(x, w, scale, pts, bias, 0, out_dtype))
    assert (y[M - 1] == 0).all()


def test_float_bias_before_the_activation_and_per_group_lists():
    x, w, scale, pts, bias = _inputs(torch.float32, torch.float32, seed=3)
    y, = gmm([x], list(w.unbind(0)), bias=list(bias.unbind(0)), scale=list(scale.unbind(0)),
             per_token_scale=[pts], group_list=torch.tensor(SIZES), split_item=3,
             group_type=0, group_list_type=1, output_dtype=torch.float16, act_type=5)
    golden = _golden(x, w, scale, pts, bias, 5, torch.float64)
    err = (y[:M - 1].double() - golden).abs()
    assert (err <= 2 ** -10 * golden.abs() + 1e-6).all()      # one float16 rounding


def test_float_bias_rules():
    x, w, scale, pts, bias = _inputs(torch.float32, torch.float32)
    gl = torch.tensor(SIZES)
    common = dict(group_list=gl, split_item=3, group_type=0, group_list_type=1)
    with pytest.raises(TypeError, match="npu_grouped_matmul: expected bias\\[0\\] dtype in"):
        gmm([x], [w], bias=[bias.half()], scale=[scale.bfloat16()],
            output_dtype=torch.bfloat16, **common)
    words = torch.zeros(E, N, dtype=torch.int64)
    with pytest.raises(NotImplementedError, match="expected bias int32 unless scale is float"):
        gmm([x], [w], bias=[bias], scale=[words], **common)
    with pytest.raises(NotImplementedError, match="expected bias int32 unless scale is float"):
        gmm([x], [w], bias=[bias], output_dtype=torch.int32, **common)
    # A2 / A3: bfloat16 only, and only on the per-token path.
    with na.strict("A2"), pytest.raises(TypeError, match="int32 or bfloat16 for int8 x"):
        gmm([x], [w], bias=[bias], scale=[scale], per_token_scale=[pts],
            output_dtype=torch.float16, **common)
    with na.strict("A3"), pytest.raises(ValueError, match="int32 without per_token_scale"):
        gmm([x], [w], bias=[bias.bfloat16()], scale=[scale.bfloat16()],
            output_dtype=torch.bfloat16, **common)
    with na.strict("A2"):
        y, = gmm([x], [w], bias=[bias.bfloat16()], scale=[scale.bfloat16()],
                 per_token_scale=[pts], output_dtype=torch.bfloat16, **common)
    golden = _golden(x, w, scale.bfloat16(), pts, bias.bfloat16(), 0, torch.bfloat16)
    assert torch.equal(y[:M - 1], golden)
