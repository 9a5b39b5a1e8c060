"""What npu_all_gather_base_mm and npu_mm_reduce_scatter_base share: the 2-D matmul with the
optional per-token (``x1_scale``) / per-channel (``x2_scale``) int8 dequantization, its checks
and its output dtype (seed 004 and op-plugin's meta functions)::

    float:  x1 @ x2 + bias                          (x1's dtype)
    quant:  (x1 @ x2) * x2_scale [* x1_scale]       (float16 for an int64 x2_scale, else
                                                      output_dtype, default bfloat16)
"""

from __future__ import annotations

import torch

from ... import checks
from . import _comm, _local

COMM_MODES = (None, "aiv", "ai_cpu")
_X2_SCALE_DTYPES = (torch.float32, torch.int64)


def out_dtype(x1, x2_scale, output_dtype) -> torch.dtype:
    if x2_scale is None:
        return x1.dtype
    if x2_scale.dtype == torch.int64:
        return torch.float16
    return torch.bfloat16 if output_dtype is None else output_dtype


def _expect_shape(op, name, t, allowed) -> None:
    checks.expect(tuple(t.shape) in allowed, op, name, lambda: f"one of the shapes {allowed}",
                  lambda: tuple(t.shape), RuntimeError)


def check(op, x1, x2, hcom, world_size, bias, x1_scale, x2_scale, comm_turn, output_dtype,
          comm_mode) -> None:
    """The checks of both ops (x1's rows are this rank's rows)."""
    _comm.expect_world_size(op, "world_size", world_size, hcom)
    checks.expect(comm_turn == 0, op, "comm_turn", "0", comm_turn, ValueError)
    checks.expect(comm_mode in COMM_MODES, op, "comm_mode", "None, 'aiv' or 'ai_cpu'",
                  repr(comm_mode), ValueError)
    checks.expect_dim(x1, 2, op, "input")
    checks.expect_dim(x2, 2, op, "x2")
    checks.expect_dtype(x1, (torch.int8, *_local.FLOAT_DTYPES), op, "input")
    checks.expect(x2.dtype == x1.dtype, op, "x2", lambda: f"the dtype of input ({x1.dtype})",
                  lambda: str(x2.dtype), TypeError)
    m, k = x1.shape
    n = x2.shape[1]
    checks.expect(x2.shape[0] == k, op, "x2", lambda: f"{k} rows (input's k)",
                  lambda: tuple(x2.shape), RuntimeError)
    named = {"input": x1, "x2": x2}
    if x1.dtype == torch.int8:
        checks.expect(x2_scale is not None, op, "x2_scale", "a tensor for int8 inputs", None,
                      ValueError)
        checks.expect_dtype(x2_scale, _X2_SCALE_DTYPES, op, "x2_scale")
        _expect_shape(op, "x2_scale", x2_scale, [(1, n), (n,), (1,)])
        named["x2_scale"] = x2_scale
        if x1_scale is not None:
            checks.expect_dtype(x1_scale, (torch.float32,), op, "x1_scale")
            _expect_shape(op, "x1_scale", x1_scale, [(m, 1), (m,)])
            checks.expect(x2_scale.dtype == torch.float32, op, "x2_scale",
                          "float32 with x1_scale", "int64", TypeError)
            named["x1_scale"] = x1_scale
        checks.expect(bias is None, op, "bias", "None for int8 inputs", "a tensor", ValueError)
        if output_dtype is not None:
            checks.expect(output_dtype in _local.FLOAT_DTYPES and x2_scale.dtype == torch.float32,
                          op, "output_dtype",
                          "torch.float16 or torch.bfloat16, with a float32 x2_scale",
                          lambda: f"{output_dtype} (x2_scale {x2_scale.dtype})", ValueError)
    else:
        for name, t in (("x1_scale", x1_scale), ("x2_scale", x2_scale)):
            checks.expect(t is None, op, name, "None for float inputs (int8 only)", "a tensor",
                          ValueError)
        checks.expect(output_dtype is None, op, "output_dtype",
                      "None for float inputs (int8 only)", str(output_dtype), ValueError)
        if bias is not None:
            checks.expect_dtype(bias, (x1.dtype,), op, "bias")
            _expect_shape(op, "bias", bias, [(n,)])
            named["bias"] = bias
    checks.expect_same_device(named, op)


def partial(x1, x2, bias, x1_scale, x2_scale) -> torch.Tensor:
    """This rank's float32 ``[m, n]`` result (before the collective and the rounding)."""
    if x2_scale is None:
        return _local.float_mm(x1, x2, bias)
    return _local.quant_mm(x1, x2, x2_scale, x1_scale)
