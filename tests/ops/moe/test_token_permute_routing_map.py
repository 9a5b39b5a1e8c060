"""npu_moe_token_permute_with_routing_map (+ its backward op) against Megatron's ``permute`` with
a routing map (Megatron-LM moe_utils.permute, which op-plugin's golden test copies), written
here as Python loops; the NPU's third output differs from Megatron's: without drop_and_pad it is
the stable argsort of Megatron's token ids."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na

OP = "npu_moe_token_permute_with_routing_map"


def routing_map(t, e, k, dtype=torch.bool, seed=0):
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.rand(t, e, generator=gen).topk(k, dim=1).indices
    return torch.zeros(t, e, dtype=torch.bool).scatter(1, chosen, True).to(dtype)


def data(t=7, h=5, e=4, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randn(t, h, generator=gen, dtype=torch.float64).to(dtype)
    probs = torch.rand(t, e, generator=gen, dtype=torch.float64).to(dtype)
    return tokens, probs


def megatron_rows(routing_map_, num_out, drop_and_pad):
    """(token of each permuted row, expert of each row), as Megatron's permute orders them."""
    t, e = routing_map_.shape
    m = routing_map_.bool().tolist()
    tokens, experts = [], []
    for ex in range(e):
        routed = [tok for tok in range(t) if m[tok][ex]]
        if drop_and_pad:
            # argsort(descending, stable) of the 0/1 column, first `capacity` entries
            unrouted = [tok for tok in range(t) if not m[tok][ex]]
            routed = (routed + unrouted)[:num_out // e]
        tokens += routed
        experts += [ex] * len(routed)
    return tokens, experts


def golden(tokens, routing_map_, probs, num_out, drop_and_pad):
    rows, experts = megatron_rows(routing_map_, num_out, drop_and_pad)
    permuted = torch.stack([tokens[r] for r in rows]) if rows else tokens[:0]
    permuted_probs = None if probs is None else torch.tensor(
        [float(probs[r, ex]) for r, ex in zip(rows, experts)], dtype=torch.float64)
    if drop_and_pad:
        index = rows
    else:
        index = sorted(range(len(rows)), key=lambda i: (rows[i], i))
    return permuted, permuted_probs, index


def assert_matches_golden(tokens, rmap, probs, num_out, drop_and_pad):
    out, out_probs, index = na.npu_moe_token_permute_with_routing_map(
        tokens, rmap, probs=probs, num_out_tokens=num_out, drop_and_pad=drop_and_pad)
    want, want_probs, want_index = golden(tokens, rmap, probs, num_out, drop_and_pad)
    assert out.dtype == tokens.dtype and torch.equal(out, want)      # copies: bit-exact
    assert index.dtype == torch.int32 and index.tolist() == want_index
    if probs is None:
        assert out_probs.numel() == 0
    else:
        assert out_probs.dtype == probs.dtype
        assert torch.equal(out_probs.double(), want_probs)


def test_doc_example():
    x = torch.randn(3, 4)
    rmap = torch.tensor([[True, True], [True, True], [True, True]])
    out, _, index = na.npu_moe_token_permute_with_routing_map(x, rmap, num_out_tokens=6,
                                                              drop_and_pad=False)
    assert torch.equal(out, x[[0, 1, 2, 0, 1, 2]])
    assert index.tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("map_dtype", [torch.bool, torch.int8])
@pytest.mark.parametrize("drop_and_pad,num_out", [(False, 21), (False, 23), (True, 12),
                                                   (True, 27)])
def test_matches_megatron(dtype, map_dtype, drop_and_pad, num_out):
    # k = 3 of E = 4 experts per token; capacity 3 drops tokens, capacity 6 pads experts.
    tokens, probs = data(dtype=dtype)
    rmap = routing_map(7, 4, 3, map_dtype)
    assert_matches_golden(tokens, rmap, probs, num_out, drop_and_pad)


def test_padding_rows_and_sparse_experts():
    # Expert 2 gets nobody, expert 0 everybody: padding fills expert 2 with tokens 0.. in order.
    rmap = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]], dtype=torch.int8)
    tokens, probs = data(5, 3, 3)
    _, _, index = na.npu_moe_token_permute_with_routing_map(tokens, rmap, probs=probs,
                                                            num_out_tokens=9, drop_and_pad=True)
    assert index.tolist() == [0, 1, 2, 1, 3, 0, 0, 1, 2]
    assert_matches_golden(tokens, rmap, probs, 9, True)
    assert_matches_golden(tokens, rmap, None, 10, True)       # capacity 3 of 10 // 3


