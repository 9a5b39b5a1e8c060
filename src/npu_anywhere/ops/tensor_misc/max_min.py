"""torch_npu.npu_max / npu_min (the ``.dim`` overloads) and their backward ops.

Semantics (seed 004; op-plugin ``op_plugin/ops/aclops/MaxV1KernelNpu.cpp`` and
``MinV1KernelNpu.cpp``, which run the CANN ops ArgMaxWithValue / ArgMinWithValue)::

    values, indices = max(self, dim, keepdim)      # like torch.max(self, dim, keepdim)
    indices.dtype == int32                          # (torch.max gives int64)

Backward (op-plugin ``derivatives.yaml``: ``self: npu_max_backward(grad, dim, indices,
self.sym_sizes(), keepdim)``; the kernel files above)::

    grad_self = zeros(sizes).scatter(dim, indices, grad)   # indices/grad unsqueezed at dim
                                                           # when keepdim is False

i.e. ``npu_scatter(zeros(sizes), indices, grad, dim)`` as op-plugin writes it: only the
position that the forward picked receives the gradient.

The ``names_dim`` (Dimname) overloads exist in op-plugin for torch 2.1-2.12 only
(``op_plugin_functions.yaml``: ``[v2.1, v2.12]``); on this torch they are not defined.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
           torch.uint8, torch.int16, torch.int32, torch.int64)
_GRAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _schema(name: str) -> str:
    return (f"{name}.dim(Tensor self, int dim, bool keepdim=False) "
            "-> (Tensor values, Tensor indices)")


def _backward_schema(name: str) -> str:
    return (f"{name}_backward(Tensor grad, int dim, Tensor indices, SymInt[] sizes, "
            "bool keepdim) -> Tensor")


def _expect_dim(op: str, dim: int, rank: int) -> int:
    """``dim`` wrapped into ``[0, max(rank, 1))`` (a 0-D tensor takes dim 0 or -1)."""
    n = max(rank, 1)
    checks.expect(-n <= dim < n, op, "dim", lambda: f"in the range [{-n}, {n - 1}] for a "
                  f"{rank}-D self", dim, IndexError)
    return dim % n


def _reduced_shape(sizes, d: int, keepdim: bool) -> tuple:
    sizes = tuple(sizes)
    if not sizes:
        return ()
    if keepdim:
        return sizes[:d] + (1,) + sizes[d + 1:]
    return sizes[:d] + sizes[d + 1:]


def _check_forward(op: str, self, dim, keepdim) -> None:
    checks.expect_dtype(self, _DTYPES, op, "self")
    d = _expect_dim(op, dim, self.dim())
    if self.dim() > 0:
        checks.expect(self.shape[d] != 0, op, "self", lambda: f"a non-empty dim {dim} to "
                      "reduce", lambda: f"shape {tuple(self.shape)}", ValueError)


def _check_backward(op: str, grad, dim, indices, sizes, keepdim) -> None:
    checks.expect_dtype(grad, _GRAD_DTYPES, op, "grad")
    checks.expect_dtype(indices, (torch.int32, torch.int64), op, "indices")
    checks.expect(all(s >= 0 for s in sizes), op, "sizes", "non-negative sizes", list(sizes),
                  ValueError)
    d = _expect_dim(op, dim, len(sizes))
    want = _reduced_shape(sizes, d, keepdim)
    checks.expect(tuple(grad.shape) == want, op, "grad",
                  lambda: f"the reduced shape {want} of sizes {list(sizes)} (keepdim={keepdim})",
                  lambda: f"shape {tuple(grad.shape)}", RuntimeError)
    checks.expect(tuple(indices.shape) == want, op, "indices", lambda: f"the shape of grad {want}",
                  lambda: f"shape {tuple(indices.shape)}", RuntimeError)
    checks.expect_same_device({"grad": grad, "indices": indices}, op)


def _extreme(self, dim, keepdim, largest: bool):
    fn = torch.max if largest else torch.min
    values, indices = fn(self, dim, keepdim)
    return values, indices.to(torch.int32)


def _scatter_back(grad, dim, indices, sizes, keepdim):
    if len(sizes) == 0:              # a 0-D input: its one element was picked
        return grad.clone()
    d = dim % len(sizes)
    g = grad if keepdim else grad.unsqueeze(d)
    idx = (indices if keepdim else indices.unsqueeze(d)).to(torch.int64)
    return grad.new_zeros(sizes).scatter(d, idx, g)


MAX, MIN = "npu_max", "npu_min"
MAX_BACKWARD, MIN_BACKWARD = "npu_max_backward", "npu_min_backward"


def check_npu_max(self, dim, keepdim=False):
    _check_forward(MAX, self, dim, keepdim)


def check_npu_min(self, dim, keepdim=False):
    _check_forward(MIN, self, dim, keepdim)


def check_npu_max_backward(grad, dim, indices, sizes, keepdim):
    _check_backward(MAX_BACKWARD, grad, dim, indices, sizes, keepdim)


def check_npu_min_backward(grad, dim, indices, sizes, keepdim):
    _check_backward(MIN_BACKWARD, grad, dim, indices, sizes, keepdim)


def npu_max_reference(self, dim, keepdim=False):
    return _extreme(self, dim, keepdim, largest=True)


def npu_min_reference(self, dim, keepdim=False):
    return _extreme(self, dim, keepdim, largest=False)


max_op = NpuOp(_schema(MAX), namespace=TORCH_NPU_NS, check=check_npu_max,
               reference=npu_max_reference, metadata_check=True, info=OpInfo(api="torch_npu"))
min_op = NpuOp(_schema(MIN), namespace=TORCH_NPU_NS, check=check_npu_min,
               reference=npu_min_reference, metadata_check=True, info=OpInfo(api="torch_npu"))
max_backward_op = NpuOp(_backward_schema(MAX), namespace=TORCH_NPU_NS,
                        check=check_npu_max_backward, reference=_scatter_back,
                        metadata_check=True, info=OpInfo(api="torch_npu", backward_of=MAX))
min_backward_op = NpuOp(_backward_schema(MIN), namespace=TORCH_NPU_NS,
                        check=check_npu_min_backward, reference=_scatter_back,
                        metadata_check=True, info=OpInfo(api="torch_npu", backward_of=MIN))
for _bw in (max_backward_op, min_backward_op):
    _bw.forbid_autograd("derivatives.yaml defines no derivative of the backward op")


def _autograd(forward: NpuOp, backward: NpuOp) -> None:
    def setup_context(ctx, inputs, output):
        self, dim, keepdim = inputs
        ctx.dim, ctx.keepdim = dim, keepdim
        ctx.sizes = self.shape
        ctx.save_for_backward(output[1])

    def run_backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        return backward(grad_values, ctx.dim, indices, list(ctx.sizes), ctx.keepdim), None, None

    forward.set_autograd(setup_context=setup_context, backward=run_backward)


_autograd(max_op, max_backward_op)
_autograd(min_op, min_backward_op)


def npu_max(self, dim, keepdim=False):
    """Maximum along ``dim``, with the int32 index of the element that holds it.

    Formula::

        values[i.., j..]  = max_k self[i.., k, j..]
        indices[i.., j..] = the first k where that maximum is found (a NaN counts as the
                            maximum: the first NaN, as torch.max)

    Parameters
    ----------
    self : Tensor
        Any shape (0-D included); float16, bfloat16, float32, float64 or an integer dtype.
    dim : int
        The dimension to reduce, in ``[-self.dim(), self.dim() - 1]`` (0 or -1 for 0-D).
    keepdim : bool
        Keep ``dim`` with size 1.

    Returns
    -------
    (values, indices) : ``values`` in ``self``'s dtype, ``indices`` int32, both ``self``'s
    shape without ``dim`` (or with it as 1 when ``keepdim``).

    Notes
    -----
    Source: seed 004 and op-plugin ``MaxV1KernelNpu.cpp`` (ArgMaxWithValue, int32 indices).
    Differentiable in ``self`` through :func:`npu_max_backward` (the gradient goes to the
    picked element only).  Ties resolve to the first index, as torch.max on CPU/CUDA; the
    NPU kernel's tie order is not documented.

    Examples
    --------
    >>> values, indices = npu_anywhere.npu_max(torch.randn(2, 2, 2, 2), 2)
    """
    return max_op(self, dim, keepdim)


def npu_min(self, dim, keepdim=False):
    """Minimum along ``dim``, with the int32 index of the element that holds it.

    Formula::

        values[i.., j..]  = min_k self[i.., k, j..]
        indices[i.., j..] = the first k where that minimum is found (first NaN, as torch.min)

    Parameters, returns and notes as :func:`npu_max` (op-plugin ``MinV1KernelNpu.cpp``,
    ArgMinWithValue); differentiable through :func:`npu_min_backward`.

    Examples
    --------
    >>> values, indices = npu_anywhere.npu_min(torch.randn(2, 2, 2, 2), 2)
    """
    return min_op(self, dim, keepdim)


def npu_max_backward(grad, dim, indices, sizes, keepdim):
    """Gradient of :func:`npu_max`: ``grad`` scattered into zeros of ``sizes`` at ``indices``.

    Formula (op-plugin ``MaxV1KernelNpu.cpp``, ``npu_max_backward_symint``)::

        out = zeros(sizes);  out[i.., indices[i.., j..], j..] = grad[i.., j..]

    ``grad`` and ``indices`` (int32 or int64) have the forward outputs' shape (with ``dim``
    kept as 1 when ``keepdim``).  Returns a tensor of ``sizes`` in ``grad``'s dtype.
    """
    return max_backward_op(grad, dim, indices, sizes, keepdim)


def npu_min_backward(grad, dim, indices, sizes, keepdim):
    """Gradient of :func:`npu_min`: as :func:`npu_max_backward` (op-plugin
    ``MinV1KernelNpu.cpp``, ``npu_min_backward_symint``)."""
    return min_backward_op(grad, dim, indices, sizes, keepdim)


TORCH_NPU_FUNCTIONS = {
    MAX: npu_max,
    MIN: npu_min,
    MAX_BACKWARD: npu_max_backward,
    MIN_BACKWARD: npu_min_backward,
}
