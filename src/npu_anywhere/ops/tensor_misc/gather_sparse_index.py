"""torch_npu.npu_gather_sparse_index and npu_gather_sparse_index_backward.

Formula (seed 004; op-plugin ``op_plugin_functions.yaml`` runs it as ``aclnnGatherV3`` with
dim 0, batch_dims 0; output size from ``op_plugin/python/meta/_meta_registrations.py``)::

    out[i_1, .., i_k, r..] = input[index[i_1, .., i_k], r..]
    out.shape = index.shape + input.shape[1:]          (a 0-D input: out is input itself)

i.e. an embedding lookup (op-plugin's golden, test/test_custom_ops/
test_npu_gather_sparse_index.py, is ``torch.nn.Embedding`` with ``input`` as the weight).

Backward (``derivatives.yaml``: ``input: npu_gather_sparse_index_backward(grad,
input.sym_sizes(), index)``; op-plugin ``GatherSparseBackwardNpuOpApi.cpp``: ``_npu_index_add``
of ``grad`` into zeros)::

    grad_input = zeros(self_sizes);  grad_input[index[p], r..] += grad[p, r..]  for every p
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_gather_sparse_index"
SCHEMA = "npu_gather_sparse_index(Tensor input, Tensor index) -> Tensor"
BACKWARD_OP = "npu_gather_sparse_index_backward"
BACKWARD_SCHEMA = ("npu_gather_sparse_index_backward(Tensor grad, SymInt[] self_sizes, "
                   "Tensor index) -> Tensor")

_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.float64, torch.complex64, torch.complex128)
_GRAD_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INDEX_DTYPES = (torch.int64, torch.int32)
_MAX_DIMS = 8
_SUPPORTED = frozenset({Product.A2, Product.A3})


def _check_index(op: str, index, input_dim: int) -> None:
    checks.expect_dtype(index, _INDEX_DTYPES, op, "index")
    checks.expect(index.dim() <= _MAX_DIMS, op, "index", f"at most {_MAX_DIMS} dims",
                  lambda: f"shape {tuple(index.shape)}", ValueError)
    out_dim = input_dim + index.dim() - 1
    checks.expect(out_dim <= _MAX_DIMS, op, "index", lambda: f"index.dim() + input.dim() - 1 "
                  f"<= {_MAX_DIMS}", lambda: f"{index.dim()} + {input_dim} - 1 = {out_dim}",
                  ValueError)


def check_gather_sparse_index(input, index):
    targets.expect_supported(OP, _SUPPORTED)
    checks.expect_dtype(input, _DTYPES, OP, "input")
    _check_index(OP, index, input.dim())
    checks.expect_same_device({"input": input, "index": index}, OP)


def check_gather_sparse_index_backward(grad, self_sizes, index):
    op = BACKWARD_OP
    checks.expect_dtype(grad, _GRAD_DTYPES, op, "grad")
    checks.expect(len(self_sizes) >= 1 and all(s >= 0 for s in self_sizes), op, "self_sizes",
                  "the non-negative sizes of an input with at least 1 dim", list(self_sizes),
                  ValueError)
    _check_index(op, index, len(self_sizes))
    want = tuple(index.shape) + tuple(self_sizes[1:])
    checks.expect(tuple(grad.shape) == want, op, "grad",
                  lambda: f"the shape index.shape + self_sizes[1:] = {want}",
                  lambda: f"shape {tuple(grad.shape)}", RuntimeError)
    checks.expect_same_device({"grad": grad, "index": index}, op)


def _expect_rows(op: str, index, rows: int) -> None:
    """Index values in ``[0, rows)`` (data-dependent: eager only, before anything is built)."""
    if index.numel() == 0:
        return
    low, high = int(index.min()), int(index.max())
    checks.expect(low >= 0 and high < rows, op, "index", f"values in [0, {rows - 1}] "
                  "(input.shape[0] rows; no negative indices)",
                  f"values in [{low}, {high}]", IndexError)


def gather_sparse_index_reference(input, index):
    if input.dim() == 0:
        return input.clone()
    _expect_rows(OP, index, input.shape[0])
    rows = torch.index_select(input, 0, index.reshape(-1).to(torch.int64))
    return rows.reshape(*index.shape, *input.shape[1:])


def _gather_fake(input, index):
    if input.dim() == 0:
        return torch.empty_like(input)
    return input.new_empty((*index.shape, *input.shape[1:]))


def gather_sparse_index_backward_reference(grad, self_sizes, index):
    sizes = list(self_sizes)
    _expect_rows(BACKWARD_OP, index, sizes[0])
    # 16-bit gradients are summed in float32 and rounded once.
    acc = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
    out = torch.zeros(sizes, dtype=acc, device=grad.device)
    out.index_add_(0, index.reshape(-1).to(torch.int64),
                   grad.reshape(index.numel(), *sizes[1:]).to(acc))
    return out.to(grad.dtype)


def _backward_fake(grad, self_sizes, index):
    return grad.new_empty(list(self_sizes))


gather_sparse_index_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gather_sparse_index,
                               reference=gather_sparse_index_reference, fake=_gather_fake,
                               metadata_check=True, info=OpInfo(api="torch_npu"))
gather_sparse_index_backward_op = NpuOp(
    BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_gather_sparse_index_backward,
    reference=gather_sparse_index_backward_reference, fake=_backward_fake, metadata_check=True,
    info=OpInfo(api="torch_npu", backward_of=OP))
gather_sparse_index_backward_op.forbid_autograd(
    "derivatives.yaml defines no derivative of the backward op")


def _setup_context(ctx, inputs, output):
    input, index = inputs
    ctx.sizes = list(input.shape)
    ctx.save_for_backward(index)


def _backward(ctx, grad):
    (index,) = ctx.saved_tensors
    return gather_sparse_index_backward_op(grad, ctx.sizes, index), None


gather_sparse_index_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_gather_sparse_index(input, index):
    """Rows of ``input`` picked by ``index`` (any shape): an embedding lookup.

    Formula::

        out[i..., r...] = input[index[i...], r...];   out.shape = index.shape + input.shape[1:]

    Parameters
    ----------
    input : Tensor
        ND; float32, float16, bfloat16, float64, complex64, complex128, int64, int32, int16,
        int8, uint8 or bool.  A 0-D input is returned as it is (op-plugin's meta shape).
    index : Tensor
        int64 or int32, at most 8 dims, values in ``[0, input.shape[0] - 1]`` (no negative
        indices; IndexError otherwise).  ``index.dim() + input.dim() - 1 <= 8``.

    Returns
    -------
    Tensor
        ``input``'s dtype, shape ``index.shape + input.shape[1:]``.

    Constraints
    -----------
    Strict mode: Atlas A2 and A3.

    Notes
    -----
    Source: seed 004, op-plugin ``op_plugin_functions.yaml`` (aclnnGatherV3, dim 0) and
    ``_meta_registrations.py``.  Differentiable in ``input`` through
    :func:`npu_gather_sparse_index_backward`.

    Examples
    --------
    >>> out = npu_anywhere.npu_gather_sparse_index(torch.randn(16, 32), torch.randint(0, 16, [2, 3]))
    """
    return gather_sparse_index_op(input, index)


def npu_gather_sparse_index_backward(grad, self_sizes, index):
    """Gradient of :func:`npu_gather_sparse_index` w.r.t. ``input``.

    Formula (op-plugin ``GatherSparseBackwardNpuOpApi.cpp``: an index-add into zeros)::

        out = zeros(self_sizes);  out[index[p], r...] += grad[p, r...]   for every position p

    ``grad`` (float16, bfloat16, float32 or float64) has shape ``index.shape +
    self_sizes[1:]``.  Float16/bfloat16 gradients are summed in float32 and rounded once (the
    NPU kernel's accumulation order is not documented).
    """
    return gather_sparse_index_backward_op(grad, self_sizes, index)


TORCH_NPU_FUNCTIONS = {
    OP: npu_gather_sparse_index,
    BACKWARD_OP: npu_gather_sparse_index_backward,
}
