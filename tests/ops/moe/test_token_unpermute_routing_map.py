"""npu_moe_token_unpermute_with_routing_map (+ its four-output twin and backward op) against
Megatron's ``unpermute`` (Megatron-LM moe_utils, which op-plugin's golden test follows) written
here with Python loops in float64, and against the kernel's own steps (float32 products, k-order
sums, one rounding) for bit-exact checks.  The index inputs are built as op-plugin's golden
builds them, not by our permute op (the round trip has a test of its own)."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from torch._subclasses.fake_tensor import FakeTensorMode

OP = "npu_moe_token_unpermute_with_routing_map"


def routing_map(t, e, k, dtype=torch.bool, seed=0):
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.rand(t, e, generator=gen).topk(k, dim=1).indices
    return torch.zeros(t, e, dtype=torch.bool).scatter(1, chosen, True).to(dtype)


def megatron_rows(rmap, capacity=None):
    """(token, expert) of each permuted row, expert-major, as Megatron's permute lays them out;
    with a capacity: each expert's routed tokens, then its unrouted ones, cut at capacity."""
    t, e = rmap.shape
    m = rmap.bool().tolist()
    rows = []
    for ex in range(e):
        routed = [tok for tok in range(t) if m[tok][ex]]
        if capacity is not None:
            routed = (routed + [tok for tok in range(t) if not m[tok][ex]])[:capacity]
        rows += [(tok, ex) for tok in routed]
    return rows


def npu_sorted_indices(rows, drop_and_pad):
    """The NPU's index: the token of each row (padding) or the argsort of the row tokens."""
    tokens = [tok for tok, _ in rows]
    if drop_and_pad:
        return torch.tensor(tokens, dtype=torch.int32)
    return torch.tensor(sorted(range(len(rows)), key=lambda i: (tokens[i], i)), dtype=torch.int32)


def megatron_unpermute(permuted, rows, t, probs):
    """Megatron: out = zeros.scatter_add(0, row tokens, permuted * permuted_probs), float64."""
    out = torch.zeros(t, permuted.shape[1], dtype=torch.float64)
    for r, (tok, ex) in enumerate(rows):
        weight = 1.0 if probs is None else float(probs[tok, ex])
        out[tok] += permuted[r].double() * weight
    return out


def kernel_steps(permuted, rows, t, probs):
    """The kernel's arithmetic: float32 rows times float32 weights, added per token in the
    order of its slots (expert ascending = row order), one rounding at the end."""
    out = [None] * t
    for r, (tok, ex) in enumerate(rows):
        term = permuted[r].float()
        if probs is not None:
            term = term * probs[tok, ex].float()
        out[tok] = term if out[tok] is None else out[tok] + term
    zero = torch.zeros(permuted.shape[1])
    return torch.stack([zero if o is None else o for o in out]).to(permuted.dtype)


def case(t=6, e=5, k=2, h=7, dtype=torch.float32, probs_dtype=None, map_dtype=torch.bool,
         drop_and_pad=False, capacity=3, seed=1):
    rmap = routing_map(t, e, k, map_dtype, seed)
    rows = megatron_rows(rmap, capacity if drop_and_pad else None)
    gen = torch.Generator().manual_seed(seed)
    permuted = torch.randn(len(rows), h, generator=gen, dtype=torch.float64).to(dtype)
    probs = torch.rand(t, e, generator=gen, dtype=torch.float64).to(probs_dtype or dtype)
    return dict(permuted=permuted, rmap=rmap, probs=probs, rows=rows, t=t, h=h,
                sorted_indices=npu_sorted_indices(rows, drop_and_pad), drop_and_pad=drop_and_pad)


def call(c, probs=True, fn=None):
    fn = fn or na.npu_moe_token_unpermute_with_routing_map
    return fn(c["permuted"], c["sorted_indices"], [c["t"], c["h"]],
              probs=c["probs"] if probs else None, routing_map=c["rmap"],
              drop_and_pad=c["drop_and_pad"])


@pytest.mark.parametrize("drop_and_pad", [False, True])
@pytest.mark.parametrize("dtype,probs_dtype", [(torch.bfloat16, None), (torch.float16, None),
                                               (torch.float32, None),
                                               (torch.bfloat16, torch.float32)])
def test_matches_megatron_and_kernel_steps(drop_and_pad, dtype, probs_dtype):
    c = case(dtype=dtype, probs_dtype=probs_dtype, drop_and_pad=drop_and_pad,
             map_dtype=torch.int8 if dtype == torch.float16 else torch.bool)
    for with_probs in (True, False):
        probs = c["probs"] if with_probs else None
        out = call(c, with_probs)
        assert out.dtype == dtype and out.shape == (c["t"], c["h"])
        assert torch.equal(out, kernel_steps(c["permuted"], c["rows"], c["t"], probs))
        want = megatron_unpermute(c["permuted"], c["rows"], c["t"], probs)
        tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)


