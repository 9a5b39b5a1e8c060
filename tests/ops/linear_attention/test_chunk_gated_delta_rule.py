"""npu_chunk_gated_delta_rule against the doc formula in float64 and against the recurrent op.

Golden: op-plugin's doc formula token by token in float64 Python loops, ``S = exp(g) S;
S += beta (v - S k) k^T; o = S (scale q)``, sequence ``b`` starting from ``initial_state[b]``.
The chunked math itself (``_gdr.chunked``) is also checked against the token recurrence in
float64, where the two must agree to rounding; and the op against the recurrent op, called on
the same tokens up to 8 at a time.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.ops.linear_attention import _gdr
from npu_anywhere.testing.tolerances import assert_close_to_golden

BF16 = torch.bfloat16


def make(lengths, nk, nv, dk, dv, seed=0, state_dtype=BF16, dtype=BF16):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).to(dtype)
    v = torch.randn(t, nv, dv, generator=gen).to(dtype)
    kw = dict(beta=torch.rand(t, nv, generator=gen).to(dtype),
              initial_state=torch.randn(len(lengths), nv, dv, dk, generator=gen).to(state_dtype),
              actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32),
              scale=dk ** -0.5, g=-torch.rand(t, nv, generator=gen))
    return q, k, v, kw


def golden(q, k, v, *, beta, initial_state, actual_seq_lengths, scale=None, g=None):
    t, nk, dk = q.shape
    nv, dv = v.shape[1:]
    scale = 1.0 if scale is None else scale
    out = torch.zeros(t, nv, dv, dtype=torch.float64)
    final = initial_state.double().clone()
    start = 0
    for b, length in enumerate(actual_seq_lengths.tolist()):
        for h in range(nv):
            kh = h // (nv // nk)
            s = initial_state[b, h].double()
            for tok in range(start, start + length):
                alpha = math.exp(g[tok, h].item()) if g is not None else 1.0
                kt = k[tok, kh].double()
                s = alpha * s
                s = s + beta[tok, h].item() * torch.outer(v[tok, h].double() - s @ kt, kt)
                out[tok, h] = s @ (q[tok, kh].double() * scale)
            final[b, h] = s
        start += length
    return out, final


@pytest.mark.parametrize("lengths,nk,nv", [([70, 3, 0], 2, 4), ([1, 64], 1, 1)])
def test_matches_the_float64_recurrence(lengths, nk, nv):
    q, k, v, kw = make(lengths, nk, nv, dk=8, dv=6, seed=len(lengths))
    before = kw["initial_state"].clone()
    o, final = na.npu_chunk_gated_delta_rule(q, k, v, **kw)
    want_o, want_final = golden(q, k, v, **kw)
    assert o.dtype == BF16 and final.dtype == BF16
    assert o.shape == v.shape and final.shape == before.shape
    assert_close_to_golden(o, want_o, rtol=2e-2, atol=2e-2)
    assert_close_to_golden(final, want_final, rtol=2e-2, atol=2e-2)
    assert torch.equal(kw["initial_state"], before), "initial_state must not be written"
    if 0 in lengths:      # an empty sequence hands its state back unchanged
        empty = lengths.index(0)
        assert torch.equal(final[empty], before[empty])


def test_chunk_math_equals_the_token_recurrence_in_float64():
    lengths, starts = [5, 40, 0, 33], [0, 5, 45, 45]
    q, k, v, kw = make(lengths, 3, 3, dk=7, dv=5, seed=7, state_dtype=torch.float64,
                       dtype=torch.float64)
    g, beta, s0 = kw["g"].double(), kw["beta"], kw["initial_state"]
    o, final = _gdr.chunked(s0, q, k, v, beta, g, lengths, starts, chunk=16)
    seen = torch.zeros(sum(lengths), dtype=torch.bool)
    o_steps = torch.zeros_like(o)
    s_last = s0.clone()
    for j, tok, active, o_j, s_j in _gdr.recurrent_steps(s0, q, k, v, beta, torch.exp(g), None,
                                                        lengths, starts):
        o_steps[tok[active]] = o_j[active]
        seen[tok[active]] = True
        done = torch.tensor(lengths) == j + 1
        s_last[done] = s_j[done]
    assert bool(seen.all())
    torch.testing.assert_close(o, o_steps, rtol=0, atol=1e-12)
    torch.testing.assert_close(final, s_last, rtol=0, atol=1e-12)


def test_equals_the_recurrent_op_token_by_token():
    """Prefill by chunks == decode of the same tokens, up to 8 per call (bfloat16 state
    between calls, so bfloat16 tolerances)."""
    lengths = [11, 6]
    q, k, v, kw = make(lengths, 1, 2, dk=8, dv=8, seed=3)
    o_chunk, final = na.npu_chunk_gated_delta_rule(q, k, v, **kw)
    state = kw["initial_state"].clone()       # slot b holds sequence b's state
    o_steps = torch.empty_like(o_chunk)
    starts = [0, lengths[0]]
    done = [0, 0]
    while done != lengths:
        take = [min(8, n - d) for n, d in zip(lengths, done)]
        tokens = torch.cat([torch.arange(s + d, s + d + n) for s, d, n in
                            zip(starts, done, take)])
        slots = torch.cat([torch.full((n,), b) for b, n in enumerate(take)])
        # the last token of each call writes the slot that the next call starts from
        o = na.npu_recurrent_gated_delta_rule(
            q[tokens], k[tokens], v[tokens], state, beta=kw["beta"][tokens], scale=kw["scale"],
            actual_seq_lengths=torch.tensor(take, dtype=torch.int32),
            ssm_state_indices=slots.to(torch.int32), g=kw["g"][tokens])
        o_steps[tokens] = o
        done = [d + n for d, n in zip(done, take)]
    assert_close_to_golden(o_chunk, o_steps.double(), rtol=3e-2, atol=3e-2)
    assert_close_to_golden(final, state.double(), rtol=3e-2, atol=3e-2)


def test_float32_state_defaults_and_non_contiguous_inputs():
    q, k, v, kw = make([9, 4], 2, 2, dk=5, dv=3, seed=4, state_dtype=torch.float32)
    del kw["g"], kw["scale"]          # g None -> no decay; scale None -> 1.0 (the doc)
    o, final = na.npu_chunk_gated_delta_rule(q, k, v, **kw)
    assert final.dtype == torch.float32
    want_o, want_final = golden(q, k, v, **kw)
    assert_close_to_golden(o, want_o, rtol=2e-2, atol=2e-2)
    assert_close_to_golden(final, want_final, rtol=1e-5, atol=1e-5)
    # strided views give the same bits
    qt = q.transpose(0, 1).contiguous().transpose(0, 1)
    big = torch.zeros(4, *kw["initial_state"].shape[1:])
    big[::2] = kw["initial_state"]
    o2, final2 = na.npu_chunk_gated_delta_rule(qt, k, v, **dict(kw, initial_state=big[::2]))
    assert torch.equal(o2, o) and torch.equal(final2, final)


def test_value_errors_and_strict_mode():
    q, k, v, kw = make([3, 2], 1, 1, dk=4, dv=4, seed=5)
    op = "npu_chunk_gated_delta_rule: expected "
    with pytest.raises(ValueError, match=op + "actual_seq_lengths lengths summing to T = 5"):
        na.npu_chunk_gated_delta_rule(q, k, v, **dict(kw, actual_seq_lengths=torch.tensor(
            [3, 3], dtype=torch.int32)))
    with pytest.raises(ValueError, match=op + "actual_seq_lengths non-negative"):
        na.npu_chunk_gated_delta_rule(q, k, v, **dict(kw, actual_seq_lengths=torch.tensor(
            [6, -1], dtype=torch.int32)))
    with na.strict("A2"):
        with pytest.raises(TypeError, match=op + "initial_state dtype in \\['bfloat16'\\] on A2"):
            na.npu_chunk_gated_delta_rule(q, k, v, **dict(
                kw, initial_state=kw["initial_state"].float()))
        with pytest.raises(ValueError, match=op + "scale a float on A2"):
            na.npu_chunk_gated_delta_rule(q, k, v, **dict(kw, scale=None))
    with na.strict("950"):
        na.npu_chunk_gated_delta_rule(q, k, v, **dict(kw, initial_state=kw["initial_state"]
                                                      .float()))
    with pytest.raises(RuntimeError, match=op + "inputs that do not require grad"):
        na.npu_chunk_gated_delta_rule(q, k, v.float().bfloat16().requires_grad_(), **kw)
