"""torch_npu.npu_confusion_transpose (+ backward), npu_transpose, npu_broadcast, npu_reshape.

Layout ops that move or repeat elements without arithmetic; each returns a new contiguous
tensor (the NPU allocates one for every call).  Formulas (seed 004 and op-plugin's
docs/zh/custom_APIs/torch_npu/（beta）torch_npu-*.md; shapes from op-plugin
op_plugin/ops/aclops/{ConfusionTranspose,Transpose,Broadcast,Reshape}KernelNpu.cpp)::

    npu_confusion_transpose(x, perm, shape, True)  = x.permute(perm).reshape(shape)
    npu_confusion_transpose(x, perm, shape, False) = x.reshape(shape).permute(perm)
    npu_transpose(x, perm)                         = x.permute(perm)
    npu_broadcast(x, size)                         = x.expand(size)
    npu_reshape(x, shape)                          = x.reshape(shape)

The backward of npu_confusion_transpose (derivatives.yaml) is the same op run the other way::

    npu_confusion_transpose_backward(g, perm, shape, True)  = g.permute(perm^-1).reshape(shape)
    npu_confusion_transpose_backward(g, perm, shape, False)
        = g.reshape([shape[p] for p in perm]).permute(perm^-1)

``shape`` is the forward input's shape; the forward's ``transpose_first`` is negated.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ._shape_common import expect_int_list, expect_permutation, make_out, numel_of

CT_OP = "npu_confusion_transpose"
CT_SCHEMA = ("npu_confusion_transpose(Tensor self, int[] perm, int[] shape, bool transpose_first) "
             "-> Tensor")
CTB_OP = "npu_confusion_transpose_backward"
CTB_SCHEMA = ("npu_confusion_transpose_backward(Tensor grad, int[] perm, SymInt[] shape, "
              "bool transpose_first) -> Tensor")
TR_OP = "npu_transpose"
TR_SCHEMA = "npu_transpose(Tensor self, int[] perm, bool require_contiguous=True) -> Tensor"
TR_OUT_SCHEMA = ("npu_transpose.out(Tensor self, int[] perm, bool require_contiguous=True, *, "
                 "Tensor(a!) out) -> Tensor(a!)")
BC_OP = "npu_broadcast"
BC_SCHEMA = "npu_broadcast(Tensor self, int[] size) -> Tensor"
BC_OUT_SCHEMA = "npu_broadcast.out(Tensor self, int[] size, *, Tensor(a!) out) -> Tensor(a!)"
RS_OP = "npu_reshape"
RS_SCHEMA = "npu_reshape(Tensor self, int[] shape, bool can_refresh=False) -> Tensor"
RS_OUT_SCHEMA = ("npu_reshape.out(Tensor self, int[] shape, bool can_refresh=False, *, "
                 "Tensor(a!) out) -> Tensor(a!)")

_NO_GRAD_OUT = "an .out overload writes into a given tensor; differentiate the functional form"


def _fresh(view: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor with ``view``'s values (never an alias of an input)."""
    return view.clone(memory_format=torch.contiguous_format)


def _inverse(perm) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# -- npu_confusion_transpose ------------------------------------------------------------------

def _check_ct(op: str, x, perm, shape, transpose_first, x_name: str) -> None:
    perm, shape = list(perm), list(shape)
    expect_int_list(op, "shape", shape, minimum=0)
    if transpose_first:
        expect_permutation(op, "perm", perm, x.dim(), f"{x_name} has {x.dim()} dims")
    else:
        expect_permutation(op, "perm", perm, len(shape), f"shape has {len(shape)} entries")
    checks.expect(numel_of(shape) == x.numel(), op, "shape",
                  lambda: f"{x.numel()} elements in all (the numel of {x_name} "
                  f"{tuple(x.shape)})", lambda: f"{shape}", ValueError)


def check_confusion_transpose(self, perm, shape, transpose_first):
    _check_ct(CT_OP, self, perm, shape, transpose_first, "self")


def confusion_transpose_reference(self, perm, shape, transpose_first):
    if transpose_first:
        return _fresh(self.permute(list(perm)).reshape(list(shape)))
    return _fresh(self.reshape(list(shape)).permute(list(perm)))


