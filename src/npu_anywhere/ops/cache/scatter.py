"""torch_npu.npu_scatter: the ArgMaxGrad kernel, one update per line along ``dim``.

op-plugin runs it as the CANN op ArgMaxGrad (``op_plugin/ops/aclops/ScatterV1KernelNpu.cpp``),
whose prototype fixes the shapes: ``indices`` and ``updates`` have ``self``'s shape without
``dim`` (var [2, 3, 4, 5], dim 2 -> indices/updates [2, 3, 5]).  Formula::

    out = self (copied)
    out[i..., indices[i..., j...], j...] = updates[i..., j...]     (the index takes dim's place)

i.e. ``out.scatter_(dim, indices.unsqueeze(dim), updates.unsqueeze(dim))``.  op-plugin's own
use is ``npu_max_backward``: ``npu_scatter(zeros(sizes), argmax_indices, grad, dim)``.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from ._common import expect_dtype_now, expect_in_range

OP = "npu_scatter"
SCHEMA = "npu_scatter(Tensor self, Tensor indices, Tensor updates, int dim) -> Tensor"

_ARGMAXGRAD = (torch.float16, torch.float32, torch.int32, torch.int8)
_PER_PRODUCT = {Product.ATLAS_TRAINING: _ARGMAXGRAD}
_DEFAULT = _ARGMAXGRAD + (torch.float64,)
_SUPPORTED = frozenset(_PER_PRODUCT)


def check_npu_scatter(self, indices, updates, dim):
    op = OP
    targets.expect_supported(op, _SUPPORTED)
    expect_dtype_now(self, _DEFAULT, _PER_PRODUCT, op, "self")
    checks.expect_same_dtype({"self": self, "updates": updates}, op)
    checks.expect_dtype(indices, (torch.int32,), op, "indices")
    checks.expect_same_device({"self": self, "indices": indices, "updates": updates}, op)
    rank = self.dim()
    checks.expect(rank >= 1, op, "self", "at least 1 dim", lambda: f"shape {tuple(self.shape)}",
                  ValueError)
    checks.expect(-rank <= dim < rank, op, "dim", lambda: f"in [{-rank}, {rank - 1}]", dim,
                  ValueError)
    if indices.numel() == 0:
        return          # seed 004: empty indices return self unchanged
    d = dim % rank
    want = tuple(self.shape[:d]) + tuple(self.shape[d + 1:])
    checks.expect(tuple(indices.shape) == want, op, "indices",
                  lambda: f"self's shape without dim {dim}: {want} (ArgMaxGrad)",
                  lambda: f"shape {tuple(indices.shape)}", RuntimeError)
    checks.expect(updates.shape == indices.shape, op, "updates",
                  lambda: f"the shape of indices {tuple(indices.shape)}",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)


def npu_scatter_reference(self, indices, updates, dim):
    out = self.clone()
    if indices.numel() == 0:
        return out
    d = dim % self.dim()
    idx = indices.to(torch.int64)
    expect_in_range(idx, 0, self.shape[d], OP, "indices", f"values (positions along dim {dim})")
    out.scatter_(d, idx.unsqueeze(d), updates.unsqueeze(d))
    return out


def _npu_scatter_fake(self, indices, updates, dim):
    return torch.empty_like(self)


npu_scatter_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_npu_scatter,
                       reference=npu_scatter_reference, fake=_npu_scatter_fake,
                       metadata_check=True, info=OpInfo(api="torch_npu"))
npu_scatter_op.forbid_autograd("npu_scatter has no backward on the NPU (op-plugin's "
                               "derivatives.yaml lists none)")


def npu_scatter(self=None, indices=None, updates=None, dim=None, **kwargs):
    """Write one update per line along ``dim`` into a copy of ``self``.

    Formula (CANN ArgMaxGrad, which op-plugin runs for this API)::

        out = self.clone()
        out[..., indices[p], ...] = updates[p]      (the index taking dim's place; p runs over
                                                     self's positions without dim)

    i.e. ``out.scatter_(dim, indices.unsqueeze(dim), updates.unsqueeze(dim))``.

    Parameters
    ----------
    self : Tensor
        float16, float32, int32 or int8 (float64 also accepted outside strict mode), at least
        1-D.  ``input=`` is accepted as an alias.
    indices : Tensor
        int32 (the only index type ArgMaxGrad takes), of self's shape with ``dim`` removed
        (self [2, 3, 4, 5], dim 2 -> [2, 3, 5]); values in ``[0, self.shape[dim])``.  Empty
        indices return a copy of self unchanged (seed 004).
    updates : Tensor
        self's dtype, the shape of ``indices``.
    dim : int
        In ``[-self.dim(), self.dim() - 1]``.

    Returns
    -------
    Tensor
        A new tensor of self's shape, dtype and strides; ``self`` is unchanged.

    Constraints
    -----------
    Strict mode: Atlas training (910) only, the one product seed 004 lists.  The shapes
    torch.scatter also allows (indices with dim kept, or smaller than self) are rejected, as
    ArgMaxGrad's prototype documents.  Out-of-range indices raise IndexError.

    Notes
    -----
    No autograd (none in derivatives.yaml).  Sources: op-plugin
    ``op_plugin/ops/aclops/ScatterV1KernelNpu.cpp`` (ArgMaxGrad) and ``MaxV1KernelNpu.cpp`` (how
    op-plugin itself calls it); the ArgMaxGrad prototype (dtypes, shapes, int32 indices).

    Examples
    --------
    >>> x = torch.tensor([[1.6279, 0.1226], [0.9041, 1.0980]])
    >>> npu_anywhere.npu_scatter(x, torch.tensor([0, 1], dtype=torch.int32),
    ...                          torch.tensor([-1.1993, -1.5247]), 0)
    tensor([[-1.1993,  0.1226],
            [ 0.9041, -1.5247]])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return npu_scatter_op(self, indices, updates, dim)


TORCH_NPU_FUNCTIONS = {"npu_scatter": npu_scatter}
