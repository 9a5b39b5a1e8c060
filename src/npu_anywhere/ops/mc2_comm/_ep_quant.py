"""The per-tensor hifloat8 mode of npu_alltoallv_quant_gmm and npu_quant_gmm_alltoallv (seed
004; op-plugin ``op_plugin/ops/opapi/AllToAllvQuantGmmNpuOpApi.cpp`` requires
``*_dtype=torch_npu.hifloat8`` on uint8 / int8 carriers for quant mode 1)::

    y = (decode(x) @ decode(w)) * x_scale * w_scale      (float32 scales of shape [1])

The hifloat8 values are exact in float32; the products are accumulated in float32 and rounded
once to ``gmm_y_dtype`` / ``mm_y_dtype``.  The other quant modes (the 950's MX mode 6) and the
communication quantization are not emulated.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes
from ..quant import core as quant_core
from ..quant import hifloat8
from . import _local

CARRIERS = (torch.uint8, torch.int8)
PERTENSOR = 1


def out_dtype(op: str, param: str, value) -> torch.dtype:
    if isinstance(value, torch.dtype):
        value = quant_core.dtype_code(value) if value in _local.FLOAT_DTYPES else -1
    checks.expect(value in _local.OUT_CODES, op, param,
                  "torch.float16 or torch.bfloat16 (5 or 15)", value, ValueError)
    return _local.OUT_CODES[value]


def _expect_hifloat8(op: str, name: str, code) -> None:
    if isinstance(code, torch.dtype):
        code = -1
    checks.expect(code == dtypes.HIFLOAT8, op, f"{name}_dtype",
                  f"torch_npu.hifloat8 ({dtypes.HIFLOAT8}) for per-tensor quant mode 1",
                  lambda: quant_core.describe_code(code), ValueError)


def _expect_mode(op: str, name: str, mode) -> None:
    checks.expect(mode == PERTENSOR, op, f"{name}_quant_mode",
                  "1 (per-tensor; the MX mode and the others are not emulated)", mode,
                  NotImplementedError)


def _expect_scale(op: str, name: str, t) -> None:
    checks.expect(t is not None, op, name, "a tensor", None, ValueError)
    checks.expect_dtype(t, (torch.float32,), op, name)
    checks.expect(tuple(t.shape) == (1,), op, name, "shape (1,) (per-tensor)",
                  lambda: tuple(t.shape), RuntimeError)


def check_operands(op: str, which: str, x_dtype, w_dtype, x_mode, w_mode, x_scale, w_scale,
                   x_scale_dtype, w_scale_dtype) -> None:
    """The quant arguments of one matmul: ``which`` is "gmm" or "mm"."""
    _expect_mode(op, f"{which}_x", x_mode)
    _expect_mode(op, f"{which}_weight", w_mode)
    _expect_hifloat8(op, f"{which}_x", x_dtype)
    _expect_hifloat8(op, f"{which}_weight", w_dtype)
    _expect_scale(op, f"{which}_x_scale", x_scale)
    _expect_scale(op, f"{which}_weight_scale", w_scale)
    for name, value in ((f"{which}_x_scale_dtype", x_scale_dtype),
                        (f"{which}_weight_scale_dtype", w_scale_dtype)):
        checks.expect(value is None, op, name, "None (float32 scales)",
                      lambda: quant_core.describe_code(value), ValueError)


def decode(codes: torch.Tensor) -> torch.Tensor:
    return hifloat8.decode_hifloat8(codes.view(torch.uint8)).to(torch.float32)


def quant_mm(x, w, x_scale, w_scale, out: torch.dtype) -> torch.Tensor:
    y = decode(x) @ decode(w)
    return (y * x_scale.to(torch.float32) * w_scale.to(torch.float32)).to(out)


def grouped_quant_mm(x, weight, sizes: list[int], x_scale, w_scale, out) -> torch.Tensor:
    parts = [quant_mm(rows, weight[j], x_scale, w_scale, out)
             for j, rows in enumerate(torch.split(x, sizes))]
    return torch.cat(parts) if parts else x.new_empty((0, weight.shape[2]), dtype=out)
