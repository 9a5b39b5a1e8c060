"""torch_npu.npu_scatter_nd_update and npu_scatter_nd_update_ (TensorFlow ScatterNdUpdate).

Formula (seed 004 constraints; aclnnScatterNdUpdate), with ``a = indices.shape[-1]``::

    input[indices[j][0], ..., indices[j][a-1], ...] = updates[j, ...]
    for every index tuple j of indices.shape[:-1]
    updates.shape = indices.shape[:-1] + input.shape[a:]

``npu_scatter_nd_update`` writes into a copy of ``input``; ``npu_scatter_nd_update_`` writes
into ``input`` and returns it.  Values are copied bit for bit.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace
from ...params import accept_alias
from ...targets import Product
from ._common import FLOAT8, INDEX_DTYPES, expect_dtype_now, expect_in_range
from .paged import bitwise

OP = "npu_scatter_nd_update"
SCHEMA = "npu_scatter_nd_update(Tensor self, Tensor indices, Tensor updates) -> Tensor"
INPLACE_PUBLIC_OP = "npu_scatter_nd_update_"
INPLACE_PUBLIC_SCHEMA = ("npu_scatter_nd_update_(Tensor(a!) self, Tensor indices, "
                         "Tensor updates) -> Tensor(a!)")
INPLACE_OP = "_npu_scatter_nd_update_inplace"
INPLACE_SCHEMA = ("_npu_scatter_nd_update_inplace(Tensor(a!) self, Tensor indices, "
                  "Tensor updates) -> ()")

_BASIC = (torch.float32, torch.float16, torch.bool)
_A2 = _BASIC + (torch.bfloat16, torch.int64, torch.int8)
_PER_PRODUCT = {
    Product.ATLAS_TRAINING: _BASIC,
    Product.ATLAS_INFERENCE: _BASIC,
    Product.A2: _A2,
    Product.A3: _A2,
    Product.ASCEND_950: _A2 + FLOAT8,   # aclnn doc: float8 formats on the 950 only
}
_DEFAULT = _A2 + FLOAT8 + (torch.float64,)
_SUPPORTED = frozenset(_PER_PRODUCT)
MAX_INDEX_DEPTH = 7          # aclnn doc: indices.shape[-1] in [1, 7] and <= rank(input)


def _check(op, x, indices, updates):
    targets.expect_supported(op, _SUPPORTED)
    expect_dtype_now(x, _DEFAULT, _PER_PRODUCT, op, "input")
    checks.expect_same_dtype({"input": x, "updates": updates}, op)
    checks.expect_dtype(indices, INDEX_DTYPES, op, "indices")
    checks.expect_same_device({"input": x, "indices": indices, "updates": updates}, op)
    checks.expect_dim(x, tuple(range(1, 9)), op, "input")
    checks.expect(indices.dim() >= 2, op, "indices", "at least 2 dims",
                  lambda: f"shape {tuple(indices.shape)}", ValueError)
    depth = indices.shape[-1]
    limit = min(MAX_INDEX_DEPTH, x.dim())
    checks.expect(1 <= depth <= limit, op, "indices",
                  lambda: f"a last dim (index depth) in [1, {limit}] (at most the rank of "
                  f"input, {x.dim()}, and 7)", lambda: f"shape {tuple(indices.shape)}",
                  RuntimeError)
    want = tuple(indices.shape[:-1]) + tuple(x.shape[depth:])
    checks.expect(tuple(updates.shape) == want, op, "updates",
                  lambda: f"shape indices.shape[:-1] + input.shape[{depth}:] = {want}",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)


def check_scatter_nd_update(self, indices, updates):
    _check(OP, self, indices, updates)


def check_scatter_nd_update_(self, indices, updates):
    _check(INPLACE_PUBLIC_OP, self, indices, updates)


def write_scatter_nd_update(op, x, indices, updates) -> None:
    """Validate the index values, then write ``updates`` into ``x`` (the formula above)."""
    depth = indices.shape[-1]
    idx = indices.to(torch.int64)
    for k in range(depth):
        expect_in_range(idx[..., k], 0, x.shape[k], op, "indices",
                        f"values in column {k} (dim {k} of input)")
    bitwise(x)[tuple(idx[..., k] for k in range(depth))] = bitwise(updates)


def scatter_nd_update_reference(self, indices, updates):
    out = self.clone()
    write_scatter_nd_update(OP, out, indices, updates)
    return out


def _scatter_nd_update_fake(self, indices, updates):
    return torch.empty_like(self)


def scatter_nd_update_inplace_reference(self, indices, updates):
    write_scatter_nd_update(INPLACE_PUBLIC_OP, self, indices, updates)


scatter_nd_update_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_scatter_nd_update,
                             reference=scatter_nd_update_reference, fake=_scatter_nd_update_fake,
                             metadata_check=True, info=OpInfo(api="torch_npu"))
scatter_nd_update_op.forbid_autograd("npu_scatter_nd_update has no backward on the NPU "
                                     "(op-plugin's derivatives.yaml lists none)")

scatter_nd_update_inplace_op, scatter_nd_update_inplace_public_op = define_inplace(
    INPLACE_PUBLIC_SCHEMA, INPLACE_SCHEMA, check=check_scatter_nd_update_,
    reference=scatter_nd_update_inplace_reference,
    no_grad="npu_scatter_nd_update_ has no backward on the NPU")


_DOC_COMMON = """
    Formula (TensorFlow ScatterNdUpdate; ``a = indices.shape[-1]``)::

        input[indices[j][0], ..., indices[j][a - 1], ...] = updates[j, ...]

    for every index tuple ``j`` over ``indices.shape[:-1]``; the trailing ``input.shape[a:]``
    dims are copied whole.

    Parameters
    ----------
    input : Tensor
        1-D to 8-D.  float32, float16, bool, bfloat16, int64, int8, float8_e4m3fn or
        float8_e5m2 (float64 also accepted outside strict mode).  ``self=`` (op-plugin's name)
        is accepted as an alias.  Non-contiguous tensors are fine.
    indices : Tensor
        int32 or int64, at least 2-D; its last dim ``a`` (the index depth) is in
        ``[1, min(7, input.dim())]``.  Values in ``[0, input.shape[k])`` for column ``k``.
    updates : Tensor
        input's dtype, shape ``indices.shape[:-1] + input.shape[a:]`` (e.g. input (4, 5, 6),
        indices (3, 2) -> updates (3, 6)).

    Constraints
    -----------
    Out-of-range indices are not supported on the NPU (not checked there); we raise IndexError
    before writing anything, and reject negative indices too (the kernel has no wrap-around).
    Repeated index tuples: which update wins is unspecified.  Strict mode: Atlas inference
    (310P) and training (910) take float32/float16/bool only; A2/A3 add bfloat16, int64 and
    int8; the 950 adds float8 (aclnn doc).

    Notes
    -----
    No autograd (none in op-plugin's derivatives.yaml).  Sources: seed 004 (shapes, dtypes per
    product); hicann/ops-nn ``index/scatter_nd_update/docs/aclnnScatterNdUpdate.md`` (index depth
    <= 7, float8 on the 950).  Empty ``indices`` (a zero-size leading dim) update nothing.
