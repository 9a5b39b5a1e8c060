"""torch_npu.npu_rms_norm_quant: RMSNorm + beta fused with per-tensor static quantization.

Formula (seed 004; op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_rms_norm_quant.md``)::

    quant_in = x / sqrt(mean(x^2) + eps) * gamma + beta
    y        = round(quant_in / scale + offset)

(the doc page writes ``quant_in * scale``; the kernel and op-plugin's golden divide -- see
:func:`npu_rms_norm_quant`).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..norm import rms_core
from ..norm.rms_core import rms_norm_fp32, rounds_intermediates
from ..quant import core
from ._common import quantize_static

OP = "npu_rms_norm_quant"
SCHEMA = ("npu_rms_norm_quant(Tensor x, Tensor gamma, Tensor beta, Tensor scale, Tensor offset, "
          "float epsilon=1e-06, *, int? dst_dtype=None) -> Tensor")

SUPPORTED = frozenset({Product.ATLAS_INFERENCE, Product.A2, Product.A3, Product.ASCEND_950})
DST_FORMATS = ("int8", "int4", "float8_e4m3fn", "float8_e5m2", "hifloat8")
DST_SPELLED = ("torch.int8", "torch.quint4x2", "torch.float8_e4m3fn (292)",
               "torch.float8_e5m2 (291)", "torch_npu.hifloat8 (290)")
_PRE950_OFFSET = (torch.int8,)
_ALL_OFFSET = (torch.int8, torch.int32, torch.float16, torch.bfloat16, torch.float32)


def parse_format(dst_dtype) -> core.QuantFormat:
    return core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def _check_vector(name, t, x, x_name="x"):
    d = x.shape[-1] if x.dim() else 0
    checks.expect(t.dim() in (1, 2), OP, name, "a 1-D or 2-D tensor",
                  lambda: f"shape {tuple(t.shape)}", ValueError)
    ok = tuple(t.shape) == (d,) or tuple(t.shape) == (1, d)
    checks.expect(ok, OP, name, lambda: f"shape ({d},) or (1, {d}) (the last dim of {x_name})",
                  lambda: tuple(t.shape))


def check_rms_norm_quant(x, gamma, beta, scale, offset, epsilon=1e-06, *, dst_dtype=None):
    product = targets.expect_supported(OP, SUPPORTED)
    fmt = parse_format(dst_dtype)
    if product is None:
        x_dtypes, s_dtypes, o_dtypes = FLOATING_OR_DOUBLE, FLOATING_OR_DOUBLE, \
            _ALL_OFFSET + (torch.float64,)
    elif product is Product.ASCEND_950:
        x_dtypes, s_dtypes, o_dtypes = FLOATING, FLOATING, _ALL_OFFSET
    else:
        x_dtypes = (torch.float16,) if product is Product.ATLAS_INFERENCE else \
            (torch.float16, torch.bfloat16)
        s_dtypes, o_dtypes = x_dtypes, _PRE950_OFFSET
    checks.expect(1 <= x.dim() <= rms_core.MAX_DIMS, OP, "x", "a 1-D to 8-D tensor",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect_dtype(x, x_dtypes, OP, "x")
    checks.expect_same_dtype({"x": x, "gamma": gamma, "beta": beta}, OP)
    checks.expect_same_device({"x": x, "gamma": gamma, "beta": beta, "scale": scale,
                               "offset": offset}, OP)
    _check_vector("gamma", gamma, x)
    _check_vector("beta", beta, x)
    checks.expect(tuple(scale.shape) == (1,), OP, "scale", "shape (1,) (one per-tensor scale)",
                  lambda: tuple(scale.shape))
    checks.expect(tuple(offset.shape) == tuple(scale.shape), OP, "offset",
                  "the shape of scale (1,)", lambda: tuple(offset.shape))
    checks.expect_dtype(scale, s_dtypes, OP, "scale")
    checks.expect_dtype(offset, o_dtypes, OP, "offset")
    checks.expect(x.shape[-1] != 0, OP, "x", "a non-empty last dim",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    if fmt.name == "int4":
        checks.expect(x.shape[-1] % 8 == 0, OP, "x",
                      "a last dim divisible by 8 when dst_dtype is quint4x2 (int4)",
                      lambda: x.shape[-1])
    if product is not None:
        checks.expect(x.numel() != 0, OP, "x", "a non-empty tensor in strict mode",
                      lambda: f"shape {tuple(x.shape)}", ValueError)
        if product is not Product.ASCEND_950:
            checks.expect(fmt.name in ("int8", "int4"), OP, "dst_dtype",
                          lambda: f"torch.int8 or torch.quint4x2 on {product.value}",
                          fmt.name, ValueError)
        if product is Product.ATLAS_INFERENCE:
            checks.expect(x.shape[-1] * x.element_size() >= 32, OP, "x",
                          "a last dim of at least 32 bytes on 310P",
                          lambda: f"{x.shape[-1]} elements", ValueError)


def _body(x, gamma, beta, scale, offset, epsilon, dst_dtype, rounds):
    fmt = parse_format(dst_dtype)
    d = x.shape[-1]
    y, _ = rms_norm_fp32(x, gamma.reshape(d), epsilon, beta=beta.reshape(d))
    if rounds and fmt.is_int and y.dtype == torch.float32:
        # A2/A3/310P kernel (rms_norm_quant.cpp, Compute): y times the float32 scalar 1 / scale
        # plus the offset, both in float32; the result rounded to float16 (CastFrom32To16),
        # then clamped and cast with CAST_RINT (CastFromF16ToI8) -- a double rounding.
        inv = torch.reciprocal(scale.to(torch.float32))
        t = (y * inv).add_(offset.to(torch.float32))
        return core.cast_to(t.to(torch.float16).to(torch.float32), fmt, inplace=True)
    return quantize_static(y, scale, offset, fmt, div_mode=True)


def rms_norm_quant_reference(x, gamma, beta, scale, offset, epsilon=1e-06, *, dst_dtype=None):
    return _body(x, gamma, beta, scale, offset, epsilon, dst_dtype, rounds_intermediates())


rms_norm_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_rms_norm_quant,
                          reference=rms_norm_quant_reference, metadata_check=True,
                          info=OpInfo(api="torch_npu"))
rms_norm_quant_op.forbid_autograd(
    "npu_rms_norm_quant has no backward in op-plugin's derivatives.yaml (integer output)")


def npu_rms_norm_quant(x, gamma, beta, scale, offset, epsilon=1e-06, *, dst_dtype=None):
    """RMSNorm + beta followed by a per-tensor static quantization.

    Formula (seed 004 / op-plugin doc, with the division the kernel performs)::

        quant_in = x / sqrt(mean(x^2 over the last dim) + eps) * gamma + beta
        y        = round(quant_in / scale + offset)

    ``round`` is half to even (``CAST_RINT``) and the result saturates ([-128, 127] for int8,
    [-8, 7] for int4; NaN gives 0; float8 saturates to its largest finite value and maps
    NaN to +0, ``castTraitFp322Fp8``'s ``SatMode::SAT``; hifloat8
    rounds half away from zero and saturates to +-32768, NaN -> 0).

    Parameters
    ----------
    x : Tensor
        1-D to 8-D, float16 or bfloat16 (310P: float16; 950 and default mode also float32;
        float64 outside strict mode).  Any strides.
    gamma, beta : Tensor
        ``(D,)`` or ``(1, D)`` with D the last dim of x; x's dtype.
    scale : Tensor
        ``(1,)``, a float dtype (A2/A3: float16/bfloat16; 950 also float32).  Must not be 0.
    offset : Tensor
        ``(1,)``, int8 (950 also int32, float16, bfloat16, float32).
    epsilon : float
        Default 1e-6.
    dst_dtype : int or dtype, optional
        ``torch.int8`` (default, also None) or ``torch.quint4x2`` (int4, eight values packed
        per int32, low nibble first; needs D divisible by 8); on the 950 also
        ``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` (or 292 / 291) and
        ``torch_npu.hifloat8`` (290, uint8 codes).

    Returns
    -------
    Tensor
        x's shape in the dst dtype; for quint4x2 an int32 tensor with last dim D / 8.

    Constraints
    -----------
    Products: Atlas inference (310P: float16, last dim >= 32 bytes), A2, A3, 950.  Strict mode
    rejects empty tensors and float8 / hifloat8 outputs off the 950.

    Notes
    -----
    The doc's ``quant_in * scale`` is a doc defect: the kernel (hicann/ops-nn
    ``norm/rms_norm_quant/op_kernel/rms_norm_quant_kernel.h``, ``GetScaleAndOffset``:
    ``1 / scale``) multiplies by the reciprocal and op-plugin's golden
    (``test/test_custom_ops/test_npu_rms_norm_quant.py``) uses ``torch.quantize_per_tensor``,
    i.e. divides.  Precision order of the A2/A3/310P kernel (the default here), followed from
    hicann/ops-nn ``norm/rms_norm_quant/op_kernel/rms_norm_quant.cpp`` (``RmsNormQuant::Compute``
    and ``ComputeNormandQuant``): the norm, gamma and beta in float32; the value multiplied by
    the float32 scalar ``1 / scale`` and the offset added, both in float32; the result rounded
    to float16 (``CastFrom32To16``), clamped to [-128, 127] and cast to int8 with
    ``CAST_RINT`` (``CastFromF16ToI8``) -- so a value that rounds to a float16 ``k + 0.5``
    rounds again, half to even.  (``rms_norm_quant.h`` also defines a float16-arithmetic
    ``ComputeFp32ToI8Quant``, which no kernel of this op calls.)  The kernel multiplies by the
    float32 ``1 / sqrt(mean + eps)`` as we do (last-bit differences in the reduction).  Under ``strict("950")``, for float8 / hifloat8 outputs and for float64
    inputs the quantization is ``quant_in / scale + offset`` in float32 (float64) with one
    rounding; the 950 kernel (``norm/add_rms_norm_quant/op_kernel/arch35/
    add_rms_norm_quant_regbase_common.h``, reached through ``RmsNormQuantV2``) casts hifloat8
    with ``castTraitFp322Hifp8``: CAST_ROUND, ``SatMode::SAT``.
    No autograd.

    Examples
    --------
    >>> x = torch.randn(16, dtype=torch.float16); gamma = torch.randn(16, dtype=torch.float16)
    >>> beta = torch.zeros(16, dtype=torch.float16)
    >>> scale = torch.ones(1, dtype=torch.float16); offset = torch.zeros(1, dtype=torch.int8)
    >>> npu_anywhere.npu_rms_norm_quant(x, gamma, beta, scale, offset, 1e-6).dtype
    torch.int8
    """
    return rms_norm_quant_op(x, gamma, beta, scale, offset, epsilon,
                             dst_dtype=dst_dtype)


def _bind(x, gamma, beta, scale, offset, epsilon=1e-06, *, dst_dtype=None):
    return x, gamma, beta, scale, offset, epsilon, dst_dtype


rms_core.register_compiled(
    rms_norm_quant_op, _body,
    key=lambda x, gamma, beta, scale, offset, epsilon, dst_dtype: (
        x.dtype, tuple(gamma.shape), scale.dtype, offset.dtype, x.device.type, dst_dtype),
    numerics=lambda *a, **k: rounds_intermediates(), bind=_bind)


TORCH_NPU_FUNCTIONS = {"npu_rms_norm_quant": npu_rms_norm_quant}
