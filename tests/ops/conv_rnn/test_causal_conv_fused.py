"""npu_fused_causal_conv1d against a float64 golden written from the doc's step list
(torch_npu-npu_fused_causal_conv1d.md: cache read, concatenation, cache update, offset crop,
APC block fill, convolution, pangu reset, residual), with the updated conv_states compared too.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

K = 3


def golden(x, w, states, loc=None, cache=None, accepted=None, computed=None, first=None,
           last=None, initial=None, block=128, pangu=False, residual=False, pad=-1):
    """Returns (y, new_states) in float64; ``states`` is not modified."""
    states = states.double().clone()
    dim = x.shape[-1]
    flat = x.double().reshape(-1, dim)
    if loc is None:
        s = x.shape[1]
        loc = list(range(0, x.shape[0] * s + 1, s))
    else:
        loc = loc.tolist()
    y = torch.ones_like(flat)
    c = states.shape[1]
    for b in range(len(loc) - 1):
        seq = flat[loc[b]:loc[b + 1]]
        length = seq.shape[0]
        if last is not None:
            read, write = int(cache[b, initial[b]]), int(cache[b, last[b]])
        elif cache is not None:
            read = write = int(cache[b])
        else:
            read = write = b
        if read == pad:
            continue
        if computed is not None and int(computed[b]) == 0:
            offset, hist = 0, torch.zeros(K - 1, dim, dtype=torch.float64)
        else:
            offset = int(accepted[b]) - 1 if accepted is not None else c - (K - 1)
            hist = states[read, :offset + K - 1]
        padded = torch.cat([hist, seq])
        total = padded.shape[0]
        m = min(c, total)
        for i in range(m):
            states[write, c - m + i] = padded[total - m + i]
        crop = padded[offset:]
        if last is not None:
            done = block - int(computed[b]) % block
            end_off = (length - done) % block
            last_full = length - end_off - block if end_off == 0 else length - end_off
            n_fill = int(last[b]) - int(first[b])
            for chunk in range(n_fill):
                boundary = last_full - (n_fill - chunk - 1) * block
                line = int(cache[b, int(first[b]) + chunk])
                for j in range(K - 1):
                    states[line, c - (K - 1) + j] = crop[boundary + j]
        out = torch.stack([sum(w[k].double() * crop[i + k] for k in range(K))
                           for i in range(length)])
        if pangu:
            reset = min(max(K - 1 - int(computed[b]), 0), length)
            out[:reset] = 0
        if residual:
            out = out + seq
        y[loc[b]:loc[b + 1]] = out
    return y.reshape(x.shape), states


def _rand(*shape, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def _run(x, w, states, **kw):
    work = states.clone()
    y = na.npu_fused_causal_conv1d(x, w, work, **kw)
    return y, work


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("residual", [0, 1])
def test_prefill_default_mode(dtype, residual):
    x, w, states = _rand(13, 32, dtype=dtype), _rand(3, 32, dtype=dtype, seed=1), \
        _rand(6, 2, 32, dtype=dtype, seed=2)
    loc, cache, computed = _i32(0, 5, 6, 13), _i32(4, 0, 2), _i32(10, 0, 3)
    y, new = _run(x, w, states, query_start_loc=loc, cache_indices=cache,
                  num_computed_tokens=computed, residual_connection=residual, max_query_len=7)
    want_y, want_states = golden(x, w, states, loc, cache, computed=computed,
                                 residual=bool(residual))
    assert y.dtype == dtype and y.shape == x.shape
    assert_close_to_golden(y, want_y)
    assert torch.equal(new.double(), want_states)          # states are plain copies


def test_mixed_with_accepted_tokens_pangu_and_pad_slot():
    x, w, states = _rand(11, 16), _rand(3, 16, seed=1), _rand(5, 4, 16, seed=2)
    loc, cache = _i32(0, 6, 8, 9, 11), _i32(1, 3, 7, 0)        # sequence 2 is padding
    accepted, computed = _i32(1, 2, 1, 2), _i32(0, 20, 5, 1)
    y, new = _run(x, w, states, query_start_loc=loc, cache_indices=cache,
                  num_accepted_tokens=accepted, num_computed_tokens=computed, pad_slot_id=7,
                  conv_mode="pangu")
    want_y, want_states = golden(x, w, states, loc, cache, accepted, computed, pangu=True, pad=7)
    assert_close_to_golden(y, want_y)
    assert torch.equal(new.double(), want_states)
    assert torch.equal(y[8], torch.ones(16, dtype=torch.bfloat16))   # the golden's filler


def test_decode_3d_without_cache_indices_and_non_contiguous_x():
    base = _rand(3, 16, 3)
    x = base.transpose(1, 2)                                   # [batch, m + 1, dim], strided
    w, states = _rand(3, 16, seed=1), _rand(3, 4, 16, seed=2)
    y, new = _run(x, w, states)
    want_y, want_states = golden(x, w, states)
    assert_close_to_golden(y, want_y)
    assert torch.equal(new.double(), want_states)


def test_apc_prefill_fills_block_boundaries():
    block, lengths = 4, (10, 3)
    x, w = _rand(sum(lengths), 16), _rand(3, 16, seed=1)
    states = _rand(8, 2, 16, seed=2)
    loc = _i32(0, 10, 13)
    cache = torch.arange(8, dtype=torch.int32).reshape(2, 4)
    computed, first, last, initial = _i32(2, 0), _i32(0, 0), _i32(2, 0), _i32(0, 0)
    kw = dict(query_start_loc=loc, cache_indices=cache, num_computed_tokens=computed,
              block_idx_first_scheduled_token=first, block_idx_last_scheduled_token=last,
              initial_state_idx=initial, block_size=block, residual_connection=1)
    y, new = _run(x, w, states, **kw)
    want_y, want_states = golden(x, w, states, loc, cache, None, computed, first, last, initial,
                                 block, residual=True)
    assert_close_to_golden(y, want_y)
    assert torch.equal(new.double(), want_states)
    assert not torch.equal(new[1], states[1])                 # a filled boundary block


def test_bad_index_values_leave_states_untouched():
    x, w, states = _rand(6, 16), _rand(3, 16, seed=1), _rand(3, 2, 16, seed=2)
    work = states.clone()
    with pytest.raises(RuntimeError, match="npu_fused_causal_conv1d: expected cache_indices "
                                           "entries in \\[0, 2\\]"):
        na.npu_fused_causal_conv1d(x, w, work, query_start_loc=_i32(0, 3, 6),
                                   cache_indices=_i32(0, 5))
    with pytest.raises(RuntimeError, match="expected num_accepted_tokens entries in \\[1, 3\\]"):
        na.npu_fused_causal_conv1d(x, w, work, query_start_loc=_i32(0, 3, 6),
                                   num_accepted_tokens=_i32(1, 4))
    assert torch.equal(work, states)


@pytest.mark.parametrize("kw, error, match", [
    (dict(conv_mode="pangu"), RuntimeError, "expected num_computed_tokens a tensor when"),
    (dict(residual_connection=2), ValueError, "expected residual_connection one of"),
    (dict(block_size=1), ValueError, "expected block_size >= 2"),
    (dict(cache_indices=torch.zeros(2, 2, dtype=torch.int32)), RuntimeError,
     "expected cache_indices \\[batch = 2\\]"),
    (dict(num_computed_tokens=torch.zeros(2)), TypeError, "expected num_computed_tokens dtype"),
])
def test_bad_arguments(kw, error, match):
    x, w, states = _rand(6, 16), _rand(3, 16, seed=1), _rand(3, 2, 16, seed=2)
    with pytest.raises(error, match="npu_fused_causal_conv1d: " + match):
        na.npu_fused_causal_conv1d(x, w, states, query_start_loc=_i32(0, 3, 6), **kw)


def test_strict_mode_rules():
    x, w, states = _rand(6, 16), _rand(3, 16, seed=1), _rand(3, 2, 16, seed=2)
    with na.strict("950"), pytest.raises(ValueError, match="expected x dim in \\[64, 16384\\]"):
        na.npu_fused_causal_conv1d(x, w, states, query_start_loc=_i32(0, 3, 6))
    with na.strict("A3"), pytest.raises(RuntimeError, match="npu_fused_causal_conv1d"):
        na.npu_fused_causal_conv1d(x, w, states, query_start_loc=_i32(0, 3, 6))


def test_v2_writes_y_into_x_and_keeps_skipped_rows():
    x, w, states = _rand(11, 16), _rand(3, 16, seed=1), _rand(5, 4, 16, seed=2)
    kw = dict(query_start_loc=_i32(0, 6, 8, 9, 11), cache_indices=_i32(1, 3, 7, 0),
              num_accepted_tokens=_i32(1, 2, 1, 2), num_computed_tokens=_i32(0, 20, 5, 1),
              pad_slot_id=7, residual_connection=1)
    want_y, want_states = golden(x, w, states, kw["query_start_loc"], kw["cache_indices"],
                                 kw["num_accepted_tokens"], kw["num_computed_tokens"],
                                 residual=True, pad=7)
    x_work, s_work = x.clone(), states.clone()
    assert torch.ops.npu.npu_fused_causal_conv1d_v2(x_work, w, s_work, **kw) is None
    assert_close_to_golden(x_work[:8], want_y[:8])
    assert_close_to_golden(x_work[9:], want_y[9:])
    assert torch.equal(x_work[8], x[8])                      # skipped sequence untouched
    assert torch.equal(s_work.double(), want_states)
    # 3-D x, written through a strided view
    base = _rand(2, 16, 3)
    x3 = base.transpose(1, 2)
    w3, st3 = _rand(3, 16, seed=1), _rand(2, 4, 16, seed=2)
    want3, _ = golden(x3, w3, st3)
    na.npu_fused_causal_conv1d_v2(x3, w3, st3.clone())
    assert_close_to_golden(base.transpose(1, 2), want3)
    with pytest.raises(RuntimeError, match="npu_fused_causal_conv1d_v2: expected weight"):
        na.npu_fused_causal_conv1d_v2(x, w[:2], states, query_start_loc=_i32(0, 11))
