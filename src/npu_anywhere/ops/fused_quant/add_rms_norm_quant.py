"""torch_npu.npu_add_rms_norm_quant: residual add + RMSNorm (+ beta) + static quantization.

Formula (seed 004; hicann/ops-nn ``norm/add_rms_norm_quant_v2/docs/aclnnAddRmsNormQuantV2.md``)::

    x  = x1 + x2
    y  = x / sqrt(mean(x^2) + epsilon) * gamma + beta
    y1 = round(y / scales1 + zero_points1)        (div_mode=False: y * scales1)
    y2 = round(y / scales2 + zero_points2)        (only with scales2)

Precision order and rounding: see :func:`npu_add_rms_norm_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..norm import rms_core
from ..norm.rms_core import add_rms_norm_fp32, check_gamma, compute_dtype, rounds_intermediates
from ..quant import core
from ._common import expect_optional_dtype, expect_shape, quantize_static

OP = "npu_add_rms_norm_quant"
SCHEMA = ("npu_add_rms_norm_quant(Tensor x1, Tensor x2, Tensor gamma, Tensor scales1, "
          "Tensor? zero_points1=None, Tensor? beta=None, Tensor? scales2=None, "
          "Tensor? zero_points2=None, *, int axis=-1, float epsilon=1e-06, bool div_mode=True, "
          "int? dst_type=None) -> (Tensor, Tensor, Tensor)")

SUPPORTED = frozenset({Product.ATLAS_INFERENCE, Product.A2, Product.A3, Product.ASCEND_950})
DST_FORMATS = ("int8", "float8_e5m2", "float8_e4m3fn", "hifloat8")
DST_SPELLED = ("torch.int8 (1)", "torch_npu.float8_e5m2 (291)", "torch_npu.float8_e4m3fn (292)",
               "torch_npu.hifloat8 (290)")
_F16, _BF16, _F32, _I32 = torch.float16, torch.bfloat16, torch.float32, torch.int32
# Strict mode: the dtype lists the aclnn layer checks, each tensor on its own (hicann/ops-nn
# norm/add_rms_norm_quant_v2/op_host/op_api/aclnn_add_rms_norm_quant_v2.cpp CheckDtypeValidV2,
# and aclnn_add_rms_norm_quant.cpp CheckDtypeValid, which the 950 runs without beta).  The
# per-product tables of aclnnAddRmsNormQuant(V2).md (and the op definition
# add_rms_norm_quant_def.cpp) list fewer (x1, scales, zero_points) rows, but op-plugin's 950
# tests (test/test_custom_ops/test_npu_add_rms_norm_quant.py) run rows outside them, e.g.
# float16 x and scales with int32 zero points, and float32 x with int32 zero points.
SCALE_DTYPES_950 = (_F32, _F16, _BF16)
ZERO_POINT_DTYPES_950 = (_I32, _F32, _F16, _BF16)
SCALE_DTYPES_A2 = (_F32, _BF16)           # A2, A3 and 310P (ASCEND910BC_AND_310P lists)
ZERO_POINT_DTYPES_A2 = (_I32, _BF16)


def parse_format(dst_type) -> core.QuantFormat:
    return core.parse_dst_type(dst_type, op=OP, param="dst_type", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def check_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1=None, beta=None, scales2=None,
                             zero_points2=None, *, axis=-1, epsilon=1e-06, div_mode=True,
                             dst_type=None):
    product = targets.expect_supported(OP, SUPPORTED)
    fmt = parse_format(dst_type)
    if product is None:
        x_dtypes, s_dtypes = FLOATING_OR_DOUBLE, SCALE_DTYPES_950 + (torch.float64,)
        z_dtypes = ZERO_POINT_DTYPES_950 + (torch.float64,)
    elif product is Product.ASCEND_950:
        x_dtypes, s_dtypes, z_dtypes = FLOATING, SCALE_DTYPES_950, ZERO_POINT_DTYPES_950
    else:
        x_dtypes = (torch.float16, torch.bfloat16)
        s_dtypes, z_dtypes = SCALE_DTYPES_A2, ZERO_POINT_DTYPES_A2
    checks.expect(axis == -1, OP, "axis", "-1 (the only supported value)", axis, ValueError)
    checks.expect_dtype(x1, x_dtypes, OP, "x1")
    named = {"x1": x1, "x2": x2, "gamma": gamma}
    if beta is not None:
        named["beta"] = beta
    checks.expect_same_dtype(named, OP)
    devices = dict(named, scales1=scales1)
    for name, t in (("zero_points1", zero_points1), ("scales2", scales2),
                    ("zero_points2", zero_points2)):
        if t is not None:
            devices[name] = t
    checks.expect_same_device(devices, OP)
    check_gamma(OP, x1, gamma, x_name="x1")
    checks.expect(x2.shape == x1.shape, OP, "x2", lambda: f"the shape of x1 {tuple(x1.shape)}",
                  lambda: tuple(x2.shape))
    shape = tuple(gamma.shape)
    for name, t in (("beta", beta), ("scales1", scales1), ("zero_points1", zero_points1),
                    ("scales2", scales2), ("zero_points2", zero_points2)):
        expect_shape(OP, name, t, shape, "gamma")
    checks.expect_dtype(scales1, s_dtypes, OP, "scales1")
    expect_optional_dtype(OP, "zero_points1", zero_points1, z_dtypes)
    if scales2 is not None:
        checks.expect_same_dtype({"scales1": scales1, "scales2": scales2}, OP)
    if zero_points2 is not None:
        expect_optional_dtype(OP, "zero_points2", zero_points2, z_dtypes)
        if zero_points1 is not None:
            checks.expect_same_dtype({"zero_points1": zero_points1,
                                      "zero_points2": zero_points2}, OP)
    if product is not None:
        checks.expect(x1.numel() != 0, OP, "x1", "a non-empty tensor in strict mode",
                      lambda: f"shape {tuple(x1.shape)}", ValueError)
        if product is Product.ATLAS_INFERENCE:
            checks.expect(x1.dtype != torch.bfloat16, OP, "x1",
                          "a dtype other than bfloat16 on 310P", "bfloat16", TypeError)
        if product is not Product.ASCEND_950:
            checks.expect(fmt.name == "int8", OP, "dst_type",
                          lambda: f"torch.int8 on {product.value} (float8 / hifloat8 outputs "
                          "are 950 only)",
                          fmt.name, ValueError)


def _body(x1, x2, gamma, scales1, zero_points1, beta, scales2, zero_points2, epsilon, div_mode,
          dst_type, rounds):
    fmt = parse_format(dst_type)
    half = x1.dtype == torch.float16
    # A2/A3/310P kernels: float16 adds in float16; bfloat16 normalizes the float32 sum, unless
    # beta is given (then the bfloat16-rounded sum).  float16: x * rstd and the gamma product
    # are float16 operations.  950 (rounds=False): float32 throughout.
    round_sum = rounds and (half or (x1.dtype == torch.bfloat16 and beta is not None))
    y, _, x = add_rms_norm_fp32(x1, x2, gamma, epsilon, round_sum=round_sum,
                                round_normalized=rounds and half)
    if rounds and half:
        y = y.to(torch.float16).to(y.dtype)
    if beta is not None:
        y = y.add_(beta.to(y.dtype))
    y1 = quantize_static(y, scales1, zero_points1, fmt, div_mode=div_mode)
    if scales2 is not None:
        y2 = quantize_static(y, scales2, zero_points2, fmt, div_mode=div_mode)
    else:
        y2 = torch.zeros_like(y1)
    return y1, y2, x


def add_rms_norm_quant_reference(x1, x2, gamma, scales1, zero_points1=None, beta=None,
                                 scales2=None, zero_points2=None, *, axis=-1, epsilon=1e-06,
                                 div_mode=True, dst_type=None):
    return _body(x1, x2, gamma, scales1, zero_points1, beta, scales2, zero_points2, epsilon,
                 div_mode, dst_type, rounds_intermediates())


add_rms_norm_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_add_rms_norm_quant,
                              reference=add_rms_norm_quant_reference, metadata_check=True,
                              info=OpInfo(api="torch_npu"))
add_rms_norm_quant_op.forbid_autograd(
    "npu_add_rms_norm_quant has no backward in op-plugin's derivatives.yaml (integer outputs)")


def npu_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1=None, beta=None, scales2=None,
                           zero_points2=None, axis=-1, epsilon=1e-06, div_mode=True,
                           dst_type=None):
    """Residual add + RMSNorm (+ beta) fused with one or two static quantizations.

    Formula (seed 004; aclnnAddRmsNormQuantV2)::

        x  = x1 + x2
        y  = x / sqrt(mean(x^2 over the trailing gamma.dim() dims) + epsilon) * gamma + beta
        y1 = round(y / scales1 + zero_points1)      div_mode=False: round(y * scales1 + ...)
        y2 = round(y / scales2 + zero_points2)

    ``round`` is half to even (``CAST_RINT``), then the value saturates to [-128, 127] (NaN
    gives 0): 2.5 -> 2, 3.5 -> 4, 127.5 -> 127, +-inf -> 127 / -128.

    Parameters
    ----------
    x1, x2 : Tensor
        Same shape (1-D to 8-D) and dtype: float16 or bfloat16 (float32 on the 950 and,
        like float64, outside strict mode).  Any strides.
    gamma : Tensor
        ``gamma.shape == x1.shape[-k:]``, x1's dtype.
    scales1 : Tensor
        gamma's shape, float32, float16 or bfloat16.  Must not be 0 when ``div_mode`` (not
        checked: a 0 scale gives +-inf, which saturates).
    zero_points1 : Tensor, optional
        gamma's shape, int32, float32, float16 or bfloat16.  Strict mode: the lists the aclnn
        layer checks for the product, each tensor on its own -- A2/A3/310P scales float32 or
        bfloat16 and zero points int32 or bfloat16; the 950 scales float32, float16 or
        bfloat16 and zero points int32, float32, float16 or bfloat16.  (The aclnn pages'
        per-product tables list fewer combinations; op-plugin's 950 tests run others.)
    beta : Tensor, optional
        gamma's shape and dtype; added after the gamma multiply.
    scales2, zero_points2 : Tensor, optional
        Same rules, dtypes equal to scales1 / zero_points1; ``y2`` is only computed with
        ``scales2`` (zero_points2 without scales2 is ignored, as on the NPU).
    axis : int
        Only -1 (ValueError otherwise; op-plugin raises too).
    epsilon : float
        Default 1e-6.
    div_mode : bool
        True: divide by the scales; False: multiply.
    dst_type : int or dtype, optional
        op-plugin's extra keyword: ``torch.int8`` / 1 (default); on the 950 also
        ``torch_npu.float8_e5m2`` (291) and ``torch_npu.float8_e4m3fn`` (292), which saturate,
        map NaN to +0 and round half to even (``castTraitFp322Fp8``: ``SatMode::SAT``,
        CAST_RINT), and ``torch_npu.hifloat8`` (290), which rounds half away from
        zero and saturates to +-32768 (NaN -> 0; the 950 kernel's ``castTraitFp322Hifp8``,
        ``norm/add_rms_norm_quant/op_kernel/arch35/add_rms_norm_quant_regbase_common.h``).

    Returns
    -------
    (y1, y2, x)
        ``y1`` and ``y2``: x1's shape, int8 (or the float8 dtype; hifloat8: uint8 codes).
        ``y2`` is all zeros when ``scales2`` is None: the NPU never writes it then
        (``aclnn_add_rms_norm_quant.cpp`` and ``aclnn_add_rms_norm_quant_v2.cpp`` copy the
        kernel's y2 out only when scales2 is given, and the kernels compute it only with
        ``hasScales2``), so it holds whatever the fresh output memory held -- op-plugin's
        golden instead quantizes with scale 1 and offset 0, which no kernel does.
        ``x``: ``x1 + x2`` in x1's dtype.

    Constraints
    -----------
    Products: Atlas inference (310P, no bfloat16), A2, A3, and the 950 (op-plugin calls
    aclnnAddRmsNormQuant(V2) there).  Strict mode rejects empty tensors (seed: not supported),
    float32/float64 on A2/A3/310P and float8 / hifloat8 outputs off the 950.

    Notes
    -----
    Precision order of the A2/A3 kernel (hicann/ops-nn
    ``norm/add_rms_norm_quant/op_kernel/add_rms_norm_quant.h``, which aclnnAddRmsNormQuantV2
    runs; the default here): float16 inputs are added in float16 and the norm is computed from
    the rounded sum; ``x * rstd`` is rounded to float16 and multiplied by gamma in float16,
    then beta is added and the quantization done in float32.  bfloat16 inputs normalize the
    float32 sum (the bfloat16-rounded sum when beta is given) and keep ``x * rstd * gamma`` in
    float32.  The quantization (``add_rms_norm_quant_base.h``: ``Div``/``Mul`` by the float32
    scale, ``Add`` of the zero point, ``Cast`` float32 -> int32 with ``CAST_RINT``, then to
    int8) is in float32.  op-plugin's golden (``test/test_custom_ops/
    test_npu_add_rms_norm_quant.py``) keeps everything in float32 and truncates with numpy's
    ``astype``; its tests allow a difference of 1.  Under ``strict("950")`` the whole chain
    is float32 (single rounding at the cast).  The kernel's per-tensor path (one-element
    scales) is not documented for this API and not accepted.  No autograd.

    Examples
    --------
    >>> x1 = torch.randn(16, 32, dtype=torch.float16); x2 = torch.randn(16, 32, dtype=torch.float16)
    >>> gamma = torch.randn(32, dtype=torch.float16); scales1 = torch.rand(32) + 0.5
    >>> y1, _, x = npu_anywhere.npu_add_rms_norm_quant(x1, x2, gamma, scales1, None)
    >>> y1.dtype, x.dtype
    (torch.int8, torch.float16)
    """
    return add_rms_norm_quant_op(x1, x2, gamma, scales1, zero_points1, beta, scales2,
                                 zero_points2, axis=axis, epsilon=epsilon,
                                 div_mode=div_mode, dst_type=dst_type)


def _bind(x1, x2, gamma, scales1, zero_points1=None, beta=None, scales2=None, zero_points2=None,
          *, axis=-1, epsilon=1e-06, div_mode=True, dst_type=None):
    return (x1, x2, gamma, scales1, zero_points1, beta, scales2, zero_points2, epsilon,
            div_mode, dst_type)


def _key(x1, x2, gamma, scales1, zero_points1, beta, scales2, zero_points2, epsilon, div_mode,
         dst_type):
    return (x1.dtype, tuple(gamma.shape), scales1.dtype, x1.device.type, div_mode, dst_type,
            tuple(None if t is None else t.dtype
                  for t in (zero_points1, beta, scales2, zero_points2)))


rms_core.register_compiled(add_rms_norm_quant_op, _body, key=_key,
                           numerics=lambda *a, **k: rounds_intermediates(), bind=_bind)


TORCH_NPU_FUNCTIONS = {"npu_add_rms_norm_quant": npu_add_rms_norm_quant}
