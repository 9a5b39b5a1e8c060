"""torch_npu.npu_indexing, npu_slice and npu_pad (each with its .out overload where the yaml has
one).

Formulas (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/（beta）torch_npu-*.md; shapes from
op_plugin/ops/opapi/IndexingKernelNpuOpApi.cpp, aclops/SliceKernelNpu.cpp, aclops/PadKernelNpu.cpp
and utils/KernelNpuOutputSize.cpp ``pad_npu_output_size``)::

    npu_indexing(x, begin, end, strides, masks...)  = StridedSlice (TensorFlow semantics)
    npu_slice(x, offsets, size)   y = x[o0:o0+s0, o1:o1+s1, ...]
    npu_pad(x, paddings)          y = x surrounded by zeros: dim d gets paddings[2d] before and
                                  paddings[2d+1] after (dim 0 first; missing entries are 0)

StridedSlice: ``begin`` / ``end`` / ``strides`` are read one entry per "sparse" position, and bit
``i`` of each mask applies to entry ``i``: ``begin_mask`` / ``end_mask`` ignore that begin / end
(the widest range in the stride's direction), ``ellipsis_mask`` (at most one bit) makes entry
``i`` stand for as many full dims as needed, ``new_axis_mask`` inserts a dim of size 1,
``shrink_axis_mask`` takes the single index ``begin[i]`` and drops the dim.  Without an ellipsis,
dims past the last entry are taken whole.  Negative begin / end count from the end; they are
then clamped to the dim (``[0, n]`` for positive strides, ``[-1, n-1]`` for negative ones), and
a dim holds ``ceil((end - begin) / stride)`` elements (0 if negative).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ._shape_common import expect_int_list, make_out

IX_OP = "npu_indexing"
_IX_ARGS = ("Tensor self, int[] begin, int[] end, int[] strides, int begin_mask=0, "
            "int end_mask=0, int ellipsis_mask=0, int new_axis_mask=0, int shrink_axis_mask=0")
IX_SCHEMA = f"npu_indexing({_IX_ARGS}) -> Tensor"
IX_OUT_SCHEMA = f"npu_indexing.out({_IX_ARGS}, *, Tensor(a!) out) -> Tensor(a!)"
SL_OP = "npu_slice"
SL_SCHEMA = "npu_slice(Tensor self, int[] offsets, int[] size) -> Tensor"
SL_OUT_SCHEMA = ("npu_slice.out(Tensor self, int[] offsets, int[] size, *, Tensor(a!) out) "
                 "-> Tensor(a!)")
PAD_OP = "npu_pad"
PAD_SCHEMA = "npu_pad(Tensor input, int[] paddings) -> Tensor"

_MAX_DIMS = 8   # IndexingKernelNpuOpApi.cpp: "The output tensor cannot be larger than 8 dimensions"
_NO_GRAD = "op-plugin's derivatives.yaml lists no backward for it"
_NO_GRAD_OUT = "an .out overload writes into a given tensor; differentiate nothing through it"


# -- npu_indexing -------------------------------------------------------------------------------

@dataclass
class _Plan:
    """Per input dim: (start, stride, count) or ("shrink", index); and the output shape."""
    dims: list
    shape: list


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def _plan_indexing(op: str, x, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                   new_axis_mask, shrink_axis_mask) -> _Plan:
    begin, end, strides = list(begin), list(end), list(strides)
    k = len(strides)
    checks.expect(len(begin) == k and len(end) == k, op, "begin, end and strides",
                  "lists of equal length", lambda: f"lengths {len(begin)}, {len(end)}, {k}",
                  ValueError)
    checks.expect(all(s != 0 for s in strides), op, "strides", "non-zero entries",
                  lambda: f"{strides}", ValueError)
    for name, mask in (("begin_mask", begin_mask), ("end_mask", end_mask),
                       ("ellipsis_mask", ellipsis_mask), ("new_axis_mask", new_axis_mask),
                       ("shrink_axis_mask", shrink_axis_mask)):
        checks.expect(mask >= 0, op, name, "a non-negative bit mask", repr(mask), ValueError)
    checks.expect(ellipsis_mask & (ellipsis_mask - 1) == 0, op, "ellipsis_mask",
                  "at most one bit set (one ellipsis)", repr(ellipsis_mask), ValueError)
    n = x.dim()
    # Sparse entries, with an implicit trailing ellipsis when there is none.
    entries = list(range(k))
    ellipsis_at = next((i for i in range(k) if _bit(ellipsis_mask, i)), None)
    if ellipsis_at is None:
        entries.append("...")
    # Entries that consume an input dim (not the ellipsis, not new axes).
    consuming = sum(1 for i in entries if i != "..." and not _bit(ellipsis_mask, i)
                    and not _bit(new_axis_mask, i))
    covered = n - consuming
    checks.expect(covered >= 0, op, "begin", lambda: f"at most {n} entries that index dims of "
                  f"self (self has {n} dims)", lambda: f"{consuming}", ValueError)
    dims, shape = [], []
    d = 0
    for i in entries:
        if i == "..." or _bit(ellipsis_mask, i):
            for _ in range(covered):
                size = x.shape[d]
                dims.append((0, 1, size))
                shape.append(size)
                d += 1
            continue
        if _bit(new_axis_mask, i):
            shape.append(1)
            continue
        size, stride = x.shape[d], strides[i]
        if _bit(shrink_axis_mask, i):
            checks.expect(stride > 0, op, "strides", lambda: f"a positive stride for the shrunk "
                          f"entry {i} (only stride 1 is meaningful there)",
                          lambda: f"{strides}", ValueError)
            b = begin[i] + size if begin[i] < 0 else begin[i]
            checks.expect(0 <= b < size, op, "begin",
                          lambda: f"an index in [-{size}, {size}) for the shrunk dim {d}",
                          lambda: f"{begin[i]}", IndexError)
            dims.append(("shrink", b))
            d += 1
            continue
        lo, hi = (0, size) if stride > 0 else (-1, size - 1)
        if _bit(begin_mask, i):
            b = lo if stride > 0 else hi
        else:
            b = begin[i] + size if begin[i] < 0 else begin[i]
            b = min(max(b, lo), hi)
        if _bit(end_mask, i):
            e = hi if stride > 0 else lo
        else:
            e = end[i] + size if end[i] < 0 else end[i]
            e = min(max(e, lo), hi)
        count = max(0, -((e - b) // -stride)) if stride > 0 else max(0, -((b - e) // stride))
        dims.append((b, stride, count))
        shape.append(count)
        d += 1
    checks.expect(len(shape) <= _MAX_DIMS, op, "new_axis_mask",
                  f"a result of at most {_MAX_DIMS} dims", lambda: f"{len(shape)} dims",
                  ValueError)
    return _Plan(dims, shape)


def check_indexing(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                   new_axis_mask=0, shrink_axis_mask=0):
    _plan_indexing(IX_OP, self, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                   new_axis_mask, shrink_axis_mask)


def indexing_reference(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                       new_axis_mask=0, shrink_axis_mask=0):
    plan = _plan_indexing(IX_OP, self, begin, end, strides, begin_mask, end_mask,
                          ellipsis_mask, new_axis_mask, shrink_axis_mask)
    y = self
    d = 0
    for spec in plan.dims:
        if spec[0] == "shrink":
            y = y.narrow(d, spec[1], 1)
        else:
            b, stride, count = spec
            if stride > 0:
                y = y.narrow(d, b, 0 if count == 0 else (count - 1) * stride + 1)[
                    (slice(None),) * d + (slice(None, None, stride),)]
            else:
                idx = b + stride * torch.arange(count, device=self.device)
                y = y.index_select(d, idx)
        d += 1
    return y.reshape(plan.shape).clone(memory_format=torch.contiguous_format)


def _indexing_shape(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                    new_axis_mask=0, shrink_axis_mask=0):
    return _plan_indexing(IX_OP, self, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                          new_axis_mask, shrink_axis_mask).shape


def _indexing_fake(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                   new_axis_mask=0, shrink_axis_mask=0):
    shape = _indexing_shape(self, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                            new_axis_mask, shrink_axis_mask)
    return self.new_empty(shape)


indexing_op = NpuOp(IX_SCHEMA, namespace=TORCH_NPU_NS, check=check_indexing,
                    reference=indexing_reference, fake=_indexing_fake, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
indexing_op.forbid_autograd(_NO_GRAD)
indexing_out_op = make_out(IX_OUT_SCHEMA, op=IX_OP, check=check_indexing,
                           compute=indexing_reference, shape_of=_indexing_shape,
                           no_grad=_NO_GRAD_OUT)


def npu_indexing(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                 new_axis_mask=0, shrink_axis_mask=0, *, out=None):
    """Strided slice of ``self``: ``self[begin[0]:end[0]:strides[0], ...]`` with TensorFlow's
    StridedSlice masks.

    Formula (per entry ``i``; ``n`` the dim's size)::

        b = begin[i] (+ n if < 0), e = end[i] (+ n if < 0), clamped to the dim
        begin_mask bit i: b = 0 (stride > 0) or n - 1;  end_mask bit i: e = n or "before 0"
        y takes b, b + s, ... while < e (s > 0) or > e (s < 0)
        shrink_axis_mask bit i: y takes begin[i] only, the dim is dropped
        new_axis_mask bit i: a dim of size 1;  ellipsis_mask bit i: all remaining dims

    Parameters
    ----------
    self : Tensor
    begin, end, strides : list of int
        Equal lengths; strides non-zero (negative walks backwards).  ``end`` is exclusive.
    begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask : int
        Bit masks over the entries (at most one ellipsis bit).
    out : Tensor, optional
        The ``.out`` overload (exact result shape, ``self``'s dtype).

    Returns
    -------
    Tensor
        A new contiguous tensor of ``self``'s dtype.

    Notes
    -----
    The output shape follows op-plugin IndexingKernelNpuOpApi.cpp (aclnnStridedSlice, the
    Ascend 950 path).  The A2/A3 path (IndexingKernelNpu.cpp) sizes the output as
    ``(end - begin + stride - 1) // stride`` per dim without masks or clamping; both agree for
    in-range, mask-free calls like the doc's.  No backward.

    Examples
    --------
    >>> x = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=torch.int32)
    >>> npu_anywhere.npu_indexing(x, [0, 0], [2, 2], [1, 1])
    tensor([[1, 2],
            [5, 6]], dtype=torch.int32)
    """
    if out is not None:
        return indexing_out_op(self, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                               new_axis_mask, shrink_axis_mask, out=out)
    return indexing_op(self, begin, end, strides, begin_mask, end_mask, ellipsis_mask,
                       new_axis_mask, shrink_axis_mask)


# -- npu_slice ----------------------------------------------------------------------------------

def check_slice(self, offsets, size):
    offsets, size = list(offsets), list(size)
    n = self.dim()
    expect_int_list(SL_OP, "offsets", offsets, n, f"{n} entries (one per dim of self)",
                    minimum=0)
    expect_int_list(SL_OP, "size", size, n, f"{n} entries (one per dim of self)", minimum=0)
    for d in range(n):
        checks.expect(offsets[d] + size[d] <= self.shape[d], SL_OP, "size",
                      lambda: f"offsets + size within self's shape {tuple(self.shape)}",
                      lambda: f"offsets {offsets} and size {size}", ValueError)


def slice_reference(self, offsets, size):
    y = self
    for d, (o, s) in enumerate(zip(offsets, size)):
        y = y.narrow(d, o, s)
    return y.clone(memory_format=torch.contiguous_format)


def _slice_shape(self, offsets, size):
    return list(size)


slice_op = NpuOp(SL_SCHEMA, namespace=TORCH_NPU_NS, check=check_slice, reference=slice_reference,
                 metadata_check=True, info=OpInfo(api="torch_npu"))
slice_op.forbid_autograd("the doc says npu_slice has no backward (该接口不支持反向计算)")
slice_out_op = make_out(SL_OUT_SCHEMA, op=SL_OP, check=check_slice, compute=slice_reference,
                        shape_of=_slice_shape, no_grad=_NO_GRAD_OUT)


def npu_slice(self, offsets, size, *, out=None):
    """The block of ``self`` starting at ``offsets`` with extent ``size`` in every dim.

    Formula: ``y = self[offsets[0]:offsets[0] + size[0], offsets[1]:offsets[1] + size[1], ...]``.

    Parameters
    ----------
    self : Tensor
    offsets, size : list of int
        One non-negative entry per dim; ``offsets[d] + size[d] <= self.shape[d]``.
    out : Tensor, optional
        The ``.out`` overload (shape ``size``, ``self``'s dtype).

    Returns
    -------
    Tensor
        New and contiguous, shape ``size`` (op-plugin SliceKernelNpu.cpp allocates exactly
        ``size``, so TensorFlow's ``size = -1`` is not accepted).  No backward (the doc says so).

    Examples
    --------
    >>> x = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], dtype=torch.float16)
    >>> npu_anywhere.npu_slice(x, [0, 0], [2, 2])
    tensor([[1., 2.],
            [6., 7.]], dtype=torch.float16)
    """
    if out is not None:
        return slice_out_op(self, offsets, size, out=out)
    return slice_op(self, offsets, size)


# -- npu_pad ------------------------------------------------------------------------------------

def check_pad(input, paddings):  # noqa: A002  (torch_npu's parameter name)
    paddings = list(paddings)
    n = input.dim()
    checks.expect(len(paddings) <= 2 * n, PAD_OP, "paddings",
                  lambda: f"at most 2 * input.dim() = {2 * n} entries (before / after per dim)",
                  lambda: f"{len(paddings)} entries", ValueError)
    expect_int_list(PAD_OP, "paddings", paddings, minimum=0)


def _pad_shape(input, paddings):  # noqa: A002
    p = list(paddings) + [0] * (2 * input.dim() - len(paddings))
    return [s + p[2 * d] + p[2 * d + 1] for d, s in enumerate(input.shape)]


def pad_reference(input, paddings):  # noqa: A002
    p = list(paddings) + [0] * (2 * input.dim() - len(paddings))
    out = input.new_zeros(_pad_shape(input, paddings))
    inner = tuple(slice(p[2 * d], p[2 * d] + s) for d, s in enumerate(input.shape))
    out[inner] = input
    return out


pad_op = NpuOp(PAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_pad, reference=pad_reference,
               metadata_check=True, info=OpInfo(api="torch_npu"))
pad_op.forbid_autograd(_NO_GRAD)


def npu_pad(input, paddings):  # noqa: A002
    """``input`` surrounded by zeros.

    Formula: dim ``d`` grows by ``paddings[2d]`` zeros before and ``paddings[2d + 1]`` after,
    dims in order from dim 0 (unlike ``torch.nn.functional.pad``, which starts at the last dim);
    missing entries are 0.

    Parameters
    ----------
    input : Tensor
    paddings : list of int
        Non-negative, at most ``2 * input.dim()`` entries.

    Returns
    -------
    Tensor
        ``input``'s dtype, shape ``input.shape[d] + paddings[2d] + paddings[2d + 1]``.

    Notes
    -----
    Shapes from op-plugin utils/KernelNpuOutputSize.cpp ``pad_npu_output_size`` (the Pad kernel
    gets the list zero-extended to ``2 * dim``).  No backward.

    Examples
    --------
    >>> npu_anywhere.npu_pad(torch.tensor([[20, 20, 10, 10]], dtype=torch.float16), [1, 1, 1, 1])
    tensor([[ 0.,  0.,  0.,  0.,  0.,  0.],
            [ 0., 20., 20., 10., 10.,  0.],
            [ 0.,  0.,  0.,  0.,  0.,  0.]], dtype=torch.float16)
    """
    return pad_op(input, paddings)


# torch_npu's functions are op packets: ``torch_npu.npu_indexing.out(..., out=y)`` works too.
npu_indexing.out = indexing_out_op
npu_slice.out = slice_out_op

TORCH_NPU_FUNCTIONS = {IX_OP: npu_indexing, SL_OP: npu_slice, PAD_OP: npu_pad}
