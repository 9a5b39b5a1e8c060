"""torch_npu.npu_quant_matmul_gelu: int8 x int8 (or int4 x int4 packed in int32) matmul with
exact int32 accumulation, per-token x per-channel dequantization, then GELU.

Formulas (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_quant_matmul_gelu.md`` and
hicann/ops-nn ``matmul/fused_quant_mat_mul/docs/aclnnFusedQuantMatmul.md``; acc = x1 @ x2 in
int32)::

    bias int32:                  qbmm = (acc + bias) * x2_scale * x1_scale[m]
    bias float16/bfloat16/float32: qbmm = acc * x2_scale * x1_scale[m] + bias
    no bias:                     qbmm = acc * x2_scale * x1_scale[m]
    approximate "gelu_erf":      out = 0.5 * qbmm * (1 + erf(qbmm / sqrt(2)))
    approximate "gelu_tanh":     out = 0.5 * qbmm * (1 + tanh(sqrt(2 / pi) * (qbmm + 0.044715 qbmm^3)))

Output dtype (op-plugin ``op_plugin/ops/opapi/QuantMatmulGeluKernelNpuOpApi.cpp``): bfloat16 when
x2_scale or bias is bfloat16, else float16.  The dequantization and the GELU run in float32 and
are rounded once to the output dtype.  Shapes and the int4 packing follow the op-plugin kernel
and meta registration (x2 ``(k, n // 8)`` packed along n, or the transpose of a contiguous
``(n, k // 8)``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import integer

OP = "npu_quant_matmul_gelu"
SCHEMA = ("npu_quant_matmul_gelu(Tensor x1, Tensor x2, Tensor x1_scale, Tensor x2_scale, *, "
          "Tensor? bias=None, str? approximate='gelu_erf') -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})
APPROXIMATE = ("gelu_erf", "gelu_tanh")
_X2_SCALE_DTYPES = (torch.float32, torch.bfloat16)
_BIAS_DTYPES = (torch.int32, torch.float32, torch.bfloat16, torch.float16)


def _mode(approximate) -> str:
    return "gelu_erf" if approximate is None else approximate


def _int4_x2_packed_along_n(x2: torch.Tensor) -> bool:
    """int4 x2 layout: contiguous ``(k, n // 8)`` (True) or a transposed ``(n, k // 8)``."""
    return x2.is_contiguous()


def _check_operands(x1, x2) -> tuple[int, int, tuple[int, ...]]:
    """(m, n, broadcast batch) after the dtype, rank and k checks."""
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect(t.dtype != torch.quint4x2, OP, name,
                      "int8, or int32 holding eight int4 values (a quint4x2 tensor is not "
                      "implemented: pass the packed int32 words)", str(t.dtype),
                      NotImplementedError)
    integer.check_int_operands(OP, x1, x2)
    if x1.dtype == torch.int32:
        checks.expect(x2.dim() == 2, OP, "x2", "a 2-D tensor for int4 (int32) inputs",
                      lambda: f"shape {tuple(x2.shape)}", ValueError)
        k1 = x1.shape[-1] * 8
        if _int4_x2_packed_along_n(x2):
            k2, n = x2.shape[-2], x2.shape[-1] * 8
        else:
            k2, n = x2.shape[-2] * 8, x2.shape[-1]
            checks.expect(n % 8 == 0, OP, "x2", "an n dim that is a multiple of 8 for int4",
                          n, ValueError)
    else:
        k1, k2, n = x1.shape[-1], x2.shape[-2], x2.shape[-1]
    checks.expect(k1 == k2, OP, "x2", lambda: f"a k dim equal to x1's ({k1})", k2, RuntimeError)
    try:
        batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except RuntimeError:
        checks.expect(False, OP, "x2", lambda: f"batch dims broadcastable with x1's "
                      f"{tuple(x1.shape[:-2])}", lambda: tuple(x2.shape[:-2]), RuntimeError)
    return x1.shape[-2], n, tuple(batch)


def _check_bias(bias, int4: bool, n: int, batch: tuple[int, ...]) -> None:
    if int4:
        checks.expect(bias.dtype == torch.int32, OP, "bias", "int32 for int4 (int32) inputs",
                      str(bias.dtype), TypeError)
    else:
        checks.expect_dtype(bias, _BIAS_DTYPES, OP, "bias")
    allowed = [(n,)]
    if not int4 and len(batch) == 1:
        allowed.append((batch[0], 1, n))
    checks.expect(tuple(bias.shape) in allowed, OP, "bias",
                  lambda: f"one of the shapes {allowed}" + (" (int4 inputs)" if int4 else ""),
                  lambda: tuple(bias.shape), ValueError)


def check_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, *, bias=None, approximate="gelu_erf"):
    mode = _mode(approximate)
    checks.expect(mode in APPROXIMATE, OP, "approximate", "'gelu_tanh' or 'gelu_erf'",
                  repr(mode), ValueError)
    m, n, batch = _check_operands(x1, x2)
    checks.expect_dtype(x1_scale, (torch.float32,), OP, "x1_scale")
    checks.expect(x1_scale.dim() == 1 and x1_scale.shape[0] == m, OP, "x1_scale",
                  lambda: f"a 1-D tensor of size m ({m})",
                  lambda: f"shape {tuple(x1_scale.shape)}", ValueError)
    checks.expect_dtype(x2_scale, _X2_SCALE_DTYPES, OP, "x2_scale")
    checks.expect(x2_scale.dim() == 1 and x2_scale.shape[0] in (1, n), OP, "x2_scale",
                  lambda: f"a 1-D tensor of size 1 or n ({n})",
                  lambda: f"shape {tuple(x2_scale.shape)}", ValueError)
    named = {"x1": x1, "x2": x2, "x1_scale": x1_scale, "x2_scale": x2_scale}
    if bias is not None:
        _check_bias(bias, x1.dtype == torch.int32, n, batch)
        named["bias"] = bias
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, _SUPPORTED)