"""


def npu_scatter_nd_update(input=None, indices=None, updates=None, **kwargs):
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return scatter_nd_update_op(input, indices, updates)


def npu_scatter_nd_update_(input=None, indices=None, updates=None, **kwargs):
    if kwargs:
        input = accept_alias(INPLACE_PUBLIC_OP, "input", input, "self", kwargs)
    return scatter_nd_update_inplace_public_op(input, indices, updates)


npu_scatter_nd_update.__doc__ = """Write ``updates`` into a copy of ``input`` at N-d indices
    (``torch_npu.npu_scatter_nd_update``); ``input`` is unchanged.
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        A new tensor of input's shape, dtype and strides.

    Examples
    --------
    >>> var = torch.zeros(3, 2)
    >>> indices, updates = torch.tensor([[0, 0], [1, 1]]), torch.tensor([10., 20.])
    >>> npu_anywhere.npu_scatter_nd_update(var, indices, updates)
    tensor([[10.,  0.],
            [ 0., 20.],
            [ 0.,  0.]])
"""

npu_scatter_nd_update_.__doc__ = """Write ``updates`` into ``input`` in place at N-d indices and
    return ``input`` (``torch_npu.npu_scatter_nd_update_``).
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        ``input`` itself.  When the call raises, ``input`` is untouched.
"""


TORCH_NPU_FUNCTIONS = {
    "npu_scatter_nd_update": npu_scatter_nd_update,
    "npu_scatter_nd_update_": npu_scatter_nd_update_,
}
