"""Tests for npu_fused_attention_score (+ _fwd, _backward) against float64 goldens.

Spec: seed 004 "npu_fused_attention_score" (matmul, add, softmax, dropout, batch matmul and
permute fused; keep_prob is the keep probability) with op-plugin's output shapes::

    P   = softmax(q @ k^T * fp16(scale) + attention_mask)        (B, N, S, S)
    out = (P * drop_mask / keep_prob) @ v  ->  (B, S, N, D)  ->  (B * S, N * D)

The keep-mask is ours (torch's generator): goldens read it from the _fwd op's third output.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

B, N, S, D = 2, 3, 16, 8


def make(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def qkv(dtype, seed=0):
    return tuple(make((B, N, S, D), dtype, seed + i) for i in range(3))


def fp16_scale(scale, dtype):
    return torch.tensor(scale, dtype=torch.float16).item() if dtype == torch.float16 else scale


def golden_probs(q, k, mask, scale):
    z = q.double() @ k.double().transpose(-1, -2) * scale + mask.double()
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def golden_out(probs, v, keep, keep_prob):
    ctx = (probs.double() * keep / keep_prob) @ v.double()
    return ctx.permute(0, 2, 1, 3).reshape(B * S, N * D)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("mask_shape", [(B, N, S, S), (B, 1, 1, S), (S, S)], ids=str)
def test_forward_without_dropout_matches_doc_formula(dtype, mask_shape):
    q, k, v = qkv(dtype)
    mask = (make(mask_shape, torch.float64, 7) > 1).to(dtype) * -10000
    before = [t.clone() for t in (q, k, v, mask)]
    out = na.npu_fused_attention_score(q, k, v, mask, 0.3, 1.0)
    assert out.shape == (B * S, N * D) and out.dtype == dtype
    scale = fp16_scale(0.3, dtype)
    probs = golden_probs(q, k, mask.expand(B, N, S, S), scale)
    if dtype == torch.float16:
        probs = probs.to(dtype)            # the second matmul starts from the rounded softmax
    assert_close_to_golden(out, golden_out(probs, v, 1.0, 1.0), dtype=dtype)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, mask)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
def test_fwd_outputs_and_dropout(dtype):
    q, k, v = qkv(dtype, 3)
    mask = torch.zeros(B, 1, 1, S, dtype=dtype)
    out, probs, drop = na.npu_fused_attention_score_fwd(q, k, v, mask, 0.125, 0.6)
    assert probs.shape == (B, N, S, S) and probs.dtype == dtype
    assert drop.shape == (B * N * S * S,) and drop.dtype == torch.uint8
    assert set(drop.unique().tolist()) <= {0, 1}
    assert abs(drop.double().mean().item() - 0.6) < 0.08    # 1536 draws: ~6 deviations
    assert_close_to_golden(probs, golden_probs(q, k, mask, 0.125), dtype=dtype)
    keep = drop.reshape(B, N, S, S).double()
    assert_close_to_golden(out, golden_out(probs, v, keep, 0.6), dtype=dtype)


def test_dropout_follows_manual_seed():
    q, k, v = qkv(torch.float16, 5)
    mask = torch.zeros(B, N, S, S, dtype=torch.float16)
    torch.manual_seed(3)
    a = na.npu_fused_attention_score(q, k, v, mask, 0.2, 0.5)
    torch.manual_seed(3)
    b = na.npu_fused_attention_score(q, k, v, mask, 0.2, 0.5)
    assert torch.equal(a, b)


def test_backward_op_matches_golden_autograd():
    q, k, v = qkv(torch.float64, 11)
    mask = make((B, 1, S, S), torch.float64, 12)
    gen = torch.Generator().manual_seed(13)
    drop = (torch.rand(B * N * S * S, generator=gen) < 0.8).to(torch.uint8)
    keep = drop.reshape(B, N, S, S).double()
    g = make((B * S, N * D), torch.float64, 14)
    probs = golden_probs(q, k, mask, 0.4)
    dq, dk, dv = na.npu_fused_attention_score_backward(g, probs, q, k, v, drop, 0.4, 0.8)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    golden_out(golden_probs(leaves[0], leaves[1], mask, 0.4), leaves[2], keep, 0.8).backward(g)
    for got, leaf in zip((dq, dk, dv), leaves):
        assert got.shape == (B, N, S, D)
        assert_close_to_golden(got, leaf.grad, dtype=torch.float64)
    assert dq.permute(0, 2, 1, 3).is_contiguous()   # stored (B, S, N, D), as op-plugin returns


def test_backward_float16_against_float64_formula():
    q, k, v = qkv(torch.float16, 21)
    mask = torch.zeros(B, N, S, S, dtype=torch.float16)
    drop = torch.ones(B * N * S * S, dtype=torch.uint8)
    g = make((B * S, N * D), torch.float16, 22)
    probs = golden_probs(q, k, mask, 0.25).to(torch.float16)
    dq, dk, dv = na.npu_fused_attention_score_backward(g, probs, q, k, v, drop, 0.25, 1.0)
    gg = g.double().reshape(B, S, N, D).permute(0, 2, 1, 3)
    p = probs.double()
    want_dv = p.transpose(-1, -2) @ gg
    dp = gg @ v.double().transpose(-1, -2)
    ds = 0.25 * p * (dp - (dp * p).sum(-1, keepdim=True))
    assert_close_to_golden(dv, want_dv, dtype=torch.float16)
    assert_close_to_golden(dq, ds @ k.double(), dtype=torch.float16)
    assert_close_to_golden(dk, ds.transpose(-1, -2) @ q.double(), dtype=torch.float16)


def test_gradcheck_with_dropout():
    leaves = [make((1, 2, 4, 3), torch.float64, i).requires_grad_() for i in range(3)]
    mask = make((1, 1, 4, 4), torch.float64, 9)

    def fn(q, k, v):
        torch.manual_seed(0)                 # one keep-mask for every evaluation
        return na.npu_fused_attention_score(q, k, v, mask, 0.7, 0.75)

    assert torch.autograd.gradcheck(fn, leaves)


def test_attention_mask_gets_no_gradient_and_probs_are_not_differentiable():
    q, k, v = (t.requires_grad_() for t in qkv(torch.float64, 30))
    mask = torch.zeros(B, 1, 1, S, dtype=torch.float64, requires_grad=True)
    out, probs, drop = na.npu_fused_attention_score_fwd(q, k, v, mask, 0.5, 1.0)
    assert not probs.requires_grad and not drop.requires_grad
    out.sum().backward()
    assert mask.grad is None and q.grad is not None


@pytest.mark.parametrize("kw,error,match", [
    ({"query_transpose": True}, NotImplementedError, "expected query_transpose False"),
    ({"bmm_score_transpose_b": True}, NotImplementedError, "expected bmm_score_transpose_b"),
    ({"dx_transpose": True}, NotImplementedError, "expected dx_transpose False"),
    ({"keep_prob": 1.5}, ValueError, "expected keep_prob in"),
    ({"keep_prob": 0.0}, NotImplementedError, "expected keep_prob above 0"),
])
def test_bad_arguments(kw, error, match):
    q, k, v = qkv(torch.float16)
    args = {"scale": 0.1, "keep_prob": 1.0, **kw}
    with pytest.raises(error, match=match):
        na.npu_fused_attention_score(q, k, v, torch.zeros(S, S, dtype=torch.float16), **args)


def test_bad_tensors():
    q, k, v = qkv(torch.float16)
    with pytest.raises(TypeError, match="npu_fused_attention_score: expected query_layer dtype"):
        na.npu_fused_attention_score(q.float(), k.float(), v.float(), torch.zeros(S, S), 0.1, 1.0)
    with pytest.raises(TypeError, match="expected attention_mask dtype in"):
        na.npu_fused_attention_score(q, k, v, torch.zeros(S, S), 0.1, 1.0)
    with pytest.raises(RuntimeError, match="expected value_layer the shape of query_layer"):
        na.npu_fused_attention_score(q, k, v[:, :, :-1], torch.zeros(S, S).half(), 0.1, 1.0)
    with pytest.raises(ValueError, match="expected query_layer a 4-D tensor"):
        na.npu_fused_attention_score(q[0], k[0], v[0], torch.zeros(S, S).half(), 0.1, 1.0)


def test_strict_mode_rules():
    q, k, v = qkv(torch.float16)
    mask = torch.zeros(S, S, dtype=torch.float16)
    with na.strict("910"):
        na.npu_fused_attention_score(q, k, v, mask, 0.1, 1.0)
        with pytest.raises(TypeError, match="expected query_layer dtype in"):
            na.npu_fused_attention_score(q.double(), k.double(), v.double(), mask.double(),
                                         0.1, 1.0)
    with na.strict("A2"), pytest.raises(Exception, match="npu_fused_attention_score"):
        na.npu_fused_attention_score(q, k, v, mask, 0.1, 1.0)


# -- npu_fused_attention_score_grad: the kernel's layout ---------------------------------------

def _kernel_layout(t):
    return t.permute(0, 2, 1, 3).reshape(B * S, N * D)


def test_grad_op_matches_golden_autograd_in_the_kernel_layout():
    """(B * S, N * D) gradients: the golden's (B, N, S, D) gradient permuted to (B, S, N, D)."""
    q, k, v = qkv(torch.float64, 31)
    mask = make((B, 1, S, S), torch.float64, 32)
    drop = (torch.rand(B * N * S * S, generator=torch.Generator().manual_seed(33)) < 0.75)
    drop = drop.to(torch.uint8)
    g = make((B * S, N * D), torch.float64, 34)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    keep = drop.reshape(B, N, S, S).double()
    golden_out(golden_probs(leaves[0], leaves[1], mask, 0.3), leaves[2], keep, 0.75).backward(g)
    before = [t.clone() for t in (g, q, k, v)]
    got = na.npu_fused_attention_score_grad(g, golden_probs(q, k, mask, 0.3), q, k, v, drop,
                                            0.3, 0.75)
    assert all(torch.equal(a, b) for a, b in zip(before, (g, q, k, v)))
    for t, leaf in zip(got, leaves):
        assert t.shape == (B * S, N * D) and t.dtype == torch.float64 and t.is_contiguous()
        assert_close_to_golden(t, _kernel_layout(leaf.grad), dtype=torch.float64)


