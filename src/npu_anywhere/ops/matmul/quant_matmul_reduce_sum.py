"""torch_npu.npu_quant_matmul_reduce_sum: per-batch int8 matmuls, dequantized per token and per
channel, summed over the batch.

Formula (seed 004 / op-plugin ``docs``; acc_i = x1[i] @ x2[i] accumulated exactly in int32)::

    out = sum_i acc_i * x1_scale[i, :, None] * x2_scale[None, :]        -> bfloat16 (m, n)

Precision: each dequantized product is formed in float32, the batch sum is accumulated in
float32 and rounded once to bfloat16 (op-plugin's golden, ``test/test_custom_ops/
test_npu_quant_matmul_reduce_sum.py``, judges against a float32 computation of the formula).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import integer

OP = "npu_quant_matmul_reduce_sum"
SCHEMA = ("npu_quant_matmul_reduce_sum(Tensor x1, Tensor x2, *, Tensor? x1_scale=None, "
          "Tensor? x2_scale=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def check_quant_matmul_reduce_sum(x1, x2, *, x1_scale=None, x2_scale=None):
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect_dtype(t, (torch.int8,), OP, name)
        checks.expect_dim(t, 3, OP, name)
        checks.expect_nonempty(t, OP, name)
    b, m, k = x1.shape
    checks.expect(x2.shape[0] == b and x2.shape[1] == k, OP, "x2",
                  lambda: f"shape ({b}, {k}, n) to match x1 {tuple(x1.shape)}",
                  lambda: tuple(x2.shape), RuntimeError)
    n = x2.shape[2]
    checks.expect(x1_scale is not None, OP, "x1_scale", "a tensor (it is required)", "None",
                  ValueError)
    checks.expect(x2_scale is not None, OP, "x2_scale", "a tensor (it is required)", "None",
                  ValueError)
    checks.expect_dtype(x1_scale, (torch.float32,), OP, "x1_scale")
    checks.expect_dtype(x2_scale, (torch.bfloat16,), OP, "x2_scale")
    checks.expect(tuple(x1_scale.shape) == (b, m), OP, "x1_scale", lambda: f"shape {(b, m)}",
                  lambda: tuple(x1_scale.shape), ValueError)
    checks.expect(tuple(x2_scale.shape) == (n,), OP, "x2_scale", lambda: f"shape {(n,)}",
                  lambda: tuple(x2_scale.shape), ValueError)
    checks.expect_same_device({"x1": x1, "x2": x2, "x1_scale": x1_scale, "x2_scale": x2_scale},
                              OP)
    targets.expect_supported(OP, _SUPPORTED)


def quant_matmul_reduce_sum_reference(x1, x2, *, x1_scale=None, x2_scale=None):
    acc = integer.int_matmul(x1, x2).to(torch.float32)              # (b, m, n), exact
    y = acc * x1_scale.unsqueeze(-1) * x2_scale.to(torch.float32)
    return y.sum(dim=0).to(torch.bfloat16)


quant_matmul_reduce_sum_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                   check=check_quant_matmul_reduce_sum,
                                   reference=quant_matmul_reduce_sum_reference,
                                   metadata_check=True, info=OpInfo(api="torch_npu"))
quant_matmul_reduce_sum_op.forbid_autograd(
    "npu_quant_matmul_reduce_sum has no backward on the NPU (inference only)")


def npu_quant_matmul_reduce_sum(x1, x2, *, x1_scale=None, x2_scale=None):
    """Batched int8 matmuls, dequantized and summed over the batch.

    Formula::

        out = sum_i (x1[i] @ x2[i]) * x1_scale[i, :, None] * x2_scale[None, :]

    Parameters
    ----------
    x1 : Tensor
        int8 ``(batch, m, k)``.
    x2 : Tensor
        int8 ``(batch, k, n)`` (FRACTAL_NZ on the NPU; the ND tensor here).
    x1_scale : Tensor
        float32 ``(batch, m)``, required.
    x2_scale : Tensor
        bfloat16 ``(n,)``, required.

    Returns
    -------
    bfloat16 Tensor ``(m, n)``.

    Notes
    -----
    The int32 products are exact; dequantization and the batch sum are in float32 with one
    rounding to bfloat16.  Strict mode: A2 and A3 only.

    Examples
    --------
    >>> b, m, k, n = 2, 3, 4, 5
    >>> x1 = torch.ones((b, m, k), dtype=torch.int8)
    >>> x2 = torch.ones((b, k, n), dtype=torch.int8)
    >>> y = npu_anywhere.npu_quant_matmul_reduce_sum(
    ...     x1, x2, x1_scale=torch.ones(b, m), x2_scale=torch.ones(n, dtype=torch.bfloat16))
    >>> y[0, 0].item()
    8.0
    """
    return quant_matmul_reduce_sum_op(x1, x2, x1_scale=x1_scale, x2_scale=x2_scale)


TORCH_NPU_FUNCTIONS = {"npu_quant_matmul_reduce_sum": npu_quant_matmul_reduce_sum}
