"""torch_npu.scatter_update and scatter_update_: per-batch slab writes along an axis.

Formula (aclnnInplaceScatterUpdate, hicann/ops-nn ``index/scatter/docs``; the seed 004 doc gives
no formula), with ``a`` the normalized ``axis`` (never 0) and ``e = updates.shape[a]``::

    indices 1-D [u0]:     data[i, ..., indices[i] + k, ...] = updates[i, ..., k, ...]
    indices 2-D [u0, 2]:  data[indices[i, 0], ..., indices[i, 1] + k, ...] = updates[i, ..., k, ...]
    indices 0-D:          as 1-D with one row (updates.shape[0] == 1)
                          for every i < u0 and k < e; the other dims are copied whole.

``scatter_update`` writes into a copy of ``data``; ``scatter_update_`` writes into ``data`` and
returns it.  Values are copied bit for bit.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace
from ...params import accept_alias
from ...targets import Product
from ._common import FLOAT8, INDEX_DTYPES, expect_dtype_now, expect_in_range
from .paged import bitwise

OP = "scatter_update"
SCHEMA = "scatter_update(Tensor self, Tensor indices, Tensor updates, int axis) -> Tensor"
INPLACE_PUBLIC_OP = "scatter_update_"
INPLACE_PUBLIC_SCHEMA = ("scatter_update_(Tensor(a!) self, Tensor indices, Tensor updates, "
                         "int axis) -> Tensor(a!)")
INPLACE_OP = "_scatter_update_inplace"
INPLACE_SCHEMA = ("_scatter_update_inplace(Tensor(a!) self, Tensor indices, Tensor updates, "
                  "int axis) -> ()")

_A2 = (torch.int8, torch.uint8, torch.float16, torch.float32, torch.int32, torch.bfloat16)
_PER_PRODUCT = {
    # seed 004 lists int8/float16/float32/int32 (+ bfloat16 on A2/A3); the aclnn doc adds uint8
    # (all but 910) and the float8 formats (950 only).
    Product.ATLAS_TRAINING: (torch.int8, torch.float16, torch.float32, torch.int32),
    Product.A2: _A2,
    Product.A3: _A2,
    Product.ASCEND_950: _A2 + FLOAT8,
}
# Default mode: the union, plus float64 (a plain copy; lets float64 pipelines run).
_DEFAULT = _A2 + FLOAT8 + (torch.float64,)
_SUPPORTED = frozenset(_PER_PRODUCT)


def _check(op, data, indices, updates, axis):
    targets.expect_supported(op, _SUPPORTED)
    expect_dtype_now(data, _DEFAULT, _PER_PRODUCT, op, "data")
    checks.expect_same_dtype({"data": data, "updates": updates}, op)
    checks.expect_dtype(indices, INDEX_DTYPES, op, "indices")
    checks.expect_same_device({"data": data, "indices": indices, "updates": updates}, op)
    checks.expect_dim(data, tuple(range(2, 9)), op, "data")
    checks.expect(updates.dim() == data.dim(), op, "updates",
                  lambda: f"{data.dim()} dims (the rank of data)",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)
    checks.expect_dim(indices, (0, 1, 2), op, "indices")
    for name, t in (("data", data), ("indices", indices), ("updates", updates)):
        checks.expect_nonempty(t, op, name)
    rank = data.dim()
    checks.expect(-rank < axis < rank and axis % rank != 0, op, "axis",
                  lambda: f"in ({-rank}, {rank}) and not the batch dim 0", axis, ValueError)
    check_slab_shapes(op, data, indices, updates, axis % rank)


def check_slab_shapes(op, data, indices, updates, ax, data_name="data") -> None:
    """The shape relations of the slab write (also used by npu_quant_scatter): 2-D indices are
    pairs, ``updates.shape[0]`` is the number of indices and at most data's, and updates has
    data's shape except in dim 0 and along the (normalized) axis ``ax``, where it is no larger."""
    rank = data.dim()
    if indices.dim() == 2:
        checks.expect(indices.shape[1] == 2, op, "indices",
                      "a second dim of 2 ([batch index, offset] pairs) when 2-D",
                      lambda: f"shape {tuple(indices.shape)}", RuntimeError)
    rows = 1 if indices.dim() == 0 else indices.shape[0]
    checks.expect(updates.shape[0] == rows, op, "updates",
                  lambda: f"dim 0 equal to the number of indices ({rows})",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)
    checks.expect(updates.shape[0] <= data.shape[0], op, "updates",
                  lambda: f"dim 0 <= {data_name}'s dim 0 ({data.shape[0]})",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)
    for d in range(1, rank):
        ok = updates.shape[d] <= data.shape[d] if d == ax else updates.shape[d] == data.shape[d]
        checks.expect(ok, op, "updates",
                      lambda: f"the shape of {data_name} {tuple(data.shape)} except in dims 0 "
                      f"and {ax} (axis), and no larger along the axis",
                      lambda: f"shape {tuple(updates.shape)}", RuntimeError)


def check_scatter_update(self, indices, updates, axis):
    _check(OP, self, indices, updates, axis)


def check_scatter_update_(self, indices, updates, axis):
    _check(INPLACE_PUBLIC_OP, self, indices, updates, axis)