def test_grad_op_float16_follows_the_given_softmax():
    """The kernel starts from the (rounded) softmax it is given: the doc's backward formula
    in float64 from those values, and the same numbers as _backward in its own layout."""
    q, k, v = qkv(torch.float16, 41)
    mask = make((B, 1, S, S), torch.float16, 42)
    drop = (torch.rand(B * N * S * S, generator=torch.Generator().manual_seed(43)) < 0.75)
    drop = drop.to(torch.uint8)
    g = make((B * S, N * D), torch.float16, 44)
    scale = fp16_scale(0.3, torch.float16)
    probs = golden_probs(q, k, mask, scale).to(torch.float16)
    got = torch.ops.npu.npu_fused_attention_score_grad(g, probs, q, k, v, drop, 0.3, 0.75)
    gg = g.double().reshape(B, S, N, D).permute(0, 2, 1, 3)
    p, keep = probs.double(), drop.reshape(B, N, S, S).double() / 0.75
    dp = (gg @ v.double().transpose(-1, -2)) * keep
    ds = scale * p * (dp - (dp * p).sum(-1, keepdim=True))
    wants = (ds @ k.double(), ds.transpose(-1, -2) @ q.double(), (p * keep).transpose(-1, -2) @ gg)
    for t, want in zip(got, wants):
        assert t.dtype == torch.float16
        assert_close_to_golden(t, _kernel_layout(want), dtype=torch.float16)
    back = torch.ops.npu.npu_fused_attention_score_backward(g, probs, q, k, v, drop, 0.3, 0.75)
    for t, b in zip(got, back):
        assert torch.equal(t, _kernel_layout(b))


def test_grad_op_bad_inputs_name_it():
    q, k, v = qkv(torch.float16)
    probs = torch.zeros(B, N, S, S, dtype=torch.float16)
    drop = torch.ones(B * N * S * S, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="npu_fused_attention_score_grad: expected "
                       "grad_output the shape"):
        na.npu_fused_attention_score_grad(q, probs, q, k, v, drop, 0.3, 1.0)
    with pytest.raises(NotImplementedError, match="npu_fused_attention_score_grad: expected "
                       "dx_transpose False"):
        torch.ops.npu.npu_fused_attention_score_grad(
            torch.zeros(B * S, N * D, dtype=torch.float16), probs, q, k, v, drop, 0.3, 1.0,
            dx_transpose=True)
    with na.strict("A2"), pytest.raises(RuntimeError, match="npu_fused_attention_score_grad"):
        na.npu_fused_attention_score_grad(torch.zeros(B * S, N * D, dtype=torch.float16),
                                          probs, q, k, v, drop, 0.3, 1.0)