def test_num_out_defaults_and_rounding():
    tokens, probs = data()
    one = routing_map(7, 4, 1)
    assert_matches_golden(tokens, one, probs, 7, False)
    out, out_probs, index = na.npu_moe_token_permute_with_routing_map(tokens, one, probs=probs)
    assert out.shape == (7, 5) and out_probs.shape == (7,) and index.shape == (7,)
    # num_out < tokens_num: no rows, and the row counts of the map are not read.
    out, out_probs, index = na.npu_moe_token_permute_with_routing_map(
        tokens, routing_map(7, 4, 2), probs=probs, num_out_tokens=6)
    assert out.shape == (0, 5) and out_probs.shape == (0,) and index.shape == (0,)
    # drop_and_pad rounds num_out down to a multiple of experts_num.
    out, _, _ = na.npu_moe_token_permute_with_routing_map(tokens, one, num_out_tokens=7,
                                                          drop_and_pad=True)
    assert out.shape == (4, 5)


def test_non_contiguous_inputs_untouched():
    tokens, probs = data(h=8)
    tokens_nc = tokens.t().contiguous().t()[:, ::2]                 # strided rows
    rmap = routing_map(7, 4, 2).t().contiguous().t()               # column-major storage
    probs_nc = probs.t().contiguous().t()
    assert not (tokens_nc.is_contiguous() or rmap.is_contiguous() or probs_nc.is_contiguous())
    before = (tokens_nc.clone(), rmap.clone(), probs_nc.clone())
    for drop_and_pad, num_out in ((False, 14), (True, 12)):
        assert_matches_golden(tokens_nc, rmap, probs_nc, num_out, drop_and_pad)
    assert all(torch.equal(a, b) for a, b in zip(before, (tokens_nc, rmap, probs_nc)))


def megatron_permute_autograd(tokens, rmap, probs, num_out, drop_and_pad):
    """Megatron's permute in torch ops (differentiable), for the backward comparison."""
    rows, experts = megatron_rows(rmap, num_out, drop_and_pad)
    rows_t, experts_t = torch.tensor(rows), torch.tensor(experts)
    return tokens.index_select(0, rows_t), probs[rows_t, experts_t]


@pytest.mark.parametrize("drop_and_pad,num_out", [(False, 14), (True, 8), (True, 20)])
def test_backward_matches_autograd_of_megatron(drop_and_pad, num_out):
    tokens, probs = data(dtype=torch.float64)
    rmap = routing_map(7, 4, 2)
    g = torch.randn(num_out // (4 if drop_and_pad else 7) * (4 if drop_and_pad else 7), 5,
                    dtype=torch.float64)
    gp = torch.randn(g.shape[0], dtype=torch.float64)
    t1, p1 = tokens.clone().requires_grad_(), probs.clone().requires_grad_()
    out, out_probs, _ = na.npu_moe_token_permute_with_routing_map(
        t1, rmap, probs=p1, num_out_tokens=num_out, drop_and_pad=drop_and_pad)
    torch.autograd.backward((out, out_probs), (g, gp))
    t2, p2 = tokens.clone().requires_grad_(), probs.clone().requires_grad_()
    want, want_probs = megatron_permute_autograd(t2, rmap, p2, num_out, drop_and_pad)
    torch.autograd.backward((want, want_probs), (g, gp))
    assert torch.allclose(t1.grad, t2.grad, rtol=1e-12, atol=1e-12)
    assert torch.allclose(p1.grad, p2.grad, rtol=0, atol=0)


@pytest.mark.parametrize("drop_and_pad,num_out", [(False, 14), (True, 12)])
def test_gradcheck(drop_and_pad, num_out):
    tokens, probs = data(5, 3, 4, dtype=torch.float64)
    rmap = routing_map(5, 4, 2, torch.int8)

    def f(x, p):
        out, out_probs, _ = na.npu_moe_token_permute_with_routing_map(
            x, rmap, probs=p, num_out_tokens=num_out, drop_and_pad=drop_and_pad)
        return out, out_probs

    assert torch.autograd.gradcheck(f, (tokens.requires_grad_(), probs.requires_grad_()))
    x = data(5, 3, 4, dtype=torch.float64)[0].requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: na.npu_moe_token_permute_with_routing_map(
            x, rmap, num_out_tokens=num_out, drop_and_pad=drop_and_pad)[0], (x,))


