"""npu_mhc_pre (+ backward) against float64 goldens.

Golden: the doc formula (torch_npu-npu_mhc_pre.md) per token in float64, written out here:
RmsNorm of x with gamma, the three projections by the rows of phi, sigmoid / 2*sigmoid, and
h_in as the H_pre-weighted sum of the streams; the backward golden is float64 autograd of it.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def _inputs(lead=(5,), n=4, d=16, dtype=torch.bfloat16, res=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = n * n + 2 * n if res else 2 * n
    x = torch.randn(*lead, n, d, generator=gen).to(dtype)
    phi = torch.randn(rows, n * d, generator=gen) * 0.2
    alpha = torch.tensor([0.5, 0.8, 1.2][:3 if res else 2])
    bias = torch.randn(rows, generator=gen) * 0.1
    gamma = torch.rand(n, d, generator=gen) + 0.5
    return x, phi, alpha, bias, gamma


def _hf32(v: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to 11 significant bits, half away from zero."""
    m, e = torch.frexp(v)
    q = torch.sign(m) * torch.floor(m.abs() * 2 ** 11 + 0.5) / 2 ** 11
    return torch.ldexp(q, e)


def golden(x, phi, alpha, bias, gamma=None, norm_eps=1e-6, hc_eps=1e-6, hf32=False):
    n, d = x.shape[-2:]
    xs = x.double().reshape(-1, n, d)
    phi, alpha, bias = phi.double(), alpha.double(), bias.double()
    g = torch.ones(n, d, dtype=torch.float64) if gamma is None else gamma.double()
    rms = torch.sqrt((xs ** 2).mean((-2, -1)) + norm_eps)                   # [T]
    lhs = (xs * g).reshape(len(xs), -1)
    rhs = phi
    if hf32:
        lhs, rhs = _hf32(lhs.float().double()), _hf32(rhs)
    proj = (lhs @ rhs.t()) / rms[:, None]                                  # x' phi
    pre = torch.sigmoid(alpha[0] * proj[:, :n] + bias[:n]) + hc_eps
    post = 2 * torch.sigmoid(alpha[1] * proj[:, n:2 * n] + bias[n:2 * n])
    h_in = (pre[:, :, None] * xs).sum(1)
    lead = x.shape[:-2]
    out = [h_in.reshape(*lead, d), post.reshape(*lead, n)]
    if alpha.numel() == 3:
        out.append((alpha[2] * proj[:, 2 * n:] + bias[2 * n:]).reshape(*lead, n, n))
    return out, 1 / rms.reshape(lead), (lhs @ rhs.t()).reshape(*lead, -1), pre.reshape(*lead, n)


@pytest.mark.parametrize("dtype,lead,res,use_gamma", [
    (torch.bfloat16, (5,), True, True),
    (torch.float16, (2, 3), True, False),
    (torch.bfloat16, (1, 3), False, True),
])
def test_forward_against_golden(dtype, lead, res, use_gamma):
    x, phi, alpha, bias, gamma = _inputs(lead, n=6 if dtype == torch.float16 else 4, dtype=dtype,
                                         res=res)
    gamma = gamma if use_gamma else None
    before = x.clone()
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma,
                                                                out_flag=1)
    assert torch.equal(x, before)
    (w_in, w_post, *w_res), w_inv, w_mix, w_pre = golden(x, phi, alpha, bias, gamma)
    assert h_in.dtype == dtype and h_post.dtype == h_res.dtype == torch.float32
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert_close_to_golden(h_in, w_in, rtol=tol, atol=tol)
    assert_close_to_golden(h_post, w_post, rtol=1e-5, atol=1e-5)
    assert_close_to_golden(inv_rms, w_inv, rtol=1e-5)
    assert_close_to_golden(h_mix, w_mix, rtol=1e-5, atol=1e-5)
    assert_close_to_golden(h_pre, w_pre, rtol=1e-5, atol=1e-5)
    if res:
        assert_close_to_golden(h_res, w_res[0], rtol=1e-5, atol=1e-5)
    else:
        assert h_res.shape == (1,) and not h_res.any()


def test_hf32_inner_precise_and_out_flag_zero():
    x, phi, alpha, bias, gamma = _inputs((7,), n=8, d=32)
    phi = phi * 3
    full = na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, inner_precise=1)
    _, _, w_mix, _ = golden(x, phi, alpha, bias, gamma, hf32=True)
    assert_close_to_golden(full[4], w_mix, rtol=1e-6, atol=1e-5)
    plain = na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma)
    assert not torch.equal(full[4], plain[4])           # HF32 rounding is visible
    flagged = na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma, out_flag=1)
    for a, b in zip(plain[:3], flagged[:3]):
        assert torch.equal(a, b)


