"""npu_gru / npu_gru_backward (DynamicGRUV2) against float64 goldens and torch.nn.GRU.

Golden: the GRU equations of ops-nn rnn/gru README in float64, with op-plugin
GruKernelNpu.cpp's packing (``weight_input = w_ih.t()`` ``[I, 3H]``, ``weight_hidden =
w_hh.t()``, gate columns r, z, n, reset applied after the hidden matmul) and its outputs
(y, output_h, update z, reset r, new n, hidden_new = h W_hn + b_hn).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

T, B, I, H = 4, 3, 5, 6
FLAGS = (True, 1, 0.0, True, False, False)
SEQ = torch.full((B,), T, dtype=torch.int32)


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def golden(x, hx, wi, wh, bi, bh):
    x, wi, wh, bi, bh = (t.double() for t in (x, wi, wh, bi, bh))
    h = hx.double().reshape(B, H)
    outs = [[] for _ in range(5)]
    for t in range(T):
        gi, gh = x[t] @ wi + bi, h @ wh + bh
        r = sig(gi[:, :H] + gh[:, :H])
        z = sig(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (1 - z) * n + z * h
        for k, v in enumerate((h, z, r, n, gh[:, 2 * H:])):
            outs[k].append(v)
    h, z, r, n, hn = (torch.stack(v) for v in outs)
    return h, h, z, r, n, hn


def make(dtype=torch.float32, bias_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s, dt=dtype: (torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa
                              * 0.6).to(dt)
    bias_dtype = bias_dtype or dtype
    return (r(T, B, I), r(B, H), r(I, 3 * H), r(H, 3 * H), r(3 * H, dt=bias_dtype),
            r(3 * H, dt=bias_dtype))


@pytest.mark.parametrize("dtype,bias_dtype", [(torch.float32, torch.float32),
                                              (torch.float16, torch.float16),
                                              (torch.float16, torch.float32)])
def test_forward_against_golden(dtype, bias_dtype):
    args = make(dtype, bias_dtype)
    out = na.npu_gru(*args, SEQ, *FLAGS)
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    for got, want in zip(out, golden(*args)):
        assert got.shape == (T, B, H) and got.dtype == bias_dtype   # outputs: bias' dtype
        assert_close_to_golden(got, want, rtol=tol, atol=tol)


def test_agrees_with_torch_gru_forward_and_autograd():
    torch.manual_seed(1)
    gru = torch.nn.GRU(I, H).double()
    x, hx = make(torch.float64, seed=2)[:2]
    params = [gru.weight_ih_l0.t(), gru.weight_hh_l0.t(), gru.bias_ih_l0, gru.bias_hh_l0]
    leaves = [x.clone().requires_grad_(), hx.clone().requires_grad_(),
              *(p.detach().clone().requires_grad_() for p in params)]
    wi_view = leaves[2]          # a transposed (non-contiguous) weight stays accepted
    assert not gru.weight_ih_l0.t().is_contiguous()
    y, h, *_ = na.npu_gru(leaves[0], leaves[1], wi_view, *leaves[3:], SEQ, *FLAGS)
    x2, h2 = x.clone().requires_grad_(), hx[None].clone().requires_grad_()
    y_ref, h_ref = gru(x2, h2)
    assert_close_to_golden(y, y_ref.detach())
    assert_close_to_golden(h[-1], h_ref[0].detach())
    gy = torch.randn(T, B, H, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = torch.autograd.grad((y * gy).sum() + h[-1].sum() * 0.5, leaves)
    want = torch.autograd.grad((y_ref * gy).sum() + h_ref.sum() * 0.5,
                               [x2, h2, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0,
                                gru.bias_hh_l0])
    for g, w in zip(got, (want[0], want[1][0], want[2].t(), want[3].t(), want[4], want[5])):
        assert_close_to_golden(g, w)


def test_backward_op_returns_npu_order_and_reads_last_step_of_gradh():
    args = make()
    outs = na.npu_gru(*args, SEQ, *FLAGS)
    x, hx, wi, wh, bi, bh = args
    gen = torch.Generator().manual_seed(4)
    gy, gh = torch.randn(T, B, H, generator=gen), torch.randn(T, B, H, generator=gen)
    res = na.npu_gru_backward(gy, gh, x, wi, wh, bi, bh, SEQ, hx, *outs)
    assert [t.shape for t in res] == [wi.shape, wh.shape, x.shape, bi.shape, bh.shape, hx.shape]
    gh_last = torch.zeros_like(gh)
    gh_last[-1] = gh[-1]
    again = na.npu_gru_backward(gy, gh_last, x, wi, wh, bi, bh, SEQ, hx, *outs)
    assert all(torch.equal(a, b) for a, b in zip(res, again))
    assert all(torch.count_nonzero(t) == 0 for t in
               na.npu_gru_backward(None, None, x, wi, wh, bi, bh, SEQ, hx, *outs))


def test_gradcheck():
    gen = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_()  # noqa
    t_, b_, i_, h_ = 2, 2, 2, 2
    inputs = (r(t_, b_, i_), r(b_, h_), r(i_, 3 * h_), r(h_, 3 * h_), r(3 * h_), r(3 * h_))

    def fn(*a):
        y, h, *_ = torch.ops.npu.npu_gru(*a, torch.zeros(b_, dtype=torch.int32), *FLAGS)
        return y, h[-1]

    torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("index,value,error,match", [
    (2, torch.zeros(I + 1, 3 * H), RuntimeError, "expected weight_input the shape"),
    (3, torch.zeros(H, 3 * H).half(), TypeError, "expected weight_hidden the same dtype"),
    (1, torch.zeros(1, B + 1, H), RuntimeError, "expected hx the shape"),
    (0, torch.zeros(T, B, I, dtype=torch.int64), TypeError, "expected input dtype in"),
])
def test_bad_inputs_raise_and_leave_inputs_untouched(index, value, error, match):
    args = list(make())
    args[index] = value
    before = [a.clone() for a in args]
    with pytest.raises(error, match=match):
        torch.ops.npu.npu_gru(*args, SEQ, *FLAGS)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
