"""npu_ffn against float64 goldens of ``activation(x @ W1 + b1) @ W2 + b2`` (seed 004).

Rounding steps from op-plugin's golden (test_npu_ffn.py): float16 (inner_precise=1) and
bfloat16 round the first matmul's output and the activation to x's dtype; the golden below
applies exactly those roundings to float64 values.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

K1, N1 = 8, 12


def _act64(h, activation):
    if activation == "gelu":
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if activation == "fastgelu":
        return h / (1 + torch.exp(-1.702 * h))
    if activation == "relu":
        return h.clamp_min(0)
    if activation == "silu":
        return h / (1 + torch.exp(-h))
    a, b = h.chunk(2, dim=-1)
    inner = {"geglu": lambda t: 0.5 * t * (1 + torch.tanh(0.7978845608028654 * (t + 0.044715 * t ** 3))),
             "swiglu": lambda t: t / (1 + torch.exp(-t)), "reglu": lambda t: t.clamp_min(0)}
    return inner[activation](a) * b


def _golden(x, w1, w2, activation, b1=None, b2=None, mid_dtype=None):
    h = x.double() @ w1.double()
    if b1 is not None:
        h = h + b1.double()
    if mid_dtype is not None:
        h = h.to(mid_dtype).double()
    a = _act64(h, activation)
    if mid_dtype is not None:
        a = a.to(mid_dtype).double()
    y = a @ w2.double()
    return y + b2.double() if b2 is not None else y


@pytest.mark.parametrize("activation", ["gelu", "fastgelu", "relu", "silu"])
@pytest.mark.parametrize("dtype,inner_precise", [(torch.float16, 1), (torch.float16, 0),
                                                 (torch.bfloat16, 0), (torch.float64, None)])
def test_plain(activation, dtype, inner_precise):
    x = torch.randn(2, 3, K1, dtype=dtype)
    w1, w2 = torch.randn(K1, N1, dtype=dtype) * 0.4, torch.randn(N1, K1, dtype=dtype) * 0.4
    bias_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
    b1, b2 = torch.randn(N1, dtype=bias_dtype), torch.randn(K1, dtype=bias_dtype)
    y = na.npu_ffn(x, w1, w2, activation, bias1=b1, bias2=b2, inner_precise=inner_precise)
    assert y.shape == x.shape and y.dtype == dtype
    mid = dtype if (dtype == torch.bfloat16 or inner_precise == 1) else None
    assert_close_to_golden(y, _golden(x, w1, w2, activation, b1, b2, mid))


@pytest.mark.parametrize("activation", ["geglu", "swiglu", "reglu"])
def test_glu(activation):
    x = torch.randn(5, K1, dtype=torch.float16)
    w1 = torch.randn(K1, 2 * N1, dtype=torch.float16) * 0.4
    w2 = torch.randn(N1, K1, dtype=torch.float16) * 0.4
    y = na.npu_ffn(x, w1, w2, activation, inner_precise=1)
    assert_close_to_golden(y, _golden(x, w1, w2, activation, mid_dtype=torch.float16))


@pytest.mark.parametrize("form", ["counts", "cumsum"])
def test_experts(form):
    counts = [3, 0, 4]
    x = torch.randn(sum(counts), K1, dtype=torch.float64)
    w1, w2 = torch.randn(3, K1, N1, dtype=torch.float64), torch.randn(3, N1, K1, dtype=torch.float64)
    kw = {"expert_tokens": counts} if form == "counts" else \
        {"expert_tokens_index": torch.tensor(counts).cumsum(0).tolist()}
    y = torch.ops.npu.npu_ffn(x, w1, w2, "relu", **kw)
    golden = torch.cat([_golden(x[:3], w1[0], w2[0], "relu"), _golden(x[3:], w1[2], w2[2], "relu")])
    assert_close_to_golden(y, golden)


def test_antiquant_int8():
    x = torch.randn(4, K1, dtype=torch.float16)
    w1 = torch.randint(-9, 9, (K1, N1), dtype=torch.int8)
    w2 = torch.randint(-9, 9, (N1, K1), dtype=torch.int8)
    s1, s2 = (torch.rand(N1) * 0.05).half(), (torch.rand(K1) * 0.05).half()
    o1, o2 = (torch.randn(N1) * 0.1).half(), (torch.randn(K1) * 0.1).half()
    y = na.npu_ffn(x, w1, w2, "silu", antiquant_scale1=s1, antiquant_scale2=s2,
                   antiquant_offset1=o1, antiquant_offset2=o2)
    # the kernel dequantizes the weights in float16 (add, round, multiply, round)
    wd1 = ((w1.double() + o1.double()).half().double() * s1.double()).half().double()
    wd2 = ((w2.double() + o2.double()).half().double() * s2.double()).half().double()
    assert_close_to_golden(y, _golden(x, wd1, wd2, "silu"))


def test_quant_per_tensor():
    x = torch.randint(-20, 20, (5, K1), dtype=torch.int8)
    w1 = torch.randint(-20, 20, (K1, N1), dtype=torch.int8)
    w2 = torch.randint(-20, 20, (N1, K1), dtype=torch.int8)
    f1, f2 = torch.rand(N1) * 0.01 + 0.01, torch.rand(K1) * 0.01 + 0.01
    d1, d2 = na.npu_trans_quant_param(f1), na.npu_trans_quant_param(f2)
    scale, offset = torch.tensor([4.0]), torch.tensor([2.0])
    y = na.npu_ffn(x, w1, w2, "relu", scale=scale, offset=offset, deq_scale1=d1, deq_scale2=d2)
    assert y.dtype == torch.float16
    cut = lambda f: (f.view(torch.int32) & -8192).view(torch.float32).double()  # noqa: E731
    h = ((x.long() @ w1.long()).double() * cut(f1)).half().double().clamp_min(0)
    q = torch.round(h * 4 + 2).clamp(-128, 127)
    golden = (q.long() @ w2.long()).double() * cut(f2)
    assert_close_to_golden(y, golden)


def test_quant_requantization_in_float16():
    # ffn_quant.h quantizes the float16 activation with AscendQuant: scale and offset cast to
    # float16, h * scale rounded to float16, + offset rounded to float16, then rint to int8.
    # 0.0111 and 0.3 are not float16 values: a float32 requantization rounds 8 of these 1536
    # codes the other way.
    g = torch.Generator().manual_seed(4)
    x = torch.randint(-128, 128, (128, K1), dtype=torch.int8, generator=g)
    w1 = torch.randint(-128, 128, (K1, N1), dtype=torch.int8, generator=g)
    w2 = torch.randint(-20, 20, (N1, K1), dtype=torch.int8, generator=g)
    f1, f2 = torch.full((N1,), 0.25), torch.full((K1,), 0.03125)        # exact in fp19
    d1, d2 = na.npu_trans_quant_param(f1), na.npu_trans_quant_param(f2)
    scale, offset = torch.tensor([0.0111]), torch.tensor([0.3])
    y = na.npu_ffn(x, w1, w2, "relu", scale=scale, offset=offset, deq_scale1=d1, deq_scale2=d2)
    h = ((x.long() @ w1.long()).double() * 0.25).half().double().clamp_min(0)
    p = (h * torch.tensor(0.0111).half().double()).half().double()
    q = torch.round((p + torch.tensor(0.3).half().double()).half().double()).clamp(-128, 127)
    golden = ((q.long() @ w2.long()).double() * 0.03125).half()
    assert torch.equal(y, golden)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"activation": "tanh"}, ValueError, "expected activation one of"),
    ({"w2": torch.randn(N1 + 1, K1)}, RuntimeError, "expected weight2 K2 = 12 rows"),
    ({"expert_tokens": [2, 2]}, ValueError, "expected weight1 a 3-D tensor"),
    ({"inner_precise": 1, "dtype": torch.bfloat16}, ValueError,
     "expected inner_precise 0 for bfloat16"),
])
def test_bad_inputs(kwargs, error, match):
    dtype = kwargs.pop("dtype", torch.float32)
    activation = kwargs.pop("activation", "relu")
    w2 = kwargs.pop("w2", torch.randn(N1, K1)).to(dtype)
    with pytest.raises(error, match=f"npu_ffn: {match}"):
        na.npu_ffn(torch.randn(4, K1, dtype=dtype), torch.randn(K1, N1, dtype=dtype), w2,
                   activation, **kwargs)
