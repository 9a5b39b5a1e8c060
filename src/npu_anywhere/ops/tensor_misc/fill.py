"""torch_npu.npu_one_hot, one_, npu_masked_fill_range and npu_stride_add.

Formulas (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/（beta）torch_npu-*.md)::

    npu_one_hot:   y[..., c, ...] = on_value if int(x[...]) == c else off_value, c < depth
                   (the class dim at position num_classes; -1 = last)
    one_:          self[...] = 1 (in place)
    npu_masked_fill_range, for i < num, j < N, start[i, j] <= k < end[i, j]:
                   axis the last dim of a 2-D / 3-D self:  y[j, ..., k] = value[i]
                   any other axis (and 1-D self):        y[..., k, ...] = value[i]
                   (later i win where ranges overlap)
    npu_stride_add: y[:, c] = x1p[:, 16 * offset1 + c] + x2p[:, 16 * offset2 + c],
                   c < 16 * c1_len, xp = x zero-padded along dim 1 to whole C1 blocks of 16

Sources followed: op-plugin aclops/OnehotNpu.cpp (A2/A3: float32 result, OneHotD with
``axis = num_classes``; the class-dim position as opapi/OneHotKernelNpuOpApi.cpp places it),
aclops/MaskedFillRangeKernelNpu.cpp and the golden test/test_base_ops/test_masked_fill_range.py,
aclops/StrideAddKernelNpu.cpp with utils/KernelNpuOutputSize.cpp ``infersize_stride_add`` and
the golden test/test_base_ops/test_strideadd.py.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace

OH_OP = "npu_one_hot"
OH_SCHEMA = ("npu_one_hot(Tensor self, int num_classes=-1, int depth=1, Scalar on_value=1, "
             "Scalar off_value=0) -> Tensor")
ONE_OP = "one_"
ONE_PUBLIC_SCHEMA = "one_(Tensor(a!) self) -> Tensor(a!)"
ONE_SCHEMA = "_one_inplace(Tensor(a!) self) -> ()"
MFR_OP = "npu_masked_fill_range"
MFR_SCHEMA = ("npu_masked_fill_range(Tensor self, Tensor start, Tensor end, Tensor value, "
              "int axis=-1) -> Tensor")
SA_OP = "npu_stride_add"
SA_SCHEMA = ("npu_stride_add(Tensor self, Tensor other, Scalar offset1, Scalar offset2, "
             "Scalar c1_len) -> Tensor")

_NO_GRAD = "op-plugin's derivatives.yaml lists no backward for it"
_C0 = 16


# -- npu_one_hot --------------------------------------------------------------------------------

def check_one_hot(self, num_classes=-1, depth=1, on_value=1, off_value=0):
    checks.expect(not self.dtype.is_complex, OH_OP, "self", "a real tensor of class indices",
                  lambda: f"dtype {dtypes.name(self.dtype)}", TypeError)
    checks.expect(-1 <= num_classes <= self.dim(), OH_OP, "num_classes",
                  lambda: f"the position of the class dim in [-1, self.dim()] = [-1, "
                  f"{self.dim()}] (-1: last)", repr(num_classes), ValueError)
    checks.expect(depth != -1, OH_OP, "depth", "a given depth (depth=-1, inferred from the "
                  "data on the Ascend 950, is not implemented by npu_anywhere)", "-1",
                  NotImplementedError)
    checks.expect(depth >= 1, OH_OP, "depth", ">= 1", repr(depth), ValueError)


def _one_hot_axis(self, num_classes) -> int:
    return self.dim() if num_classes == -1 else num_classes


def one_hot_reference(self, num_classes=-1, depth=1, on_value=1, off_value=0):
    idx = self.to(torch.int32).to(torch.int64).unsqueeze(-1)
    classes = torch.arange(depth, device=self.device)
    hot = idx == classes                                   # out-of-range ids match nothing
    on = torch.tensor(float(on_value), dtype=torch.float32, device=self.device)
    off = torch.tensor(float(off_value), dtype=torch.float32, device=self.device)
    y = torch.where(hot, on, off)
    return y.movedim(-1, _one_hot_axis(self, num_classes)).contiguous()


def _one_hot_fake(self, num_classes=-1, depth=1, on_value=1, off_value=0):
    shape = list(self.shape)
    shape.insert(_one_hot_axis(self, num_classes), depth)
    return self.new_empty(shape, dtype=torch.float32)


one_hot_op = NpuOp(OH_SCHEMA, namespace=TORCH_NPU_NS, check=check_one_hot,
                   reference=one_hot_reference, fake=_one_hot_fake, metadata_check=True,
                   info=OpInfo(api="torch_npu"))
one_hot_op.forbid_autograd(_NO_GRAD)


def npu_one_hot(self, num_classes=-1, depth=1, on_value=1, off_value=0):
    """One-hot encoding: ``on_value`` where the class equals the index, ``off_value`` elsewhere.

    Formula::

        y[..., c, ...] = on_value if int(self[...]) == c else off_value,   0 <= c < depth

    Parameters
    ----------
    self : Tensor
        Class indices of any shape (floats are truncated to int32 first, as the NPU casts
        them); indices outside ``[0, depth)`` give a row of ``off_value``.
    num_classes : int
        Where the class dim goes (OneHotD's ``axis``): -1 (default) appends it, ``0 ..
        self.dim()`` inserts it there.
    depth : int
        Number of classes (>= 1).
    on_value, off_value : Scalar

    Returns
    -------
    Tensor
        float32, ``self``'s shape with ``depth`` inserted at the class dim.

    Notes
    -----
    Follows the A2/A3 kernel (op-plugin aclops/OnehotNpu.cpp): the result is float32 whatever
    the scalars' type, as the doc's example shows.  On the Ascend 950
    (opapi/OneHotKernelNpuOpApi.cpp) the result takes ``on_value``'s type (int64 for the
    defaults) and ``depth=-1`` infers the depth from the data; neither is reproduced.
    No backward.

    Examples
    --------
    >>> npu_anywhere.npu_one_hot(torch.IntTensor([5, 3, 2, 1]), depth=5)
    tensor([[0., 0., 0., 0., 0.],
            [0., 0., 0., 1., 0.],
            [0., 0., 1., 0., 0.],
            [0., 1., 0., 0., 0.]])
    """
    return one_hot_op(self, num_classes, depth, on_value, off_value)


# -- one_ ---------------------------------------------------------------------------------------

def check_one_(self):
    checks.expect(isinstance(self, torch.Tensor), ONE_OP, "self", "a Tensor",
                  type(self).__name__, TypeError)


def one_inplace_reference(self):
    self.fill_(1)


_one_internal, one_inplace_op = define_inplace(
    ONE_PUBLIC_SCHEMA, ONE_SCHEMA, check=check_one_, reference=one_inplace_reference,
    no_grad="op-plugin's derivatives.yaml lists no backward for one_")


def one_(self):
    """Fill ``self`` with ones in place and return it (``self.fill_(1)``; any dtype, any
    strides).  No backward."""
    return one_inplace_op(self)


# -- npu_masked_fill_range ----------------------------------------------------------------------

_MFR_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int8)


def check_masked_fill_range(self, start, end, value, axis=-1):
    op = MFR_OP
    checks.expect_dim(self, (1, 2, 3), op, "self")
    checks.expect_dtype(self, _MFR_DTYPES + (torch.float64,), op, "self")
    n = self.dim()
    checks.expect(-n <= axis < n, op, "axis", lambda: f"in [{-n}, {n - 1}]", repr(axis),
                  IndexError)
    checks.expect_dim(start, 2, op, "start")
    checks.expect_dtype(start, (torch.int32,), op, "start")
    checks.expect_dtype(end, (torch.int32,), op, "end")
    checks.expect(tuple(end.shape) == tuple(start.shape), op, "end",
                  lambda: f"start's shape {tuple(start.shape)}", lambda: f"shape {tuple(end.shape)}",
                  RuntimeError)
    checks.expect_dim(value, 1, op, "value")
    checks.expect(value.shape[0] == start.shape[0], op, "value",
                  lambda: f"one value per range group (start.size(0) = {start.shape[0]})",
                  lambda: f"shape {tuple(value.shape)}", RuntimeError)
    checks.expect(value.dtype == self.dtype, op, "value", lambda: f"self's dtype "
                  f"{dtypes.name(self.dtype)}", lambda: dtypes.name(value.dtype), TypeError)
    if n >= 2 and axis % n == n - 1:
        checks.expect(start.shape[1] <= self.shape[0], op, "start",
                      lambda: f"at most self.size(0) = {self.shape[0]} columns (column j fills "
                      "row j of self along the last axis)", lambda: f"shape {tuple(start.shape)}",
                      RuntimeError)
    checks.expect_same_device({"self": self, "start": start, "end": end, "value": value}, op)


def masked_fill_range_reference(self, start, end, value, axis=-1):
    n = self.dim()
    ax = axis % n
    size = self.shape[ax]
    num, rows = start.shape
    k = torch.arange(size, device=self.device)
    s = start.to(torch.int64).clamp(0, size).unsqueeze(-1)
    e = end.to(torch.int64).clamp(0, size).unsqueeze(-1)
    inside = (k >= s) & (k < e)                                   # (num, N, size)
    group = torch.arange(1, num + 1, device=self.device).view(num, 1, 1)
    winner = torch.where(inside, group, 0).amax(dim=0) if num else \
        torch.zeros(rows, size, dtype=torch.int64, device=self.device)     # (N, size): i + 1
    fill = torch.cat([value.new_zeros(1), value])
    out = self.clone(memory_format=torch.contiguous_format)
    if n >= 2 and ax == n - 1:
        # column j of start / end fills row j of self along the last axis
        target = out[:rows]
        w = winner.view(rows, *([1] * (n - 2)), size).expand(target.shape)
        target.copy_(torch.where(w > 0, fill[w], target))
    else:
        w = winner.amax(dim=0) if rows else torch.zeros(size, dtype=torch.int64,
                                                          device=self.device)
        shape = [1] * n
        shape[ax] = size
        w = w.view(shape).expand(out.shape)
        out = torch.where(w > 0, fill[w], out)
    return out


masked_fill_range_op = NpuOp(MFR_SCHEMA, namespace=TORCH_NPU_NS, check=check_masked_fill_range,
                             reference=masked_fill_range_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
masked_fill_range_op.forbid_autograd(_NO_GRAD)


def npu_masked_fill_range(self, start, end, value, axis=-1):
    """Fill ranges along ``axis`` with per-group values.

    Formula (op-plugin's golden test_masked_fill_range.py), for ``i < num``, ``j < N`` and
    ``start[i, j] <= k < end[i, j]``::

        axis the last dim of a 2-D or 3-D self:  y[j, ..., k] = value[i]
        otherwise (and for 1-D self):           y[..., k, ...] = value[i]   (all other dims)

    Where ranges overlap the later group ``i`` wins (the golden's loop order).

    Parameters
    ----------
    self : Tensor
        1-D, 2-D or 3-D; float32, float16, int32 or int8 (float64 also accepted).
    start, end : Tensor
        int32 of shape ``(num, N)``; for the last axis ``N <= self.size(0)``.  Range bounds
        outside ``[0, self.size(axis)]`` are clamped to it.
    value : Tensor
        ``(num,)``, ``self``'s dtype.
    axis : int
        In ``[-self.dim(), self.dim() - 1]``.

    Returns
    -------
    Tensor
        A new tensor; ``self`` is not modified.

    Notes
    -----
    Checks as op-plugin MaskedFillRangeKernelNpu.cpp (axis range, 2-D start of end's shape,
    one value per group, value's dtype).  No backward.

    Examples
    --------
    >>> a = torch.zeros(4, 4)
    >>> start = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    >>> end = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    >>> npu_anywhere.npu_masked_fill_range(a, start, end, torch.tensor([1.]), 1).diagonal()
    tensor([1., 1., 1., 0.])
    """
    return masked_fill_range_op(self, start, end, value, axis)


# -- npu_stride_add -----------------------------------------------------------------------------

def _c1(channels: int) -> int:
    return -(-channels // _C0)


def _scalar_int(op: str, name: str, v) -> int:
    checks.expect(float(v) == int(v) and int(v) >= 0, op, name, "a non-negative integer",
                  repr(v), ValueError)
    return int(v)


def check_stride_add(self, other, offset1, offset2, c1_len):
    op = SA_OP
    checks.expect(self.dim() >= 2, op, "self", "at least 2 dims (N, C, ...), a 5HD tensor's "
                  "logical shape", lambda: f"shape {tuple(self.shape)}", ValueError)
    checks.expect(other.dim() == self.dim() and all(
        other.shape[d] == self.shape[d] for d in range(self.dim()) if d != 1), op, "other",
        lambda: f"self's shape {tuple(self.shape)} except in dim 1 (C)",
        lambda: f"shape {tuple(other.shape)}", RuntimeError)
    checks.expect_same_dtype({"self": self, "other": other}, op)
    checks.expect_same_device({"self": self, "other": other}, op)
    o1 = _scalar_int(op, "offset1", offset1)
    o2 = _scalar_int(op, "offset2", offset2)
    n = _scalar_int(op, "c1_len", c1_len)
    checks.expect(n >= 1, op, "c1_len", ">= 1", repr(c1_len), ValueError)
    for name, x, o in (("self", self, o1), ("other", other, o2)):
        checks.expect(o + n <= _c1(x.shape[1]), op, "c1_len",
                      lambda x=x, o=o, name=name: f"<= C1 - offset of {name} (C1 = "
                      f"ceil({x.shape[1]} / 16) = {_c1(x.shape[1])}, offset {o})", repr(c1_len),
                      ValueError)


def _channel_block(x, offset: int, length: int) -> torch.Tensor:
    """Channels [16 * offset, 16 * (offset + length)) of x, zero beyond x's C."""
    lo, hi = _C0 * offset, _C0 * (offset + length)
    part = x[:, lo:min(hi, x.shape[1])]
    pad = hi - lo - part.shape[1]
    if pad:
        zeros = x.new_zeros((x.shape[0], pad, *x.shape[2:]))
        part = torch.cat([part, zeros], dim=1)
    return part


def stride_add_reference(self, other, offset1, offset2, c1_len):
    n = int(c1_len)
    return _channel_block(self, int(offset1), n) + _channel_block(other, int(offset2), n)


def _stride_add_fake(self, other, offset1, offset2, c1_len):
    shape = list(self.shape)
    shape[1] = _C0 * int(c1_len)
    return self.new_empty(shape)


stride_add_op = NpuOp(SA_SCHEMA, namespace=TORCH_NPU_NS, check=check_stride_add,
                      reference=stride_add_reference, fake=_stride_add_fake, metadata_check=True,
                      info=OpInfo(api="torch_npu"))
stride_add_op.forbid_autograd(_NO_GRAD)


def npu_stride_add(self, other, offset1, offset2, c1_len):
    """Add C1 blocks of two NC1HWC0 (5HD) tensors.

    Formula (C0 = 16; ``xp`` is ``x`` zero-padded along dim 1 to whole blocks)::

        y[:, c] = self_p[:, 16 * offset1 + c] + other_p[:, 16 * offset2 + c],  c < 16 * c1_len

    Parameters
    ----------
    self, other : Tensor
        The logical (N, C, ...) shape of a 5HD tensor; same dtype, equal except in dim 1.
    offset1, offset2 : Scalar
        First C1 block of ``self`` / ``other`` (non-negative integers).
    c1_len : Scalar
        Number of C1 blocks added; ``offset + c1_len <= ceil(C / 16)`` for both inputs (the
        doc's "less than" reads as "at most": its own example uses C1 = 1, offset 0,
        c1_len = 1).

    Returns
    -------
    Tensor
        ``self``'s shape with dim 1 equal to ``16 * c1_len`` (op-plugin StrideAddKernelNpu.cpp),
        ``self``'s dtype; padding channels add up to 0.

    Examples
    --------
    >>> a = torch.tensor([[[[[1.]]]]])
    >>> npu_anywhere.npu_stride_add(a, a, 0, 0, 1).reshape(-1)[:3]
    tensor([2., 0., 0.])
    """
    return stride_add_op(self, other, offset1, offset2, c1_len)


TORCH_NPU_FUNCTIONS = {OH_OP: npu_one_hot, ONE_OP: one_, MFR_OP: npu_masked_fill_range,
                       SA_OP: npu_stride_add}