def test_non_contiguous_x():
    x, phi, alpha, bias, gamma = _inputs((4,))
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)
    assert not xt.is_contiguous()
    for a, b in zip(na.npu_mhc_pre(xt, phi, alpha, bias, gamma=gamma),
                    torch.ops.npu.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma)):
        assert torch.equal(a, b)


def _golden_outputs(x, phi, alpha, bias, gamma):
    outs, *_ = golden(x, phi, alpha, bias, gamma)
    return outs


@pytest.mark.parametrize("lead,use_gamma,post", [((3,), True, True), ((1, 2), False, False)])
def test_backward_op_against_golden_autograd(lead, use_gamma, post):
    x, phi, alpha, bias, gamma = _inputs(lead, dtype=torch.bfloat16, seed=3)
    gamma = gamma if use_gamma else None
    _, h_post, _, inv_rms, h_mix, h_pre = na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma,
                                                         out_flag=1)
    gen = torch.Generator().manual_seed(4)
    g_in = torch.randn(*lead, 16, generator=gen).bfloat16()
    g_post, g_res = torch.randn(*lead, 4, generator=gen), torch.randn(*lead, 4, 4, generator=gen)
    g_x_post = torch.randn(x.shape, generator=gen).bfloat16() if post else None
    dx, dphi, dalpha, dbias, dgamma = na.npu_mhc_pre_backward(
        x, phi, alpha, g_in, g_post, g_res, inv_rms, h_mix, h_pre, h_post, gamma=gamma,
        grad_x_post=g_x_post)
    leaves = [t.double().requires_grad_() for t in (x, phi, alpha, bias)]
    gd = gamma.double().requires_grad_() if use_gamma else None
    outs = _golden_outputs(*leaves, gd)
    wants = torch.autograd.grad(outs, leaves + ([gd] if use_gamma else []),
                                [g_in.double(), g_post.double(), g_res.double()])
    want_dx = wants[0] + (g_x_post.double() if post else 0)
    assert dx.dtype == torch.bfloat16 and dphi.shape == phi.shape and dalpha.shape == (3,)
    assert_close_to_golden(dx, want_dx, rtol=2e-2, atol=2e-2)
    for got, want in zip((dphi, dalpha, dbias), wants[1:4]):
        assert_close_to_golden(got, want, rtol=1e-2, atol=1e-2)
    if use_gamma:
        assert_close_to_golden(dgamma, wants[4], rtol=1e-2, atol=1e-2)
    else:
        assert dgamma.shape == (4, 16) and not dgamma.any()


@pytest.mark.parametrize("res", [True, False])
def test_gradcheck_float64(res):
    x, phi, alpha, bias, gamma = (t.double() for t in _inputs((2,), res=res, seed=5))
    args = [t.requires_grad_() for t in (x, phi, alpha, bias, gamma)]

    def f(x, phi, alpha, bias, gamma):     # with two alphas h_res is a constant [1] zero
        return na.npu_mhc_pre(x, phi, alpha, bias, gamma=gamma)[:3 if res else 2]
    torch.autograd.gradcheck(f, args, fast_mode=True)
    # the last three outputs carry no gradient (derivatives.yaml), and h_in alone works
    h_in = na.npu_mhc_pre(*args[:4])[0]
    (dx,) = torch.autograd.grad(h_in.sum(), args[0])
    assert dx.shape == x.shape and math.isfinite(float(dx.sum()))


@pytest.mark.parametrize("change,match,error", [
    (dict(x=torch.zeros(2, 5, 16, dtype=torch.bfloat16)), "expected x n \\(its size\\(-2\\)\\)",
     ValueError),
    (dict(x=torch.zeros(2, 4, 24, dtype=torch.bfloat16)),
     "expected x D \\(its last size\\) a multiple", ValueError),
    (dict(x=torch.zeros(2, 4, 16)), "expected x dtype in", TypeError),
    (dict(alpha=torch.ones(4)), "expected alpha a 1-D tensor of 3", ValueError),
    (dict(bias=torch.zeros(23)), "expected bias the shape", RuntimeError),
    (dict(gamma=torch.ones(4, 8)), "expected gamma the shape", RuntimeError),
    (dict(inner_precise=2), "expected inner_precise one of", ValueError),
])
def test_errors(change, match, error):
    x, phi, alpha, bias, gamma = _inputs((2,))
    kw = dict(x=x, phi=phi, alpha=alpha, bias=bias, gamma=gamma)
    kw.update(change)
    with pytest.raises(error, match="npu_mhc_pre: " + match):
        na.npu_mhc_pre(**kw)


def test_strict_mode_950_only():
    x, phi, alpha, bias, gamma = _inputs((2,))
    with na.strict("950"):
        na.npu_mhc_pre(x, phi, alpha, bias)
    with na.strict("A2"), pytest.raises(RuntimeError, match="expected a product the op supports"):
        na.npu_mhc_pre(x, phi, alpha, bias)