def check_confusion_transpose_backward(grad, perm, shape, transpose_first):
    op = CTB_OP
    perm, shape = list(perm), list(shape)
    expect_int_list(op, "shape", shape, minimum=0)
    if transpose_first:
        expect_permutation(op, "perm", perm, grad.dim(), f"grad has {grad.dim()} dims")
    else:
        expect_permutation(op, "perm", perm, len(shape), f"shape has {len(shape)} entries")
    checks.expect(numel_of(shape) == grad.numel(), op, "shape",
                  lambda: f"{grad.numel()} elements in all (the numel of grad "
                  f"{tuple(grad.shape)})", lambda: f"{shape}", ValueError)


def confusion_transpose_backward_reference(grad, perm, shape, transpose_first):
    perm, shape = list(perm), list(shape)
    inv = _inverse(perm)
    if transpose_first:
        return _fresh(grad.permute(inv).reshape(shape))
    return _fresh(grad.reshape([shape[p] for p in perm]).permute(inv))


confusion_transpose_op = NpuOp(CT_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_confusion_transpose,
                               reference=confusion_transpose_reference, metadata_check=True,
                               info=OpInfo(api="torch_npu"))
confusion_transpose_backward_op = NpuOp(
    CTB_SCHEMA, namespace=TORCH_NPU_NS, check=check_confusion_transpose_backward,
    reference=confusion_transpose_backward_reference, metadata_check=True,
    info=OpInfo(api="torch_npu", backward_of=CT_OP))


def _ct_setup(ctx, inputs, output):
    self, perm, _shape, transpose_first = inputs
    ctx.perm = list(perm)
    ctx.in_shape = list(self.shape)
    ctx.transpose_first = transpose_first


def _ct_backward(ctx, grad):
    return (confusion_transpose_backward_op(grad, ctx.perm, ctx.in_shape,
                                            not ctx.transpose_first), None, None, None)


def _ctb_setup(ctx, inputs, output):
    grad, perm, shape, transpose_first = inputs
    ctx.perm = list(perm)
    ctx.grad_shape = list(grad.shape)
    ctx.transpose_first = transpose_first


def _ctb_backward(ctx, gg):
    # The backward is itself a confusion transpose; its adjoint is the backward op again, with
    # the inverse permutation and the other order.
    return (confusion_transpose_backward_op(gg, _inverse(ctx.perm), ctx.grad_shape,
                                            not ctx.transpose_first), None, None, None)


confusion_transpose_op.set_autograd(setup_context=_ct_setup, backward=_ct_backward)
confusion_transpose_backward_op.set_autograd(setup_context=_ctb_setup, backward=_ctb_backward)


def npu_confusion_transpose(self, perm, shape, transpose_first):
    """Fused reshape and permute.

    Formula::

        transpose_first=True:   y = self.permute(perm).reshape(shape)          (y.shape = shape)
        transpose_first=False:  y = self.reshape(shape).permute(perm)
                                                   (y.shape = [shape[p] for p in perm])

    Parameters
    ----------
    self : Tensor
        float16, float32, int8, int16, int32, int64, uint8, uint16, uint32, uint64 (the doc's
        list; other dtypes are accepted too, the op moves elements only).
    perm : list of int
        A permutation of ``0..n-1``: ``n = self.dim()`` when ``transpose_first``, else
        ``len(shape)``.
    shape : list of int
        The reshape target (``numel`` equal to ``self``'s).
    transpose_first : bool

    Returns
    -------
    Tensor
        New and contiguous, ``self``'s dtype.

    Notes
    -----
    Shapes follow op-plugin ConfusionTransposeKernelNpu.cpp; op-plugin's golden
    (test_confusion_transpose.py) is ``permute(...).contiguous().view(shape)`` /
    ``view(shape).permute(...)``.  Differentiable: the gradient is
    :func:`npu_confusion_transpose_backward` (derivatives.yaml).

    Examples
    --------
    >>> x = torch.rand(2, 3, 4, 6)
    >>> npu_anywhere.npu_confusion_transpose(x, (0, 2, 1, 3), (2, 4, 18), True).shape
    torch.Size([2, 4, 18])
    """
    return confusion_transpose_op(self, perm, shape, transpose_first)


def npu_confusion_transpose_backward(grad, perm, shape, transpose_first):
    """Gradient of :func:`npu_confusion_transpose`, called with the forward input's ``shape`` and
    the negated ``transpose_first``::

        transpose_first=True:   g.permute(perm^-1).reshape(shape)
        transpose_first=False:  g.reshape([shape[p] for p in perm]).permute(perm^-1)

    Returns a new contiguous tensor of shape ``shape`` (op-plugin ConfusionTransposeKernelNpu.cpp).
    """
    return confusion_transpose_backward_op(grad, perm, shape, transpose_first)


