"""torch.ops.custom.<op>: seed 004's ``custom.<op>`` prototypes, forwarding to torch.ops.npu."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere  # noqa: F401  (registers the ops)
from npu_anywhere import custom_namespace, library
from npu_anywhere.testing.opdb import OPDB

NAMES = custom_namespace.custom_op_names()
pytestmark = pytest.mark.skipif(library.REAL_TORCH_NPU,
                                reason="a real torch_npu owns torch.ops.custom")


def test_the_four_documented_custom_ops_are_served():
    assert NAMES == ["npu_kv_quant_sparse_flash_attention", "npu_lightning_indexer",
                     "npu_quant_lightning_indexer", "npu_sparse_flash_attention"]
    for name in NAMES:
        custom = getattr(torch.ops.custom, name).default._schema
        npu = getattr(torch.ops.npu, name).default._schema
        assert str(custom).replace("custom::", "npu::") == str(npu)


def _leaves(out):
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", NAMES)
def test_custom_calls_compute_what_npu_calls_compute(name):
    sample = OPDB[name].samples[0]
    args, kwargs = sample.make()
    want = getattr(torch.ops.npu, name)(*args, **kwargs)
    args, kwargs = sample.make()
    got = getattr(torch.ops.custom, name)(*args, **kwargs)
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    args, kwargs = sample.make()
    mode = FakeTensorMode()
    with mode:
        fargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, args)
        fkwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, kwargs)
        fake = getattr(torch.ops.custom, name)(*fargs, **fkwargs)
    assert [t.shape for t in _leaves(fake)] == [t.shape for t in _leaves(want)]


def test_errors_and_compile_go_through_the_npu_op():
    name = "npu_lightning_indexer"
    bad = OPDB[name].errors[0]
    args, kwargs = bad.make()
    with pytest.raises(bad.error, match=bad.match):
        torch.ops.custom.npu_lightning_indexer(*args, **kwargs)
    args, kwargs = OPDB[name].samples[0].make()
    compiled = torch.compile(lambda *a: torch.ops.custom.npu_lightning_indexer(*a, **kwargs),
                             fullgraph=True, backend="aot_eager")
    for g, w in zip(_leaves(compiled(*args)),
                    _leaves(torch.ops.npu.npu_lightning_indexer(*args, **kwargs)), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
