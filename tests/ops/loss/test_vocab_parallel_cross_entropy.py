"""The vocab-parallel cross-entropy pieces against float64 goldens.

Goldens: the documented per-shard formulas written in float64 (mask ``target < start or
target >= end`` as the kernel, bits LSB first), and end to end: the three pieces on two vocab
shards, with the "all-reduce" done by hand (max, then sums rescaled to the global max), must give
plain cross-entropy of the full logits, and the backward must give autograd's gradients of it.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def make(dtype, b=13, h=7, v=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, h, generator=gen).to(dtype)
    w = torch.randn(2 * v, h, generator=gen).to(dtype)       # two shards of v rows
    target = torch.randint(0, 2 * v, (b,), generator=gen)
    return x, w, target


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_online_max_sum_against_golden(dtype):
    x, w, target = make(dtype)
    start, end = 10, 17                                     # a shard narrower than its rows
    shard = w[10:20]
    out = na.npu_fused_linear_online_max_sum(x, shard, target.to(torch.int32), start, end,
                                             return_logits=True)
    logits_max, sum_exp, predicted, mask, masked, logits = out
    full = x.double() @ shard.double().t()
    mx = full.max(-1).values
    outside = [not (start <= t < end) for t in target.tolist()]
    want_masked = [0 if o else t - start for o, t in zip(outside, target.tolist())]
    assert masked.dtype == torch.int32 and masked.tolist() == want_masked
    bits = outside + [True] * 3                             # padding from target 0: 0 < start
    assert mask.tolist() == [sum(int(bits[8 * k + j]) << j for j in range(8)) for k in range(2)]
    assert_close_to_golden(logits_max, mx, rtol=1e-5, atol=1e-5)
    assert_close_to_golden(sum_exp, (full - mx[:, None]).exp().sum(-1), rtol=1e-5, atol=1e-5)
    pred = [0.0 if o else float(full[i, m] - mx[i])
            for i, (o, m) in enumerate(zip(outside, want_masked))]
    assert_close_to_golden(predicted, torch.tensor(pred, dtype=torch.float64), atol=1e-5)
    assert logits.dtype == dtype
    assert_close_to_golden(logits, full, dtype=dtype, atol=1e-2)
    assert na.npu_fused_linear_online_max_sum(x, shard, target, start, end)[5] is None
    raw = torch.ops.npu.npu_fused_linear_online_max_sum(x, shard, target, start, end)
    assert raw[5].shape == (0,)


def _reduced(parts):
    """The all-reduces of Megatron's vocab-parallel cross-entropy, by hand."""
    mx = torch.stack([p[0] for p in parts]).amax(0)
    sum_exp = sum(p[1] * (p[0] - mx).exp() for p in parts)
    predicted = sum(p[2] + torch.where(p[3], 0.0, p[0] - mx) for p in parts)
    return mx, sum_exp, predicted


@pytest.mark.parametrize("recompute", [False, True])
def test_two_shards_give_full_cross_entropy_and_its_gradients(recompute):
    x, w, target = make(torch.float32, seed=1)
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(x64 @ w64.t(), target, reduction="none")
    upstream = torch.randn(x.shape[0], dtype=torch.float64)
    gx, gw = torch.autograd.grad(ref, (x64, w64), upstream)

    shards = [(w[:10], 0, 10), (w[10:], 10, 20)]
    parts, outs = [], []
    for weight, start, end in shards:
        out = na.npu_fused_linear_online_max_sum(x, weight, target, start, end,
                                                 return_logits=True)
        outs.append(out)
        outside = (target < start) | (target >= end)
        # predicted is relative to the local max: shift it to the global max below
        parts.append((out[0], out[1], out[2], outside))
    mx, sum_exp, predicted = _reduced(parts)
    grad_x = torch.zeros_like(x, dtype=torch.float64)
    grad_w = []
    for (weight, _, _), out in zip(shards, outs):
        loss, softmax = na.npu_fused_cross_entropy_loss_with_max_sum(
            mx, sum_exp, predicted, vocab_parallel_logits=out[5])
        assert_close_to_golden(loss, ref.detach(), rtol=1e-5, atol=1e-5)
        kw = (dict(logits_max=mx, sum_exp_logits=sum_exp) if recompute
              else dict(softmax=softmax))
        gi, gwi = na.npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
            upstream.float(), x, weight, out[3], out[4], **kw)
        grad_x += gi.double()
        grad_w.append(gwi.double())
    assert_close_to_golden(grad_x, gx, rtol=1e-4, atol=1e-5)
    assert_close_to_golden(torch.cat(grad_w), gw, rtol=1e-4, atol=1e-5)


def test_loss_only_and_softmax_formula():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    mx = logits.amax(-1) + 0.25
    s = (logits - mx[:, None]).exp().sum(-1) * 2
    pred = logits[:, 1] - mx
    loss, softmax = na.npu_fused_cross_entropy_loss_with_max_sum(mx.float(), s.float(),
                                                                 pred.float())
    assert softmax is None and loss.dtype == torch.float32
    assert_close_to_golden(loss, s.log() - pred, rtol=1e-6, atol=1e-6)
    _, softmax = na.npu_fused_cross_entropy_loss_with_max_sum(
        mx.float(), s.float(), pred.float(), vocab_parallel_logits=logits.half())
    want = (logits.half().double() - mx[:, None]).exp() / s[:, None]
    assert softmax.dtype == torch.float32
    assert_close_to_golden(softmax, want, rtol=1e-5, atol=1e-7)


def test_backward_rounds_the_logit_gradient_to_the_input_dtype():
    x, w, target = make(torch.bfloat16, seed=3)
    gen = torch.Generator().manual_seed(3)
    softmax = torch.softmax(torch.randn(13, 20, generator=gen), -1)
    grad = torch.randn(13, generator=gen)
    mask = torch.tensor([0b00010010, 0b11100000], dtype=torch.uint8)   # rows 1 and 4 outside
    masked = target.to(torch.int32)
    gi, gw = na.npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
        grad, x, w, mask, masked, softmax=softmax)
    p = softmax.double().clone()
    for b in range(13):
        if b not in (1, 4):
            p[b, masked[b]] -= 1.0
    g = (p * grad.double()[:, None]).to(torch.bfloat16).double()
    assert gi.dtype == gw.dtype == torch.bfloat16
    assert_close_to_golden(gi, g @ w.double(), dtype=torch.bfloat16, atol=1e-2)
    assert_close_to_golden(gw, g.t() @ x.double(), dtype=torch.bfloat16, atol=1e-2)


def test_errors_and_no_autograd():
    x, w, target = make(torch.float16)
    with pytest.raises(ValueError, match="expected vocab_end_index <= vocab_start_index"):
        na.npu_fused_linear_online_max_sum(x, w[:10], target, 0, 11)
    with pytest.raises(ValueError, match="expected weight None"):
        na.npu_fused_cross_entropy_loss_with_max_sum(torch.zeros(2), torch.ones(2),
                                                     torch.zeros(2), weight=torch.ones(2))
    with pytest.raises(RuntimeError, match="that do not require grad"):
        na.npu_fused_linear_online_max_sum(x.float().requires_grad_(), w.float(), target, 0, 20)
