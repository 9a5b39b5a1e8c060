"""torch_npu.npu_group_norm_silu: GroupNorm followed by SiLU, returning ``(out, mean, rstd)``.

Formula (aclnnGroupNormSilu, hicann/ops-nn ``norm/group_norm_silu/docs``)::

    y    = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta      over each of `group` groups
    out  = y / (1 + exp(-y))                                     (SiLU)
    mean = E[x];  rstd = 1 / sqrt(Var[x] + eps)                  shape (N, group)
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from .group_core import check_affine, check_group_input, group_norm_fp32

OP = "npu_group_norm_silu"
SCHEMA = ("npu_group_norm_silu(Tensor input, Tensor? weight, Tensor? bias, int group, "
          "float eps=0.00001) -> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.ATLAS_INFERENCE, Product.A2, Product.A3, Product.ASCEND_950})


def check_group_norm_silu(input, weight, bias, group, eps=1e-05):
    op = OP
    product = targets.current()
    allowed = FLOATING if product is not None else FLOATING_OR_DOUBLE
    check_group_input(op, input, group, "group", allowed)
    check_affine(op, input, "weight", weight, allowed)
    check_affine(op, input, "bias", bias, allowed)
    named = {"input": input}
    if weight is not None:
        named["weight"] = weight
    if bias is not None:
        named["bias"] = bias
    if weight is not None and bias is not None:
        checks.expect_same_dtype({"weight": weight, "bias": bias}, op)
    checks.expect_same_device(named, op)
    checks.expect(eps > 0, op, "eps", "> 0", eps, ValueError)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None and product != Product.ASCEND_950:
        # Seed 004 lists weight and bias as required inputs; only 950 accepts None.
        for name, t in (("weight", weight), ("bias", bias)):
            checks.expect(t is not None, op, name, lambda: f"a tensor on {product.value}",
                          "None", ValueError)
    if product == Product.ATLAS_INFERENCE:
        checks.expect(input.dtype != torch.bfloat16, op, "input",
                      "a dtype other than bfloat16 on 310P", "bfloat16", TypeError)


def _stat_dtype(input, weight, bias):
    # op-plugin npu_group_norm_silu_dst_type: input's dtype, promoted with weight (or bias)
    # on Ascend 950 only.
    if targets.current() is Product.ASCEND_950:
        other = weight if weight is not None else bias
        if other is not None:
            return torch.promote_types(input.dtype, other.dtype)
    return input.dtype


def group_norm_silu_reference(input, weight, bias, group, eps=1e-05):
    y, mean, rstd = group_norm_fp32(input, weight, bias, group, eps)
    out = torch.nn.functional.silu(y).to(input.dtype)
    stat = _stat_dtype(input, weight, bias)
    return out, mean.to(stat), rstd.to(stat)


group_norm_silu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_group_norm_silu,
                           reference=group_norm_silu_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
group_norm_silu_op.forbid_autograd("npu_group_norm_silu has no backward in op-plugin's "
                                   "derivatives.yaml")


def npu_group_norm_silu(input, weight, bias, group, eps=1e-05):
    """GroupNorm + SiLU: returns ``(out, meanOut, rstdOut)``.

    Formula (aclnnGroupNormSilu)::

        over each (n, g), g = 0..group-1, the C/group channels and all spatial elements:
        mean = E[x];  var = E[(x - mean)^2];  rstd = 1 / sqrt(var + eps)
        y    = (x - mean) * rstd * weight[c] + bias[c]
        out  = y * sigmoid(y)

    Parameters
    ----------
    input : Tensor
        (N, C, ...), 2-D to 8-D, float16, float32 or bfloat16 (float64 outside strict mode).
    weight, bias : Tensor or None
        1-D with C elements, both of one dtype: input's or float32.  None (gamma = 1,
        beta = 0) is accepted as op-plugin's schema allows (Ascend 950 only on the NPU).
    group : int
        Number of groups; must divide C.
    eps : float
        > 0 (default 1e-5).

    Returns
    -------
    out : Tensor
        input's shape and dtype (float32 math, one rounding on every product).
    meanOut, rstdOut : Tensor
        Shape (N, group), input's dtype.

    Constraints
    -----------
    Products: A2 and Atlas inference (310P, no bfloat16) in seed 004, plus A3 and 950 (aclnn
    doc).  Strict mode requires weight and bias except on 950, and rejects float64.

    Notes
    -----
    Precision, settled from the kernels (hicann/ops-nn ``norm/group_norm_silu/op_kernel/``):
    on every product the normalized value stays float32 into the SiLU and ``out`` is rounded
    once.  A2/A3/310P: ``group_norm_silu_b16.h`` ``CalcSilu`` (``x * (rstd * gamma) +
    (beta - mean * rstd * gamma)``, then ``x / (1 + exp(-x))``, one ``Cast``); the 950:
    ``arch35/group_norm_silu_regbase_base.h`` ``VFInnerNormalizeAndSwish`` (float32 registers,
    ``StoreOutputData`` rounds with CAST_RINT).  op-plugin's test golden
    (``test/test_custom_ops/test_group_norm_silu.py``) rounds the norm to float16 before
    the SiLU; no kernel does, so we do not.
    mean/rstd dtype follows op-plugin's ``npu_group_norm_silu_dst_type``
    (``op_plugin/utils/KernelNpuOutputDtype.cpp``): the input dtype, promoted with weight's
    on Ascend 950 only (op-plugin's meta registration returns weight's dtype instead; the two
    differ only for float32 weights with a 16-bit input).  No autograd.

    Examples
    --------
    >>> x = torch.randn(2, 32, 4, 4); g = torch.randn(32); b = torch.randn(32)
    >>> out, mean, rstd = npu_anywhere.npu_group_norm_silu(x, g, b, group=8, eps=1e-5)
    >>> mean.shape
    torch.Size([2, 8])
    """
    return group_norm_silu_op(input, weight, bias, group, eps)


TORCH_NPU_FUNCTIONS = {"npu_group_norm_silu": npu_group_norm_silu}
