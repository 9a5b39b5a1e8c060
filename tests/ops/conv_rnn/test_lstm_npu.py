"""_lstm_npu / _lstm_npu_backward against torch.nn.LSTM (the op backs it on the NPU) and a
float64 golden of the doc's intermediates.

Golden: the seed doc's formulas (1)-(7) per layer and direction in float64, params in
torch.nn.LSTM's ``_flat_weights`` order, intermediates stacked direction first, then layer;
packed input (``batch_sizes``) checked against torch's PackedSequence LSTM.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

T, B, I, H = 3, 3, 4, 5


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def gates_golden(x, w_ih, w_hh, b, h, c):
    """One forward direction of one layer: i, j, f, o, h, c, tanhc per step, float64."""
    outs = [[] for _ in range(7)]
    for t in range(x.shape[0]):
        z = x[t] @ w_ih.t() + h @ w_hh.t() + b
        i, f, j, o = sig(z[:, :H]), sig(z[:, H:2 * H]), torch.tanh(z[:, 2 * H:3 * H]), \
            sig(z[:, 3 * H:])
        c = f * c + i * j
        h = o * torch.tanh(c)
        for k, v in enumerate((i, j, f, o, h, c, torch.tanh(c))):
            outs[k].append(v)
    return [torch.stack(v) for v in outs]


def model(layers=1, bidirectional=False, bias=True, batch_first=False, seed=0):
    torch.manual_seed(seed)
    return torch.nn.LSTM(I, H, num_layers=layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional).double()


def states(cells, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(cells, B, H, generator=gen, dtype=torch.float64) for _ in range(2)]


@pytest.mark.parametrize("layers,bidirectional,bias,batch_first", [
    (2, True, True, True), (2, False, False, False)])
def test_agrees_with_torch_lstm_forward_and_autograd(layers, bidirectional, bias, batch_first):
    lstm = model(layers, bidirectional, bias, batch_first)
    dirs = 2 if bidirectional else 1
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(*((B, T, I) if batch_first else (T, B, I)), generator=gen,
                    dtype=torch.float64)
    hx = states(dirs * layers)
    leaves = [x.clone().requires_grad_(), *(s.clone().requires_grad_() for s in hx),
              *(p.detach().clone().requires_grad_() for p in lstm._flat_weights)]
    out = na._lstm_npu(leaves[0], leaves[1:3], leaves[3:], bias, layers, 0.0, True,
                       bidirectional, batch_first=batch_first)
    assert len(out) == 10
    x2, h2, c2 = (t.clone().requires_grad_() for t in (x, *hx))
    y_ref, (h_ref, c_ref) = lstm(x2, (h2, c2))
    for got, want in zip(out[:3], (y_ref, h_ref, c_ref)):
        assert_close_to_golden(got, want.detach())
    assert out[3].shape == (dirs * layers, T, B, H)
    gy = torch.randn(y_ref.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad((out[0] * gy).sum() + out[1].sum() + out[2].sum() * 0.5, leaves)
    want = torch.autograd.grad((y_ref * gy).sum() + h_ref.sum() + c_ref.sum() * 0.5,
                               [x2, h2, c2, *lstm._flat_weights])
    for g, w in zip(got, want):
        assert_close_to_golden(g, w)


def test_intermediates_against_the_doc_formulas():
    lstm = model(bidirectional=True)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(T, B, I, generator=gen, dtype=torch.float64)
    h0, c0 = states(2)
    p = [t.detach() for t in lstm._flat_weights]
    out = na._lstm_npu(x, [h0, c0], p, True, 1, 0.0, True, True)
    fwd = gates_golden(x, p[0], p[1], p[2] + p[3], h0[0], c0[0])
    bwd = [g.flip(0) for g in gates_golden(x.flip(0), p[4], p[5], p[6] + p[7], h0[1], c0[1])]
    for k in range(7):                       # i, j, f, o, h, c, tanhc
        assert_close_to_golden(out[3 + k][0], fwd[k])
        assert_close_to_golden(out[3 + k][1], bwd[k])   # reverse: stored at its own step
    assert_close_to_golden(out[1][1], bwd[4][0])        # its final state is step 0


def test_packed_batch_sizes_match_packed_sequence():
    lstm = model(bidirectional=True)
    lengths = [3, 2, 1]
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(T, B, I, generator=gen, dtype=torch.float64)
    hx = states(2)
    y_ref, (h_ref, c_ref) = lstm(pack_padded_sequence(x, lengths), tuple(hx))
    y_ref, _ = pad_packed_sequence(y_ref, total_length=T)
    batch_sizes = torch.tensor([3, 2, 1])
    data = x.reshape(T * B, I).clone().requires_grad_()
    out = na._lstm_npu(data, hx, list(lstm._flat_weights), True, 1, 0.0, True, True,
                       batch_sizes=batch_sizes)
    assert out[0].shape == (T, B, 2 * H)
    for got, want in zip(out[:3], (y_ref, h_ref, c_ref)):
        assert_close_to_golden(got, want.detach())
    (dx,) = torch.autograd.grad(out[0].sum() + out[1].sum(), data)
    x2 = x.clone().requires_grad_()
    y2, (h2, _) = lstm(pack_padded_sequence(x2, lengths), tuple(hx))
    (dx_ref,) = torch.autograd.grad(pad_packed_sequence(y2)[0].sum() + h2.sum(), x2)
    assert_close_to_golden(dx, dx_ref.reshape(T * B, I))


def test_inference_outputs_float16_and_empty_hx():
    lstm = model(layers=2)
    x = torch.randn(T, B, I).half()
    params = [p.detach().half() for p in lstm._flat_weights]
    out = na._lstm_npu(x, [], params, True, 2, 0.0, False, False)
    assert [o.numel() for o in (out[3], out[4], out[5], out[6], out[9])] == [0] * 5
    assert out[7].shape == out[8].shape == (2, B, H) and out[0].dtype == torch.float16
    y_ref, (h_ref, _) = lstm(x.double())
    assert_close_to_golden(out[0], y_ref.detach(), rtol=1e-2, atol=1e-2)
    assert_close_to_golden(out[1], h_ref.detach(), rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError, match="expected train True"):
        xg = x.float().requires_grad_()
        res = na._lstm_npu(xg, [], [p.float() for p in params], True, 2, 0.0, False, False)
        res[0].sum().backward()


def test_backward_op_direct_call():
    lstm = model()
    x = torch.randn(T, B, I, dtype=torch.float64)
    hx = states(1)
    p = [t.detach() for t in lstm._flat_weights]
    out = na._lstm_npu(x, hx, p, True, 1, 0.0, True, False)
    gy, gh, gc = torch.ones_like(out[0]), torch.zeros_like(out[1]), torch.zeros_like(out[2])
    dx, dhx, dparams = na._lstm_npu_backward(gy, gh, gc, x, hx, p, *out[3:], True, 1, 0.0,
                                             True, False)
    assert len(dhx) == 2 and [t.shape for t in dparams] == [t.shape for t in p]
    x2 = x.clone().requires_grad_()
    y_ref, _ = lstm(x2, tuple(hx))
    want = torch.autograd.grad(y_ref.sum(), [x2, *lstm._flat_weights])
    assert_close_to_golden(dx, want[0])
    for g, w in zip(dparams, want[1:]):
        assert_close_to_golden(g, w)


@pytest.mark.parametrize("change,error,match", [
    (lambda a: a.__setitem__(2, a[2][:3]), ValueError, "expected params 4 tensors"),
    (lambda a: a.__setitem__(1, [a[1][0]]), ValueError, "expected hx a list of 2"),
    (lambda a: a.__setitem__(0, a[0][0]), ValueError, "expected input a 3-D tensor"),
])
def test_bad_inputs_raise(change, error, match):
    lstm = model()
    args = [torch.randn(T, B, I, dtype=torch.float64), states(1),
            [p.detach() for p in lstm._flat_weights], True, 1, 0.0, True, False]
    change(args)
    with pytest.raises(error, match=match):
        torch.ops.npu._lstm_npu(*args)


def test_gradcheck_bidirectional_packed():
    gen = torch.Generator().manual_seed(6)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_()  # noqa
    h = 2
    x = r(2 * 2, 2)                       # T = 2, B = 2, input_size 2
    params = [r(4 * h, 2), r(4 * h, h), r(4 * h, 2), r(4 * h, h)]   # no biases, D = 2
    h0, c0 = r(2, 2, h), r(2, 2, h)
    batch_sizes = torch.tensor([2, 1])

    def fn(x, h0, c0, *params):
        out = torch.ops.npu._lstm_npu(x, [h0, c0], list(params), False, 1, 0.0, True, True,
                                      batch_sizes=batch_sizes)
        return out[:3]

    torch.autograd.gradcheck(fn, (x, h0, c0, *params), fast_mode=True)


@pytest.mark.parametrize("bidirectional,batch_first,packed,train", [
    (True, True, False, True), (False, False, True, False), (True, False, True, True)])
def test_fake_kernel_matches_eager_metadata(bidirectional, batch_first, packed, train):
    from torch._subclasses.fake_tensor import FakeTensorMode
    lstm = model(layers=2, bidirectional=bidirectional)
    dirs = 2 if bidirectional else 1
    x = torch.randn(*((B, T, I) if batch_first else (T, B, I)), dtype=torch.float64)
    kw = dict(batch_first=batch_first)
    if packed:
        x, kw["batch_sizes"] = x.reshape(T * B, I), torch.tensor([3, 2, 2])
    args = [x, states(dirs * 2), [p.detach() for p in lstm._flat_weights], True, 2, 0.0, train,
            bidirectional]
    eager = na._lstm_npu(*args, **kw)
    calls = [(torch.ops.npu._lstm_npu, args, kw, eager)]
    if train:
        grads = [torch.ones_like(t) for t in eager[:3]]
        back_args = [*grads, *args[:3], *eager[3:], *args[3:]]
        calls.append((torch.ops.npu._lstm_npu_backward, back_args, kw,
                      na._lstm_npu_backward(*back_args, **kw)))
    mode = FakeTensorMode()

    def conv(v):
        if isinstance(v, torch.Tensor):
            return mode.from_tensor(v)
        return [mode.from_tensor(t) for t in v] if isinstance(v, list) else v

    def flat(outputs):
        return [t for v in outputs for t in (v if isinstance(v, (list, tuple)) else [v])]

    for op, a, k, want in calls:
        with mode:
            fake = op(*[conv(v) for v in a], **{n: conv(v) for n, v in k.items()})
        for f, e in zip(flat(fake), flat(want)):
            assert (f.shape, f.dtype, f.stride()) == (e.shape, e.dtype, e.stride())
