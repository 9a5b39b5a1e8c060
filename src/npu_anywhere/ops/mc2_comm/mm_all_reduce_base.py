"""torch_npu.npu_mm_all_reduce_base: each rank's matmul, summed over the ranks of ``hcom``.

Formulas (seed 004; hicann/ops-transformer ``mc2/matmul_all_reduce/README.md``)::

    float:          out = allreduce(x1 @ x2 + bias + x3)
    weight quant:   out = allreduce(x1 @ ((x2 + antiquant_offset) * antiquant_scale) + bias + x3)
    full quant:     out = allreduce(dequant_scale [* pertoken_scale] * (x1 @ x2 + bias_int32) + x3)

The sum is over every rank's own ``x1 @ x2 + bias + x3``, as the formula (and the kernel, which
adds bias and x3 on every rank before reducing) has it: a tensor-parallel row layer passes its
bias on one rank only, or adds it after the call.  Each rank's partial result is computed in
float32 (the matmul family's arithmetic, ``_local.py``) and rounded to the output dtype, as the
kernel writes its matmul tile in that dtype before the collective reads it
(``op_kernel/matmul_all_reduce_base.h``); the rounded partials are summed in float32 and the sum
rounded once more.  With two ranks that is exactly one addition in the output dtype, whatever
order HCCL sums in; op-plugin's golden (``test/test_custom_ops/test_mm_all_reduce_base.py``)
skips the first rounding, well within its tolerance.
The output shape and dtypes follow op-plugin's meta function: ``x1``'s shape with n last; the
quantized output is ``y_dtype``, else bfloat16 for a bfloat16 ``dequant_scale`` and float16 for
the others.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _comm, _local

OP = "npu_mm_all_reduce_base"
SCHEMA = (
    "npu_mm_all_reduce_base(Tensor x1, Tensor x2, str hcom, *, str reduce_op='sum', "
    "Tensor? bias=None, Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, "
    "Tensor? x3=None, Tensor? dequant_scale=None, Tensor? pertoken_scale=None, "
    "Tensor? comm_quant_scale_1=None, Tensor? comm_quant_scale_2=None, "
    "int antiquant_group_size=0, int comm_turn=0, int[]? group_sizes=None, int? y_dtype=None, "
    "int? x1_dtype=None, int? x2_dtype=None, int? dequant_scale_dtype=None, "
    "int? pertoken_scale_dtype=None, int comm_quant_mode=0, str? comm_mode=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.ASCEND_950})
_DEQUANT_DTYPES = (torch.int64, torch.bfloat16, torch.float32)


def _mode(x1, x2) -> str:
    if x1.dtype == torch.int8:
        return "quant"
    return "weight_quant" if x2.dtype == torch.int8 else "float"


def _out_dtype(x1, x2, dequant_scale, y_dtype) -> torch.dtype:
    if _mode(x1, x2) != "quant":
        return x1.dtype
    default = torch.bfloat16 if dequant_scale.dtype == torch.bfloat16 else torch.float16
    return _local.out_dtype_of(OP, "y_dtype", y_dtype, default)


def _out_shape(x1, x2) -> tuple[int, ...]:
    return (*x1.shape[:-1], x2.shape[1])


def _expect_shape(name: str, t, allowed: list[tuple[int, ...]]) -> None:
    checks.expect(tuple(t.shape) in allowed, OP, name, lambda: f"one of the shapes {allowed}",
                  lambda: tuple(t.shape), RuntimeError)


def _expect_absent(mode: str, **tensors) -> None:
    for name, t in tensors.items():
        checks.expect(t is None, OP, name, f"None in the {mode} mode",
                      "a tensor", ValueError)


def _check_unemulated(comm_quant_scale_1, comm_quant_scale_2, group_sizes, x1_dtype, x2_dtype,
                      dequant_scale_dtype, pertoken_scale_dtype, comm_quant_mode) -> None:
    for name, value in (("comm_quant_scale_1", comm_quant_scale_1),
                        ("comm_quant_scale_2", comm_quant_scale_2),
                        ("group_sizes", group_sizes), ("x1_dtype", x1_dtype),
                        ("x2_dtype", x2_dtype), ("dequant_scale_dtype", dequant_scale_dtype),
                        ("pertoken_scale_dtype", pertoken_scale_dtype)):
        checks.expect(value is None, OP, name,
                      "None (int8 communication, per-block and float8 / hifloat8 inputs are "
                      "not emulated)", "a value", NotImplementedError)
    checks.expect(comm_quant_mode == 0, OP, "comm_quant_mode",
                  "0 (communication quantization is not emulated)", comm_quant_mode,
                  NotImplementedError)


def _check_weight_quant(x1, antiquant_scale, antiquant_offset, group_size, k, n) -> None:
    checks.expect(antiquant_scale is not None, OP, "antiquant_scale",
                  "a tensor when x2 is int8 and x1 is not (weight quant)", None, ValueError)
    checks.expect(antiquant_scale.dtype == x1.dtype, OP, "antiquant_scale",
                  lambda: f"the dtype of x1 ({x1.dtype})", lambda: str(antiquant_scale.dtype),
                  TypeError)
    if group_size:
        checks.expect(group_size % 32 == 0 and 32 <= group_size <= k - 1, OP,
                      "antiquant_group_size",
                      lambda: f"0 or a multiple of 32 in [32, k - 1 = {k - 1}]", group_size,
                      ValueError)
        _expect_shape("antiquant_scale", antiquant_scale, [(math.ceil(k / group_size), n)])
    else:
        _expect_shape("antiquant_scale", antiquant_scale, [(1,), (n,), (1, n)])
    if antiquant_offset is not None:
        checks.expect(antiquant_offset.dtype == antiquant_scale.dtype, OP, "antiquant_offset",
                      lambda: f"the dtype of antiquant_scale ({antiquant_scale.dtype})",
                      lambda: str(antiquant_offset.dtype), TypeError)
        _expect_shape("antiquant_offset", antiquant_offset, [tuple(antiquant_scale.shape)])


def _check_quant(x1, x2, dequant_scale, pertoken_scale, n) -> None:
    checks.expect(x2.dtype == torch.int8, OP, "x2", "int8 when x1 is int8 (full quant)",
                  lambda: str(x2.dtype), TypeError)
    checks.expect(dequant_scale is not None, OP, "dequant_scale",
                  "a tensor when x1 and x2 are int8 (full quant)", None, ValueError)
    checks.expect_dtype(dequant_scale, _DEQUANT_DTYPES, OP, "dequant_scale")
    _expect_shape("dequant_scale", dequant_scale, [(1,), (n,), (1, n)])
    if pertoken_scale is not None:
        checks.expect_dtype(pertoken_scale, (torch.float32,), OP, "pertoken_scale")
        m = math.prod(x1.shape[:-1])
        _expect_shape("pertoken_scale", pertoken_scale, [(m,)])
        checks.expect(dequant_scale.dtype != torch.int64, OP, "dequant_scale",
                      "float32 or bfloat16 with pertoken_scale", "int64", TypeError)


def check_mm_all_reduce_base(x1, x2, hcom, *, reduce_op="sum", bias=None, antiquant_scale=None,
                             antiquant_offset=None, x3=None, dequant_scale=None,
                             pertoken_scale=None, comm_quant_scale_1=None,
                             comm_quant_scale_2=None, antiquant_group_size=0, comm_turn=0,
                             group_sizes=None, y_dtype=None, x1_dtype=None, x2_dtype=None,
                             dequant_scale_dtype=None, pertoken_scale_dtype=None,
                             comm_quant_mode=0, comm_mode=None):
    _check_unemulated(comm_quant_scale_1, comm_quant_scale_2, group_sizes, x1_dtype, x2_dtype,
                      dequant_scale_dtype, pertoken_scale_dtype, comm_quant_mode)
    checks.expect(reduce_op == "sum", OP, "reduce_op", "'sum'", repr(reduce_op), ValueError)
    checks.expect(comm_turn == 0, OP, "comm_turn", "0", comm_turn, ValueError)
    checks.expect_dim(x1, (2, 3), OP, "x1")
    checks.expect_dim(x2, 2, OP, "x2")
    checks.expect_dtype(x1, (torch.int8, *_local.FLOAT_DTYPES), OP, "x1")
    k, n = x2.shape
    checks.expect(x1.shape[-1] == k, OP, "x2", lambda: f"{x1.shape[-1]} rows (x1's k)",
                  lambda: tuple(x2.shape), RuntimeError)
    mode = _mode(x1, x2)
    if mode == "float":
        checks.expect(x2.dtype == x1.dtype, OP, "x2",
                      lambda: f"the dtype of x1 ({x1.dtype}) or int8", lambda: str(x2.dtype),
                      TypeError)
        _expect_absent("float", antiquant_scale=antiquant_scale,
                       antiquant_offset=antiquant_offset, dequant_scale=dequant_scale,
                       pertoken_scale=pertoken_scale)
    elif mode == "weight_quant":
        _check_weight_quant(x1, antiquant_scale, antiquant_offset, antiquant_group_size, k, n)
        _expect_absent("weight quant", dequant_scale=dequant_scale,
                       pertoken_scale=pertoken_scale)
    else:
        _check_quant(x1, x2, dequant_scale, pertoken_scale, n)
        _expect_absent("full quant", antiquant_scale=antiquant_scale,
                       antiquant_offset=antiquant_offset)
    out = _out_dtype(x1, x2, dequant_scale, y_dtype)
    if bias is not None:
        checks.expect_dtype(bias, (torch.int32,) if mode == "quant" else (x1.dtype,), OP, "bias")
        _expect_shape("bias", bias, [(n,)])
    if x3 is not None:
        checks.expect_dtype(x3, (out,), OP, "x3")
        _expect_shape("x3", x3, [_out_shape(x1, x2)])
    named = {"x1": x1, "x2": x2}
    for name, t in (("bias", bias), ("antiquant_scale", antiquant_scale),
                    ("antiquant_offset", antiquant_offset), ("x3", x3),
                    ("dequant_scale", dequant_scale), ("pertoken_scale", pertoken_scale)):
        if t is not None:
            named[name] = t
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, _SUPPORTED)


def mm_all_reduce_base_reference(x1, x2, hcom, *, reduce_op="sum", bias=None,
                                 antiquant_scale=None, antiquant_offset=None, x3=None,
                                 dequant_scale=None, pertoken_scale=None,
                                 comm_quant_scale_1=None, comm_quant_scale_2=None,
                                 antiquant_group_size=0, comm_turn=0, group_sizes=None,
                                 y_dtype=None, x1_dtype=None, x2_dtype=None,
                                 dequant_scale_dtype=None, pertoken_scale_dtype=None,
                                 comm_quant_mode=0, comm_mode=None):
    mode = _mode(x1, x2)
    if mode == "float":
        partial = _local.float_mm(x1, x2, bias)
    elif mode == "weight_quant":
        partial = _local.weight_quant_mm(x1, x2, antiquant_scale, antiquant_offset,
                                         antiquant_group_size, bias)
    else:
        partial = _local.quant_mm(x1, x2, dequant_scale, pertoken_scale, bias)
    if x3 is not None:
        partial = partial + x3.to(torch.float32)
    out = _out_dtype(x1, x2, dequant_scale, y_dtype)
    # The kernel stores each rank's tile in the output dtype before the collective reads it.
    total = _comm.all_reduce_sum(partial.to(out).to(torch.float32), hcom)
    return total.to(out)


def mm_all_reduce_base_fake(x1, x2, hcom, *, dequant_scale=None, y_dtype=None, **kwargs):
    return x1.new_empty(_out_shape(x1, x2), dtype=_out_dtype(x1, x2, dequant_scale, y_dtype))


mm_all_reduce_base_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mm_all_reduce_base,
                              reference=mm_all_reduce_base_reference,
                              fake=mm_all_reduce_base_fake, info=OpInfo(api="torch_npu"))
mm_all_reduce_base_op.forbid_autograd(
    "npu_mm_all_reduce_base has no backward (op-plugin's derivatives.yaml defines none)")


def npu_mm_all_reduce_base(x1, x2, hcom, *, reduce_op="sum", bias=None, antiquant_scale=None,
                           antiquant_offset=None, x3=None, dequant_scale=None,
                           pertoken_scale=None, comm_quant_scale_1=None,
                           comm_quant_scale_2=None, antiquant_group_size=0, comm_turn=0,
                           group_sizes=None, y_dtype=None, x1_dtype=None, x2_dtype=None,
                           dequant_scale_dtype=None, pertoken_scale_dtype=None,
                           comm_quant_mode=0, comm_mode=None):
    """Matmul on every rank of ``hcom``, then the sum over the ranks (tensor-parallel row layer).

    Formulas (seed 004; ops-transformer ``mc2/matmul_all_reduce/README.md``)::

        float:        out = allreduce(x1 @ x2 + bias + x3)
        weight quant: out = allreduce(x1 @ ((x2 + antiquant_offset) * antiquant_scale) + bias + x3)
        full quant:   out = allreduce(dequant_scale [* pertoken_scale]
                                      * (x1 @ x2 + bias) + x3)

    Parameters
    ----------
    x1 : Tensor
        ``[m, k]`` or ``[b, s, k]``: float16 / bfloat16, or int8 (full quant).
    x2 : Tensor
        ``[k, n]`` (a transposed view is fine): x1's dtype, or int8 (weight quant when x1 is
        float, full quant when x1 is int8).
    hcom : str
        The group's communicator name, ``group._get_backend(torch.device("npu"))
        .get_hccl_comm_name(rank)`` after ``init_process_group(backend="hccl")``.  An unknown
        name (or no process group) means one rank: the sum is this rank's own result.
    reduce_op : str
        ``'sum'`` only.
    bias : Tensor, optional
        ``[n]``, x1's dtype (int32 in full quant); added on every rank, so inside the sum.
    antiquant_scale, antiquant_offset : Tensor, optional
        Weight quant: x1's dtype, ``[1]`` (per-tensor), ``[n]`` / ``[1, n]`` (per-channel) or
        ``[ceil(k / antiquant_group_size), n]`` (per-group).
    x3 : Tensor, optional
        Added to each rank's result before the sum; the output's shape and dtype.
    dequant_scale : Tensor, optional
        Full quant: int64 (an ``npu_trans_quant_param`` word), float32 or bfloat16, ``[1]``,
        ``[n]`` or ``[1, n]``.
    pertoken_scale : Tensor, optional
        Full quant: float32 ``[m]`` (``[b*s]`` for a 3-D x1), with a float dequant_scale.
    antiquant_group_size : int
        0, or the per-group size: a multiple of 32 in ``[32, k - 1]``.
    comm_turn : int
        0 only.
    y_dtype : int, optional
        Full quant output dtype code: 5 (float16) or 15 (bfloat16).
    comm_quant_scale_1, comm_quant_scale_2, group_sizes, x1_dtype, x2_dtype, \
