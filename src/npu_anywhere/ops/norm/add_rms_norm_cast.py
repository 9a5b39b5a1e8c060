"""torch_npu.npu_add_rms_norm_cast: npu_add_rms_norm plus a float32 copy of y.

Formula (aclnnAddRmsNormCast, hicann/ops-nn ``norm/add_rms_norm_cast``)::

    x    = x1 + x2
    rstd = 1 / sqrt(mean(x^2 over the trailing gamma.dim() dims) + epsilon)
    y2   = x * rstd * gamma          (x1's dtype)
    y1   = float(y2)                 (float32)

Outputs, in order: ``(y1 float32, y2, rstd float32, x)`` (op-plugin yaml ``gen_opapi`` and
meta registration).
"""

from __future__ import annotations

import torch

from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import rms_core
from .add_rms_norm import check_add_pair
from .rms_core import add_rms_norm_fp32, rounds_intermediates

OP = "npu_add_rms_norm_cast"
SCHEMA = ("npu_add_rms_norm_cast(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) "
          "-> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_DTYPES = (torch.float16, torch.bfloat16)


def check_add_rms_norm_cast(x1, x2, gamma, epsilon=1e-06):
    check_add_pair(OP, x1, x2, gamma, dtypes=_DTYPES, supported=_SUPPORTED)


# The A2/A3 bfloat16 templates switch to the split-D template (``add_rms_norm_cast_split_d.h``)
# above this many normalized elements (``UB_FACTOR_B16`` in ``add_rms_norm_cast_tiling.cpp``).
_BF16_SPLIT_D_ABOVE = 8704


def _bf16_a2_body(x1, x2, gamma, epsilon):
    """A2/A3 bfloat16: the norm of the float32 sum, ``y`` rounded once (see the docstring)."""
    ct = torch.float32
    total = x1.to(ct) + x2.to(ct)
    x = total.to(x1.dtype)
    dims = rms_core.norm_dims(x1.dim(), gamma.dim())
    rstd = torch.rsqrt(total.square().mean(dims, keepdim=True) + epsilon)
    # The split-D template reloads x from the rounded x output for its second pass.
    source = x.to(ct) if gamma.numel() > _BF16_SPLIT_D_ABOVE else total
    y2 = (source * rstd * gamma.to(ct)).to(x1.dtype)
    return y2.to(ct), y2, rstd, x


def _add_rms_norm_cast_body(x1, x2, gamma, epsilon, rounds):
    if rounds and x1.dtype == torch.bfloat16:
        return _bf16_a2_body(x1, x2, gamma, epsilon)
    y, rstd, x = add_rms_norm_fp32(x1, x2, gamma, epsilon, round_sum=rounds,
                                   round_normalized=rounds)
    y2 = y.to(x1.dtype)
    # A2/A3 kernels cast the rounded y2 back (y1 == float(y2)); the 950 kernel writes the
    # float32 value it rounded y2 from.
    y1 = y2.to(torch.float32) if rounds else y
    return y1, y2, rstd, x


def add_rms_norm_cast_reference(x1, x2, gamma, epsilon=1e-06):
    return _add_rms_norm_cast_body(x1, x2, gamma, epsilon, rounds_intermediates())


add_rms_norm_cast_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_add_rms_norm_cast,
                             reference=add_rms_norm_cast_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
add_rms_norm_cast_op.forbid_autograd("npu_add_rms_norm_cast has no backward in op-plugin's "
                                     "derivatives.yaml")


def npu_add_rms_norm_cast(x1, x2, gamma, epsilon=1e-06):
    """Residual add + RMSNorm + cast: returns ``(y1, y2, rstd, x)``.

    Formula (aclnnAddRmsNormCast)::

        x    = x1 + x2
        rstd = 1 / sqrt(mean(x^2 over the trailing gamma.dim() dims) + epsilon)
        y2   = x * rstd * gamma
        y1   = float(y2)

    Parameters
    ----------
    x1, x2 : Tensor
        Same shape (1-D to 8-D), float16 or bfloat16.
    gamma : Tensor
        ``gamma.shape == x1.shape[n:]`` (``n < x1.dim()``), same dtype as x1.
    epsilon : float
        Default 1e-6.

    Returns
    -------
    y1 : Tensor
        float32, x1's shape: the normalized output cast to float32.
    y2 : Tensor
        x1's dtype and shape: the normalized output.
    rstd : Tensor
        float32, shape ``x1.shape[:-k] + (1,) * k``.
    x : Tensor
        ``x1 + x2`` in x1's dtype.

    Constraints
    -----------
    Products: A2, A3 (seed 004) and 950 (aclnn doc).  float32 input is not supported (the doc
    lists float16/bfloat16 only).  Strict mode rejects empty tensors (seed: "不支持空tensor").

    Notes
    -----
    Precision follows the kernel templates (hicann/ops-nn ``norm/add_rms_norm_cast/op_kernel/``).
    A2/A3 (and default mode), float16 (``add_rms_norm_cast.h`` ``Computefp16``,
    ``_single_n.h``, ``_split_d.h``, and the float16-only ``_multi_n.h``): x1 + x2 is added in
    float16 and the norm is computed from the rounded sum; ``x * rstd`` is rounded to float16
    before the gamma multiply.  A2/A3, bfloat16 (``add_rms_norm_cast.h`` ``Computebf16``,
    ``_single_n.h``): x1 + x2 is added in float32, rstd comes from the **float32 sum**, and
    ``y2 = round(sum * rstd * gamma)`` is rounded once; when ``gamma.numel() > 8704`` the
    split-D template (``_split_d.h``) keeps rstd from the float32 sum but computes y2 from the
    rounded x output.  In both cases ``y1 == y2.float()`` exactly.  Under ``strict("950")`` the
    float32 sum is normalized, y2 rounded once and y1 is the float32 value y2 was rounded
    from (``op_kernel/arch35/add_rms_norm_cast_regbase_common.h`` ``ComputeY`` stores the
    float32 register to y1 and its cast to y2; ops-nn ``norm/add_rms_norm/tests/assets/
    golden.py``, ``add_rms_golden_v2`` with ``post_action='cast'``).  No autograd.

    Examples
    --------
    >>> x1 = torch.randn(20, 10, 64, dtype=torch.float16)
    >>> x2 = torch.randn(20, 10, 64, dtype=torch.float16)
    >>> g = torch.randn(64, dtype=torch.float16)
    >>> y1, y2, rstd, x = npu_anywhere.npu_add_rms_norm_cast(x1, x2, g)
    >>> y1.dtype, y2.dtype, rstd.shape
    (torch.float32, torch.float16, torch.Size([20, 10, 1]))
    """
    return add_rms_norm_cast_op(x1, x2, gamma, epsilon)


def _bind(x1, x2, gamma, epsilon=1e-06):
    return x1, x2, gamma, epsilon


rms_core.register_compiled(
    add_rms_norm_cast_op, _add_rms_norm_cast_body,
    key=lambda x1, x2, gamma, epsilon: (x1.dtype, tuple(gamma.shape), x1.device.type),
    numerics=lambda *a, **k: rounds_intermediates(), bind=_bind)


TORCH_NPU_FUNCTIONS = {"npu_add_rms_norm_cast": npu_add_rms_norm_cast}
