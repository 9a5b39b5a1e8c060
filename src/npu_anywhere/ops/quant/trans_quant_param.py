"""torch_npu.npu_trans_quant_param: pack float32 quantization scales (and offsets) into the int64
parameter word the quantized matmuls consume.

Bit layout (CANN aclnnTransQuantParamV2/V3, hicann/ops-nn ``quant/trans_quant_param_v2/docs/
aclnnTransQuantParamV3.md`` and its kernel ``op_kernel/trans_quant_param_v2.h``; op-plugin golden
``test/test_custom_ops/test_npu_trans_quant_param.py``)::

    bits  0..12   0
    bits 13..31   the scale as "fp19": float32 sign, exponent and top 10 mantissa bits
    bits 32..36   0
    bits 37..45   offset as a 9-bit two's-complement integer (only when offset is given)
    bit  46       1
    bits 47..63   0
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_trans_quant_param"
SCHEMA = "npu_trans_quant_param(Tensor scale, Tensor? offset=None, int? round_mode=0) -> Tensor"

FP19_MASK = 0xFFFFE000          # sign, exponent and the top 10 mantissa bits of a float32
QUANT_FLAG = 1 << 46
OFFSET_SHIFT = 37
OFFSET_MIN, OFFSET_MAX = -256, 255

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})


def _check_param(name: str, t: torch.Tensor) -> None:
    checks.expect_dtype(t, (torch.float32,), OP, name)
    checks.expect(t.dim() == 1 or (t.dim() == 2 and t.shape[0] == 1), OP, name,
                  "shape (t,) or (1, n)", lambda: f"shape {tuple(t.shape)}", ValueError)
    checks.expect_nonempty(t, OP, name)


def check_trans_quant_param(scale, offset=None, round_mode=0):
    mode = 0 if round_mode is None else round_mode
    checks.expect(mode in (0, 1), OP, "round_mode", "0 (truncate) or 1 (round to nearest even)",
                  round_mode, ValueError)
    _check_param("scale", scale)
    if offset is not None:
        _check_param("offset", offset)
        checks.expect_same_device({"scale": scale, "offset": offset}, OP)
        if scale.dim() == 2:
            checks.expect(offset.shape == scale.shape, OP, "offset",
                          lambda: f"the shape of scale {tuple(scale.shape)} when scale is 2-D",
                          lambda: tuple(offset.shape))
        else:
            checks.expect(offset.dim() == 1, OP, "offset", "a 1-D tensor when scale is 1-D",
                          lambda: f"shape {tuple(offset.shape)}")
            s, o = scale.shape[0], offset.shape[0]
            checks.expect(s == o or s == 1 or o == 1, OP, "offset",
                          lambda: f"size 1 or the size of scale ({s})", o)
    targets.expect_supported(OP, _SUPPORTED)


def _fp19_bits(bits: torch.Tensor, round_mode: int) -> torch.Tensor:
    """float32 bit patterns (as int64 in [0, 2**32)) -> the fp19 field at bits 13..31."""
    if round_mode == 0:
        return bits & FP19_MASK                               # truncate
    # Round to nearest, ties to even, on the 10 kept mantissa bits (the kernel's
    # CalQuantPreScaleValue): a carry out of the mantissa increments the exponent (254 -> 255
    # gives the infinity pattern); exponent 0 (zero, subnormals) keeps only the sign;
    # exponent 255 (inf, NaN) is truncated.
    sign = bits & 0x80000000
    exponent = (bits >> 23) & 0xFF
    magnitude = (bits & 0x7FFFFFFF) >> 13                     # exponent and 10 mantissa bits
    round_bit = (bits >> 12) & 1
    sticky = (bits & 0xFFF) != 0
    odd = (magnitude & 1) == 1
    up = ((round_bit == 1) & (sticky | odd) & (exponent != 255)).to(torch.int64)
    rounded = ((magnitude + up) << 13) | sign
    return torch.where(exponent == 0, sign, rounded)


def trans_quant_param_reference(scale, offset=None, round_mode=0):
    mode = 0 if round_mode is None else round_mode
    bits = scale.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    word = _fp19_bits(bits, mode) | QUANT_FLAG
    if offset is not None:
        # float32 -> int32 with round half to even (CAST_RINT), clamped to the int9 range.
        o = core.saturate_int(core.round_values(offset, "rint"), core.FORMATS["int32"])
        o = o.clamp(OFFSET_MIN, OFFSET_MAX).to(torch.int64)
        word = word | ((o & 0x1FF) << OFFSET_SHIFT)
    if word.dim() == 2:
        return word.contiguous()
    return word.reshape(-1).contiguous()


trans_quant_param_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_trans_quant_param,
                             reference=trans_quant_param_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
trans_quant_param_op.forbid_autograd("npu_trans_quant_param has no backward on the NPU")


def npu_trans_quant_param(scale, offset=None, round_mode=0):
    """Pack float32 scales (and offsets) into the int64 words quantized matmuls consume.

    Layout of each output int64 (CANN aclnnTransQuantParamV3 formula)::

        out = (fp19(scale) << 13 ... i.e. scale_bits & 0xFFFFE000) | (1 << 46)
        with offset:  out |= (clamp(rint(offset), -256, 255) & 0x1FF) << 37

    Parameters
    ----------
    scale : Tensor
        float32, shape ``(t,)`` or ``(1, n)``, non-empty (t = 1 or n).
    offset : Tensor, optional
        float32, shape ``(t,)`` (t = 1 or scale's size, or scale of size 1) or, with a 2-D
        scale, scale's shape.
    round_mode : int, optional
        How the float32 scale is reduced to fp19 (sign, 8 exponent bits, 10 mantissa bits):
        0 (default, None too) truncates the 13 low mantissa bits; 1 rounds to nearest, ties to
        even (a carry increments the exponent; zero/subnormal scales become signed zero).

    Returns
    -------
    Tensor
        int64 (the NPU's uint64 words; bit 63 is never set), shape ``(max(t_scale, t_offset),)``
        for 1-D inputs, scale's shape ``(1, n)`` for 2-D.

    Constraints
    -----------
    round_mode 0 or 1 (1 needs aclnnTransQuantParamV3).  The CANN doc requires scale and offset
    without NaN/inf; we keep the bit patterns anyway (inf/NaN scales truncate, a NaN offset
    gives 0, +-inf offsets clamp to 255 / -256).

    Notes
    -----
    Bit-exact emulation of the kernel (hicann/ops-nn ``quant/trans_quant_param_v2/op_kernel/
    trans_quant_param_v2.h``: ``DEQ_SCALE_MUL = 0xFFFFE000``, ``QUANT_SCALE = 1 << 46``,
    offsets cast with CAST_RINT, clamped to [-256, 255], masked with 0x1FF and shifted by 37),
    matching op-plugin's golden (``scale_bits & 0xFFFFE000 | 1 << 46``).  Offsets round half
    to even: 2.5 -> 2, -0.5 -> 0.

    Examples
    --------
    >>> npu_anywhere.npu_trans_quant_param(torch.tensor([1.0]))    # 0x3F800000 | 1 << 46
    tensor([70369809530880])
    """
    return trans_quant_param_op(scale, offset, round_mode)


TORCH_NPU_FUNCTIONS = {"npu_trans_quant_param": npu_trans_quant_param}
