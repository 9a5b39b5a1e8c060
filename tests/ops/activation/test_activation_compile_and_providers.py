"""Activation ops under torch.compile and FakeTensor, the "compiled" provider against the
"reference" provider, and the glu_core API the quantizing SwiGLU ops build on.

Goldens are the doc formulas in float64 (seed 004: swiglu ``A*sigmoid(A)*B``, fast_gelu
``x/(1+e^(-1.702x))``, clipped swiglu; aclnnGeGluV3 for geglu).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.kernels import compiled as compiled_kernels
from npu_anywhere.library import REGISTRY
from npu_anywhere.ops.activation import glu_core
from npu_anywhere.testing.tolerances import assert_close_to_golden


def rand(shape, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def swiglu64(x, dim=-1):
    x = x.double()
    a, b = x.chunk(2, dim)
    return a / (1 + torch.exp(-a)) * b


def fast_gelu64(x):
    x = x.double()
    return x / (1 + torch.exp(-1.702 * x))


def geglu64(x, approximate, activate_left):
    a, b = x.double().chunk(2, -1)
    gate, lin = (a, b) if activate_left else (b, a)
    if approximate:
        g = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
    else:
        g = 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    return lin * g, g


def _compile(fn, backend):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True)


# ============================================================================================
# torch.compile(fullgraph=True)
# ============================================================================================

def test_compile_swiglu_with_autograd_aot_eager():
    x = rand((4, 6), torch.float64, seed=1).requires_grad_(True)
    fn = _compile(lambda t: torch.ops.npu.npu_swiglu(t, 0) * 2.0, "aot_eager")
    out = fn(x)
    g = rand(out.shape, torch.float64, seed=2, scale=1.0)
    (got,) = torch.autograd.grad(out, x, g)
    xs = x.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad(swiglu64(xs, 0) * 2.0, xs, g)
    assert_close_to_golden(out, swiglu64(x.detach(), 0) * 2.0)
    assert_close_to_golden(got, want)


def test_compile_geglu_two_outputs_aot_eager():
    x = rand((3, 8), seed=3)
    fn = _compile(lambda t: na.npu_geglu(t, -1, 0, True), "aot_eager")
    out, g = fn(x)
    want_out, want_g = geglu64(x, 0, True)
    assert_close_to_golden(out, want_out)
    assert_close_to_golden(g, want_g)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_silu_inplace(backend):
    x = rand((3, 5), seed=4)
    x0 = x.clone()

    def f(t):
        r = na.npu_silu_(t)
        return r + 0

    out = _compile(f, backend)(x)
    want = x0.double() / (1 + torch.exp(-x0.double()))
    assert_close_to_golden(x, want)          # the input itself was written
    assert torch.equal(out, x)


def test_compile_fast_gelu_strict_formula_follows_context():
    x = torch.tensor([float("inf"), 1.0])
    fn = _compile(lambda t: na.npu_fast_gelu(t), "aot_eager")
    assert fn(x)[0] == float("inf")
    with na.strict("910"):
        torch._dynamo.reset()
        assert torch.isnan(torch.compile(lambda t: na.npu_fast_gelu(t), backend="aot_eager",
                                         fullgraph=True)(x)[0])


def test_compile_clipped_swiglu_group_index():
    x = rand((6, 8), seed=5)
    gi = torch.tensor([2, 1], dtype=torch.int64)
    fn = _compile(lambda t, g: na.npu_clipped_swiglu(t, group_index=g, interleaved=False),
                  "aot_eager")
    out = fn(x, gi)
    assert torch.count_nonzero(out[3:]) == 0
    torch.testing.assert_close(out, na.npu_clipped_swiglu(x, group_index=gi, interleaved=False),
                               rtol=0, atol=0)


# ============================================================================================
# FakeTensor: shapes, dtypes, identical errors
# ============================================================================================

def test_fake_shapes_and_dtypes():
    with FakeTensorMode():
        x = torch.empty(3, 10, 4, dtype=torch.bfloat16)
        assert na.npu_swiglu(x, 1).shape == (3, 5, 4)
        y, g = na.npu_geglu(x, 1)
        assert y.shape == g.shape == (3, 5, 4) and y.dtype == g.dtype == torch.bfloat16
        assert na.npu_swiglu_backward(na.npu_swiglu(x, 1), x, 1).shape == x.shape
        assert na.npu_clipped_swiglu(x, dim=1).shape == (3, 5, 4)
        h = torch.empty(7, 6, dtype=torch.float16)
        assert na.npu_gelu_mul(h).shape == (7, 3)
        assert na.npu_silu(h).dtype == torch.float16
        assert na.npu_silu_(h) is h
        assert na.npu_mish_backward(h, h).shape == h.shape


def _bad_cases():
    x = rand((3, 5), seed=6)
    return {
        "swiglu-odd": lambda: na.npu_swiglu(x),
        "swiglu-dim": lambda: na.npu_swiglu(x, 4),
        "geglu-approx": lambda: na.npu_geglu(x[:, :4], -1, 5),
        "gelu_mul-mode": lambda: na.npu_gelu_mul(x[:, :4], approximate="x"),
        "fast_gelu-int": lambda: na.npu_fast_gelu(x.int()),
        "silu-bf16": lambda: na.npu_silu(x.bfloat16()),
        "clipped-group": lambda: na.npu_clipped_swiglu(x[:, :4], group_index=x[0]),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_fake_errors_match_eager(case):
    with pytest.raises(Exception) as eager:
        _bad_cases()[case]()
    mode = FakeTensorMode()
    # re-create the inputs as fake tensors: the lambdas close over real ones, so convert them
    real = rand((3, 5), seed=6)
    fake_x = mode.from_tensor(real)
    cases = {
        "swiglu-odd": lambda: na.npu_swiglu(fake_x),
        "swiglu-dim": lambda: na.npu_swiglu(fake_x, 4),
        "geglu-approx": lambda: na.npu_geglu(fake_x[:, :4], -1, 5),
        "gelu_mul-mode": lambda: na.npu_gelu_mul(fake_x[:, :4], approximate="x"),
        "fast_gelu-int": lambda: na.npu_fast_gelu(fake_x.int()),
        "silu-bf16": lambda: na.npu_silu(fake_x.bfloat16()),
        "clipped-group": lambda: na.npu_clipped_swiglu(fake_x[:, :4], group_index=fake_x[0]),
    }
    with mode, pytest.raises(Exception) as fake:
        cases[case]()
    assert type(fake.value) is type(eager.value)
    assert str(fake.value) == str(eager.value)
    assert ": expected" in str(eager.value)


# ============================================================================================
# glu_core API
# ============================================================================================

def test_glu_core_swiglu_fp32_api():
    x = rand((3, 8), torch.bfloat16, seed=7)
    right = glu_core.swiglu_fp32(x, -1)                      # default: activate the right half
    left = glu_core.swiglu_fp32(x, -1, activate_left=True)
    assert right.dtype == left.dtype == torch.float32
    a, b = x.double().chunk(2, -1)
    assert_close_to_golden(left, a / (1 + torch.exp(-a)) * b, dtype=torch.float32)
    assert_close_to_golden(right, a * (b / (1 + torch.exp(-b))), dtype=torch.float32)
    assert glu_core.swiglu_fp32(x.double(), 0).dtype == torch.float64
    # npu_swiglu == activate_left=True, rounded once
    assert torch.equal(na.npu_swiglu(x), left.to(torch.bfloat16))


def test_glu_core_clipped_and_interleaved_split():
    x = torch.arange(12, dtype=torch.float64).reshape(2, 6) - 6
    even, odd = glu_core.glu_halves(x, -1, interleaved=True)
    assert torch.equal(even, x[:, 0::2]) and torch.equal(odd, x[:, 1::2])
    first, second = glu_core.glu_halves(x, 0)
    assert torch.equal(first, x[:1]) and torch.equal(second, x[1:])
    y = glu_core.clipped_glu_fp32(even, odd, alpha=1.702, limit=2.0, bias=1.0)
    a, b = even.clamp(max=2.0), odd.clamp(-2.0, 2.0)
    torch.testing.assert_close(y, a / (1 + torch.exp(-1.702 * a)) * (b + 1.0))


# ============================================================================================
# "compiled" provider vs "reference" provider
# ============================================================================================

def _ordered_bits(t):
    bits = t.view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


def _assert_parity(fast, ref):
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    if ref.dtype in (torch.float16, torch.bfloat16):
        ulps = (_ordered_bits(fast) - _ordered_bits(ref)).abs()
        assert int(ulps.max()) <= 1
        assert float((ulps == 0).double().mean()) >= 0.99
    else:
        torch.testing.assert_close(fast, ref, rtol=2e-6, atol=1e-6)


def _run_both(fn, *args, **kwargs):
    with na.use_providers("reference"):
        ref = fn(*args, **kwargs)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = fn(*args, **kwargs)
    return fast, ref


def _provider(op_name):
    return {p.name: p for p in REGISTRY[op_name].providers._fast}["compiled"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_compiled_provider_swiglu_forward_and_backward(dtype):
    x = rand((7, 2, 40), dtype, seed=8)
    fast, ref = _run_both(na.npu_swiglu, x, -1)
    _assert_parity(fast, ref)
    assert_close_to_golden(fast, swiglu64(x), dtype=dtype)
    g = rand((7, 2, 20), dtype, seed=9, scale=1.0)
    fast_b, ref_b = _run_both(na.npu_swiglu_backward, g, x, -1)
    _assert_parity(fast_b, ref_b)
    assert _provider("npu_swiglu").fn.__self__._disabled is None


@pytest.mark.slow
def test_compiled_provider_geglu_bf16_and_fp16_declined():
    x = rand((5, 64), torch.bfloat16, seed=10, scale=2.0)
    (fo, fg), (ro, rg) = _run_both(na.npu_geglu, x, -1, 1, False)
    _assert_parity(fo, ro)
    _assert_parity(fg, rg)
    # float16 keeps its two roundings: the compiled provider declines it, results are identical
    h = x.to(torch.float16)
    assert _provider("npu_geglu").supports(h) is not None
    (fo, fg), (ro, rg) = _run_both(na.npu_geglu, h, -1, 1, False)
    assert torch.equal(fo, ro) and torch.equal(fg, rg)


@pytest.mark.slow
def test_compiled_provider_fast_gelu_per_formula():
    x = rand((6, 33), seed=11)
    fast, ref = _run_both(na.npu_fast_gelu, x)
    _assert_parity(fast, ref)
    assert_close_to_golden(fast, fast_gelu64(x))
    with na.strict("310P"):
        fast1, ref1 = _run_both(na.npu_fast_gelu, x)
    _assert_parity(fast1, ref1)


@pytest.mark.slow
def test_compiled_provider_clipped_swiglu_group_index():
    x = rand((9, 16), torch.bfloat16, seed=12)
    gi = torch.tensor([3, 2], dtype=torch.int64)
    fast, ref = _run_both(na.npu_clipped_swiglu, x, group_index=gi)
    _assert_parity(fast, ref)
    assert torch.count_nonzero(fast[5:]) == 0


def test_compiled_provider_tiering_swiglu():
    x = rand((2, 8), torch.float64, seed=13)
    provider = _provider("npu_swiglu").fn.__self__
    key = (-1, 8, torch.float64, "cpu")
    provider._calls.pop(key, None)
    with compiled_kernels.compiling_after(2):
        assert provider.supports(x, -1) is not None
        assert provider.supports(x, -1) is not None
        assert provider.supports(x, -1) is None
    assert key not in provider._compiled
