"""npu_mla_prolog (v1) and npu_mla_prolog_v2 against the float64 golden of mla_prolog_golden.py."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from mla_prolog_golden import golden
from npu_anywhere.testing.opdb.mla_prolog import v1v2_inputs
from test_mla_prolog_v3 import _check_caches, _close_bf16, _close_int8


def _v3_view(args, kw, scenario):
    """The golden's (args, kwargs) form of a v1/v2 call."""
    v3_args = args[:9] + args[10:]
    v3_kw = dict(kw, cache_index=args[9], weight_quant_mode=scenario[0],
                 kv_cache_quant_mode=scenario[1], query_quant_mode=scenario[2])
    return v3_args, v3_kw


@pytest.mark.parametrize("scenario,mode", [((0, 0, 0), "PA_BSND"), ((1, 2, 0), "PA_NZ")])
def test_v1_matches_golden_and_writes_in_place(scenario, mode):
    args, kw = v1v2_inputs(1, tokens=(2, 3), scenario=scenario, cache_mode=mode, dr=32)
    v3_args, v3_kw = _v3_view(args, kw, scenario)
    before = args[10].clone(), args[11].clone()
    gold = golden(v3_args, v3_kw)
    query, q_rope, kv_out, kr_out = na.npu_mla_prolog(*args, **kw)
    assert kv_out is args[10] and kr_out is args[11]
    _close_bf16(query.reshape(6, 2, -1), gold["query"])
    _close_bf16(q_rope.reshape(6, 2, -1), gold["query_rope"])
    _check_caches(v3_args, v3_kw, gold, *before, (2, 3))


def test_v2_full_quant_matches_golden():
    scenario = (2, 1, 1)
    args, kw = v1v2_inputs(2, tokens=(5,), scenario=scenario)
    v3_args, v3_kw = _v3_view(args, kw, scenario)
    before = args[10].clone(), args[11].clone()
    gold = golden(v3_args, v3_kw)
    query, q_rope, kv_out, kr_out, scale = na.npu_mla_prolog_v2(*args, **kw)
    assert kv_out is args[10] and query.dtype == torch.int8 and scale.shape == (5, 2, 1)
    _close_int8(query, gold["query"])
    torch.testing.assert_close(scale.double(), gold["scale_q_nope"], rtol=1e-5, atol=0)
    _close_bf16(q_rope, gold["query_rope"])
    _check_caches(v3_args, v3_kw, gold, *before, (5,))


def test_v2_agrees_with_v3_and_returns_a_one_element_scale():
    args, kw = v1v2_inputs(2, scenario=(1, 0, 0))
    v3_args, v3_kw = _v3_view(args, kw, (1, 0, 0))
    v3_args = v3_args[:9] + (v3_args[9].clone(), v3_args[10].clone())
    outs = na.npu_mla_prolog_v2(*args, **kw)
    ref = na.npu_mla_prolog_v3(*v3_args, **v3_kw)
    assert torch.equal(outs[0], ref[0]) and torch.equal(outs[1], ref[1])
    assert torch.equal(outs[2], v3_args[9]) and torch.equal(outs[3], v3_args[10])
    assert outs[4].shape == (1,) and outs[4].dtype == torch.float32


def test_v1_rejects_v3_only_modes():
    args, kw = v1v2_inputs(1)
    with pytest.raises(ValueError, match="npu_mla_prolog: expected cache_mode one of"):
        na.npu_mla_prolog(*args, **dict(kw, cache_mode="PA_BLK_BSND"))
    with pytest.raises(TypeError, match="npu_mla_prolog: expected token_x dtype"):
        na.npu_mla_prolog(*v1v2_inputs(1, scenario=(2, 0, 0))[0], **kw)


def test_strict_mode_products():
    args, kw = v1v2_inputs(2)
    with na.strict("950"), pytest.raises(RuntimeError, match="npu_mla_prolog_v2: expected a "
                                                             "product the op supports"):
        na.npu_mla_prolog_v2(*args, **kw)
    with na.strict("A3"), pytest.raises(ValueError, match="npu_mla_prolog_v2: expected token_x "
                                                          r"He in \[7168\]"):
        na.npu_mla_prolog_v2(*args, **kw)
