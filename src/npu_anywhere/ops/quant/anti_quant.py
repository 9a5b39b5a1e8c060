"""torch_npu.npu_anti_quant: dequantization, ``(x + offset) * scale`` cast to float16/bfloat16.

Formula (seed 004)::

    anti_quant(x) = (x + offset) * scale

op-plugin: ``op_plugin/ops/opapi/AntiQuantKernelNpuOpApi.cpp`` (aclnnAscendAntiQuant, sqrt_mode
False); golden ``test/test_custom_ops/test_npu_anti_quant.py``.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_anti_quant"
SCHEMA = ("npu_anti_quant(Tensor x, Tensor scale, *, Tensor? offset=None, int? dst_dtype=None, "
          "int? src_dtype=None) -> Tensor")

_X_DTYPES = (torch.int8, torch.int32, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8)
# The formats src_dtype may name for each x dtype (op-plugin: int32 x needs quint4x2/int4,
# otherwise src_dtype must name x's own format).
_SRC_FORMAT = {torch.int8: "int8", torch.int32: "int4", torch.float8_e4m3fn: "float8_e4m3fn",
               torch.float8_e5m2: "float8_e5m2", torch.uint8: "hifloat8"}
_DST_CODES = {5: torch.float16, 15: torch.bfloat16}
_SCALE_DTYPES = (torch.float32, torch.bfloat16)

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})


def _describe_dst(dst_dtype) -> str:
    described = core.describe_code(dst_dtype)
    if described.startswith("dtype code "):
        # A code that names no dtype at all: torch_npu's own wording for it is what Ascend's
        # tests and client code match on, so it is kept next to ours.
        described += " (Input dst_type must be valid, but got UNKNOWN_SCALAR)"
    return described


def _dst(dst_dtype) -> torch.dtype:
    if dst_dtype is None:
        return torch.float16
    code = core.dtype_code(dst_dtype) if isinstance(dst_dtype, torch.dtype) else dst_dtype
    checks.expect(code in _DST_CODES, OP, "dst_dtype", "torch.float16 or torch.bfloat16",
                  lambda: _describe_dst(dst_dtype), ValueError)
    return _DST_CODES[code]


def check_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    checks.expect_dtype(x, _X_DTYPES, OP, "x")
    if src_dtype is not None:
        fmt = core.format_of(src_dtype)
        want = _SRC_FORMAT[x.dtype]
        checks.expect(fmt is not None and fmt.name == want, OP, "src_dtype",
                      lambda: f"the format of x ({x.dtype} holds {want})",
                      core.describe_code(src_dtype), TypeError)
    _dst(dst_dtype)
    checks.expect(x.dim() <= 8, OP, "x", "at most 8 dims", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    if x.dtype == torch.int32:
        checks.expect(x.dim() >= 1, OP, "x", "at least 1 dim when it holds packed int4 (int32)",
                      "a 0-dim tensor", ValueError)
    checks.expect_dtype(scale, _SCALE_DTYPES, OP, "scale")
    checks.expect_dim(scale, 1, OP, "scale")
    named = {"x": x, "scale": scale}
    if offset is not None:
        named["offset"] = offset
    checks.expect_same_device(named, OP)
    n = scale.shape[0]
    last = (x.shape[-1] * (8 if x.dtype == torch.int32 else 1)) if x.dim() else 1
    checks.expect(n == 1 or n == last, OP, "scale",
                  lambda: f"size 1 or the (unpacked) last dim of x ({last})", n)
    if offset is not None:
        checks.expect(offset.dtype == scale.dtype, OP, "offset",
                      lambda: f"the dtype of scale ({scale.dtype})", str(offset.dtype), TypeError)
        checks.expect(offset.shape == scale.shape, OP, "offset",
                      lambda: f"the shape of scale {tuple(scale.shape)}",
                      lambda: tuple(offset.shape))
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8):
        checks.expect(scale.dtype == torch.float32, OP, "scale",
                      "dtype float32 when x is float8 or hifloat8 (uint8)", str(scale.dtype),
                      TypeError)
    _check_strict(x, scale, dst_dtype)


def _check_strict(x, scale, dst_dtype) -> None:
    product = targets.expect_supported(OP, _SUPPORTED)
    if product is None:
        return
    if product != Product.ASCEND_950:
        checks.expect(x.dtype in (torch.int8, torch.int32), OP, "x",
                      lambda: f"int8 or int32 (packed int4) on {product.value}", str(x.dtype),
                      TypeError)
    if product == Product.ATLAS_INFERENCE:
        checks.expect(x.dtype == torch.int8, OP, "x", "int8 on 310P", str(x.dtype), TypeError)
        checks.expect(scale.dtype == torch.float32, OP, "scale", "float32 on 310P",
                      str(scale.dtype), TypeError)
        checks.expect(_dst(dst_dtype) == torch.float16, OP, "dst_dtype", "torch.float16 on 310P",
                      core.describe_code(dst_dtype), ValueError)


def anti_quant_reference(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    out_dtype = _dst(dst_dtype)
    q = core.unpack_int4(x) if x.dtype == torch.int32 else x
    # uint8 x holds hifloat8 codes (op-plugin: Byte -> ACL_HIFLOAT8), decoded exactly
    v = (core.decode(q, core.FORMATS["hifloat8"]) if x.dtype == torch.uint8
         else core.to_float32(q))
    if offset is not None:
        v = v + offset.to(torch.float32)
    v = v * scale.to(torch.float32)
    # A 0-dim x with a (1,) scale would broadcast to (1,); the output keeps x's shape.
    return v.to(out_dtype).reshape(q.shape)


anti_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_anti_quant,
                      reference=anti_quant_reference, metadata_check=True,
                      info=OpInfo(api="torch_npu"))
anti_quant_op.forbid_autograd("npu_anti_quant has no backward on the NPU")


def npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    """Dequantize int8 / packed-int4 (/ float8, hifloat8 on the 950) values to float16 or
    bfloat16.

    Formula (seed 004)::

        y = (x + offset) * scale            (offset = 0 when None)

    Parameters
    ----------
    x : Tensor
        int8; int32 holding 8 int4 values each (element ``8k + j`` in bits ``4j..4j+3``, low
        nibble first; A2/A3); float8_e4m3fn / float8_e5m2 (950); uint8 holding
        torch_npu.hifloat8 codes (950; op-plugin maps uint8 x to ACL_HIFLOAT8).  Up to 8 dims,
        any strides.
    scale : Tensor
        1-D, float32 or bfloat16 (float32 only for float8 / hifloat8 x and on 310P); size 1 or
        the last dim of x (8 times x's last dim for int32 x).
    offset : Tensor, optional
        scale's dtype and shape.
    dst_dtype : dtype or int, optional
        ``torch.float16`` (default) or ``torch.bfloat16``.
    src_dtype : dtype or int, optional
        If given, must name x's format: ``torch.int8`` for int8 x, ``torch.quint4x2`` or
        ``torch_npu.int4`` for int32 x, the float8 type for float8 x, ``torch_npu.hifloat8``
        (290) for uint8 x (TypeError otherwise).

    Returns
    -------
    Tensor
        dst_dtype; x's shape (last dim times 8 for int32 x).

    Constraints
    -----------
    Strict mode: 310P takes int8 x, float32 scale and float16 output only; float8 and
    hifloat8 x need the 950.

    Notes
    -----
    Computed in float32: ``(float32(x) + float32(offset)) * float32(scale)`` (hifloat8 codes
    decode exactly to float32: 0x80 NaN, 0x6F / 0xEF +-inf), then rounded once
    to dst_dtype (round half to even, overflow to inf; the 950 kernel casts with CAST_RINT and
    NO_SAT, hicann/ops-nn ``quant/ascend_anti_quant_v2/op_kernel/arch35/
    ascend_anti_quant_v2_common.h``; op-plugin's golden computes the same in float32).  No
    backward.

    Examples
    --------
    >>> x = torch.tensor([1, 2, 3, 4], dtype=torch.int8)
    >>> npu_anywhere.npu_anti_quant(x, torch.tensor([2.0]), offset=torch.tensor([2.0]))
    tensor([ 6.,  8., 10., 12.], dtype=torch.float16)
    """
    return anti_quant_op(x, scale, offset=offset, dst_dtype=dst_dtype,
                         src_dtype=src_dtype)


compiled.register(
    anti_quant_op,
    key=lambda x, scale, *, offset=None, dst_dtype=None, src_dtype=None:
        (x.dtype, scale.dtype, offset is None, dst_dtype, x.device.type))


TORCH_NPU_FUNCTIONS = {"npu_anti_quant": npu_anti_quant}
