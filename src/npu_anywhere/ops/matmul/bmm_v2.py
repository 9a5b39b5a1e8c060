"""torch_npu.npu_bmmV2 and its backward ops npu_bmm_v2_mat1_backward / mat2_backward.

Formula (seed 004; shapes from op-plugin ``op_plugin/ops/aclops/BmmV2KernelNpu.cpp``)::

    out = self @ mat2                      batch dims broadcast, result (batch, m, n)
    output_sizes non-empty: out summed over the dims where output_sizes (right-aligned) differs
                            from the broadcast result, then viewed as output_sizes

Backward (op-plugin ``derivatives.yaml``)::

    grad_self = sum_to(grad @ mat2^T, self.shape);  grad_mat2 = sum_to(self^T @ grad, mat2.shape)

Precision: float16 / bfloat16 are multiplied in float32 and rounded once; int32 exactly.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_bmmV2"
SCHEMA = "npu_bmmV2(Tensor self, Tensor mat2, int[] output_sizes) -> Tensor"
MAT1_OP = "npu_bmm_v2_mat1_backward"
MAT1_SCHEMA = ("npu_bmm_v2_mat1_backward(Tensor grad, Tensor mat1, Tensor mat2, SymInt[] size) "
               "-> Tensor")
MAT2_OP = "npu_bmm_v2_mat2_backward"
MAT2_SCHEMA = ("npu_bmm_v2_mat2_backward(Tensor grad, Tensor mat1, Tensor mat2, SymInt[] size) "
               "-> Tensor")

_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})
_DTYPES = (torch.float16, torch.float32, torch.int32, torch.bfloat16, torch.float64)


def _broadcast_shape(op: str, a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        checks.expect(False, op, "mat2", lambda: f"batch dims broadcastable with "
                      f"{tuple(a.shape[:-2])}", lambda: tuple(b.shape[:-2]), RuntimeError)
    return (*batch, a.shape[-2], b.shape[-1])


def _check_pair(op: str, a_name: str, a, b_name: str, b) -> tuple[int, ...]:
    for name, t in ((a_name, a), (b_name, b)):
        checks.expect_dtype(t, _DTYPES, op, name)
        checks.expect(t.dim() >= 2, op, name, "a tensor with at least 2 dims",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    checks.expect(a.shape[-1] == b.shape[-2], op, b_name,
                  lambda: f"a k dim equal to the last dim of {a_name} ({a.shape[-1]})",
                  lambda: b.shape[-2], RuntimeError)
    checks.expect_same_dtype({a_name: a, b_name: b}, op)
    checks.expect_same_device({a_name: a, b_name: b}, op)
    return _broadcast_shape(op, a, b)


def _reduced_dims(full: tuple[int, ...], sizes) -> list[int]:
    aligned = [1] * (len(full) - len(sizes)) + list(sizes)
    return [i for i, (f, s) in enumerate(zip(full, aligned)) if f != s]


def check_bmm_v2(self, mat2, output_sizes):
    full = _check_pair(OP, "self", self, "mat2", mat2)
    if output_sizes:
        sizes = list(output_sizes)
        numel = 1
        for s in sizes:
            numel *= s
        aligned_ok = len(sizes) <= len(full) or all(s == 1 for s in sizes[:len(sizes) - len(full)])
        reduced = _reduced_dims(full, sizes[-len(full):]) if aligned_ok else []
        kept = 1
        for i, f in enumerate(full):
            kept *= 1 if i in reduced else f
        checks.expect(aligned_ok and all(i < len(full) - 2 for i in reduced) and numel == kept,
                      OP, "output_sizes",
                      lambda: f"the result shape {list(full)} with some batch dims reduced to 1",
                      sizes, ValueError)
    targets.expect_supported(OP, _SUPPORTED)


def _ct(dtype):
    return dtype if dtype in (torch.float32, torch.float64, torch.int32) else torch.float32


def _matmul(a, b):
    if a.dtype == torch.int32:
        # Exact on every backend: int64 holds any int32 product sum of these sizes.
        return (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32)
    ct = _ct(a.dtype)
    return (a.to(ct) @ b.to(ct)).to(a.dtype)


def bmm_v2_reference(self, mat2, output_sizes):
    y = _matmul(self, mat2)
    if not output_sizes:
        return y
    sizes = list(output_sizes)
    dims = _reduced_dims(tuple(y.shape), sizes[-y.dim():])
    if dims:
        y = y.sum(dim=dims, keepdim=True, dtype=y.dtype)
    return y.reshape(sizes).clone()


def check_mat1_backward(grad, mat1, mat2, size):
    _check_pair(MAT1_OP, "mat1", mat1, "mat2", mat2)
    checks.expect_same_dtype({"grad": grad, "mat1": mat1}, MAT1_OP)


def check_mat2_backward(grad, mat1, mat2, size):
    _check_pair(MAT2_OP, "mat1", mat1, "mat2", mat2)
    checks.expect_same_dtype({"grad": grad, "mat1": mat1}, MAT2_OP)


def mat1_backward_reference(grad, mat1, mat2, size):
    g = _matmul(grad, mat2.mT)
    return g.sum_to_size(list(size)).clone()


def mat2_backward_reference(grad, mat1, mat2, size):
    g = _matmul(mat1.mT, grad)
    return g.sum_to_size(list(size)).clone()


bmm_v2_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_bmm_v2,
                  reference=bmm_v2_reference, metadata_check=True, info=OpInfo(api="torch_npu"))
mat1_backward_op = NpuOp(MAT1_SCHEMA, namespace=TORCH_NPU_NS, check=check_mat1_backward,
                         reference=mat1_backward_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))
mat2_backward_op = NpuOp(MAT2_SCHEMA, namespace=TORCH_NPU_NS, check=check_mat2_backward,
                         reference=mat2_backward_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    self, mat2, output_sizes = inputs
    ctx.full = tuple(torch.broadcast_shapes(self.shape[:-2], mat2.shape[:-2])) + \
        (self.shape[-2], mat2.shape[-1])
    ctx.save_for_backward(self, mat2)


def _backward(ctx, grad):
    self, mat2 = ctx.saved_tensors
    g = grad.expand(ctx.full) if tuple(grad.shape) != ctx.full else grad
    if len(grad.shape) != len(ctx.full):
        g = grad.reshape([1] * (len(ctx.full) - grad.dim()) + list(grad.shape)).expand(ctx.full)
    g = g.contiguous()
    g1 = mat1_backward_op(g, self, mat2, list(self.shape)) if ctx.needs_input_grad[0] else None
    g2 = mat2_backward_op(g, self, mat2, list(mat2.shape)) if ctx.needs_input_grad[1] else None
    return g1, g2, None


bmm_v2_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_bmmV2(self, mat2, output_sizes):
    """Batched matmul with broadcasting; ``output_sizes`` reduces batch dims (for backward).

    Formula::

        out = self @ mat2                 (batch dims broadcast)
        output_sizes = []: out as is; else out summed over the batch dims where output_sizes
        (right-aligned) is 1 and the result is not, viewed as output_sizes

    Parameters
    ----------
    self, mat2 : Tensor
        2-D or more, float16 / float32 / int32 (bfloat16 / float64 also accepted), same dtype.
    output_sizes : list of int
        ``[]`` or the wanted output shape.

    Returns
    -------
    Tensor of self's dtype.  Differentiable (npu_bmm_v2_mat1_backward / mat2_backward).

    Examples
    --------
    >>> npu_anywhere.npu_bmmV2(torch.randn(10, 3, 4), torch.randn(10, 4, 5), []).shape
    torch.Size([10, 3, 5])
    """
    return bmm_v2_op(self, mat2, output_sizes)


def npu_bmm_v2_mat1_backward(grad, mat1, mat2, size):
    """``sum_to(grad @ mat2^T, size)``."""
    return mat1_backward_op(grad, mat1, mat2, size)


def npu_bmm_v2_mat2_backward(grad, mat1, mat2, size):
    """``sum_to(mat1^T @ grad, size)``."""
    return mat2_backward_op(grad, mat1, mat2, size)


TORCH_NPU_FUNCTIONS = {
    "npu_bmmV2": npu_bmmV2,
    "npu_bmm_v2_mat1_backward": npu_bmm_v2_mat1_backward,
    "npu_bmm_v2_mat2_backward": npu_bmm_v2_mat2_backward,
}
