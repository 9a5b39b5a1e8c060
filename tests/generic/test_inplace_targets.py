"""Written arguments (``Tensor(a!)`` in the schema) are checked before the first write.

For every op of the op database that writes into an argument, each written argument in turn is
made (a) an inference tensor used outside inference mode and (b) an expanded view whose
elements share memory.  Both must raise a RuntimeError naming the op and that parameter, on the
op object, through ``torch.ops`` and under FakeTensor alike, with every input left as it was --
never a half-done write followed by torch's own message about the second target.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.library import REGISTRY
from npu_anywhere.testing.opdb import OPDB


def _written(op):
    return [(i, a.name) for i, a in enumerate(op.overload._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


CASES = [(name, i, param) for name in sorted(OPDB) if name in REGISTRY and OPDB[name].samples
         for i, param in _written(REGISTRY[name])]


def _ids(cases):
    return [f"{name}-{param}" for name, _, param in cases]


def _expandable(name, i, param):
    """Whether the first sample's target has a dimension an expanded view could alias."""
    args, kwargs = OPDB[name].samples[0].make()
    target = args[i] if i < len(args) else kwargs[param]
    return any(size > 1 for size in target.shape)


# Targets with no dimension to expand (empty or one element) cannot share memory.
EXPAND_CASES = [case for case in CASES if _expandable(*case)]


def _replace(args, kwargs, i, param, fn):
    args, kwargs = list(args), dict(kwargs)
    if i < len(args):
        args[i] = fn(args[i])
    else:
        kwargs[param] = fn(kwargs[param])
    return tuple(args), kwargs


def _inference_copy(t):
    with torch.inference_mode():
        return t.clone()


def _expanded(t):
    """``t``'s shape with the first dim of size > 1 read through stride 0."""
    dim = next(d for d, size in enumerate(t.shape) if size > 1)
    index = [slice(None)] * t.dim()
    index[dim] = slice(0, 1)
    return t[tuple(index)].expand(t.shape)


def _snapshot(args, kwargs):
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    return tensors, [t.clone() for t in tensors]


def _assert_untouched(tensors, before, where):
    for t, b in zip(tensors, before):
        assert torch.equal(t.view(torch.uint8) if t.dtype.itemsize == 1 else t,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b), where


def _public(name):
    return REGISTRY[name].arguments.op


@pytest.mark.parametrize("name,i,param", CASES, ids=_ids(CASES))
def test_an_inference_tensor_target_is_rejected_before_any_write(name, i, param):
    op = REGISTRY[name]
    message = f"{_public(name)}: expected {param} a tensor that may be written outside"
    for door in (op, op.overload):
        args, kwargs = _replace(*OPDB[name].samples[0].make(), i, param, _inference_copy)
        tensors, before = _snapshot(args, kwargs)
        with pytest.raises(RuntimeError, match=message):
            door(*args, **kwargs)
        _assert_untouched(tensors, before, (name, param, door))
    # Inside inference mode the same tensors may be written.
    args, kwargs = _replace(*OPDB[name].samples[0].make(), i, param, _inference_copy)
    with torch.inference_mode():
        op(*args, **kwargs)


@pytest.mark.parametrize("name,i,param", EXPAND_CASES, ids=_ids(EXPAND_CASES))
def test_an_expanded_target_is_rejected_in_eager_and_fake(name, i, param):
    op = REGISTRY[name]
    message = f"{_public(name)}: expected {param} a tensor whose elements do not share memory"
    errors = []
    for door in (op, op.overload):
        args, kwargs = _replace(*OPDB[name].samples[0].make(), i, param, _expanded)
        tensors, before = _snapshot(args, kwargs)
        with pytest.raises(RuntimeError, match=message) as info:
            door(*args, **kwargs)
        errors.append(str(info.value))
        _assert_untouched(tensors, before, (name, param, door))
    args, kwargs = _replace(*OPDB[name].samples[0].make(), i, param, _expanded)
    mode = FakeTensorMode()
    fargs = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
    fkwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
               for k, v in kwargs.items()}
    with pytest.raises(RuntimeError) as fake, mode:
        op.overload(*fargs, **fkwargs)
    assert str(fake.value) == errors[0] == errors[1]


def test_the_written_lists_cover_the_in_place_ops_named_in_the_docs():
    names = {name for name, _, _ in CASES}
    for expected in ("npu_scatter_pa_kv_cache", "npu_apply_rotary_pos_emb", "npu_silu_",
                     "npu_advance_step_flashattn", "scatter_update_", "npu_scatter_nd_update_",
                     "npu_quant_scatter_", "npu_kv_rmsnorm_rope_cache",
                     "npu_kv_rmsnorm_rope_cache_v2"):
        assert expected in names, expected


def test_value_cache_inference_tensor_leaves_key_cache_unwritten():
    """The reported case: a plain key_cache and an inference value_cache."""
    args, kwargs = OPDB["npu_scatter_pa_kv_cache"].samples[0].make()
    key, value, kc, vc, slots = args[:5]
    vc = _inference_copy(vc)
    kc_before = kc.clone()
    with pytest.raises(RuntimeError, match="npu_scatter_pa_kv_cache: expected value_cache a "
                       "tensor that may be written outside torch.inference_mode"):
        na.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, *args[5:], **kwargs)
    assert torch.equal(kc, kc_before)


def test_expanded_key_leaves_query_unrotated():
    q = torch.randn(1, 2, 2, 64)
    k = torch.randn(1, 2, 1, 64).expand(1, 2, 2, 64)
    cos = torch.randn(1, 2, 1, 64)
    q_before = q.clone()
    with pytest.raises(RuntimeError, match="npu_apply_rotary_pos_emb: expected key a tensor "
                       r"whose elements do not share memory .*, but got strides \(128, 64, 0, 1\)"):
        na.npu_apply_rotary_pos_emb(q, k, cos, cos)
    assert torch.equal(q, q_before)


def test_transposed_and_sliced_targets_are_still_written():
    """Non-contiguous is fine as long as no two elements share memory."""
    x = torch.randn(8, 4).t()
    want = na.npu_silu(x.contiguous())
    na.npu_silu_(x)
    torch.testing.assert_close(x, want, rtol=0, atol=0)
