"""npu_recurrent_gated_delta_rule (in place) and _functional against a float64 golden.

The golden is op-plugin's doc formula, token by token and head by head, in float64 Python
loops: ``S = exp(g) S (* exp(gk) per key column); S += beta (v - S k) k^T; o = S (scale q)``,
sequence ``i`` starting from ``state[ssm[s_i + num_accepted_tokens[i] - 1]]`` and every token's
state stored at ``state[ssm[t]]``.  The op stores bfloat16, so outputs and states are compared
with bfloat16 tolerances; the golden carries its state in float64 (the kernel carries float32
within a sequence, so only the stored values are rounded).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

BF16 = torch.bfloat16


def make(lengths, nk, nv, dk, dv, blocks, seed=0, gk=False):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).to(BF16)
    k = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).to(BF16)
    v = torch.randn(t, nv, dv, generator=gen).to(BF16)
    state = torch.randn(blocks, nv, dv, dk, generator=gen).to(BF16)
    kw = dict(beta=torch.rand(t, nv, generator=gen).to(BF16), g=-torch.rand(t, nv, generator=gen),
              actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32),
              ssm_state_indices=torch.randperm(blocks, generator=gen)[:t].to(torch.int32))
    if gk:
        kw["gk"] = -0.5 * torch.rand(t, nv, dk, generator=gen)
    return q, k, v, state, kw


def golden(q, k, v, state, *, beta=None, scale=None, actual_seq_lengths, ssm_state_indices,
           num_accepted_tokens=None, g=None, gk=None):
    t, nk, dk = q.shape
    nv, dv = v.shape[1:]
    scale = 1 / math.sqrt(dk) if scale is None else scale
    q64, k64, v64 = q.double(), k.double(), v.double()
    out = torch.zeros(t, nv, dv, dtype=torch.float64)
    new_state = state.double().clone()
    slots = ssm_state_indices.tolist()
    start = 0
    for i, length in enumerate(actual_seq_lengths.tolist()):
        if length == 0:
            continue
        first = start + (num_accepted_tokens[i].item() - 1 if num_accepted_tokens is not None
                         else 0)
        for h in range(nv):
            kh = h // (nv // nk)
            s = state[slots[first], h].double().clone()
            for tok in range(start, start + length):
                alpha = math.exp(g[tok, h].item()) if g is not None else 1.0
                s = alpha * s
                if gk is not None:
                    s = s * torch.exp(gk[tok, h].double())[None, :]
                b = beta[tok, h].item() if beta is not None else 1.0
                kt = k64[tok, kh]
                s = s + b * torch.outer(v64[tok, h] - s @ kt, kt)
                out[tok, h] = s @ (scale * q64[tok, kh])
                new_state[slots[tok], h] = s
        start += length
    return out, new_state


def check_against_golden(q, k, v, state, kw):
    want_o, want_s = golden(q, k, v, state, **kw)
    before = state.clone()
    o, s = na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, **kw)
    assert torch.equal(state, before), "the functional op must not write state"
    assert o.dtype == BF16 and s.dtype == BF16 and o.shape == v.shape
    assert_close_to_golden(o, want_o, rtol=2e-2, atol=2e-2)
    assert_close_to_golden(s, want_s, rtol=2e-2, atol=2e-2)
    # in place: the same numbers, written into the caller's state
    target = state.clone()
    o_inplace = na.npu_recurrent_gated_delta_rule(q, k, v, target, **kw)
    assert torch.equal(o_inplace, o) and torch.equal(target, s)
    return o, s


def test_speculative_decode_grouped_heads_matches_golden():
    q, k, v, state, kw = make([3, 1, 2], nk=2, nv=4, dk=8, dv=5, blocks=9)
    kw.update(scale=0.5, num_accepted_tokens=torch.tensor([2, 1, 2], dtype=torch.int32))
    _, s = check_against_golden(q, k, v, state, kw)
    # slots no token names keep their bytes
    untouched = sorted(set(range(9)) - set(kw["ssm_state_indices"].tolist()))
    assert torch.equal(s[untouched], state[untouched])


def test_defaults_and_empty_sequence_match_golden():
    # beta None -> 1, scale None -> 1/sqrt(Dk), g None -> no decay; a sequence of length 0
    q, k, v, state, kw = make([2, 0, 1], nk=1, nv=3, dk=6, dv=7, blocks=4, seed=1)
    del kw["beta"], kw["g"]
    check_against_golden(q, k, v, state, kw)


def test_per_key_decay_gk_matches_golden():
    q, k, v, state, kw = make([2, 2], nk=1, nv=2, dk=5, dv=3, blocks=6, seed=2, gk=True)
    check_against_golden(q, k, v, state, kw)


def test_a_slot_named_by_every_token_keeps_the_last_tokens_state():
    q, k, v, state, kw = make([4], nk=1, nv=1, dk=4, dv=4, blocks=5, seed=3)
    kw["ssm_state_indices"] = torch.zeros(4, dtype=torch.int32)
    # the golden stores token t's state in slot t; the op stores them all in slot 0
    want_o, want_s = golden(q, k, v, state, **dict(kw, ssm_state_indices=torch.arange(4)))
    target = state.clone()
    o = na.npu_recurrent_gated_delta_rule(q, k, v, target, **kw)
    assert_close_to_golden(o, want_o, rtol=2e-2, atol=2e-2)
    assert_close_to_golden(target[0], want_s[3], rtol=2e-2, atol=2e-2)
    assert torch.equal(target[1:], state[1:])


def test_non_contiguous_inputs_and_state_view():
    q, k, v, state, kw = make([2, 3], nk=2, nv=2, dk=6, dv=4, blocks=7, seed=4)
    want_o, want_s = na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, **kw)
    qt = q.transpose(0, 1).contiguous().transpose(0, 1)
    big = torch.zeros(14, *state.shape[1:], dtype=BF16)
    view = big[::2]
    view.copy_(state)
    beta_t = kw["beta"].t().contiguous().t()
    o = na.npu_recurrent_gated_delta_rule(qt, k, v, view, **dict(kw, beta=beta_t))
    assert not qt.is_contiguous() and not view.is_contiguous()
    assert torch.equal(o, want_o) and torch.equal(view, want_s)
    assert torch.count_nonzero(big[1::2]) == 0


@pytest.mark.parametrize("change,error,match", [
    (dict(actual_seq_lengths=torch.tensor([2, 2], dtype=torch.int32)), ValueError,
     "actual_seq_lengths lengths summing to T = 5"),
    (dict(actual_seq_lengths=torch.tensor([9, -4], dtype=torch.int32)), ValueError,
     "actual_seq_lengths sequence lengths in \\[0, 8\\], but got 9 at position 0"),
    (dict(ssm_state_indices=torch.tensor([0, 1, 2, 3, 7], dtype=torch.int32)), IndexError,
     "ssm_state_indices state slots in \\[0, 6\\], but got 7 at position 4"),
    (dict(num_accepted_tokens=torch.tensor([1, 4], dtype=torch.int32)), ValueError,
     "num_accepted_tokens values in \\[1, actual_seq_lengths\\[i\\]\\]"),
])
def test_bad_values_raise_before_any_write(change, error, match):
    q, k, v, state, kw = make([2, 3], nk=1, nv=2, dk=4, dv=4, blocks=7, seed=5)
    kw.update(change)
    target = state.clone()
    with pytest.raises(error, match="npu_recurrent_gated_delta_rule: expected " + match):
        na.npu_recurrent_gated_delta_rule(q, k, v, target, **kw)
    assert torch.equal(target, state)


def test_strict_mode_applies_the_kernels_rules():
    q, k, v, state, kw = make([1, 1], nk=1, nv=1, dk=4, dv=4, blocks=2, seed=6, gk=True)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected gk None on A2"):
            na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, scale=0.5, **kw)
        del kw["gk"]
        with pytest.raises(ValueError, match="expected scale a float on A2"):
            na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, **kw)
        with pytest.raises(RuntimeError, match="expected state BlockNum >= T = 2"):
            na.npu_recurrent_gated_delta_rule_functional(q, k, v, state[:1], scale=0.5, **kw)
        with pytest.raises(RuntimeError, match="expected a product the op supports"), \
                na.strict("950"):
            na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, scale=0.5, **kw)
        na.npu_recurrent_gated_delta_rule_functional(q, k, v, state, scale=0.5, **kw)


def test_gradients_are_refused():
    q, k, v, state, kw = make([1], nk=1, nv=1, dk=4, dv=4, blocks=1)
    with pytest.raises(RuntimeError, match="expected inputs that do not require grad"):
        na.npu_recurrent_gated_delta_rule_functional(q.requires_grad_(), k, v, state, **kw)