dequant_scale_dtype, pertoken_scale_dtype, comm_quant_mode
        int8 communication, per-block and float8 / hifloat8 inputs are not emulated
        (NotImplementedError unless left at their defaults).
    comm_mode : str, optional
        Accepted and ignored (a scheduling choice of the NPU).

    Returns
    -------
    Tensor
        ``x1``'s shape with n last; x1's dtype, or in full quant ``y_dtype`` (default bfloat16
        for a bfloat16 dequant_scale, float16 otherwise).

    Constraints
    -----------
    Strict mode: Atlas A2 and the 950.

    Notes
    -----
    Every rank's float32 partial is rounded to the output dtype (as the kernel stores it), the
    rounded partials are summed in float32 and rounded again: exact for two ranks; with more, the
    NPU's reduction order may differ in the last bits.  No backward.  Under FakeTensor and ``torch.compile`` tracing only shapes are computed.

    Examples
    --------
    >>> x1, x2 = torch.randn(4, 16, dtype=torch.float16), torch.randn(16, 8, dtype=torch.float16)
    >>> npu_anywhere.npu_mm_all_reduce_base(x1, x2, "no_group").shape   # one rank
    torch.Size([4, 8])
    """
    return mm_all_reduce_base_op(
        x1, x2, hcom, reduce_op=reduce_op, bias=bias, antiquant_scale=antiquant_scale,
        antiquant_offset=antiquant_offset, x3=x3, dequant_scale=dequant_scale,
        pertoken_scale=pertoken_scale, comm_quant_scale_1=comm_quant_scale_1,
        comm_quant_scale_2=comm_quant_scale_2, antiquant_group_size=antiquant_group_size,
        comm_turn=comm_turn, group_sizes=group_sizes, y_dtype=y_dtype, x1_dtype=x1_dtype,
        x2_dtype=x2_dtype, dequant_scale_dtype=dequant_scale_dtype,
        pertoken_scale_dtype=pertoken_scale_dtype, comm_quant_mode=comm_quant_mode,
        comm_mode=comm_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_mm_all_reduce_base}
