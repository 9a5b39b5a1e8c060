"""npu_cross_entropy_loss and its backward against float64 goldens written from the docs.

Golden: aclnnCrossEntropyLoss.md's formula with the kernel's label smoothing (per-class weighted
smoothing sum, skipped on ignored rows, the mean dividing by the kept weight sum), as op-plugin's
golden (test/test_custom_ops/test_npu_cross_entropy_loss.py) writes it; the z-loss is
``scale * lse ** 2`` per kept row, added to the loss.  Written as per-row Python loops.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def golden(x, target, weight, reduction, ignore_index, ls, scale):
    rows = x.double().tolist()
    n, c = len(rows), len(rows[0])
    w = weight.double().tolist() if weight is not None else [1.0] * c
    losses, zs, lses, log_probs, wsum, kept = [], [], [], [], 0.0, 0
    for r, t in zip(rows, target.tolist()):
        m = max(r)
        lse = m + math.log(sum(math.exp(v - m) for v in r))
        lp = [v - lse for v in r]
        log_probs.append(lp)
        lses.append(lse)
        if t == ignore_index:
            losses.append(0.0)
            zs.append(0.0)
            continue
        nll = -w[t] * lp[t]
        smooth = -sum(wc * v for wc, v in zip(w, lp))
        losses.append((1 - ls) * nll + ls / c * smooth)
        zs.append(scale * lse * lse)
        wsum += w[t]
        kept += 1
    if reduction == "none":
        loss = [a + (b if scale else 0.0) for a, b in zip(losses, zs)]
        zloss = zs
    elif reduction == "sum":
        zloss = [sum(zs)]
        loss = [sum(losses) + (zloss[0] if scale else 0.0)]
    else:
        zloss = [sum(zs) / kept]
        loss = [sum(losses) / wsum + (zloss[0] if scale else 0.0)]
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return f64(loss), f64(log_probs), f64(zloss), f64(lses)


CASES = [  # reduction, weight, ignore_index, label_smoothing, zloss scale
    ("mean", False, -100, 0.0, 0.0),
    ("mean", True, 2, 0.25, 0.1),
    ("sum", True, -100, 0.1, 0.0),
    ("none", False, 4, 0.3, 0.2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction,use_weight,ignore_index,ls,scale", CASES)
def test_forward_against_golden(dtype, reduction, use_weight, ignore_index, ls, scale):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(7, 13, generator=gen) * 3).to(dtype)
    target = torch.tensor([2, 0, 12, 4, 2, 7, 4])
    weight = torch.rand(13, generator=gen) * 0.9 + 0.1 if use_weight else None
    x_before = x.clone()
    loss, log_prob, zloss, lse = na.npu_cross_entropy_loss(
        x, target, weight, reduction, ignore_index, ls, scale, True)
    g_loss, g_lp, g_z, g_lse = golden(x, target, weight, reduction, ignore_index, ls, scale)
    assert loss.dtype == log_prob.dtype == zloss.dtype == lse.dtype == dtype
    assert loss.shape == ((7,) if reduction == "none" else (1,)) == zloss.shape
    assert_close_to_golden(loss, g_loss, rtol=4e-3 if dtype != torch.float32 else 1e-5)
    assert_close_to_golden(log_prob, g_lp, atol=1e-5 if dtype == torch.float32 else 2e-2)
    assert_close_to_golden(zloss, g_z, rtol=1e-5 if dtype == torch.float32 else 1e-2)
    if scale:
        assert_close_to_golden(lse, g_lse)
    else:
        assert lse.shape == (0,)
    assert torch.equal(x, x_before)


def test_empty_optional_outputs_and_non_contiguous_input():
    base = torch.randn(13, 6, dtype=torch.float64)
    x = base.t()                                   # (6, 13), non-contiguous
    target = torch.tensor([0, 5, 12, 3, 3, 9])
    loss, log_prob, zloss, lse = na.npu_cross_entropy_loss(x, target)
    assert zloss.shape == (0,) and lse.shape == (0,) and loss.shape == (1,)
    g_loss, g_lp, _, _ = golden(x, target, None, "mean", -100, 0.0, 0.0)
    assert_close_to_golden(loss, g_loss)
    assert_close_to_golden(log_prob, g_lp)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_through_backward_op(reduction):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, 3, 5, 3, 0])
    weight = torch.rand(6, generator=gen, dtype=torch.float64) + 0.2

    def f(x):
        loss, _, zloss, _ = na.npu_cross_entropy_loss(x, target, weight, reduction, 3, 0.2,
                                                      0.15, True)
        return loss, zloss

    torch.autograd.gradcheck(f, (x,))


def test_backward_op_against_kernel_golden_fp16():
    # The steps of op-plugin's grad golden (ops-nn cross_entropy_loss_grad/tests/assets/golden.py)
    # in float64, the op in float16: mean reduction, weights, smoothing, one ignored row.
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    log_prob = torch.log_softmax(x, -1).half()
    target = torch.tensor([0, 8, 4, 4, 2, 1])
    weight = torch.rand(9, generator=gen) + 0.1
    grad_loss = torch.tensor([0.7], dtype=torch.float16)
    out = na.npu_cross_entropy_loss_backward(grad_loss, log_prob, target, weight, None, None,
                                             "mean", 4, 0.3)
    p = log_prob.double().exp().tolist()
    w = weight.double().tolist()
    keep = [t != 4 for t in target.tolist()]
    wsum = sum(w[t] for t, k in zip(target.tolist(), keep) if k)
    g = 0.7 / wsum
    want = []
    for n, t in enumerate(target.tolist()):
        if not keep[n]:
            want.append([0.0] * 9)
            continue
        nll = g * 0.7 * w[t]
        s = [g * 0.3 / 9 * wc for wc in w]
        want.append([p[n][c] * nll - (nll if c == t else 0.0) + p[n][c] * sum(s) - s[c]
                     for c in range(9)])
    assert out.dtype == torch.float16 and out.shape == (6, 9)
    assert_close_to_golden(out, torch.tensor(want, dtype=torch.float64), atol=1e-4)


def test_bad_inputs_raise_before_anything_and_match_the_shim():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="expected reduction one of"):
        na.npu_cross_entropy_loss(x, torch.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(RuntimeError, match="expected target the shape"):
        torch.ops.npu.npu_cross_entropy_loss(x, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="expected lse_square_scale_for_zloss in"):
        na.npu_cross_entropy_loss(x, torch.tensor([0, 1, 2]), lse_square_scale_for_zloss=1.0)
