"""The ``levels`` provider of npu_moe_token_unpermute_with_routing_map's padded mode
(ops/moe/token_unpermute_padded.py) against the padded formula written here as Python loops
(float64 golden; the kernel's float32 steps, ascending row order per token, one rounding, for
the bit-exact check), eager and compiled, and its errors.  The padded index is built as
Megatron's ``permute(drop_and_pad=True)`` lays it out (each expert's routed tokens, then its
unrouted ones, cut at the capacity), so low-numbered tokens fill many padding slots."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.ops.moe import token_unpermute_padded as padded
from npu_anywhere.testing.tolerances import assert_close_to_golden

OP = "npu_moe_token_unpermute_with_routing_map"


def padded_case(t, e, k, h, capacity, dtype=torch.float32, probs_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.rand(t, e, generator=gen).topk(k, dim=1).indices
    rmap = torch.zeros(t, e, dtype=torch.bool).scatter(1, chosen, True)
    m = rmap.tolist()
    rows = []                                            # (token, expert) of each row
    for ex in range(e):
        routed = [tok for tok in range(t) if m[tok][ex]]
        unrouted = [tok for tok in range(t) if not m[tok][ex]]
        rows += [(tok, ex) for tok in (routed + unrouted)[:capacity]]
    permuted = torch.randn(len(rows), h, generator=gen, dtype=torch.float64).to(dtype)
    probs = torch.rand(t, e, generator=gen, dtype=torch.float64).to(probs_dtype or dtype)
    sorted_indices = torch.tensor([tok for tok, _ in rows], dtype=torch.int32)
    return permuted, sorted_indices, probs, rmap, rows


def golden(permuted, rows, t, probs):
    out = torch.zeros(t, permuted.shape[1], dtype=torch.float64)
    for r, (tok, ex) in enumerate(rows):
        out[tok] += permuted[r].double() * (1.0 if probs is None else float(probs[tok, ex]))
    return out


def kernel_steps(permuted, rows, t, probs):
    out = torch.zeros(t, permuted.shape[1])
    for r, (tok, ex) in enumerate(rows):
        term = permuted[r].float()
        if probs is not None:
            term = term * probs[tok, ex].float()
        out[tok] = out[tok] + term
    return out.to(permuted.dtype)


def unpermute(permuted, sorted_indices, t, probs, rmap, provider):
    with na.use_providers(provider, op=OP):
        return na.npu_moe_token_unpermute_with_routing_map(
            permuted, sorted_indices, [t, permuted.shape[1]], probs=probs, routing_map=rmap,
            drop_and_pad=True)


@pytest.mark.parametrize("dtype, probs_dtype", [(torch.bfloat16, None),
                                                (torch.bfloat16, torch.float32),
                                                (torch.float16, None), (torch.float32, None)])
def test_levels_match_the_kernel_steps_and_the_golden(dtype, probs_dtype):
    # 12 tokens, 6 experts, capacity 5: tokens 0-2 fill many padding slots (sparse levels).
    t = 12
    permuted, s, probs, rmap, rows = padded_case(t, 6, 2, 9, 5, dtype, probs_dtype)
    sizes = padded._levels(s, t)[0]
    assert any(n * 4 >= t for n in sizes) and any(n * 4 < t for n in sizes)   # both paths
    got = unpermute(permuted, s, t, probs, rmap, "levels")
    assert got.dtype == dtype and got.shape == (t, 9)
    assert torch.equal(got, kernel_steps(permuted, rows, t, probs))
    assert torch.equal(got, unpermute(permuted, s, t, probs, rmap, "reference"))
    assert_close_to_golden(got, golden(permuted, rows, t, probs))


def test_levels_without_probs_non_contiguous_and_tokens_without_rows():
    t = 9
    permuted, s, _, rmap, rows = padded_case(t, 4, 1, 6, 2)
    wide = torch.cat([permuted, permuted], 1)[:, :6]               # non-contiguous rows
    assert not wide.is_contiguous()
    before = wide.clone()
    got = unpermute(wide, s, t, None, None, "levels")
    assert torch.equal(wide, before)
    assert torch.equal(got, kernel_steps(permuted, rows, t, None))
    assert set(range(t)) - set(s.tolist())                      # some tokens get nothing
    missing = sorted(set(range(t)) - set(s.tolist()))
    assert not got[missing].any()


def test_only_sparse_levels():
    # 40 tokens, 8 rows: no level holds a quarter of the tokens (one index_add_ does it all).
    t = 40
    permuted, s, probs, rmap, rows = padded_case(t, 2, 1, 5, 4, seed=3)
    assert padded._levels(s, t)[0][0] * 4 < t
    got = unpermute(permuted, s, t, probs, rmap, "levels")
    assert torch.equal(got, kernel_steps(permuted, rows, t, probs))


def test_the_padded_mode_takes_the_levels_provider_and_checks_values():
    permuted, s, probs, rmap, _ = padded_case(6, 3, 1, 4, 2)
    provider = na.library.REGISTRY[OP].providers.select(
        permuted, s, [6, 4], probs=probs, routing_map=rmap, drop_and_pad=True)
    assert provider.name == "levels"
    bad = s.clone()
    bad[0] = 6
    with pytest.raises(IndexError, match=f"{OP}: expected sorted_indices values in \\[0, 5\\]"):
        unpermute(permuted, bad, 6, probs, rmap, "levels")


@pytest.mark.slow       # compiles: seconds of Inductor
def test_compiled_dense_levels_are_bit_identical():
    from npu_anywhere.kernels import compiled as compiled_kernels

    t = 12
    permuted, s, probs, rmap, rows = padded_case(t, 6, 2, 40, 5, torch.bfloat16)
    want = kernel_steps(permuted, rows, t, probs)
    with compiled_kernels.compiling_after(0):
        got = unpermute(permuted, s, t, probs, rmap, "levels")
    assert padded._compiled_dense._disabled is None, padded._compiled_dense._disabled
    assert padded._compiled_dense._compiled
    assert torch.equal(got, want)
