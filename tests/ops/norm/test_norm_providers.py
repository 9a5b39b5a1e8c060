"""RMSNorm ops under torch.compile, and the "compiled" provider against the doc formula.

The compiled provider compiles the op's own body, so the oracle here is the float64 doc formula
(and bit-equality with the eager reference where Inductor keeps the same operation order is not
assumed: only the golden tolerance is).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import dispatch
from npu_anywhere.kernels import compiled as compiled_kernels
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).to(dtype)


def rms_golden(x, gamma, eps=1e-6):
    x, g = x.double(), gamma.double()
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    r = 1.0 / torch.sqrt((x * x).mean(dims, keepdim=True) + eps)
    return x * r * g, r


def _compile(fn, backend):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True)


def test_compile_fullgraph_rms_norm_autograd_aot_eager():
    x = make((3, 4, 6), F64, 1).requires_grad_(True)
    gamma = make((6,), F64, 2).requires_grad_(True)
    fn = _compile(lambda a, b: torch.ops.npu.npu_rms_norm(a, b, 1e-5)[0] * 2.0, "aot_eager")
    out = fn(x, gamma)
    dy = make(out.shape, F64, 3)
    got = torch.autograd.grad(out, (x, gamma), dy)
    xs, gs = (t.detach().clone().requires_grad_(True) for t in (x, gamma))
    want_out = rms_golden(xs, gs, 1e-5)[0] * 2.0
    want = torch.autograd.grad(want_out, (xs, gs), dy)
    assert_close_to_golden(out, want_out)
    for a, b in zip(got, want):
        assert_close_to_golden(a, b)


def test_compile_fullgraph_add_rms_norm_and_group_norm_swish():
    x1, x2, g = make((4, 16), F16, 4), make((4, 16), F16, 5), make((16,), F16, 6)
    fn = _compile(lambda a, b, c: na.npu_add_rms_norm(a, b, c), "aot_eager")
    for got, want in zip(fn(x1, x2, g), na.npu_add_rms_norm(x1, x2, g)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    x = make((2, 6, 5), F64, 7).requires_grad_(True)
    w, b = make((6,), F64, 8), make((6,), F64, 9)
    sw = _compile(lambda a: na.npu_group_norm_swish(a, 3, w, b)[0], "aot_eager")
    out = sw(x)
    (gx,) = torch.autograd.grad(out.sum(), x)
    xe = x.detach().clone().requires_grad_(True)
    (ge,) = torch.autograd.grad(na.npu_group_norm_swish(xe, 3, w, b)[0].sum(), xe)
    assert_close_to_golden(gx, ge)


@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_compiled_provider_rms_norm_matches_golden(dtype):
    x, gamma = make((8, 256), dtype, 10), make((256,), dtype, 11)
    with compiled_kernels.compiling_after(0), dispatch.use_providers("compiled",
                                                                     op="npu_rms_norm"):
        y, rstd = na.npu_rms_norm(x, gamma)
    want_y, want_r = rms_golden(x, gamma)
    assert y.dtype == dtype and rstd.dtype == F32 and rstd.shape == (8, 1)
    assert_close_to_golden(y, want_y, dtype=dtype)
    assert_close_to_golden(rstd, want_r, rtol=1e-5)


def test_compiled_provider_rms_norm_backward_matches_golden():
    x, gamma, dy = make((6, 64), BF16, 15), make((64,), F32, 16), make((6, 64), BF16, 17)
    rstd = rms_golden(x, gamma)[1].float()
    with compiled_kernels.compiling_after(0), dispatch.use_providers(
            "compiled", op="npu_rms_norm_backward"):
        dx, dgamma = na.npu_rms_norm_backward(dy, x, gamma, rstd)
    xs = x.double().requires_grad_(True)
    gs = gamma.double().requires_grad_(True)
    want = torch.autograd.grad(rms_golden(xs, gs)[0], (xs, gs), dy.double())
    assert dx.dtype == BF16 and dgamma.dtype == F32
    assert_close_to_golden(dx, want[0], dtype=BF16, atol=1e-3)
    assert_close_to_golden(dgamma, want[1], rtol=1e-5, atol=1e-5)


def test_compiled_provider_add_rms_norm_follows_strict_numerics():
    x1, x2 = make((32, 128), BF16, 12), make((32, 128), BF16, 13)
    gamma = make((128,), BF16, 14) * 3
    s = x1.double() + x2.double()
    xr = s.to(BF16).double()
    r_a2 = 1.0 / torch.sqrt((xr * xr).mean(-1, keepdim=True) + 1e-6)
    a2 = ((xr * r_a2).to(BF16).double() * gamma.double()).to(BF16)
    r_950 = 1.0 / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-6)
    v950 = (s * r_950 * gamma.double()).to(BF16)
    with compiled_kernels.compiling_after(0), dispatch.use_providers("compiled",
                                                                     op="npu_add_rms_norm"):
        y, _, x = na.npu_add_rms_norm(x1, x2, gamma)
        with na.strict("950"):
            y950, _, x950 = na.npu_add_rms_norm(x1, x2, gamma)
    assert torch.equal(x, s.to(BF16)) and torch.equal(x950, x)
    assert (y == a2).float().mean() > 0.99
    assert (y950 == v950).float().mean() > 0.99
    assert not torch.equal(y, y950)