def test_grad_op_formula_bf16():
    # tokens_grad sums the K rows of each token in float32 and rounds once.
    g = (torch.randn(6, 4) * 100).to(torch.bfloat16)
    index = torch.tensor([0, 3, 1, 4, 2, 5], dtype=torch.int32)           # K = 2, T = 3
    rmap = torch.ones(3, 2, dtype=torch.bool)
    gp = torch.randn(6).to(torch.bfloat16)
    tokens_grad, probs_grad = na.npu_moe_token_permute_with_routing_map_grad(
        g, gp, index, rmap, 2, 3, False)
    gd = g.double()
    want = torch.stack([gd[0] + gd[3], gd[1] + gd[4], gd[2] + gd[5]]).float().to(torch.bfloat16)
    assert tokens_grad.dtype == torch.bfloat16 and torch.equal(tokens_grad, want)
    # probs are expert-major: row r of expert e holds token r - 3e
    assert torch.equal(probs_grad, torch.stack([gp[:3], gp[3:]], dim=1))
    _, none = na.npu_moe_token_permute_with_routing_map_grad(g, None, index, rmap, 2, 3, False)
    assert none.numel() == 0
    # drop_and_pad: index_add over token ids, probs_grad[token, row // capacity]
    index = torch.tensor([2, 0, 0, 1], dtype=torch.int32)                 # E = 2, C = 2
    tokens_grad, probs_grad = na.npu_moe_token_permute_with_routing_map_grad(
        g[:4], gp[:4], index, rmap, 2, 3, True)
    want = torch.stack([gd[1] + gd[2], gd[3], gd[0]]).float().to(torch.bfloat16)
    assert torch.equal(tokens_grad, want)
    want_p = torch.zeros(3, 2, dtype=torch.bfloat16)
    want_p[2, 0], want_p[0, 0], want_p[0, 1], want_p[1, 1] = gp[0], gp[1], gp[2], gp[3]
    assert torch.equal(probs_grad, want_p)


def test_bad_inputs():
    tokens, probs = data()
    rmap = routing_map(7, 4, 2)
    fn = na.npu_moe_token_permute_with_routing_map
    with pytest.raises(ValueError, match=f"{OP}: expected routing_map num_out_tokens // "
                                         "tokens_num = 3 ones in every row"):
        fn(tokens, rmap, num_out_tokens=21)
    with pytest.raises(ValueError, match=f"{OP}: expected routing_map values 0 or 1"):
        fn(tokens, rmap.to(torch.int8) * 2, num_out_tokens=14)
    with pytest.raises(RuntimeError, match=f"{OP}: expected probs routing_map's shape"):
        fn(tokens, rmap, probs=probs[:, :3], num_out_tokens=14)
    with pytest.raises(ValueError, match=f"{OP}: expected num_out_tokens in"):
        fn(tokens, rmap, num_out_tokens=-1)
    with pytest.raises(ValueError, match=f"{OP}: expected routing_map at least one token"):
        fn(tokens[:0], rmap[:0])
    with pytest.raises(ValueError, match=f"{OP}: expected num_out_tokens num_out_tokens // "
                                         "tokens_num <= 512"):
        fn(tokens[:1], torch.ones(1, 600, dtype=torch.bool), num_out_tokens=513)
    with pytest.raises(ValueError, match=f"{OP}: expected tokens a 2-D tensor"):
        fn(tokens[0], rmap)
    with pytest.raises(TypeError, match=f"{OP}: expected tokens dtype in"):
        fn(tokens.to(torch.int32), rmap, num_out_tokens=14)
    grad = na.npu_moe_token_permute_with_routing_map_grad
    with pytest.raises(IndexError, match="_grad: expected sorted_indices row indices in"):
        grad(torch.randn(14, 5), None, torch.full((14,), 14, dtype=torch.int32), rmap, 4, 7,
             False)
    with pytest.raises(RuntimeError, match="_grad: expected permuted_token_out_grad a row "
                                           "count divisible by experts_num"):
        grad(torch.randn(14, 5), None, torch.zeros(14, dtype=torch.int32), rmap, 4, 7, True)


def test_strict_mode():
    tokens, probs = data(dtype=torch.bfloat16)
    rmap = routing_map(7, 4, 1)
    for product in ("A2", "A3"):
        with na.strict(product):
            na.npu_moe_token_permute_with_routing_map(tokens, rmap, probs=probs)
    with na.strict("310P"), pytest.raises(RuntimeError, match=f"{OP}: expected a product"):
        na.npu_moe_token_permute_with_routing_map(tokens, rmap)
    with na.strict("A2"), pytest.raises(TypeError, match=f"{OP}: expected tokens dtype in"):
        na.npu_moe_token_permute_with_routing_map(tokens.double(), rmap)
