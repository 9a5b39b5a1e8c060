"""npu_mla_prolog_v3 / _functional against the float64 golden of mla_prolog_golden.py."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from mla_prolog_golden import cache_rows, golden, token_slots
from npu_anywhere.testing.opdb.mla_prolog import mla_inputs

V3 = na.npu_mla_prolog_v3


def _close_bf16(out, gold):
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.to(torch.float64), gold, rtol=2e-2, atol=2e-2)


def _close_int8(out, gold, max_off=1, share=0.02):
    """int8 results: each within 1 of the golden (a bf16 intermediate may fall on the other side
    of a rounding boundary), and only a few off at all."""
    assert out.dtype == torch.int8
    diff = (out.to(torch.float64) - gold).abs()
    assert diff.max() <= max_off
    assert (diff > 0).double().mean() <= share


def _check_caches(args, kw, gold, kv_before, kr_before, tokens):
    kv_cache, kr_cache = args[9], args[10]
    mode = kw["cache_mode"]
    if mode in ("BSND", "TND"):
        slots = list(range(len(gold["kv"])))
    else:
        slots = token_slots(kw, tokens, kv_cache.shape[1])
    kv_rows, kr_rows = cache_rows(kv_cache, mode), cache_rows(kr_cache, mode)
    kv_old, kr_old = cache_rows(kv_before, mode), cache_rows(kr_before, mode)
    written = set()
    for tok, slot in enumerate(slots):
        if slot < 0:
            continue
        written.add(slot)
        for rows, ref in ((kv_rows, gold["kv"]), (kr_rows, gold["kr"])):
            got = rows[slot]                       # [Nkv, D]: every head the same row
            want = ref[tok].expand_as(got)
            if got.dtype == torch.int8:
                _close_int8(got, want, share=0.1)
            else:
                _close_bf16(got, want)
    untouched = [i for i in range(kv_rows.shape[0]) if i not in written]
    assert torch.equal(kv_rows[untouched], kv_old[untouched])
    assert torch.equal(kr_rows[untouched], kr_old[untouched])


def _run_and_compare(args, kw, tokens):
    kv_before, kr_before = args[9].clone(), args[10].clone()
    gold = golden(args, kw)
    query, q_rope, s_nope, q_norm, s_norm = V3(*args, **kw)
    n, hckv = args[3].shape[0], args[3].shape[2]
    assert query.shape == tokens + (n, hckv)
    t = gold["query"].shape[0]
    if "scale_q_nope" in gold:
        assert s_nope.shape == (t, n, 1) and s_nope.dtype == torch.float32
        torch.testing.assert_close(s_nope.double(), gold["scale_q_nope"], rtol=1e-5, atol=0)
        _close_int8(query.reshape(t, n, hckv), gold["query"])
    else:
        assert s_nope.shape == (0,)
        _close_bf16(query.reshape(t, n, hckv), gold["query"])
    _close_bf16(q_rope.reshape(t, n, -1), gold["query_rope"])
    if kw.get("query_norm_flag"):
        assert q_norm.shape == tokens + (args[1].shape[1],)
        if q_norm.dtype == torch.int8:
            _close_int8(q_norm.reshape(t, -1), gold["query_norm"])
            torch.testing.assert_close(s_norm.double(), gold["scale_q_norm"], rtol=1e-5, atol=0)
        else:
            _close_bf16(q_norm.reshape(t, -1), gold["query_norm"])
            assert s_norm.shape == (0,)
    else:
        assert q_norm.shape == (0,) and s_norm.shape == (0,)
    _check_caches(args, kw, gold, kv_before, kr_before, tokens)


def test_bf16_pa_bsnd_with_norm_output_and_scales():
    args, kw = mla_inputs(tokens=(2, 3), he=40, hcq=24, n=3)
    kw.update(query_norm_flag=True, qc_qr_scale=0.75, kc_scale=1.5, rmsnorm_epsilon_cq=1e-3)
    _run_and_compare(args, kw, (2, 3))


@pytest.mark.parametrize("mode,tokens", [("PA_NZ", (5,)), ("PA_BLK_BSND", (2, 11)),
                                         ("PA_BLK_NZ", (7,)), ("BSND", (2, 3)), ("TND", (4,))])
def test_cache_modes(mode, tokens):
    args, kw = mla_inputs(tokens=tokens, cache_mode=mode, dr=16, block_size=4, blocks=8, nkv=2)
    _run_and_compare(args, kw, tokens)


@pytest.mark.parametrize("scenario", [(1, 0, 0), (1, 2, 0), (2, 0, 0), (2, 1, 1)])
def test_quant_scenarios(scenario):
    args, kw = mla_inputs(tokens=(5,), scenario=scenario, smooth=scenario != (2, 0, 0))
    kw["query_norm_flag"] = True
    _run_and_compare(args, kw, (5,))


def test_functional_returns_copies_and_leaves_the_inputs():
    args, kw = mla_inputs(scenario=(1, 2, 0), cache_mode="PA_NZ", dr=32)
    before = [a.clone() for a in args]
    outs = na.npu_mla_prolog_v3_functional(*args, **kw)
    assert len(outs) == 7
    for a, b in zip(args, before):
        assert torch.equal(a, b)
    v3_args = args[:9] + (args[9].clone(), args[10].clone())
    v3_outs = V3(*v3_args, **kw)
    for x, y in zip(outs[:5], v3_outs):
        assert torch.equal(x, y)
    assert torch.equal(outs[5], v3_args[9]) and torch.equal(outs[6], v3_args[10])


def test_non_contiguous_inputs_give_the_same_result():
    args, kw = mla_inputs(tokens=(3,), he=32)
    plain = V3(*args[:9], args[9].clone(), args[10].clone(), **kw)

    def strided(t):
        wide = torch.zeros(t.shape + (2,), dtype=t.dtype)
        wide[..., 0] = t
        return wide[..., 0]

    moved = [strided(a) for a in args[:9]]
    assert not moved[1].is_contiguous()
    other = V3(*moved, args[9].clone(), args[10].clone(), **kw)
    for x, y in zip(plain, other):
        assert torch.equal(x, y)


def test_bad_index_raises_before_writing():
    args, kw = mla_inputs()
    kw["cache_index"] = kw["cache_index"].clone()
    kw["cache_index"][0, 0] = 4 * 8            # == BlockNum * BlockSize
    kv, kr = args[9].clone(), args[10].clone()
    with pytest.raises(IndexError, match="npu_mla_prolog_v3: expected cache_index values "
                                         "below BlockNum"):
        V3(*args, **kw)
    assert torch.equal(args[9], kv) and torch.equal(args[10], kr)
    # tokens sharing a slot: the last one's row is written
    kw["cache_index"][0, 0] = kw["cache_index"][1, 2]
    shared = int(kw["cache_index"][1, 2])
    V3(*args, **kw)
    one = dict(kw, cache_index=torch.full((2, 3), -1))
    one["cache_index"][1, 2] = shared
    kv_last = kv.clone()
    V3(*args[:9], kv_last, kr.clone(), **one)
    assert torch.equal(args[9].reshape(32, -1)[shared], kv_last.reshape(32, -1)[shared])


def test_empty_tokens_write_nothing():
    args, kw = mla_inputs(tokens=(0,))
    kv = args[9].clone()
    outs = V3(*args, **kw)
    assert outs[0].shape == (0, 2, 32) and torch.equal(args[9], kv)
    # Skv = 0 (BlockNum = 0): queries computed, nothing written, whatever cache_index holds
    args, kw = mla_inputs(tokens=(3,), blocks=0)
    kw["cache_index"] = torch.arange(3)
    outs = V3(*args, **kw)
    assert outs[0].shape == (3, 2, 32) and args[9].shape == (0, 8, 1, 32)


def test_strict_mode_shapes_and_not_implemented_scenarios():
    args, kw = mla_inputs()
    with na.strict("A2"), pytest.raises(ValueError, match="expected token_x He in"):
        V3(*args, **kw)
    with pytest.raises(NotImplementedError, match="not implemented"):
        V3(*args, **dict(kw, weight_quant_mode=4))
    with pytest.raises(RuntimeError, match="requires_grad|require grad"):
        V3(args[0].float().bfloat16().requires_grad_(), *args[1:], **kw)