def output_dtype(x2_scale: torch.Tensor, bias) -> torch.dtype:
    if x2_scale.dtype == torch.bfloat16 or (bias is not None and bias.dtype == torch.bfloat16):
        return torch.bfloat16
    return torch.float16


def quant_matmul_gelu_reference(x1, x2, x1_scale, x2_scale, *, bias=None,
                                approximate="gelu_erf"):
    a, b = integer.unpack_int4_operands(x1, x2)
    acc = integer.int_matmul(a, b)
    int_bias = bias is not None and bias.dtype == torch.int32
    if int_bias:
        acc = acc + bias                      # int32, before dequantization
    v = acc.to(torch.float32) * x2_scale.to(torch.float32)
    v = v * x1_scale.unsqueeze(-1)
    if bias is not None and not int_bias:
        v = v + bias.to(torch.float32)
    form = "tanh" if _mode(approximate) == "gelu_tanh" else "none"
    return torch.nn.functional.gelu(v, approximate=form).to(output_dtype(x2_scale, bias))


quant_matmul_gelu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_quant_matmul_gelu,
                             reference=quant_matmul_gelu_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
quant_matmul_gelu_op.forbid_autograd(
    "npu_quant_matmul_gelu has no backward on the NPU (inference only)")


def npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, *, bias=None, approximate="gelu_erf"):
    """Quantized matmul fused with GELU: exact int32 ``x1 @ x2``, dequantized per token and per
    channel, plus bias, then GELU.

    Formula (``acc = x1 @ x2`` accumulated exactly in int32)::

        int32 bias:  qbmm = (acc + bias) * x2_scale * x1_scale[m]
        float bias:  qbmm = acc * x2_scale * x1_scale[m] + bias
        gelu_erf:    out = 0.5 * qbmm * (1 + erf(qbmm / sqrt(2)))
        gelu_tanh:   out = 0.5 * qbmm * (1 + tanh(sqrt(2 / pi) * (qbmm + 0.044715 * qbmm**3)))

    Parameters
    ----------
    x1 : Tensor
        ``(..., m, k)``, 2-D to 6-D, int8 (A8W8); or int32 holding eight int4 values each
        (A4W4, ``(..., m, k // 8)``, contiguous, low nibble first).
    x2 : Tensor
        ``(..., k, n)``, 2-D to 6-D, x1's dtype, batch dims broadcast with x1's; int8 may be a
        transposed view (or FRACTAL_NZ from npu_format_cast, which is ND here).  A4W4: 2-D, a
        contiguous ``(k, n // 8)`` or the transpose of a contiguous ``(n, k // 8)``.
    x1_scale : Tensor
        float32 ``(m,)``: per-token scale.
    x2_scale : Tensor
        float32 or bfloat16, ``(n,)`` (per channel) or ``(1,)`` (per tensor).
    bias : Tensor, optional
        int32 (added to the accumulator), or float32 / bfloat16 / float16 (added after
        dequantization); ``(n,)``, or ``(batch, 1, n)`` for A8W8 with a 3-D output.  A4W4:
        int32 ``(n,)`` only.
    approximate : str, optional
        ``"gelu_erf"`` (default) or ``"gelu_tanh"``.

    Returns
    -------
    Tensor of shape ``broadcast(batch) + (m, n)``: bfloat16 when x2_scale or bias is bfloat16,
    else float16.

    Constraints
    -----------
    Last dims of x1 and x2 at most 65535; A2 / A3 only (strict mode rejects other products).

    Notes
    -----
    The int32 accumulation is exact on every device; dequantization and GELU run in float32 and
    are rounded once.  A ``torch.quint4x2`` tensor is not accepted: int4 data travel as the
    int32 words npu_quantize returns for ``torch.quint4x2``.  Inference only (no backward).

    Examples
    --------
    >>> x1 = torch.randint(-5, 5, (128, 256), dtype=torch.int8)
    >>> x2 = torch.randint(-5, 5, (256, 512), dtype=torch.int8)
    >>> x1_scale, x2_scale = torch.rand(128) * 0.01, torch.rand(512) * 0.01
    >>> npu_anywhere.npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale,
    ...                                    approximate="gelu_tanh").dtype
    torch.float16
    """
    return quant_matmul_gelu_op(x1, x2, x1_scale, x2_scale, bias=bias, approximate=approximate)


TORCH_NPU_FUNCTIONS = {"npu_quant_matmul_gelu": npu_quant_matmul_gelu}
