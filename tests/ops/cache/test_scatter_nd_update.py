"""npu_scatter_nd_update (copy) and npu_scatter_nd_update_ (in place) against a golden written
from seed 004 (TensorFlow ScatterNdUpdate)::

    a = indices.shape[-1];  updates.shape = indices.shape[:-1] + input.shape[a:]
    input[indices[j][0], ..., indices[j][a-1]] = updates[j]      for every j in indices.shape[:-1]

(op-plugin's own golden: ``var[indices[i][0]][indices[i][1]] = updates[i]``.)
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_helpers import bits, values  # noqa: E402

OP = "npu_scatter_nd_update: expected"
IOP = "npu_scatter_nd_update_: expected"
DTYPES = [torch.float32, torch.float16, torch.bool, torch.bfloat16, torch.int64, torch.int8,
          torch.float8_e4m3fn, torch.float8_e5m2, torch.float64]
def distinct_indices(shape, lead, seed, dtype=torch.int64):
    """Distinct index tuples (the result is then independent of the write order)."""
    gen = torch.Generator().manual_seed(seed)
    count = int(torch.tensor(lead).prod())
    combos = list(itertools.product(*(range(n) for n in shape)))
    pick = torch.randperm(len(combos), generator=gen)[:count].tolist()
    return torch.tensor([combos[p] for p in pick], dtype=dtype).reshape(tuple(lead) + (len(shape),))


def golden(x, indices, updates):
    out = bits(x.clone()).clone()
    upd = bits(updates)
    depth = indices.shape[-1]
    for j in itertools.product(*(range(n) for n in indices.shape[:-1])):
        target = tuple(int(v) for v in indices[j])
        assert len(target) == depth
        out[target] = upd[j]
    return out


def make(dtype=torch.float32, *, shape=(4, 5, 6), depth=2, lead=(3,), index_dtype=torch.int64,
         seed=0):
    x = values(shape, dtype, seed)
    indices = distinct_indices(shape[:depth], lead, seed + 1, index_dtype)
    updates = values(tuple(lead) + tuple(shape[depth:]), dtype, seed + 2)
    return x, indices, updates


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_both_variants_match_golden(dtype):
    x, indices, updates = make(dtype)
    want = golden(x, indices, updates)
    x0 = x.clone()
    out = na.npu_scatter_nd_update(x, indices, updates)
    assert torch.equal(bits(out), want) and out.dtype == dtype
    assert torch.equal(bits(x), bits(x0))
    assert na.npu_scatter_nd_update_(x, indices, updates) is x
    assert torch.equal(bits(x), want)


@pytest.mark.parametrize("shape,depth,lead", [((4, 5, 6), 1, (3,)), ((4, 5, 6), 3, (2, 5)),
                                              ((7,), 1, (4,)), ((3, 4), 2, (1,)),
                                              ((2, 2, 2, 2, 2, 2, 2, 3), 7, (2,)),
                                              ((5, 3), 1, (2, 1, 2))], ids=str)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
def test_depths_ranks_and_index_dtypes(shape, depth, lead, index_dtype):
    x, indices, updates = make(torch.float16, shape=shape, depth=depth, lead=lead,
                               index_dtype=index_dtype, seed=depth)
    want = golden(x, indices, updates)
    assert torch.equal(bits(na.npu_scatter_nd_update(x, indices, updates)), want)
    na.npu_scatter_nd_update_(x, indices, updates)
    assert torch.equal(bits(x), want)


def test_op_plugin_golden_case():
    var = torch.zeros(3, 2, dtype=torch.float16)
    out = na.npu_scatter_nd_update(var, torch.tensor([[0, 0], [1, 1]]),
                                   torch.tensor([10, 20], dtype=torch.float16))
    assert torch.equal(out, torch.tensor([[10, 0], [0, 20], [0, 0]], dtype=torch.float16))


def test_doc_shape_example():
    """Seed 004: input (4, 5, 6), indices (3, 2) -> updates (3, 6)."""
    x, indices, updates = make(shape=(4, 5, 6), depth=2, lead=(3,))
    assert updates.shape == (3, 6)
    assert torch.equal(bits(na.npu_scatter_nd_update(x, indices, updates)),
                       golden(x, indices, updates))
    with pytest.raises(RuntimeError, match=f"{OP} updates shape indices.shape\\[:-1\\] \\+ "
                       "input.shape\\[2:\\] = \\(3, 6\\)"):
        na.npu_scatter_nd_update(x, indices, updates[:, :5])


def test_non_contiguous_and_empty():
    x, indices, updates = make(torch.bfloat16, shape=(6, 4, 5), depth=1, lead=(3,))
    want = golden(x, indices, updates)
    x_nc = x.transpose(0, 2).contiguous().transpose(0, 2)
    out = na.npu_scatter_nd_update(x_nc, indices[::1], updates.transpose(1, 2).contiguous()
                                   .transpose(1, 2))
    assert torch.equal(bits(out), want) and out.stride() == x_nc.stride()
    na.npu_scatter_nd_update_(x_nc, indices, updates)
    assert torch.equal(bits(x_nc), want)
    empty = torch.zeros(0, 1, dtype=torch.int64)
    assert torch.equal(na.npu_scatter_nd_update(x, empty, updates[:0]), x)


def test_input_alias():
    x, indices, updates = make()
    assert torch.equal(bits(na.npu_scatter_nd_update(self=x, indices=indices, updates=updates)),
                       golden(x, indices, updates))


@pytest.mark.parametrize("value,column", [(4, 0), (5, 1), (-1, 0)])
def test_out_of_range_raises_and_changes_nothing(value, column):
    x, indices, updates = make()
    indices[-1, column] = value
    x0 = x.clone()
    for fn, prefix in ((na.npu_scatter_nd_update, OP), (na.npu_scatter_nd_update_, IOP)):
        with pytest.raises(IndexError, match=f"{prefix} indices values in column {column}"):
            fn(x, indices, updates)
        assert torch.equal(x, x0)


@pytest.mark.parametrize("change,error,match", [
    ("int32_input", TypeError, "input dtype in"),
    ("mixed", TypeError, "updates the same dtype as input"),
    ("index_dtype", TypeError, "indices dtype in"),
    ("indices_1d", ValueError, "indices at least 2 dims"),
    ("depth_too_big", RuntimeError, "indices a last dim \\(index depth\\) in \\[1, 3\\]"),
    ("depth_zero", RuntimeError, "indices a last dim"),
    ("rank9", ValueError, "input a tensor with one of"),
])
def test_bad_metadata(change, error, match):
    x, indices, updates = make()
    if change == "int32_input":
        x, updates = x.int(), updates.int()
    elif change == "mixed":
        updates = updates.double()
    elif change == "index_dtype":
        indices = indices.short()
    elif change == "indices_1d":
        indices = indices[0]
    elif change == "depth_too_big":
        indices = torch.zeros(3, 4, dtype=torch.int64)
    elif change == "depth_zero":
        indices = torch.zeros(3, 0, dtype=torch.int64)
    else:
        x = torch.zeros((1,) * 9)
        indices = torch.zeros(1, 1, dtype=torch.int64)
        updates = torch.zeros((1,) * 9)
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_scatter_nd_update(x, indices, updates)
    with pytest.raises(error, match=f"{IOP} {match}"):
        na.npu_scatter_nd_update_(x, indices, updates)


def test_depth_at_most_seven():
    x = torch.zeros((2,) * 8)
    with pytest.raises(RuntimeError, match=f"{OP} indices a last dim \\(index depth\\) in "
                       "\\[1, 7\\]"):
        na.npu_scatter_nd_update(x, torch.zeros(1, 8, dtype=torch.int64), torch.zeros(1))


def test_strict_mode():
    x, indices, updates = make(torch.bfloat16)
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(TypeError, match=f"{OP} input dtype in .* on "
                                                                f"{product}"):
            na.npu_scatter_nd_update(x, indices, updates)
        with na.strict(product):
            na.npu_scatter_nd_update(*make(torch.bool))
    with na.strict("A3"):
        na.npu_scatter_nd_update(x, indices, updates)
        na.npu_scatter_nd_update(*make(torch.int64))
        with pytest.raises(TypeError, match=f"{OP} input dtype in .* on A3"):
            na.npu_scatter_nd_update(*make(torch.float8_e5m2))
    with na.strict("950"):
        na.npu_scatter_nd_update(*make(torch.float8_e4m3fn))


def test_no_autograd():
    x, indices, updates = make()
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.npu_scatter_nd_update(x, indices, updates.requires_grad_())