def test_padding_rows_count_and_unreached_tokens_are_zero():
    # capacity 4 > routed count for some experts: padding rows (unrouted tokens) are added too,
    # weighted by their probs, as Megatron's scatter_add does; token 5 may get nothing.
    c = case(t=6, e=3, k=1, drop_and_pad=True, capacity=2)
    out = call(c)
    want = megatron_unpermute(c["permuted"], c["rows"], c["t"], c["probs"])
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    reached = {tok for tok, _ in c["rows"]}
    for tok in set(range(6)) - reached:
        assert torch.equal(out[tok], torch.zeros(c["h"]))


def test_unused_slots_add_nothing():
    # The newer aclnn doc: without padding, -1 marks an unused slot; a row with fewer ones
    # than topK leaves its last slots unused (weight 0).
    rmap = torch.tensor([[1, 1, 0], [0, 1, 0], [1, 0, 1]], dtype=torch.int8)
    permuted = torch.arange(6 * 2, dtype=torch.float32).view(6, 2) + 1
    probs = torch.tensor([[0.5, 0.25, 9.0], [9.0, 2.0, 9.0], [4.0, 9.0, 0.125]])
    index = torch.tensor([0, 3, 1, -1, 2, 4], dtype=torch.int32)
    out = na.npu_moe_token_unpermute_with_routing_map(permuted, index, [3, 2], probs=probs,
                                                      routing_map=rmap)
    want = torch.stack([0.5 * permuted[0] + 0.25 * permuted[3], 2.0 * permuted[1],
                        4.0 * permuted[2] + 0.125 * permuted[4]])
    assert torch.equal(out, want)
    plain = na.npu_moe_token_unpermute_with_routing_map(permuted, index, [3, 2])
    assert torch.equal(plain[1], permuted[1])