# -- npu_transpose ----------------------------------------------------------------------------

def check_transpose(self, perm, require_contiguous=True):
    expect_permutation(TR_OP, "perm", list(perm), self.dim(), f"self has {self.dim()} dims")


def transpose_reference(self, perm, require_contiguous=True):
    return _fresh(self.permute(list(perm)))


def _transpose_shape(self, perm, require_contiguous=True):
    return [self.shape[p] for p in perm]


transpose_op = NpuOp(TR_SCHEMA, namespace=TORCH_NPU_NS, check=check_transpose,
                     reference=transpose_reference, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
transpose_op.forbid_autograd("op-plugin's derivatives.yaml lists no backward for npu_transpose")
transpose_out_op = make_out(TR_OUT_SCHEMA, op=TR_OP, check=check_transpose,
                            compute=transpose_reference, shape_of=_transpose_shape,
                            no_grad=_NO_GRAD_OUT)


def npu_transpose(self, perm, require_contiguous=True, *, out=None):
    """``self`` with its dims permuted, as a new contiguous tensor.

    Formula: ``y = self.permute(perm)`` (``y.shape[i] = self.shape[perm[i]]``).

    Parameters
    ----------
    self : Tensor
    perm : list of int
        A permutation of ``0..self.dim()-1``.
    require_contiguous : bool
        On the NPU, whether the kernel makes ``self`` contiguous first (a performance switch for
        inputs known to be contiguous or transposed); the values are the same either way, and
        here any strides are fine.
    out : Tensor, optional
        The ``.out`` overload: written in place (shape ``y.shape``, ``self``'s dtype) and
        returned.

    Notes
    -----
    op-plugin TransposeKernelNpu.cpp; no backward (derivatives.yaml lists none).

    Examples
    --------
    >>> npu_anywhere.npu_transpose(torch.randn(2, 3, 5), (2, 0, 1)).shape
    torch.Size([5, 2, 3])
    """
    if out is not None:
        return transpose_out_op(self, perm, require_contiguous, out=out)
    return transpose_op(self, perm, require_contiguous)


# -- npu_broadcast ----------------------------------------------------------------------------

def check_broadcast(self, size):
    size = list(size)
    checks.expect(len(size) >= self.dim(), BC_OP, "size",
                  lambda: f"at least self.dim() = {self.dim()} entries",
                  lambda: f"{size}", ValueError)
    lead = len(size) - self.dim()
    checks.expect(all(s >= 0 for s in size[:lead]), BC_OP, "size",
                  "non-negative sizes for the new leading dims", lambda: f"{size}", ValueError)
    for i, have in enumerate(self.shape):
        want = size[lead + i]
        checks.expect(want == have or have == 1 or want == -1, BC_OP, "size",
                      lambda: f"to keep or expand each dim of self {tuple(self.shape)} (a dim of "
                      f"size 1 expands; -1 keeps a dim)",
                      lambda: f"{size}", ValueError)


def broadcast_reference(self, size):
    return _fresh(self.expand(list(size)))


def _broadcast_shape(self, size):
    size = list(size)
    lead = len(size) - self.dim()
    return size[:lead] + [self.shape[i] if s == -1 else s for i, s in enumerate(size[lead:])]


broadcast_op = NpuOp(BC_SCHEMA, namespace=TORCH_NPU_NS, check=check_broadcast,
                     reference=broadcast_reference, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
broadcast_op.forbid_autograd("op-plugin's derivatives.yaml lists no backward for npu_broadcast")
broadcast_out_op = make_out(BC_OUT_SCHEMA, op=BC_OP, check=check_broadcast,
                            compute=broadcast_reference, shape_of=_broadcast_shape,
                            no_grad=_NO_GRAD_OUT)


def npu_broadcast(self, size, *, out=None):
    """``self`` expanded to ``size``, as a new contiguous tensor.

    Formula: ``y = self.expand(size)``: dims of size 1 are repeated, new dims are added in front
    (``-1`` keeps a dim, as in ``torch.broadcast_to``).

    Parameters
    ----------
    self : Tensor
    size : list of int
        ``len(size) >= self.dim()``; each trailing entry equals ``self``'s dim, or that dim is 1.
    out : Tensor, optional
        The ``.out`` overload (shape ``size``, ``self``'s dtype).

    Notes
    -----
    op-plugin BroadcastKernelNpu.cpp (BroadcastTo); bool inputs work as well.  No backward.

    Examples
    --------
    >>> npu_anywhere.npu_broadcast(torch.tensor([[1], [2], [3]]), [3, 4])
    tensor([[1, 1, 1, 1],
            [2, 2, 2, 2],
            [3, 3, 3, 3]])
    """
    if out is not None:
        return broadcast_out_op(self, size, out=out)
    return broadcast_op(self, size)


# -- npu_reshape ------------------------------------------------------------------------------

def check_reshape(self, shape, can_refresh=False):
    shape = list(shape)
    expect_int_list(RS_OP, "shape", shape, minimum=0)
    checks.expect(numel_of(shape) == self.numel(), RS_OP, "shape",
                  lambda: f"{self.numel()} elements in all (the numel of self "
                  f"{tuple(self.shape)})", lambda: f"{shape}", ValueError)


def reshape_reference(self, shape, can_refresh=False):
    return _fresh(self.reshape(list(shape)))


def _reshape_shape(self, shape, can_refresh=False):
    return list(shape)


reshape_op = NpuOp(RS_SCHEMA, namespace=TORCH_NPU_NS, check=check_reshape,
                   reference=reshape_reference, metadata_check=True, info=OpInfo(api="torch_npu"))
reshape_op.forbid_autograd("op-plugin's derivatives.yaml lists no backward for npu_reshape")


def _check_reshape_out(self, shape, can_refresh=False, *, out):
    check_reshape(self, shape, can_refresh)
    checks.expect(tuple(out.shape) == tuple(shape) and out.dtype == self.dtype, RS_OP, "out",
                  lambda: f"shape {tuple(shape)} and dtype {self.dtype}",
                  lambda: f"shape {tuple(out.shape)} and dtype {out.dtype}", RuntimeError)
    checks.expect_same_device({"self": self, "out": out}, RS_OP)


def _reshape_out_write(self, shape, can_refresh=False, *, out):
    # ReshapeKernelNpu.cpp: can_refresh only refreshes out's storage descriptor (its values stay);
    # otherwise self's bytes are copied into out.
    if not can_refresh:
        out.copy_(self.reshape(list(shape)))


from ...library import define_out as _define_out  # noqa: E402

_reshape_out_internal, reshape_out_op = _define_out(
    RS_OUT_SCHEMA, check=_check_reshape_out, reference=_reshape_out_write, no_grad=_NO_GRAD_OUT)


def npu_reshape(self, shape, can_refresh=False, *, out=None):
    """``self``'s elements in row-major order with a new shape, as a new tensor.

    Formula: ``y = self.reshape(shape)`` (values unchanged).

    Parameters
    ----------
    self : Tensor
    shape : list of int
        Non-negative sizes whose product is ``self.numel()`` (no ``-1``: the NPU allocates
        ``shape`` as given).
    can_refresh : bool
        With ``out``: True only refreshes ``out``'s storage descriptor, so ``out`` keeps its
        values (op-plugin ReshapeKernelNpu.cpp); False copies ``self`` into ``out``.
    out : Tensor, optional
        The ``.out`` overload (shape ``shape``, ``self``'s dtype).

    Notes
    -----
    The functional form always returns ``self``'s values.  On the NPU,
    ``can_refresh=True`` without ``out`` returns the freshly allocated result without copying
    into it (ReshapeKernelNpu.cpp); that garbage is not reproduced.  No backward.

    Examples
    --------
    >>> npu_anywhere.npu_reshape(torch.rand(2, 8), (4, 4)).shape
    torch.Size([4, 4])
    """
    if out is not None:
        return reshape_out_op(self, shape, can_refresh, out=out)
    return reshape_op(self, shape, can_refresh)


# torch_npu's functions are op packets: ``torch_npu.npu_transpose.out(..., out=y)`` works too.
npu_transpose.out = transpose_out_op
npu_broadcast.out = broadcast_out_op
npu_reshape.out = reshape_out_op

TORCH_NPU_FUNCTIONS = {
    CT_OP: npu_confusion_transpose,
    CTB_OP: npu_confusion_transpose_backward,
    TR_OP: npu_transpose,
    BC_OP: npu_broadcast,
    RS_OP: npu_reshape,
}
