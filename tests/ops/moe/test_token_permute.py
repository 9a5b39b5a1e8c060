"""npu_moe_token_permute / npu_moe_token_unpermute (+ backward) against Megatron's eager formula
(op-plugin test_npu_moe_token_permute_and_unpermute.py): a stable argsort of the flattened
expert ids; the NPU returns the inverse permutation; unpermute is a probs-weighted sum.  The
goldens here are Python loops in float64."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def golden_permute(tokens, indices, num_out):
    flat = indices.reshape(-1).tolist()
    k = 1 if indices.dim() == 1 else indices.shape[1]
    order = sorted(range(len(flat)), key=lambda i: (flat[i], i))
    n = len(flat)
    rows = n if not num_out else (min(num_out, n) if num_out > 0 else n + num_out)
    inv = [0] * n
    for pos, src in enumerate(order):
        inv[src] = pos
    permuted = torch.stack([tokens[order[i] // k] for i in range(rows)])
    return permuted, inv


def golden_unpermute(permuted, inv, probs):
    k = 1 if probs is None else probs.shape[1]
    n = len(inv) // k
    out = torch.zeros(n, permuted.shape[1], dtype=torch.float64)
    for t in range(n):
        for j in range(k):
            r = inv[t * k + j]
            if r < permuted.shape[0]:
                w = 1.0 if probs is None else float(probs[t, j])
                out[t] += w * permuted[r].double()
    return out


def data(n=7, h=6, k=3, experts=4, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randn(n, h, generator=gen, dtype=torch.float64).to(dtype)
    indices = torch.randint(0, experts, (n, k), generator=gen)
    probs = torch.rand(n, k, generator=gen, dtype=torch.float64).to(dtype)
    return tokens, indices, probs


def test_doc_example():
    tokens = torch.tensor([[1, 1, 1], [2, 2, 2], [3, 3, 3], [0, 0, 0]]).to(torch.bfloat16)
    indices = torch.tensor([[0, 4], [4, 3], [4, 2], [1, 1]])
    probs = (torch.ones_like(indices) / 2).to(torch.bfloat16)
    permuted, sorted_indices = na.npu_moe_token_permute(tokens, indices, indices.numel())
    assert sorted_indices.dtype == torch.int32
    assert sorted_indices.tolist() == [0, 5, 6, 4, 7, 3, 1, 2]
    out = na.npu_moe_token_unpermute(permuted, sorted_indices, probs=probs)
    assert torch.equal(out, tokens)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("num_out", [None, 0, 10, -5, 100])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_permute_unpermute_match_golden(dtype, num_out, index_dtype):
    tokens, indices, probs = data(dtype=dtype)
    indices = indices.to(index_dtype)
    permuted, sorted_indices = na.npu_moe_token_permute(tokens, indices, num_out)
    want_p, want_inv = golden_permute(tokens, indices, num_out)
    assert torch.equal(permuted, want_p)
    assert sorted_indices.tolist() == want_inv
    out = na.npu_moe_token_unpermute(permuted, sorted_indices, probs=probs)
    assert out.dtype == dtype
    assert_close_to_golden(out, golden_unpermute(permuted, want_inv, probs))


def test_one_d_indices_and_no_probs():
    tokens, _, _ = data(dtype=torch.float32)
    indices = torch.tensor([2, 0, 1, 0, 2, 1, 0])
    permuted, s = na.npu_moe_token_permute(tokens, indices)
    want_p, want_inv = golden_permute(tokens, indices, None)
    assert torch.equal(permuted, want_p) and s.tolist() == want_inv
    assert torch.equal(na.npu_moe_token_unpermute(permuted, s), tokens)


def test_non_contiguous_inputs_untouched():
    tokens, indices, probs = data(dtype=torch.float32)
    wide = torch.cat([tokens, tokens], 1)[:, ::2]
    idx = indices.t().contiguous().t()
    before = wide.clone()
    permuted, s = na.npu_moe_token_permute(wide, idx)
    want_p, want_inv = golden_permute(wide.contiguous(), indices, None)
    assert torch.equal(permuted, want_p) and s.tolist() == want_inv
    assert torch.equal(wide, before)


@pytest.mark.parametrize("num_out", [None, 12])
def test_gradcheck_round_trip(num_out):
    tokens, indices, probs = data(n=5, h=3, k=2, dtype=torch.float64)
    tokens.requires_grad_(True)
    probs.requires_grad_(True)

    def f(t, p):
        permuted, s = na.npu_moe_token_permute(t, indices, num_out)
        return na.npu_moe_token_unpermute(permuted, s, probs=p)

    assert torch.autograd.gradcheck(f, (tokens, probs))


def _unpermute_grad_golden(permuted, gu, inv, probs, k, rows):
    """float64 (d permuted_tokens, d probs) of unpermute: row ``r = inv[j]`` (kept when
    ``r < rows``) is expert output of choice ``j`` of token ``j // k``."""
    want_gp = torch.zeros(permuted.shape, dtype=torch.float64)
    want_pr = torch.zeros(probs.shape, dtype=torch.float64)
    for j, r in enumerate(inv):
        if r < rows:
            want_gp[r] = float(probs.reshape(-1)[j]) * gu[j // k].double()
            want_pr.view(-1)[j] = (gu[j // k].double() * permuted[r].double()).sum()
    return want_gp, want_pr


def test_backward_ops_formula():
    tokens, indices, probs = data(dtype=torch.float32)
    permuted, s = na.npu_moe_token_permute(tokens, indices, 15)
    g = torch.randn(permuted.shape)
    inv = s.tolist()
    k = indices.shape[1]
    want = torch.zeros(tokens.shape, dtype=torch.float64)
    for j, r in enumerate(inv):
        if r < 15:
            want[j // k] += g[r].double()
    assert_close_to_golden(na.npu_moe_token_permute_grad(tokens, g, indices, s), want)
    gu = torch.randn(tokens.shape)
    gp, gprobs = na.npu_moe_token_unpermute_grad(permuted, gu, s, probs)
    want_gp, want_pr = _unpermute_grad_golden(permuted, gu, inv, probs, k, rows=15)
    assert_close_to_golden(gp, want_gp)
    assert_close_to_golden(gprobs, want_pr)


def _saved_storages(permuted, s, probs):
    """Storage pointers of what the unpermute autograd node keeps for its backward."""
    seen = []

    def pack(t):
        seen.append(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = na.npu_moe_token_unpermute(permuted, s, probs=probs)
    return out, seen


@pytest.mark.parametrize("with_probs", [False, True])
def test_unpermute_keeps_expert_outputs_only_for_probs(with_probs):
    # op-plugin's A2/A3 autograd keeps permuted_tokens alive only when d probs needs them.
    tokens, indices, probs = data(n=5, h=4, k=2, dtype=torch.float32)
    permuted, s = na.npu_moe_token_permute(tokens, indices, 8)          # 2 choices dropped
    permuted = permuted.detach().requires_grad_(True)
    probs = probs.requires_grad_(True) if with_probs else None
    k = 2 if with_probs else 1
    s = s if with_probs else s[:5]            # k = 1 without probs: 5 rows, one choice each
    out, seen = _saved_storages(permuted, s, probs)
    assert (permuted.untyped_storage().data_ptr() in seen) == with_probs
    g = torch.randn(out.shape)
    out.backward(g)
    want = torch.zeros(permuted.shape, dtype=torch.float64)
    for j, r in enumerate(s.tolist()):
        if r < 8:
            w = 1.0 if probs is None else float(probs.detach().reshape(-1)[j])
            want[r] = w * g[j // k].double()
    assert_close_to_golden(permuted.grad, want)


def test_unpermute_grad_v2_formula_and_errors():
    tokens, indices, probs = data(dtype=torch.float32)
    permuted, s = na.npu_moe_token_permute(tokens, indices, 15)
    gu = torch.randn(tokens.shape)
    inv = s.tolist()
    k = indices.shape[1]
    gp, gprobs = na.npu_moe_token_unpermute_grad_v2(gu, s, 15, torch.bfloat16, probs,
                                                    permuted_tokens=permuted)
    want_gp, want_pr = _unpermute_grad_golden(permuted, gu, inv, probs, k, rows=15)
    assert gp.dtype == torch.bfloat16 and gp.shape == (15, tokens.shape[1])
    assert_close_to_golden(gp, want_gp)
    assert_close_to_golden(gprobs, want_pr)
    with pytest.raises(ValueError, match="npu_moe_token_unpermute_grad_v2: expected "
                                         "permuted_tokens a tensor when probs is given"):
        na.npu_moe_token_unpermute_grad_v2(gu, s, 15, torch.float32, probs)
    with pytest.raises(RuntimeError, match="npu_moe_token_unpermute_grad_v2: expected "
                                           "permuted_tokens shape \\(15, 6\\)"):
        na.npu_moe_token_unpermute_grad_v2(gu, s, 15, torch.float32, probs,
                                           permuted_tokens=permuted[:3])


def test_bad_inputs():
    tokens, indices, probs = data()
    with pytest.raises(ValueError, match="npu_moe_token_permute: expected padded_mode False"):
        na.npu_moe_token_permute(tokens, indices, padded_mode=True)
    with pytest.raises(TypeError, match="npu_moe_token_permute: expected indices dtype in"):
        na.npu_moe_token_permute(tokens, indices.float())
    with pytest.raises(RuntimeError, match="expected indices tokens.size"):
        na.npu_moe_token_permute(tokens[:3], indices)
    p, s = na.npu_moe_token_permute(tokens, indices)
    with pytest.raises(RuntimeError, match="npu_moe_token_unpermute: expected probs"):
        na.npu_moe_token_unpermute(p, s, probs=probs[:2])
    with na.strict("A2"):
        with pytest.raises(TypeError, match="expected tokens dtype in \\['bfloat16'\\]"):
            na.npu_moe_token_permute(tokens.float(), indices)


def kernel_steps_unpermute(permuted, inv, probs):
    """float32 products summed in k order, one rounding (dropped choices add nothing)."""
    k = probs.shape[1]
    rows = []
    for t in range(len(inv) // k):
        acc = None
        for j in range(k):
            r = inv[t * k + j]
            if r < permuted.shape[0]:
                term = permuted[r].float() * probs[t, j].float()
                acc = term if acc is None else acc + term
        rows.append(torch.zeros(permuted.shape[1]) if acc is None else acc)
    return torch.stack(rows).to(permuted.dtype)


@pytest.mark.slow       # compiles: seconds of Inductor
def test_unpermute_compiled_provider_matches_kernel_steps():
    from npu_anywhere.kernels import compiled as compiled_kernels
    from npu_anywhere.library import REGISTRY

    tokens, indices, probs = data(n=9, h=40, k=3)
    permuted, s = na.npu_moe_token_permute(tokens, indices, 20)        # 7 choices dropped
    want = kernel_steps_unpermute(permuted, s.tolist(), probs)
    with na.use_providers("reference"):
        assert torch.equal(na.npu_moe_token_unpermute(permuted, s, probs=probs), want)
    fast = {p.name: p for p in REGISTRY["npu_moe_token_unpermute"].providers._fast}
    provider = fast["compiled"].fn.__self__
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        out = na.npu_moe_token_unpermute(permuted, s, probs=probs)
    assert provider._disabled is None, provider._disabled
    assert provider._compiled
    assert torch.equal(out, want)
