"""torch_npu.npu_add_rms_norm_dynamic_quant: residual add + RMSNorm + up to two per-token
dynamic quantizations.

Formula (seed 004; op-plugin ``test/test_custom_ops/test_npu_add_rms_norm_dynamic_quant.py``)::

    x      = x1 + x2
    y      = x / sqrt(mean(x^2 over the last dim) + epsilon) * gamma + beta
    v_i    = y * smooth_scale_i                     (y when smooth_scale_i is None)
    scale_i = rowMax(|v_i|) / 127;   y_i = round(v_i / scale_i)
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..norm import rms_core
from ..norm.rms_core import add_rms_norm_fp32
from ..quant import core
from ._common import expect_shape

OP = "npu_add_rms_norm_dynamic_quant"
SCHEMA = ("npu_add_rms_norm_dynamic_quant(Tensor x1, Tensor x2, Tensor gamma, *, "
          "Tensor? smooth_scale1=None, Tensor? smooth_scale2=None, Tensor? beta=None, "
          "float epsilon=1e-06, bool[2]? output_mask=None, int? y_dtype=None) "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")

SUPPORTED = frozenset({Product.A2, Product.A3})
DST_FORMATS = ("int8", "int4", "hifloat8")
DST_SPELLED = ("torch.int8", "torch.quint4x2", "torch_npu.hifloat8 (290)")


def parse_format(y_dtype) -> core.QuantFormat:
    return core.parse_dst_type(y_dtype, op=OP, param="y_dtype", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def outputs(smooth_scale1, smooth_scale2, output_mask) -> tuple[bool, bool]:
    """Which of y1 / y2 are computed (op-plugin's meta registration)."""
    if output_mask is None or len(output_mask) == 0:
        return True, smooth_scale1 is not None and smooth_scale2 is not None
    return bool(output_mask[0]), bool(output_mask[1])


def check_add_rms_norm_dynamic_quant(x1, x2, gamma, *, smooth_scale1=None, smooth_scale2=None,
                                     beta=None, epsilon=1e-06, output_mask=None, y_dtype=None):
    product = targets.expect_supported(OP, SUPPORTED)
    fmt = parse_format(y_dtype)
    allowed = FLOATING_OR_DOUBLE if product is None else (torch.float16, torch.bfloat16)
    checks.expect_dtype(x1, allowed if product is not None else FLOATING_OR_DOUBLE, OP, "x1")
    named = {"x1": x1, "x2": x2, "gamma": gamma}
    for name, t in (("smooth_scale1", smooth_scale1), ("smooth_scale2", smooth_scale2),
                    ("beta", beta)):
        if t is not None:
            named[name] = t
    checks.expect_same_dtype(named, OP)
    checks.expect_same_device(named, OP)
    checks.expect(2 <= x1.dim() <= rms_core.MAX_DIMS, OP, "x1", "a 2-D to 8-D tensor",
                  lambda: f"shape {tuple(x1.shape)}", ValueError)
    checks.expect(x2.shape == x1.shape, OP, "x2", lambda: f"the shape of x1 {tuple(x1.shape)}",
                  lambda: tuple(x2.shape))
    d = x1.shape[-1]
    checks.expect(tuple(gamma.shape) == (d,), OP, "gamma",
                  lambda: f"a 1-D tensor of the last dim of x1 ({d},)", lambda: tuple(gamma.shape))
    checks.expect(d != 0, OP, "gamma", "a non-empty tensor", "shape (0,)", ValueError)
    for name in ("smooth_scale1", "smooth_scale2", "beta"):
        expect_shape(OP, name, named.get(name), (d,), "gamma")
    if output_mask is not None and len(output_mask) != 0:
        checks.expect(len(output_mask) == 2, OP, "output_mask", "empty or of length 2",
                      lambda: list(output_mask), ValueError)
        checks.expect(bool(output_mask[0]) or bool(output_mask[1]), OP, "output_mask",
                      "at least one True entry", lambda: list(output_mask), ValueError)
        checks.expect(smooth_scale1 is None or bool(output_mask[0]), OP, "output_mask",
                      "output_mask[0] True when smooth_scale1 is given",
                      lambda: list(output_mask), ValueError)
        checks.expect(smooth_scale2 is None or bool(output_mask[1]), OP, "output_mask",
                      "output_mask[1] True when smooth_scale2 is given",
                      lambda: list(output_mask), ValueError)
    else:
        checks.expect(smooth_scale2 is None or smooth_scale1 is not None, OP, "smooth_scale1",
                      "a tensor when smooth_scale2 is given (and output_mask is empty)", "None",
                      ValueError)
    if fmt.name == "int4":
        checks.expect(d % 8 == 0, OP, "x1",
                      "a last dim divisible by 8 when y_dtype is quint4x2 (int4)", d)
    if product is not None:
        checks.expect(x1.numel() != 0, OP, "x1", "a non-empty tensor in strict mode",
                      lambda: f"shape {tuple(x1.shape)}", ValueError)
        # hifloat8 output exists in the 950 kernels only (ops-nn op_kernel/arch35/)
        checks.expect(fmt.name != "hifloat8", OP, "y_dtype",
                      lambda: f"torch.int8 or torch.quint4x2 on {product.value}", fmt.name,
                      ValueError)


def _quant(y, smooth, fmt):
    v = y * smooth.to(y.dtype) if smooth is not None else y.clone()
    amax = v.abs().amax(-1, keepdim=True)
    scale = amax / core.max_value(fmt)
    # op-plugin's golden: an all-zero row gets scale 1 (and y 0).
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = core.cast_to(v.div_(scale), fmt, inplace=True)
    return q, scale.squeeze(-1)


def add_rms_norm_dynamic_quant_reference(x1, x2, gamma, *, smooth_scale1=None,
                                         smooth_scale2=None, beta=None, epsilon=1e-06,
                                         output_mask=None, y_dtype=None):
    fmt = parse_format(y_dtype)
    want1, want2 = outputs(smooth_scale1, smooth_scale2, output_mask)
    y, _, x = add_rms_norm_fp32(x1, x2, gamma, epsilon, round_sum=False,
                                round_normalized=False, beta=beta)
    stat = torch.float64 if y.dtype == torch.float64 else torch.float32
    # An output switched off is a 0-d tensor: op-plugin's eager kernel
    # (op_plugin/ops/opapi/AddRmsNormDynamicQuantKernelNpuOpApi.cpp) allocates it with an empty
    # size list.  The NPU leaves its one element unwritten; here it is 0.
    empty_y = x1.new_zeros((), dtype=fmt.packed_dtype)
    empty_s = x1.new_zeros((), dtype=stat)
    y1, s1 = _quant(y, smooth_scale1, fmt) if want1 else (empty_y, empty_s)
    y2, s2 = _quant(y, smooth_scale2, fmt) if want2 else (empty_y, empty_s)
    return y1, y2, x, s1.to(stat), s2.to(stat)


add_rms_norm_dynamic_quant_op = NpuOp(
    SCHEMA, namespace=TORCH_NPU_NS, check=check_add_rms_norm_dynamic_quant,
    reference=add_rms_norm_dynamic_quant_reference, metadata_check=True,
    info=OpInfo(api="torch_npu"))
add_rms_norm_dynamic_quant_op.forbid_autograd(
    "npu_add_rms_norm_dynamic_quant has no backward in op-plugin's derivatives.yaml")


def npu_add_rms_norm_dynamic_quant(x1, x2, gamma, *, smooth_scale1=None, smooth_scale2=None,
                                   beta=None, epsilon=1e-06, output_mask=None, y_dtype=None):
    """Residual add + RMSNorm (+ beta) + up to two per-token symmetric dynamic quantizations.

    Formula (seed 004; op-plugin's golden)::

        x       = x1 + x2
        y       = x / sqrt(mean(x^2 over the last dim) + epsilon) * gamma + beta
        v_i     = y * smooth_scale_i            (y itself without smooth_scale_i)
        scale_i = rowMax(|v_i|) / DTYPE_MAX     (127 int8, 7 int4; 1 for an all-zero row)
        y_i     = round(v_i / scale_i)

    ``round`` is half to even (``CAST_RINT``), saturating (NaN -> 0).

    Parameters
    ----------
    x1, x2 : Tensor
        Same shape, 2-D to 8-D, float16 or bfloat16 (float32/float64 outside strict mode).
    gamma : Tensor
        ``(H,)``, H the last dim of x1, x1's dtype.
    smooth_scale1, smooth_scale2, beta : Tensor, optional
        gamma's shape and dtype.  smooth_scale2 needs smooth_scale1 when output_mask is empty.
    epsilon : float
        Default 1e-6.
    output_mask : list of two bools, optional
        Which of (y1, y2) to compute.  Empty / None: y1 always, y2 when both smooth scales are
        given.  Not both False; True where the matching smooth scale is given.
    y_dtype : dtype or int, optional
        ``torch.int8`` (default) or ``torch.quint4x2`` (int4 packed eight per int32, low
        nibble first; H divisible by 8); outside strict mode also ``torch_npu.hifloat8``
        (290, uint8 codes, ``DTYPE_MAX`` 32768), which only the 950 kernels compute.

    Returns
    -------
    (y1, y2, x, scale1, scale2)
        ``y_i``: x1's shape, int8 (int32 with last dim H / 8 for int4; uint8 for hifloat8);
        ``scale_i``: float32, ``x1.shape[:-1]``.  An output that is not computed (y2 and
        scale2 by default, or those switched off by output_mask) is a 0-d tensor of the
        output's dtype holding 0, as op-plugin's eager kernel
        (``op_plugin/ops/opapi/AddRmsNormDynamicQuantKernelNpuOpApi.cpp``) allocates it with
        an empty size list (its value is unwritten memory on the NPU; the seed doc says shape
        [1] and "no meaning").
        ``x``: ``x1 + x2`` in x1's dtype.

    Constraints
    -----------
    Products: A2 and A3.  Strict mode rejects empty tensors, float32, float64 and hifloat8
    output.

    Notes
    -----
    Precision follows op-plugin's golden (``test/test_custom_ops/
    test_npu_add_rms_norm_dynamic_quant.py``): the norm of the float32 sum, ``x / rms * gamma +
    beta`` and the quantization in float32 with no intermediate rounding; an all-zero row gets
    scale 1 (the quant core's ``dynamic_symmetric`` would give 0; the kernel's choice is not
    documented).  ``v / scale`` is a division, as in the golden.  The seed's example calls the
    op with undefined names (``x1_n``, ``eps_f``...); the example test binds them.  hifloat8
    follows the 950 kernel (hicann/ops-nn ``norm/add_rms_norm_dynamic_quant/op_kernel/arch35/
    add_rms_norm_dynamic_quant_regbase_common.h``): ``scale = amax * 2^-15`` (the same as the
    division), ``v / scale``, cast with CAST_ROUND and ``SatMode::SAT`` (half away from zero,
    +-32768, NaN -> 0).  No autograd.

    Examples
    --------
    >>> x1 = torch.randn(3, 4, 8, dtype=torch.float16); x2 = torch.randn(3, 4, 8, dtype=torch.float16)
    >>> gamma = torch.ones(8, dtype=torch.float16)
    >>> y1, y2, x, s1, s2 = npu_anywhere.npu_add_rms_norm_dynamic_quant(x1, x2, gamma)
    >>> y1.dtype, s1.shape, y2.shape
    (torch.int8, torch.Size([3, 4]), torch.Size([]))
    """
    return add_rms_norm_dynamic_quant_op(
        x1, x2, gamma, smooth_scale1=smooth_scale1, smooth_scale2=smooth_scale2, beta=beta,
        epsilon=epsilon, output_mask=output_mask, y_dtype=y_dtype)


TORCH_NPU_FUNCTIONS = {"npu_add_rms_norm_dynamic_quant": npu_add_rms_norm_dynamic_quant}
