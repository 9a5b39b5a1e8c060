"""Tests for npu_multi_head_attention / its backward against a float64 golden.

Spec: seed 004 "npu_multi_head_attention" and op-plugin's CPU golden
(test/test_base_ops/test_multi_head_attention.py): npu_linear projections (x @ W^T + b), q
scaled by D ** -0.5, scores + attn_mask, float32 softmax, dropout (keep = 1 - dropout_prob),
context permuted to (B * T, E), output projection.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

B, N, D, S, T = 2, 16, 16, 16, 32
E = N * D


def make(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).mul(0.2).to(dtype)


def inputs(dtype, bias=True):
    t = [make((B * T, E), dtype, 0), make((B * S, E), dtype, 1), make((B * S, E), dtype, 2)]
    w = [make((E, E), dtype, 3 + i) for i in range(4)]
    mask = make((B, N, T, S), dtype, 7)
    biases = [make((E,), dtype, 8 + i) if bias else None for i in range(4)]
    return t, w, mask, biases


def call(t, w, mask, biases, prob=0.0, use_float=True):
    return na.npu_multi_head_attention(t[0], t[1], t[2], w[0], w[1], w[2], mask, w[3], *biases,
                                       None, N, D, S, T, prob, use_float)


def golden(t, w, mask, biases, keep=None, prob=0.0):
    def lin(x, wt, bias):
        y = x.double() @ wt.double().T
        return y if bias is None else y + bias.double()

    def heads(x, rows):
        return x.reshape(B, rows, N, D).permute(0, 2, 1, 3)

    q = heads(lin(t[0], w[0], biases[0]) * D ** -0.5, T)
    k, v = heads(lin(t[1], w[1], biases[1]), S), heads(lin(t[2], w[2], biases[2]), S)
    p = torch.softmax(q @ k.transpose(-1, -2) + mask.double(), -1)
    a = p if keep is None else p * keep / (1 - prob)
    context = (a @ v).permute(0, 2, 1, 3).reshape(B * T, E)
    return lin(context, w[3], biases[3]), p, context


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("use_float", [True, False])
def test_forward_matches_golden(dtype, bias, use_float):
    t, w, mask, biases = inputs(dtype, bias)
    y, dmask, q_res, k_res, v_res, scores, res, context = call(t, w, mask, biases,
                                                               use_float=use_float)
    want_y, want_p, want_ctx = golden(t, w, mask, biases)
    assert y.shape == context.shape == (B * T, E) and y.dtype == dtype
    assert q_res.shape == (B, N, T, D) and k_res.shape == v_res.shape == (B, N, S, D)
    assert dmask.shape == (B * N * T * S // 8,) and dmask.dtype == torch.uint8
    assert scores.dtype == (torch.float32 if use_float and dtype == torch.float16 else dtype)
    # float16 rounds after each fused step: a few float16 ulps of the output's scale
    tol = {} if dtype == torch.float64 else {"rtol": 2e-2, "atol": 2e-3}
    assert_close_to_golden(scores, want_p, dtype=dtype, **tol)
    assert_close_to_golden(context, want_ctx, dtype=dtype, **tol)
    assert_close_to_golden(y, want_y, dtype=dtype, **tol)


def test_dropout_mask_is_bit_packed_and_applied():
    t, w, mask, biases = inputs(torch.float64)
    y, dmask, *_ , res, _ = call(t, w, mask, biases, prob=0.3)
    bits = ((dmask.to(torch.int32).unsqueeze(1) >> torch.arange(8)) & 1).reshape(B, N, T, S)
    assert abs(bits.double().mean().item() - 0.7) < 0.03
    want_y, _, _ = golden(t, w, mask, biases, keep=bits.double(), prob=0.3)
    assert_close_to_golden(y, want_y, dtype=torch.float64)


def test_gradients_match_golden_autograd_with_dropout():
    t, w, mask, biases = inputs(torch.float64)
    leaves = [x.clone().requires_grad_() for x in t + w + biases]
    lt, lw, lb = leaves[:3], leaves[3:7], leaves[7:]
    out = call(lt, lw, mask, lb, prob=0.2)
    dy = make((B * T, E), torch.float64, 20)
    out[0].backward(dy)
    bits = ((out[1].to(torch.int32).unsqueeze(1) >> torch.arange(8)) & 1).reshape(B, N, T, S)
    gold = [x.clone().requires_grad_() for x in t + w + biases]
    golden(gold[:3], gold[3:7], mask, gold[7:], keep=bits.double(), prob=0.2)[0].backward(dy)
    for got, want in zip(leaves, gold):
        assert got.grad.shape == got.shape
        assert_close_to_golden(got.grad, want.grad, dtype=torch.float64)


def test_gradcheck_small():
    t, w, mask, biases = inputs(torch.float64)
    leaves = [x.requires_grad_() for x in t + w[:1] + biases[:1]]

    def fn(q, k, v, wq, bq):
        return call([q, k, v], [wq] + w[1:], mask, [bq] + biases[1:])[0]

    assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)


@pytest.mark.parametrize("ints,match", [
    ((8, 32, 16, 32), "expected attn_head_num a positive multiple of 16"),
    ((16, 16, 24, 32), "expected src_len a positive multiple of 16"),
])
def test_bad_sizes(ints, match):
    t, w, mask, biases = inputs(torch.float16)
    with pytest.raises(ValueError, match=match):
        na.npu_multi_head_attention(t[0], t[1], t[2], w[0], w[1], w[2], mask, w[3], *biases,
                                    None, *ints, 0.0, True)


def test_bad_tensors_and_strict_mode():
    t, w, mask, biases = inputs(torch.float16)
    with pytest.raises(RuntimeError, match="expected key batch [*] src_len"):
        call([t[0], t[1][:-16], t[2]], w, mask, biases)
    with pytest.raises(RuntimeError, match="expected query_weight the shape"):
        call(t, [w[0][:, :-1]] + w[1:], mask, biases)
    with pytest.raises(RuntimeError, match="expected attn_mask a shape that broadcasts"):
        call(t, w, mask[..., :-1], biases)
    with na.strict("310P"), pytest.raises(Exception, match="npu_multi_head_attention"):
        call(t, w, mask, biases)
