"""Tests for npu_interleave_rope against a golden written from the documented formula.

Spec: op-plugin's docs/zh/custom_APIs/torch_npu/torch_npu-npu_interleave_rope.md (not in
seed 004)::

    q = reshape(x, [B, N, S, D/2, 2]).transpose(-1, -2).reshape([B, N, S, D])
    q_embed = q * cos + RotateHalf(q) * sin
    RotateHalf(q) = [-q_{D/2}, ..., -q_{D-1}, q_0, ..., q_{D/2-1}]  ([1,2,3,4] -> [-3,-4,1,2])

    x: (B, N, S, D) bfloat16/float16, not non-contiguous; cos/sin: (B, 1, S or 1, D), x's dtype;
    D == 64; cos/sin N == 1.  Products: A2, A3.  Inference only.

Every expected value below is computed from those lines in float64 (or, for the rounding test,
in float32 rounded once), never by the library.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

OP = "npu_interleave_rope"
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


# -- golden (literal doc formula) ------------------------------------------------------------

def rotate_half(q):
    d = q.shape[-1]
    return torch.cat((-q[..., d // 2:], q[..., :d // 2]), dim=-1)


def golden(x, cos, sin, compute=torch.float64):
    b, n, s, d = x.shape
    q = x.to(compute).reshape(b, n, s, d // 2, 2).transpose(-1, -2).reshape(b, n, s, d)
    return q * cos.to(compute) + rotate_half(q) * sin.to(compute)


def rand(shape, dtype, seed, unit=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1 if unit
         else torch.randn(shape, generator=g, dtype=torch.float64))
    return t.to(dtype)


def make(b=3, n=5, s=7, cos_s=None, dtype=torch.float16, seed=0):
    cos_s = s if cos_s is None else cos_s
    return (rand((b, n, s, 64), dtype, seed), rand((b, 1, cos_s, 64), dtype, seed + 1, True),
            rand((b, 1, cos_s, 64), dtype, seed + 2, True))


def _raises(exc, fn, prefix=f"{OP}: expected"):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)
    return info


# ============================================================================================
# Values
# ============================================================================================

def test_rotate_half_golden_matches_doc_example():
    # the doc's worked example of RotateHalf: [1, 2, 3, 4] -> [-3, -4, 1, 2]
    assert rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [-3.0, -4.0, 1.0, 2.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cos_s", ["S", 1])
@pytest.mark.parametrize("b,n,s", [(3, 5, 7), (1, 1, 1), (2, 3, 1), (1, 4, 9)])
def test_forward_matches_doc(b, n, s, cos_s, dtype):
    x, cos, sin = make(b, n, s, s if cos_s == "S" else 1, dtype, seed=b * 100 + n * 10 + s)
    out = na.npu_interleave_rope(x, cos, sin)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert_close_to_golden(out, golden(x, cos, sin))


def test_known_values_deinterleave_and_rotate():
    x = torch.arange(64.0, dtype=torch.float16).reshape(1, 1, 1, 64) - 20
    ones, zeros = torch.ones(1, 1, 1, 64, dtype=torch.float16), torch.zeros(1, 1, 1, 64,
                                                                           dtype=torch.float16)
    # cos = 1, sin = 0: the result is the de-interleaved x, evens first, then odds
    out = na.npu_interleave_rope(x, ones, zeros)
    assert torch.equal(out[..., :32], x[..., ::2]) and torch.equal(out[..., 32:], x[..., 1::2])
    # cos = 0, sin = 1: RotateHalf of the de-interleaved x: (-odds, evens)
    out = na.npu_interleave_rope(x, zeros, ones)
    assert torch.equal(out[..., :32], -x[..., 1::2]) and torch.equal(out[..., 32:], x[..., ::2])


def test_cos_s1_broadcasts_over_sequence():
    x, cos, sin = make(2, 3, 6, cos_s=1, seed=11)
    out = na.npu_interleave_rope(x, cos, sin)
    full = na.npu_interleave_rope(x, cos.expand(2, 1, 6, 64).contiguous(),
                                  sin.expand(2, 1, 6, 64).contiguous())
    assert torch.equal(out, full)


def test_cos_per_batch_is_used():
    # each batch entry has its own cos/sin (dim 0 is B, not broadcast)
    x, cos, sin = make(2, 2, 3, seed=12)
    x = x[:1].expand(2, -1, -1, -1).contiguous()
    out = na.npu_interleave_rope(x, cos, sin)
    assert not torch.equal(out[0], out[1])
    assert_close_to_golden(out, golden(x, cos, sin))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cos_s", [1, 16])
def test_half_precision_is_fp32_rounded_once(dtype, cos_s):
    x, cos, sin = make(4, 8, 16, cos_s, dtype, seed=13)
    out = na.npu_interleave_rope(x, cos, sin)
    expected = golden(x, cos, sin, compute=torch.float32).to(dtype)

    def ordered(t):
        bits = t.view(torch.int16).to(torch.int32)
        mag = bits & 0x7FFF
        return torch.where(bits < 0, -mag, mag)

    ulps = (ordered(out) - ordered(expected)).abs()
    assert int(ulps.max()) <= 1
    assert float((ulps == 0).double().mean()) >= 0.99


def test_float64_exact_to_golden():
    x, cos, sin = make(dtype=torch.float64, seed=14)
    torch.testing.assert_close(na.npu_interleave_rope(x, cos, sin), golden(x, cos, sin),
                               rtol=1e-14, atol=1e-14)


def test_inputs_unchanged_and_output_new():
    x, cos, sin = make(seed=15)
    before = [t.clone() for t in (x, cos, sin)]
    out = na.npu_interleave_rope(x, cos, sin)
    for t, b in zip((x, cos, sin), before):
        assert torch.equal(t, b)
    assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("which", ["x_transposed", "x_sliced", "cos_sliced"])
def test_non_contiguous_accepted_by_default(which):
    x, cos, sin = make(2, 3, 5, dtype=torch.bfloat16, seed=16)
    if which == "x_transposed":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)     # (B, N, S, D) view of BSND data
    elif which == "x_sliced":
        x = rand((2, 3, 5, 128), torch.bfloat16, 17)[..., ::2]
    else:
        cos = rand((2, 1, 5, 128), torch.bfloat16, 18, True)[..., 1::2]
    assert not (x.is_contiguous() and cos.is_contiguous())
    out = na.npu_interleave_rope(x, cos, sin)
    assert_close_to_golden(out, golden(x, cos, sin))
    assert torch.equal(out, na.npu_interleave_rope(x.contiguous(), cos.contiguous(), sin))


def test_entry_points_agree():
    x, cos, sin = make(seed=19)
    a = na.npu_interleave_rope(x, cos, sin)
    assert torch.equal(a, torch.ops.npu.npu_interleave_rope(x, cos, sin))
    assert torch.equal(a, torch.ops.npu.npu_interleave_rope.default(x, cos, sin))


# ============================================================================================
# Errors
# ============================================================================================

def _bad(case):
    x, cos, sin = make(3, 5, 7, seed=20)
    if case == "x_d32":
        x32 = x[..., :32].contiguous()
        return lambda: na.npu_interleave_rope(x32, cos[..., :32], sin[..., :32]), ValueError
    if case == "x_d128":
        x128 = torch.cat((x, x), -1)
        return lambda: na.npu_interleave_rope(x128, torch.cat((cos, cos), -1),
                                              torch.cat((sin, sin), -1)), ValueError
    if case == "cos_d32":
        return lambda: na.npu_interleave_rope(x, cos[..., :32], sin[..., :32]), ValueError
    if case == "cos_n_not_1":
        c = cos.expand(3, 5, 7, 64).contiguous()
        return lambda: na.npu_interleave_rope(x, c, c), RuntimeError
    if case == "cos_b_mismatch":
        return lambda: na.npu_interleave_rope(x, cos[:2], sin[:2]), RuntimeError
    if case == "cos_s_mismatch":
        return lambda: na.npu_interleave_rope(x, cos[:, :, :3], sin[:, :, :3]), RuntimeError
    if case == "sin_shape":
        return lambda: na.npu_interleave_rope(x, cos, sin[:, :, :1]), RuntimeError
    if case == "x_3d":
        return lambda: na.npu_interleave_rope(x[0], cos, sin), ValueError
    if case == "cos_3d":
        return lambda: na.npu_interleave_rope(x, cos[:, 0], sin[:, 0]), ValueError
    if case == "mixed_dtype":
        return lambda: na.npu_interleave_rope(x, cos.to(torch.bfloat16), sin), TypeError
    if case == "integer_x":
        return (lambda: na.npu_interleave_rope(x.to(torch.int32), cos.to(torch.int32),
                                               sin.to(torch.int32)), TypeError)
    raise AssertionError(case)


BAD_CASES = ["x_d32", "x_d128", "cos_d32", "cos_n_not_1", "cos_b_mismatch", "cos_s_mismatch",
             "sin_shape", "x_3d", "cos_3d", "mixed_dtype", "integer_x"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_errors(case):
    fn, exc = _bad(case)
    _raises(exc, fn)


# ============================================================================================
# Strict mode
# ============================================================================================

@pytest.mark.parametrize("product", ["A2", "A3"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_strict_accepts_documented(product, dtype):
    x, cos, sin = make(2, 4, 3, cos_s=1, dtype=dtype, seed=21)
    with na.strict(product):
        out = na.npu_interleave_rope(x, cos, sin)
    assert_close_to_golden(out, golden(x, cos, sin))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_strict_a2_rejects_float32_and_float64(dtype):
    x, cos, sin = make(dtype=dtype, seed=22)
    na.npu_interleave_rope(x, cos, sin)                        # accepted in default mode
    with na.strict("A2"):
        _raises(TypeError, lambda: na.npu_interleave_rope(x, cos, sin))


@pytest.mark.parametrize("which", ["x", "cos", "sin"])
def test_strict_a2_rejects_non_contiguous(which):
    x, cos, sin = make(2, 3, 5, seed=23)
    if which == "x":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    elif which == "cos":
        cos = rand((2, 1, 5, 128), torch.float16, 24, True)[..., ::2]
    else:
        sin = rand((2, 1, 5, 128), torch.float16, 25, True)[..., ::2]
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_interleave_rope(x, cos, sin))


@pytest.mark.parametrize("product", ["950", "310P", "910"])
def test_strict_unlisted_product_rejects(product):
    x, cos, sin = make(seed=26)
    with na.strict(product):
        _raises(RuntimeError, lambda: na.npu_interleave_rope(x, cos, sin))


# ============================================================================================
# Autograd (none) and torch.compile
# ============================================================================================

@pytest.mark.parametrize("which", [0, 1, 2])
def test_requires_grad_raises(which):
    inputs = list(make(dtype=torch.float32, seed=27))
    inputs[which] = inputs[which].clone().requires_grad_(True)
    _raises(RuntimeError, lambda: na.npu_interleave_rope(*inputs))
    with torch.no_grad():
        out = na.npu_interleave_rope(*inputs)
    assert_close_to_golden(out, golden(*(t.detach() for t in inputs)))


def test_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    x, cos, sin = make(2, 3, 5, cos_s=1, dtype=torch.bfloat16, seed=28)

    def fn(a, c, s):
        return na.npu_interleave_rope(a, c, s) * 2

    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, cos, sin)
    want = fn(x, cos, sin)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert_close_to_golden(got, golden(x, cos, sin) * 2)
    torch._dynamo.reset()
