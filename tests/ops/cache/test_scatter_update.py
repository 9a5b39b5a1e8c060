"""scatter_update (copy) and scatter_update_ (in place) against a golden written from the aclnn
doc's formula (hicann/ops-nn index/scatter, aclnnInplaceScatterUpdate)::

    indices 1-D:  data[i][..][indices[i] + k][..] = updates[i][..][k][..]     (axis = -2: dim 2)
    indices 2-D:  data[indices[i][0]][..][indices[i][1] + k][..] = updates[i][..][k][..]

for every batch row i of updates and every k < updates.shape[axis]; the golden walks every
element of updates with Python loops.
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

OP = "scatter_update: expected"
IOP = "scatter_update_: expected"
DTYPES = [torch.int8, torch.uint8, torch.float16, torch.float32, torch.int32, torch.bfloat16,
          torch.float8_e4m3fn, torch.float8_e5m2, torch.float64]
def golden(data, indices, updates, axis):
    out = bits(data.clone()).clone()
    upd = bits(updates)
    ax = axis % data.dim()
    for pos in itertools.product(*(range(n) for n in updates.shape)):
        i, k = pos[0], pos[ax]
        if indices.dim() == 2:
            row, start = int(indices[i][0]), int(indices[i][1])
        elif indices.dim() == 1:
            row, start = i, int(indices[i])
        else:
            row, start = i, int(indices)
        target = list(pos)
        target[0] = row
        target[ax] = start + k
        out[tuple(target)] = upd[pos]
    return out


def make(dtype=torch.float32, *, shape=(4, 3, 7, 5), axis=-2, span=2, rows=3, index_dims=1,
         index_dtype=torch.int64, seed=0):
    data = values(shape, dtype, seed)
    ax = axis % len(shape)
    ushape = list(shape)
    ushape[0], ushape[ax] = rows, span
    updates = values(tuple(ushape), dtype, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    if index_dims == 2:
        batch = torch.randperm(shape[0], generator=gen)[:rows]
        indices = torch.stack((batch, torch.randint(0, shape[ax] - span + 1, (rows,),
                                                    generator=gen)), 1)
    elif index_dims == 0:
        indices = torch.tensor(shape[ax] - span)
    else:
        indices = torch.randint(0, shape[ax] - span + 1, (rows,), generator=gen)
    return data, indices.to(index_dtype), updates


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_both_variants_match_golden(dtype):
    data, indices, updates = make(dtype)
    want = golden(data, indices, updates, -2)
    data0 = data.clone()
    out = na.scatter_update(data, indices, updates, -2)
    assert torch.equal(bits(out), want) and out.dtype == dtype
    assert torch.equal(bits(data), bits(data0)), "scatter_update must not touch data"
    ret = na.scatter_update_(data, indices, updates, -2)
    assert ret is data
    assert torch.equal(bits(data), want)


@pytest.mark.parametrize("shape,axis", [((4, 3, 7, 5), -1), ((4, 3, 7, 5), 1), ((4, 3, 7, 5), 3),
                                        ((5, 9), 1), ((5, 9), -1), ((2, 3, 4, 5, 6), 2),
                                        ((3, 2, 2, 2, 2, 2, 2, 4), -1)], ids=str)
@pytest.mark.parametrize("index_dims", [0, 1, 2])
def test_axes_ranks_and_index_forms(shape, axis, index_dims):
    rows = 1 if index_dims == 0 else 2
    data, indices, updates = make(torch.bfloat16, shape=shape, axis=axis, rows=rows, span=2,
                                  index_dims=index_dims, index_dtype=torch.int32, seed=len(shape))
    want = golden(data, indices, updates, axis)
    assert torch.equal(bits(na.scatter_update(data, indices, updates, axis)), want)
    na.scatter_update_(data, indices, updates, axis)
    assert torch.equal(bits(data), want)


def test_doc_style_kv_cache_append():
    """The seed example: [1, 1, 2, 8] data, index 1 along axis -2, one new row."""
    data = torch.tensor([[[[1.] * 8, [2.] * 8]]])
    out = na.scatter_update(data, torch.tensor([1]), torch.full((1, 1, 1, 8), 3.), axis=-2)
    assert torch.equal(out, torch.tensor([[[[1.] * 8, [3.] * 8]]]))


def test_non_contiguous_data_and_updates():
    data, indices, updates = make(torch.float16, shape=(4, 6, 5, 3), axis=2)
    want = golden(data, indices, updates, 2)
    data_nc = data.transpose(1, 3).contiguous().transpose(1, 3)
    upd_nc = updates.transpose(1, 3).contiguous().transpose(1, 3)
    assert not data_nc.is_contiguous() and not upd_nc.is_contiguous()
    out = na.scatter_update(data_nc, indices, upd_nc, 2)
    assert out.stride() == data_nc.stride()           # clone keeps the layout
    assert torch.equal(bits(out), want)
    na.scatter_update_(data_nc, indices, upd_nc, 2)
    assert torch.equal(bits(data_nc), want)


def test_self_alias():
    data, indices, updates = make()
    want = golden(data, indices, updates, -2)
    assert torch.equal(bits(na.scatter_update(self=data, indices=indices, updates=updates,
                                              axis=-2)), want)


@pytest.mark.parametrize("bad,match", [
    ("offset_past_end", "indices offsets along axis -2 in \\[0, 5\\]"),
    ("negative_offset", "indices offsets along axis -2 in \\[0, 5\\]"),
    ("batch_index", "indices batch indices \\(column 0\\) in \\[0, 3\\]"),
])
def test_out_of_range_raises_and_changes_nothing(bad, match):
    data, indices, updates = make(index_dims=2 if bad == "batch_index" else 1)
    if bad == "offset_past_end":
        indices[-1] = 6
    elif bad == "negative_offset":
        indices[1] = -1
    else:
        indices[-1, 0] = 4
    data0 = data.clone()
    for fn, prefix in ((na.scatter_update, OP), (na.scatter_update_, IOP)):
        with pytest.raises(IndexError, match=f"{prefix} {match}"):
            fn(data, indices, updates, -2)
        assert torch.equal(data, data0)


@pytest.mark.parametrize("change,error,match", [
    ("int64_data", TypeError, "data dtype in"),
    ("mixed", TypeError, "updates the same dtype as data"),
    ("float_indices", TypeError, "indices dtype in"),
    ("rank1", ValueError, "data a tensor with one of"),
    ("axis0", ValueError, "axis in \\(-4, 4\\) and not the batch dim 0"),
    ("axis_out", ValueError, "axis in"),
    ("indices_3d", ValueError, "indices a tensor with one of \\[0, 1, 2\\] dims"),
    ("rows", RuntimeError, "updates dim 0 equal to the number of indices"),
    ("other_dim", RuntimeError, "updates the shape of data"),
    ("span", RuntimeError, "updates the shape of data"),
    ("empty", ValueError, "indices a non-empty tensor"),
])
def test_bad_metadata(change, error, match):
    data, indices, updates = make()
    axis = -2
    if change == "int64_data":
        data, updates = data.long(), updates.long()
    elif change == "mixed":
        updates = updates.half()
    elif change == "float_indices":
        indices = indices.float()
    elif change == "rank1":
        data, updates = data[0, 0, 0], updates[0, 0, 0]
    elif change == "axis0":
        axis = 0
    elif change == "axis_out":
        axis = 4
    elif change == "indices_3d":
        indices = indices[:, None, None]
    elif change == "rows":
        indices = indices[:2]
    elif change == "other_dim":
        updates = updates[:, :, :, :4]
    elif change == "span":
        updates = torch.cat([updates] * 4, dim=2)
    else:
        indices, updates = indices[:0], updates[:0]
    data0 = data.clone()
    with pytest.raises(error, match=f"{OP} {match}"):
        na.scatter_update(data, indices, updates, axis)
    with pytest.raises(error, match=f"{IOP} {match}"):
        na.scatter_update_(data, indices, updates, axis)
    assert torch.equal(data, data0)


def test_strict_mode_dtypes_and_products():
    data, indices, updates = make(torch.bfloat16)
    with na.strict("910"), pytest.raises(TypeError, match=f"{OP} data dtype in .* on 910"):
        na.scatter_update(data, indices, updates, -2)
    with na.strict("A2"):
        na.scatter_update(data, indices, updates, -2)
        with pytest.raises(TypeError, match=f"{OP} data dtype in .* on A2"):
            na.scatter_update(*make(torch.float8_e4m3fn)[:3], -2)
        with pytest.raises(TypeError, match=f"{OP} data dtype in"):
            na.scatter_update(*make(torch.float64)[:3], -2)
    with na.strict("950"):
        na.scatter_update(*make(torch.float8_e5m2)[:3], -2)
    with na.strict("310P"), pytest.raises(RuntimeError, match=f"{OP} a product the op"):
        na.scatter_update(data, indices, updates, -2)


def test_no_autograd():
    data, indices, updates = make()
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.scatter_update(data.requires_grad_(), indices, updates, -2)