def write_scatter_update(op, data, indices, updates, axis, data_name="data") -> None:
    """Validate the index values, then write ``updates`` into ``data`` (the formula above);
    ``data_name`` names data in the messages."""
    ax = axis % data.dim()
    span = updates.shape[ax]
    idx = indices.to(torch.int64).reshape(-1, 2 if indices.dim() == 2 else 1)
    if indices.dim() == 2:
        rows, start = idx[:, 0], idx[:, 1]
        expect_in_range(rows, 0, data.shape[0], op, "indices", "batch indices (column 0)")
    else:
        rows, start = torch.arange(idx.shape[0], device=data.device), idx[:, 0]
    expect_in_range(start, 0, data.shape[ax] - span + 1, op, "indices",
                    f"offsets along axis {axis}",
                    f" (offset + updates.shape[axis] ({span}) <= {data_name}.shape[axis] "
                    f"({data.shape[ax]}))")
    positions = start[:, None] + torch.arange(span, device=data.device)
    # Every write goes through one advanced-indexing assignment on a view of data.
    bitwise(data).movedim(ax, 1)[rows[:, None], positions] = bitwise(updates).movedim(ax, 1)


def scatter_update_reference(self, indices, updates, axis):
    out = self.clone()
    write_scatter_update(OP, out, indices, updates, axis)
    return out


def _scatter_update_fake(self, indices, updates, axis):
    return torch.empty_like(self)


def scatter_update_inplace_reference(self, indices, updates, axis):
    write_scatter_update(INPLACE_PUBLIC_OP, self, indices, updates, axis)


scatter_update_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_scatter_update,
                          reference=scatter_update_reference, fake=_scatter_update_fake,
                          metadata_check=True, info=OpInfo(api="torch_npu"))
scatter_update_op.forbid_autograd("scatter_update has no backward on the NPU (op-plugin's "
                                  "derivatives.yaml lists none)")

scatter_update_inplace_op, scatter_update_inplace_public_op = define_inplace(
    INPLACE_PUBLIC_SCHEMA, INPLACE_SCHEMA, check=check_scatter_update_,
    reference=scatter_update_inplace_reference,
    no_grad="scatter_update_ has no backward on the NPU")


_DOC_COMMON = """
    Formula (aclnnInplaceScatterUpdate; ``a`` = axis normalized, ``e = updates.shape[a]``)::

        indices [u0]:     data[i, ..., indices[i] + k, ...]       = updates[i, ..., k, ...]
        indices [u0, 2]:  data[indices[i, 0], ..., indices[i, 1] + k, ...] = updates[i, ..., k, ...]
        indices 0-D:      as [1] (updates.shape[0] == 1)

    for ``i < u0`` and ``k < e``; all other dims are copied whole.

    Parameters
    ----------
    data : Tensor
        2-D to 8-D; int8, uint8, float16, float32, int32, bfloat16, float8_e4m3fn or
        float8_e5m2 (float64 also accepted outside strict mode).  ``self=`` (op-plugin's name)
        is accepted as an alias.  Non-contiguous tensors are fine.
    indices : Tensor
        int32 or int64; 1-D (one offset per batch row of updates), 2-D ``[u0, 2]`` of
        ``(batch index, offset)`` pairs, or 0-D.
    updates : Tensor
        The dtype and rank of ``data``; equal to data's shape except in dim 0
        (``u0 <= data.shape[0]``) and along ``axis`` (``e <= data.shape[axis]``).
    axis : int
        In ``(-rank, rank)``, not 0 (dim 0 is the batch dim the indices select).

    Constraints
    -----------
    No empty tensors.  ``0 <= offset`` and ``offset + e <= data.shape[axis]``, batch indices in
    ``[0, data.shape[0])``: the NPU does not check them ("索引越界不校验"); we raise IndexError
    before writing anything.  Repeated positions: which update wins is unspecified (as
    documented).  Strict mode: Atlas training (910: no bfloat16, uint8, float8), A2, A3
    (no float8) and the 950 (aclnn doc).

    Notes
    -----
    No autograd (none in op-plugin's derivatives.yaml).  0-D indices and the uint8/float8
    dtypes come from the aclnn doc (hicann/ops-nn
    ``index/scatter/docs/aclnnInplaceScatterUpdate.md``);
    the write pattern from its golden ``index/scatter/tests/assets/golden.py``.
"""


def scatter_update(data=None, indices=None, updates=None, axis=None, **kwargs):
    if kwargs:
        data = accept_alias(OP, "data", data, "self", kwargs)
    return scatter_update_op(data, indices, updates, axis)


def scatter_update_(data=None, indices=None, updates=None, axis=None, **kwargs):
    if kwargs:
        data = accept_alias(INPLACE_PUBLIC_OP, "data", data, "self", kwargs)
    return scatter_update_inplace_public_op(data, indices, updates, axis)


scatter_update.__doc__ = """Write ``updates`` into a copy of ``data`` at per-batch offsets along
    ``axis`` (``torch_npu.scatter_update``); ``data`` is unchanged.
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        A new tensor of data's shape, dtype and strides.

    Examples
    --------
    >>> data = torch.tensor([[[[1.] * 8, [2.] * 8]]])
    >>> out = npu_anywhere.scatter_update(data, torch.tensor([1]), torch.full((1, 1, 1, 8), 3.), -2)
    >>> out[0, 0, 1, 0].item(), data[0, 0, 1, 0].item()
    (3.0, 2.0)
"""

scatter_update_.__doc__ = """Write ``updates`` into ``data`` in place at per-batch offsets along
    ``axis`` and return ``data`` (``torch_npu.scatter_update_``).
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        ``data`` itself.  When the call raises, ``data`` is untouched.
"""


TORCH_NPU_FUNCTIONS = {"scatter_update": scatter_update, "scatter_update_": scatter_update_}
