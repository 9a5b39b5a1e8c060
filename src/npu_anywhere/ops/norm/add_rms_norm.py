"""torch_npu.npu_add_rms_norm: residual add fused with RMSNorm, returning ``(y, rstd, x)``.

Formula (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_add_rms_norm.md``)::

    x    = x1 + x2
    rstd = 1 / sqrt(mean(x^2 over the trailing gamma.dim() dims) + epsilon)
    y    = x * rstd * gamma

Precision (A2/A3/310P kernels, the default): ``x`` is rounded to the input dtype and the norm is
computed from the rounded ``x``; ``x * rstd`` is rounded to the input dtype before the gamma
multiply.  ``strict("950")``: the float32 sum is normalized and ``y`` rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import rms_core
from .rms_core import add_rms_norm_fp32, check_gamma, rounds_intermediates, stat_dtype

OP = "npu_add_rms_norm"
SCHEMA = ("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) "
          "-> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.ATLAS_INFERENCE, Product.A2, Product.A3, Product.ASCEND_950})


def check_add_pair(op, x1, x2, gamma, *, dtypes=None, supported=_SUPPORTED):
    """Checks shared by npu_add_rms_norm and npu_add_rms_norm_cast."""
    product = targets.expect_supported(op, supported)
    if dtypes is None:
        dtypes = FLOATING if product is not None else FLOATING_OR_DOUBLE
    checks.expect_dtype(x1, dtypes, op, "x1")
    checks.expect_same_dtype({"x1": x1, "x2": x2, "gamma": gamma}, op)
    checks.expect_same_device({"x1": x1, "x2": x2, "gamma": gamma}, op)
    check_gamma(op, x1, gamma, x_name="x1")
    checks.expect(x2.shape == x1.shape, op, "x2", lambda: f"the shape of x1 {tuple(x1.shape)}",
                  lambda: tuple(x2.shape))
    if product is not None:
        # The torch_npu docs: empty tensors are not supported (aclnn accepts them).
        checks.expect(x1.numel() != 0, op, "x1", "a non-empty tensor in strict mode",
                      lambda: f"shape {tuple(x1.shape)}", ValueError)
    if product == Product.ATLAS_INFERENCE:
        checks.expect(x1.dtype != torch.bfloat16, op, "x1", "a dtype other than bfloat16 on 310P",
                      "bfloat16", TypeError)


def check_add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    check_add_pair(OP, x1, x2, gamma)


def _add_rms_norm_body(x1, x2, gamma, epsilon, rounds):
    y, rstd, x = add_rms_norm_fp32(x1, x2, gamma, epsilon, round_sum=rounds,
                                   round_normalized=rounds)
    return y.to(x1.dtype), rstd.to(stat_dtype(x1.dtype)), x


def add_rms_norm_reference(x1, x2, gamma, epsilon=1e-06):
    return _add_rms_norm_body(x1, x2, gamma, epsilon, rounds_intermediates())


add_rms_norm_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_add_rms_norm,
                        reference=add_rms_norm_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
add_rms_norm_op.forbid_autograd("npu_add_rms_norm has no backward in op-plugin's "
                                "derivatives.yaml")


def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    """Residual add + RMSNorm: returns ``(y, rstd, x)`` with ``x = x1 + x2``.

    Formula (op-plugin doc ``torch_npu-npu_add_rms_norm.md``; aclnnAddRmsNorm)::

        x    = x1 + x2
        rstd = 1 / sqrt(mean(x^2 over the trailing gamma.dim() dims) + epsilon)
        y    = x * rstd * gamma

    Parameters
    ----------
    x1, x2 : Tensor
        Same shape (1-D to 8-D) and dtype: float16, bfloat16 or float32 (float64 outside
        strict mode).
    gamma : Tensor
        ``gamma.shape == x1.shape[-k:]``, same dtype as x1.
    epsilon : float
        Default 1e-6.

    Returns
    -------
    y : Tensor
        x1's shape and dtype.
    rstd : Tensor
        float32 (float64 for float64 input), shape ``x1.shape[:-k] + (1,) * k``.
    x : Tensor
        ``x1 + x2`` in x1's dtype (the new residual).

    Constraints
    -----------
    Products: Atlas inference (310P, no bfloat16; the doc says rstd is not valid there), A2,
    A3, 950.  Strict mode rejects empty tensors (torch_npu doc) and float64.

    Notes
    -----
    Not in seed 004; schema from op-plugin ``op_plugin_functions.yaml``.  Precision, settled
    from hicann/ops-nn ``norm/add_rms_norm/op_kernel/add_rms_norm.h`` and
    ``tests/assets/golden.py`` (``add_rms_golden_v1`` for Ascend910B/910_93) and op-plugin
    ``test/test_custom_ops/test_npu_add_rms_norm.py`` (whose golden adds in float16 before
    upcasting): on A2/A3/310P (the default here) **x1 + x2 is rounded to the input dtype before
    the norm**, and for float16/bfloat16 ``x * rstd`` is rounded to the input dtype before the
    gamma multiply, i.e. ``y = round(round(x * rstd) * gamma)``.  Under ``strict("950")`` the
    float32 sum is normalized and y is rounded once (``add_rms_golden_v2``).  No autograd
    (not in derivatives.yaml): a call with inputs requiring grad raises.

    Examples
    --------
    >>> x1 = torch.rand(4, 8, dtype=torch.float16) * 100
    >>> x2 = torch.rand(4, 8, dtype=torch.float16) * 100
    >>> gamma = torch.rand(8, dtype=torch.float16) * 100
    >>> y, rstd, x = npu_anywhere.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6)
    >>> y.dtype, rstd.dtype, x.shape
    (torch.float16, torch.float32, torch.Size([4, 8]))
    """
    return add_rms_norm_op(x1, x2, gamma, epsilon)


def _bind(x1, x2, gamma, epsilon=1e-06):
    return x1, x2, gamma, epsilon


rms_core.register_compiled(
    add_rms_norm_op, _add_rms_norm_body,
    key=lambda x1, x2, gamma, epsilon: (x1.dtype, tuple(gamma.shape), x1.device.type),
    numerics=lambda *a, **k: rounds_intermediates(), bind=_bind)


TORCH_NPU_FUNCTIONS = {"npu_add_rms_norm": npu_add_rms_norm}
