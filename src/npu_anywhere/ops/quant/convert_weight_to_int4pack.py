"""torch_npu.npu_convert_weight_to_int4pack: pack int4 weights held in int32 into int32 words.

op-plugin: ``op_plugin/ops/opapi/ConvertWeightToINT4PackKernelNpuOpApi.cpp`` (host-side packing:
``convert_to_int4_pack`` for int32 weights; on the 950 also ``convert_to_fp4_pack`` for float32
weights holding float4_e2m1 values, and 3-D weights); golden
``test/test_custom_ops/test_npu_convert_weight_to_int4pack.py`` (``pack_int4_3dim``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_convert_weight_to_int4pack"
SCHEMA = "npu_convert_weight_to_int4pack(Tensor weight, int inner_k_tiles=0) -> Tensor"

# float32 bit pattern (masked with 0xFFC00000: sign, exponent, top mantissa bit) -> float4_e2m1
# code; any other pattern packs as 0 (op-plugin's FP32_BIT_TO_FP4_E2M1 table).
FP4_E2M1_MASK = 0xFFC00000
FP4_E2M1_CODES = {
    0x00000000: 0b0000, 0x3F000000: 0b0001, 0x3F800000: 0b0010, 0x3FC00000: 0b0011,
    0x40000000: 0b0100, 0x40400000: 0b0101, 0x40800000: 0b0110, 0x40C00000: 0b0111,
    0x80000000: 0b1000, 0xBF000000: 0b1001, 0xBF800000: 0b1010, 0xBFC00000: 0b1011,
    0xC0000000: 0b1100, 0xC0400000: 0b1101, 0xC0800000: 0b1110, 0xC0C00000: 0b1111,
}

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def check_convert_weight_to_int4pack(weight, inner_k_tiles=0):
    checks.expect_dtype(weight, (torch.int32, torch.float32), OP, "weight")
    checks.expect(weight.dim() in (2, 3), OP, "weight", "a 2-D (k, n) / (n, k) tensor (3-D on the "
                  "950)", lambda: f"shape {tuple(weight.shape)}", ValueError)
    checks.expect(all(s > 0 for s in weight.shape), OP, "weight", "no empty dim",
                  lambda: f"shape {tuple(weight.shape)}", ValueError)
    checks.expect(weight.shape[-1] % 8 == 0, OP, "weight", "a last dim divisible by 8",
                  weight.shape[-1], ValueError)
    checks.expect(weight.is_contiguous(), OP, "weight", "a contiguous tensor",
                  lambda: f"strides {weight.stride()}", ValueError)
    product = targets.expect_supported(OP, _SUPPORTED)
    if product is not None and product != Product.ASCEND_950:
        checks.expect(weight.dtype == torch.int32, OP, "weight",
                      lambda: f"dtype int32 on {product.value}", str(weight.dtype), TypeError)
        checks.expect(weight.dim() == 2, OP, "weight", lambda: f"a 2-D tensor on {product.value}",
                      lambda: f"shape {tuple(weight.shape)}", ValueError)


def _fp4_codes(weight: torch.Tensor) -> torch.Tensor:
    bits = weight.view(torch.int32).to(torch.int64) & FP4_E2M1_MASK
    codes = torch.zeros_like(bits)
    for pattern, code in FP4_E2M1_CODES.items():
        codes = torch.where(bits == pattern, torch.full_like(bits, code), codes)
    return codes


def convert_weight_to_int4pack_reference(weight, inner_k_tiles=0):
    if weight.dtype == torch.float32:
        return core.pack_int4(_fp4_codes(weight)).view(torch.float32)
    return core.pack_int4(weight)


convert_weight_to_int4pack_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                      check=check_convert_weight_to_int4pack,
                                      reference=convert_weight_to_int4pack_reference,
                                      # the check looks at strides, which the metadata-check
                                      # cache does not key on; the op runs once per weight
                                      metadata_check=False, info=OpInfo(api="torch_npu"))
convert_weight_to_int4pack_op.forbid_autograd("npu_convert_weight_to_int4pack has no backward")


def npu_convert_weight_to_int4pack(weight, inner_k_tiles=0):
    """Pack int4 values held in an int32 tensor, eight per int32 ("interleaved" layout).

    Output element ``[..., k]`` holds input elements ``[..., 8k + j]`` for ``j = 0..7`` in bits
    ``4j .. 4j+3`` (low nibble first), two's-complement nibbles::

        out = (w0 & 0xF) | (w1 & 0xF) << 4 | ... | (w7 & 0xF) << 28

    Parameters
    ----------
    weight : Tensor
        int32, 2-D ``(k, n)`` or ``(n, k)``, contiguous, last dim divisible by 8, values in
        [-8, 7] (values outside keep their low 4 bits, as op-plugin's packer does).  On the 950
        also 3-D, and float32 weights holding float4_e2m1 values (packed to their 4-bit codes,
        returned as float32 words).
    inner_k_tiles : int
        Reserved, unused (doc).

    Returns
    -------
    Tensor
        weight's dtype (int32), shape ``(..., last / 8)``.

    Constraints
    -----------
    Strict mode: A2/A3 accept 2-D int32 only.  FRACTAL_NZ weights (a storage format) do not
    exist here; the ND packing is emulated.

    Notes
    -----
    Bit-exact with op-plugin's host-side ``convert_to_int4_pack``; float32 weights follow its
    ``convert_fp32_to_fp4_e2m1`` table (the float32 bits masked with 0xFFC00000 looked up among
    the 16 float4_e2m1 values; anything else, e.g. 0.25 or 8.0, packs as 0; 1.75 truncates to
    1.5).

    Examples
    --------
    >>> w = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8]], dtype=torch.int32)
    >>> hex(npu_anywhere.npu_convert_weight_to_int4pack(w).item() & 0xFFFFFFFF)
    '0x87654321'
    """
    return convert_weight_to_int4pack_op(weight, inner_k_tiles)


TORCH_NPU_FUNCTIONS = {"npu_convert_weight_to_int4pack": npu_convert_weight_to_int4pack}
