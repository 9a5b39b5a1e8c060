"""npu_lstm / npu_lstm_backward (DynamicRNN) against float64 goldens and torch.nn.LSTM.

Golden: the LSTM cell equations of the seed doc in float64, the NPU's weight packing
``[input_size + hidden_size, 4H]`` with gate columns i, f, j(g), o (op-plugin
LstmKernelNpu.cpp, ``gate_order="ifjo"``), the sequence mask blended as the DynamicRNN kernel
does (c and h keep their previous value, y is 0 at masked steps), REDIRECTIONAL walking time
from the end.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

T, B, I, H = 4, 3, 5, 6
FLAGS = (True, 1, 0.0, True, False, False)


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def golden(x, w, b, h0, c0, mask=None, reverse=False):
    """Per step in float64: returns y, h, c, i, j, f, o, tanhc as [T, B, H]."""
    x, w, b = x.double(), w.double(), b.double()
    h, c = h0.double().reshape(B, H), c0.double().reshape(B, H)
    feat = x.shape[-1]
    outs = [[None] * T for _ in range(8)]
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        z = x[t] @ w[:feat] + h @ w[feat:] + b
        i, f, j, o = sig(z[:, :H]), sig(z[:, H:2 * H]), torch.tanh(z[:, 2 * H:3 * H]), \
            sig(z[:, 3 * H:])
        c_new = f * c + i * j
        m = torch.ones(B, H, dtype=torch.float64) if mask is None else mask[t].double()
        c = m * c_new + (1 - m) * c
        h_new = o * torch.tanh(c)
        y = m * h_new
        h = y + (1 - m) * h
        for k, v in enumerate((y, h, c, i, j, f, o, torch.tanh(c))):
            outs[k][t] = v
    return [torch.stack(v) for v in outs]


def make(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=gen, dtype=torch.float64) * 0.6).to(dtype)  # noqa
    return r(T, B, I), r(I + H, 4 * H), r(4 * H), r(1, B, H), r(1, B, H)


LENGTHS = torch.tensor([4, 2, 1], dtype=torch.int32)


def length_mask():
    return (torch.arange(T)[:, None] < LENGTHS[None, :]).double()[..., None].expand(T, B, H)


@pytest.mark.parametrize("dtype,mode", [(torch.float32, "plain"), (torch.float16, "lengths"),
                                        (torch.float32, "float_mask_reverse")])
def test_forward_against_golden(dtype, mode):
    x, w, b, h0, c0 = make(dtype)
    reverse = mode.endswith("reverse")
    if mode == "plain":
        seq, want = torch.empty(0), golden(x, w, b, h0, c0)
    else:
        mask = length_mask()
        seq = LENGTHS if mode == "lengths" else mask.to(dtype).contiguous()
        want = golden(x, w, b, h0, c0, mask, reverse)
    out = na.npu_lstm(x, w, b, seq, h0, c0, *FLAGS, mode != "plain", reverse)
    assert len(out) == 8
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    for got, exp in zip(out, want):
        assert got.shape == (T, B, H) and got.dtype == dtype
        assert_close_to_golden(got, exp, rtol=tol, atol=tol)
    if mode == "lengths":          # finished sequences output 0 and keep their state
        assert torch.all(out[0][2:, 1] == 0) and torch.equal(out[1][3, 2], out[1][0, 2])


def torch_lstm_weights(seed=1):
    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(I, H).double()
    w = torch.cat([lstm.weight_ih_l0, lstm.weight_hh_l0], 1).t().detach()
    return lstm, w, (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()


def test_agrees_with_torch_lstm_forward_and_autograd():
    lstm, w, b = torch_lstm_weights()
    x, _, _, h0, c0 = make(torch.float64, seed=2)
    leaves = [t.clone().requires_grad_() for t in (x, w, b, h0, c0)]
    # non-contiguous x: a transposed copy viewed back
    xv = leaves[0].transpose(0, 1).contiguous().transpose(0, 1)
    y, h, c, *_ = na.npu_lstm(xv, leaves[1], leaves[2], torch.empty(0), leaves[3], leaves[4],
                              *FLAGS, False, False)
    x2, h2, c2 = (t.clone().requires_grad_() for t in (x, h0, c0))
    y_ref, (h_ref, c_ref) = lstm(x2, (h2, c2))
    assert_close_to_golden(y, y_ref.detach())
    assert_close_to_golden(h[-1], h_ref[0].detach())
    assert_close_to_golden(c[-1], c_ref[0].detach())
    gen = torch.Generator().manual_seed(3)
    gy = torch.randn(T, B, H, generator=gen, dtype=torch.float64)
    loss = (y * gy).sum() + h[-1].sum() * 0.5 + c[-1].sum() * 0.25
    loss_ref = (y_ref * gy).sum() + h_ref.sum() * 0.5 + c_ref.sum() * 0.25
    got = torch.autograd.grad(loss, leaves)
    want = torch.autograd.grad(loss_ref, [x2, lstm.weight_ih_l0, lstm.weight_hh_l0,
                                          lstm.bias_ih_l0, h2, c2])
    assert_close_to_golden(got[0], want[0])
    assert_close_to_golden(got[1], torch.cat([want[1], want[2]], 1).t())
    assert_close_to_golden(got[2], want[3])
    assert_close_to_golden(got[3], want[4])
    assert_close_to_golden(got[4], want[5])


def test_backward_op_reads_only_the_last_step_of_gradh_gradc():
    x, w, b, h0, c0 = make()
    outs = na.npu_lstm(x, w, b, torch.empty(0), h0, c0, *FLAGS, False, False)
    gen = torch.Generator().manual_seed(4)
    gy, gh, gc = (torch.randn(T, B, H, generator=gen) for _ in range(3))
    full = na.npu_lstm_backward(gy, gh, gc, x, w, b, h0, c0, *outs)
    last_only = [torch.zeros_like(g) for g in (gh, gc)]
    for g, src in zip(last_only, (gh, gc)):
        g[-1] = src[-1]
    assert all(torch.equal(a, b) for a, b in zip(
        full, na.npu_lstm_backward(gy, *last_only, x, w, b, h0, c0, *outs)))
    no_grads = na.npu_lstm_backward(None, None, None, x, w, b, h0, c0, *outs)
    assert [t.shape for t in full] == [x.shape, w.shape, b.shape, (1, B, H), (1, B, H)]
    assert all(torch.count_nonzero(t) == 0 for t in no_grads)


def test_gradcheck_masked_reverse():
    small = dict(T=2, B=2, I=2, H=2)
    gen = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_()  # noqa
    t_, b_, i_, h_ = small.values()
    x, w, bias, h0, c0 = r(t_, b_, i_), r(i_ + h_, 4 * h_), r(4 * h_), r(1, b_, h_), r(1, b_, h_)
    mask = torch.ones(t_, b_, h_, dtype=torch.float64)
    mask[1, 1] = 0

    def fn(x, w, bias, h0, c0):
        y, h, c, *_ = torch.ops.npu.npu_lstm(x, w, bias, mask, h0, c0, *FLAGS, True, True)
        return y, h[0], c[0]           # reversed: the final state is at index 0

    torch.autograd.gradcheck(fn, (x, w, bias, h0, c0), fast_mode=True)


def test_aliases_and_two_d_states():
    x, w, b, h0, c0 = make()
    ref = na.npu_lstm(x, w, b, torch.empty(0), h0, c0, *FLAGS, False, False)
    alias = na.npu_lstm(x=x, weight=w, bias=b, seqMask=torch.empty(0), h=h0[0], c=c0[0])
    assert all(torch.equal(a, b) for a, b in zip(ref, alias))


@pytest.mark.parametrize("index,value,match", [
    (1, torch.zeros(I + H + 1, 4 * H), "expected weight the shape"),
    (2, torch.zeros(4 * H).half(), "expected bias the same dtype"),
    (5, torch.zeros(2, B, H), "expected c the shape"),
    (3, torch.zeros(B + 1, dtype=torch.int32), "expected seq_mask the shape"),
])
def test_bad_inputs_raise_and_leave_inputs_untouched(index, value, match):
    args = list(make()) + [torch.empty(0)]
    args = [args[0], args[1], args[2], LENGTHS, args[3], args[4]]
    args[index] = value
    before = [a.clone() for a in args]
    with pytest.raises(RuntimeError, match=match):
        torch.ops.npu.npu_lstm(*args, *FLAGS, True, False)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    with na.strict("950"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_lstm(*make()[:3], torch.empty(0), *make()[3:], *FLAGS, False, False)
