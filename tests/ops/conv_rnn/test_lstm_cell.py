"""npu_lstm_cell / npu_lstm_cell_backward against torch.nn.LSTMCell and a float64 golden.

Golden: the LSTM cell equations in float64 with op-plugin LstmCellKernelNpu.cpp's layout
(``w_ih`` ``[I, 4H]`` and ``w_hh`` ``[H, 4H]``, gate blocks i, f, g, o, bias ``b_ih + b_hh``).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

B, I, H = 3, 5, 4


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def golden(x, w_ih, w_hh, h, c, bias):
    z = x.double() @ w_ih.double() + h.double() @ w_hh.double() + bias
    i, f, j, o = sig(z[:, :H]), sig(z[:, H:2 * H]), torch.tanh(z[:, 2 * H:3 * H]), \
        sig(z[:, 3 * H:])
    c2 = f * c.double() + i * j
    h2 = o * torch.tanh(c2)
    return h2[None], h2, c2, i[None], j[None], f[None], o[None], torch.tanh(c2)[None]


@pytest.mark.parametrize("dtype,bias", [(torch.float32, True), (torch.float16, False)])
def test_forward_against_golden(dtype, bias):
    gen = torch.Generator().manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=gen, dtype=torch.float64) * 0.6)  # noqa: E731
    x, w_ih, w_hh, h, c = r(B, I), r(I, 4 * H), r(H, 4 * H), r(B, H), r(B, H)
    b_ih, b_hh = (r(4 * H), r(4 * H)) if bias else (None, None)
    args = [t.to(dtype) for t in (x, w_ih, w_hh, h, c)]
    out = na.npu_lstm_cell(*args, *(b if b is None else b.to(dtype) for b in (b_ih, b_hh)))
    bsum = (b_ih.to(dtype).double() + b_hh.to(dtype).double()) if bias else 0.0
    want = golden(*args, bsum)
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    for got, exp in zip(out, want):
        assert got.dtype == dtype and got.shape == exp.shape
        assert_close_to_golden(got, exp, rtol=tol, atol=tol)


def test_agrees_with_torch_lstm_cell_and_autograd():
    torch.manual_seed(1)
    cell = torch.nn.LSTMCell(I, H).double()
    gen = torch.Generator().manual_seed(2)
    x, h, c = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((B, I), (B, H),
                                                                              (B, H)))
    leaves = [t.clone().requires_grad_() for t in
              (x, cell.weight_ih.t().detach(), cell.weight_hh.t().detach(), h, c,
               cell.bias_ih.detach(), cell.bias_hh.detach())]
    y, h2, c2, *_ = na.npu_lstm_cell(*leaves)
    x_, h_, c_ = (t.clone().requires_grad_() for t in (x, h, c))
    h_ref, c_ref = cell(x_, (h_, c_))
    assert_close_to_golden(h2, h_ref.detach())
    assert_close_to_golden(c2, c_ref.detach())
    assert_close_to_golden(y[0], h_ref.detach())
    got = torch.autograd.grad(y.sum() * 0.3 + h2.sum() + (c2 * 2).sum(), leaves)
    want = torch.autograd.grad(h_ref.sum() * 1.3 + (c_ref * 2).sum(),
                               [x_, cell.weight_ih, cell.weight_hh, h_, c_, cell.bias_ih,
                                cell.bias_hh])
    for g, w in zip(got, (want[0], want[1].t(), want[2].t(), *want[3:])):
        assert_close_to_golden(g, w)
    torch.autograd.gradcheck(lambda *a: na.npu_lstm_cell(*a)[:3],
                             [t.detach().requires_grad_() for t in leaves], fast_mode=True)


def test_backward_op_returns_the_bias_gradient_twice_and_bad_inputs():
    gen = torch.Generator().manual_seed(3)
    x, w_ih, w_hh, h, c = (torch.randn(*s, generator=gen) for s in
                           ((B, I), (I, 4 * H), (H, 4 * H), (B, H), (B, H)))
    outs = na.npu_lstm_cell(x, w_ih, w_hh, h, c)
    grads = na.npu_lstm_cell_backward(torch.ones_like(outs[0]), None, None, x, w_ih, w_hh, h,
                                      c, *outs)
    assert len(grads) == 7 and torch.equal(grads[3], grads[4]) and grads[3].shape == (4 * H,)
    with pytest.raises(RuntimeError, match="expected w_ih the shape"):
        torch.ops.npu.npu_lstm_cell(x, w_ih[:-1], w_hh, h, c)
    with pytest.raises(ValueError, match="expected b_ih and b_hh both given or both None"):
        na.npu_lstm_cell(x, w_ih, w_hh, h, c, torch.zeros(4 * H))


def test_torch_layout_weights_give_the_same_numbers_and_grads_in_their_layout():
    gen = torch.Generator().manual_seed(4)
    x, w_ih, w_hh, h, c = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
                           ((B, I), (I, 4 * H), (H, 4 * H), (B, H), (B, H)))
    npu = na.npu_lstm_cell(x, w_ih, w_hh, h, c)
    torch_layout = na.npu_lstm_cell(x, w_ih.t().contiguous(), w_hh.t().contiguous(), h, c)
    for a, b in zip(npu, torch_layout):          # the same numbers, up to matmul order
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    gy = torch.ones(1, B, H, dtype=torch.float64)
    g_npu = na.npu_lstm_cell_backward(gy, None, None, x, w_ih, w_hh, h, c, *npu)
    g_torch = na.npu_lstm_cell_backward(gy, None, None, x, w_ih.t(), w_hh.t(), h, c, *npu)
    assert g_torch[1].shape == (4 * H, I) and g_torch[2].shape == (4 * H, H)
    torch.testing.assert_close(g_torch[1], g_npu[1].t(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g_torch[2], g_npu[2].t(), rtol=1e-12, atol=1e-12)