@pytest.mark.parametrize("drop_and_pad,num_out", [(False, 12), (True, 10)])
def test_round_trip_with_permute(drop_and_pad, num_out):
    t, e, k, h = 6, 5, 2, 4
    rmap = routing_map(t, e, k)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randn(t, h, generator=gen, dtype=torch.float64)
    probs = torch.rand(t, e, generator=gen, dtype=torch.float64)
    permuted, _, index = na.npu_moe_token_permute_with_routing_map(
        tokens, rmap, probs=probs, num_out_tokens=num_out, drop_and_pad=drop_and_pad)
    out = na.npu_moe_token_unpermute_with_routing_map(
        permuted, index, [t, h], probs=probs, routing_map=rmap, drop_and_pad=drop_and_pad)
    if drop_and_pad:
        rows = megatron_rows(rmap, num_out // e)
        weight = torch.zeros(t, dtype=torch.float64)
        for tok, ex in rows:
            weight[tok] += probs[tok, ex]
    else:
        weight = (probs * rmap).sum(dim=1)
    torch.testing.assert_close(out, tokens * weight.unsqueeze(-1), rtol=1e-12, atol=1e-12)


def test_non_contiguous_inputs():
    c = case(t=5, e=4, k=2, h=6)
    wide = torch.randn(c["permuted"].shape[0], 12)
    wide[:, ::2] = c["permuted"]
    probs_t = c["probs"].t().contiguous().t()
    index = torch.stack([c["sorted_indices"], c["sorted_indices"]], dim=1)[:, 0]
    out = na.npu_moe_token_unpermute_with_routing_map(wide[:, ::2], index, [5, 6],
                                                      probs=probs_t, routing_map=c["rmap"])
    assert torch.equal(out, call(c))


@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_full_op_side_outputs(drop_and_pad):
    c = case(drop_and_pad=drop_and_pad, dtype=torch.bfloat16, probs_dtype=torch.float32)
    out, out_index, token_id, permute_probs = call(
        c, fn=torch.ops.npu._npu_moe_token_unpermute_with_routing_map)
    assert torch.equal(out, call(c))
    assert out_index.dtype == token_id.dtype == torch.int32
    assert permute_probs.dtype == torch.float32
    si = c["sorted_indices"].tolist()
    if drop_and_pad:
        order = sorted(range(len(si)), key=lambda i: (si[i], i))        # stable sort
        assert out_index.tolist() == order
        assert token_id.tolist() == [si[i] for i in order]
        want = [float(c["probs"][tok, ex]) for tok, ex in c["rows"]]
    else:
        m = c["rmap"].bool()
        want = c["probs"].masked_select(m).tolist()                  # op-plugin's golden
    assert permute_probs.tolist() == want
    _, _, _, none = call(c, probs=False, fn=torch.ops.npu._npu_moe_token_unpermute_with_routing_map)
    assert none.numel() == 0


def megatron_autograd(c, with_probs):
    permuted = c["permuted"].detach().double().clone().requires_grad_()
    probs = c["probs"].detach().double().clone().requires_grad_()
    out = torch.zeros(c["t"], c["h"], dtype=torch.float64)
    for r, (tok, ex) in enumerate(c["rows"]):
        out = out.index_add(0, torch.tensor([tok]),
                            (permuted[r] * (probs[tok, ex] if with_probs else 1)).unsqueeze(0))
    return permuted, probs, out


@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_backward_matches_autograd_of_megatron(drop_and_pad):
    c = case(t=5, e=4, k=2, h=3, dtype=torch.float64, drop_and_pad=drop_and_pad, capacity=3)
    g = torch.randn(5, 3, dtype=torch.float64)
    for with_probs in (True, False):
        permuted, probs, want = megatron_autograd(c, with_probs)
        want.backward(g)
        p = c["permuted"].clone().requires_grad_()
        q = c["probs"].clone().requires_grad_()
        out = na.npu_moe_token_unpermute_with_routing_map(
            p, c["sorted_indices"], [5, 3], probs=q if with_probs else None,
            routing_map=c["rmap"], drop_and_pad=drop_and_pad)
        out.backward(g)
        torch.testing.assert_close(p.grad, permuted.grad, rtol=1e-12, atol=1e-12)
        if with_probs:
            torch.testing.assert_close(q.grad, probs.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("drop_and_pad", [False, True])
def test_gradcheck(drop_and_pad):
    c = case(t=4, e=3, k=2, h=3, dtype=torch.float64, drop_and_pad=drop_and_pad, capacity=3)
    for fn in (na.npu_moe_token_unpermute_with_routing_map,
               lambda *a, **kw: torch.ops.npu._npu_moe_token_unpermute_with_routing_map(
                   *a, **kw)[0]):
        torch.autograd.gradcheck(
            lambda p, q: fn(p, c["sorted_indices"], [4, 3], probs=q, routing_map=c["rmap"],
                            drop_and_pad=drop_and_pad),
            (c["permuted"].clone().requires_grad_(), c["probs"].clone().requires_grad_()))


def test_grad_op_formula_bf16():
    # Padded layout, called directly with the stable sort of sorted_indices, as
    # derivatives.yaml does: d permuted[row] = prob * g[token], rounded once to bfloat16.
    c = case(t=5, e=3, k=1, h=4, dtype=torch.bfloat16, drop_and_pad=True, capacity=2)
    g = torch.randn(5, 4, dtype=torch.float64).to(torch.bfloat16)
    token_id, out_index = torch.sort(c["sorted_indices"], stable=True)
    d_perm, d_probs = na.npu_moe_token_unpermute_with_routing_map_grad(
        g, out_index.to(torch.int32), token_id.to(torch.int32), c["rmap"], c["permuted"],
        c["probs"], True, [5, 4])
    assert d_perm.dtype == d_probs.dtype == torch.bfloat16 and d_probs.shape == (5, 3)
    want_probs = torch.zeros(5, 3, dtype=torch.float64)
    for r, (tok, ex) in enumerate(c["rows"]):
        want = (g[tok].float() * c["probs"][tok, ex].float()).to(torch.bfloat16)
        assert torch.equal(d_perm[r], want)
        want_probs[tok, ex] += (g[tok].double() * c["permuted"][r].double()).sum()
    torch.testing.assert_close(d_probs.double(), want_probs, rtol=1e-2, atol=1e-2)
    plain, empty = na.npu_moe_token_unpermute_with_routing_map_grad(
        g, out_index.to(torch.int32), token_id.to(torch.int32), None, None, None, True, [5, 4])
    assert empty.numel() == 0
    for r, (tok, _) in enumerate(c["rows"]):
        assert torch.equal(plain[r], g[tok])


def test_bad_inputs():
    c = case()
    p, si, rmap, probs = c["permuted"], c["sorted_indices"], c["rmap"], c["probs"]
    fn = na.npu_moe_token_unpermute_with_routing_map
    with pytest.raises(ValueError, match=f"{OP}: expected restore_shape \\[tokens_num >= 1, "
                                         "hidden"):
        fn(p, si, [6, 3])
    with pytest.raises(RuntimeError, match=f"{OP}: expected permuted_tokens sorted_indices"):
        fn(p[:5], si, [6, 7])
    with pytest.raises(TypeError, match=f"{OP}: expected sorted_indices dtype in"):
        fn(p, si.long(), [6, 7])
    with pytest.raises(ValueError, match=f"{OP}: expected routing_map a tensor when probs"):
        fn(p, si, [6, 7], probs=probs)
    with pytest.raises(RuntimeError, match=f"{OP}: expected probs routing_map's shape"):
        fn(p, si, [6, 7], probs=probs[:, :4], routing_map=rmap)
    with pytest.raises(TypeError, match=f"{OP}: expected probs permuted_tokens' dtype"):
        fn(p, si, [6, 7], probs=probs.half(), routing_map=rmap)
    with pytest.raises(RuntimeError, match=f"{OP}: expected routing_map shape \\(tokens_num"):
        fn(p, si, [6, 7], probs=probs[:5], routing_map=rmap[:5])
    with pytest.raises(RuntimeError, match=f"{OP}: expected sorted_indices a length divisible "
                                           "by tokens_num"):
        fn(p[:11], si[:11], [6, 7])
    with pytest.raises(ValueError, match=f"{OP}: expected sorted_indices topK = length // "
                                         "tokens_num <= experts_num"):
        fn(torch.randn(12, 7), torch.zeros(12, dtype=torch.int32), [2, 7],
           probs=torch.rand(2, 5), routing_map=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(RuntimeError, match=f"{OP}: expected sorted_indices a length divisible "
                                           "by experts_num"):
        fn(p[:11], si[:11], [6, 7], probs=probs, routing_map=rmap, drop_and_pad=True)
    with pytest.raises(IndexError, match=f"{OP}: expected sorted_indices values in \\[-1, 11\\]"):
        fn(p, torch.full_like(si, 12), [6, 7])
    with pytest.raises(IndexError, match=f"{OP}: expected sorted_indices values in \\[0, 5\\]"):
        fn(p[:10], torch.full((10,), 6, dtype=torch.int32), [6, 7], probs=probs,
           routing_map=rmap, drop_and_pad=True)
    with pytest.raises(ValueError, match=f"{OP}: expected routing_map values 0 or 1"):
        fn(p, si, [6, 7], probs=probs, routing_map=rmap.to(torch.int8) * 2)
    grad = na.npu_moe_token_unpermute_with_routing_map_grad
    with pytest.raises(ValueError, match=f"{OP}_grad: expected permuted_tokens a tensor when"):
        grad(torch.randn(6, 7), si, si, rmap, None, probs, False, [6, 7])
    with pytest.raises(RuntimeError, match=f"{OP}_grad: expected permuted_token_id out_index"):
        grad(torch.randn(6, 7), si, si[:4], None, None, None, False, [6, 7])
    with pytest.raises(ValueError, match=f"{OP}_grad: expected out_index capacity"):
        idx = torch.zeros(15, dtype=torch.int32)
        grad(torch.randn(2, 7), idx, idx, rmap[:2], torch.randn(15, 7), probs[:2], True, [2, 7])


def test_errors_identical_on_every_path():
    c = case()
    args = (c["permuted"][:5], c["sorted_indices"], [6, 7])
    msg = f"{OP}: expected permuted_tokens sorted_indices.size\\(0\\) = 12 rows"
    with pytest.raises(RuntimeError, match=msg):
        na.npu_moe_token_unpermute_with_routing_map(*args)
    with pytest.raises(RuntimeError, match=msg):
        torch.ops.npu.npu_moe_token_unpermute_with_routing_map(*args)
    with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=msg):
        torch.ops.npu.npu_moe_token_unpermute_with_routing_map(
            *(mode.from_tensor(a) for a in args[:2]), [6, 7])


def test_strict_mode():
    c = case(dtype=torch.bfloat16)
    for product in ("A2", "A3"):
        with na.strict(product):
            call(c)
    with na.strict("310P"), pytest.raises(RuntimeError, match=f"{OP}: expected a product"):
        call(c)
    c64 = case(dtype=torch.float64)
    with na.strict("A2"), pytest.raises(TypeError,
                                        match=f"{OP}: expected permuted_tokens dtype in"):
        call(c64)


@pytest.mark.slow       # compiles: seconds of Inductor
def test_compiled_provider_matches_reference():
    from npu_anywhere.kernels import compiled as compiled_kernels
    from npu_anywhere.ops.moe import token_unpermute_routing_map as module

    c = case(t=9, e=6, k=3, h=40, dtype=torch.bfloat16)
    with na.use_providers("reference"):
        ref = call(c)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        out = call(c)
        with pytest.raises(IndexError, match=f"{OP}: expected sorted_indices values in"):
            na.npu_moe_token_unpermute_with_routing_map(
                c["permuted"], torch.full_like(c["sorted_indices"], 99), [9, 40],
                probs=c["probs"], routing_map=c["rmap"])
    provider = module._compiled_unpermute
    assert provider._disabled is None, provider._disabled
    assert provider._compiled
    assert torch.equal(out, kernel_steps(c["permuted"], c["rows"], 9, c["probs"]))
    assert torch.equal(out, ref)
