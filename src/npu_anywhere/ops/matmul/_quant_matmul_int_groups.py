"""The per-group modes of npu_quant_matmul for integer inputs (aclnnQuantMatmulV5):

    int8 G-B (float32 (m, ceil(k / 128)) and (ceil(k / 128), ceil(n / 128)) scales,
        group_sizes [1, 128, 128]): the per-block sum of ``_quant_matmul_lowbit``, plus a
        float32 bias, bfloat16 output
    int4 K-G (int4 packed in int32, float32 scale and float16 offset (ceil(k / 256), n),
        float32 pertoken_scale (m, 1), group_sizes [1, 1, 256]):
        out = pertoken_scale * sum_g (x1_g @ (x2_g - offset_g)) * scale_g

The int4 golden of op-plugin ``test/test_custom_ops/test_npu_quant_matmul.py``
(``cpu_quant_matmul_a4w4_pergroup``) computes the same per-group order.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...targets import Product
from ..quant import core as quant_core
from ._quant_matmul_lowbit import (GROUP, OP, _check_bias, _check_group_sizes,
                                   _check_per_block, _code, _per_block, block_group_m)


INT8_GB_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def is_int8_per_block(x1, scale, pertoken_scale) -> bool:
    return x1.dtype == torch.int8 and (scale.dim() >= 2 or (
        pertoken_scale is not None and pertoken_scale.dim() >= 2))


def check_int8_per_block(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype,
                         group_sizes, y_scale) -> None:
    """int8 G-B (aclnnQuantMatmulV5): float32 (m, ceil(k / 128)) and (ceil(k / 128),
    ceil(n / 128)) scales, float32 bias, bfloat16 output; no B-B for int8."""
    checks.expect_dtype(x2, (torch.int8,), OP, "x2")
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect(2 <= t.dim() <= 6, OP, name, "a tensor with 2 to 6 dims",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
        checks.expect_nonempty(t, OP, name)
    m, k, k2, n = x1.shape[-2], x1.shape[-1], x2.shape[-2], x2.shape[-1]
    checks.expect(k == k2, OP, "x2", lambda: f"a k dim equal to x1's ({k})", k2, RuntimeError)
    try:
        batch = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError:
        batch = None
    checks.expect(batch is not None, OP, "x2", lambda: f"batch dims broadcastable with x1's "
                  f"{tuple(x1.shape[:-2])}", lambda: tuple(x2.shape[:-2]), RuntimeError)
    code = _code(output_dtype)
    checks.expect(code == 15, OP, "output_dtype",
                  "torch.bfloat16 for int8 inputs with per-block scales (G-B)",
                  lambda: quant_core.describe_code(output_dtype), ValueError)
    checks.expect(offset is None, OP, "offset", "None in the G-B mode", "a tensor", ValueError)
    checks.expect(y_scale is None, OP, "y_scale", "None (not implemented)", "a tensor",
                  NotImplementedError)
    _check_per_block(x1, x2, scale, pertoken_scale, bias, group_sizes, m, k, n)
    checks.expect(block_group_m(pertoken_scale, m) == 1 or m == -(-m // GROUP), OP,
                  "pertoken_scale", lambda: f"({m}, {-(-k // GROUP)}) (G-B; int8 has no B-B)",
                  lambda: f"shape {tuple(pertoken_scale.shape)}", ValueError)
    if bias is not None:
        _check_bias(bias, n, batch)
    named = {"x1": x1, "x2": x2, "scale": scale, "pertoken_scale": pertoken_scale}
    if bias is not None:
        named["bias"] = bias
    checks.expect_same_device(named, OP)
    product = targets.expect_supported(OP, INT8_GB_SUPPORTED)
    if product in (Product.A2, Product.A3):
        rule = f"on {product.value} (G-B)"
        checks.expect(k % 512 == 0, OP, "x1", f"a k that is a multiple of 4 * 128 {rule}", k,
                      ValueError)
        checks.expect(n % 256 == 0, OP, "x2", f"an n that is a multiple of 256 {rule}", n,
                      ValueError)


def int8_per_block_reference(x1, x2, scale, *, pertoken_scale, bias) -> torch.Tensor:
    """The G-B sum with exact int8 group dot products; bias added in float32; bfloat16."""
    v = _per_block(x1.to(torch.float64), x2.to(torch.float64), scale, pertoken_scale)
    if bias is not None:
        v = v + bias
    return v.to(torch.bfloat16)


# -- int4 K-G: per-group asymmetric int4 weights ------------------------------------------------

KG_GROUP = 256
KG_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def is_int4_per_group(x1, scale, offset, group_sizes) -> bool:
    return x1.dtype == torch.int32 and (scale.dim() == 2 or bool(group_sizes))


def check_int4_per_group(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype,
                         group_sizes, y_scale, m: int, k: int, n: int) -> None:
    """K-G (aclnnQuantMatmulV5): int4 x1 / x2 packed in int32, float32 scale and float16 offset
    of shape (ceil(k / 256), n), float32 pertoken_scale (m, 1), float16 / bfloat16 output."""
    code = _code(output_dtype)
    checks.expect(code in (5, 15), OP, "output_dtype",
                  "torch.float16 or torch.bfloat16 for int4 per-group scales (K-G)",
                  lambda: quant_core.describe_code(output_dtype), ValueError)
    kg = -(-k // KG_GROUP)
    checks.expect_dtype(scale, (torch.float32,), OP, "scale")
    checks.expect(tuple(scale.shape) == (kg, n), OP, "scale",
                  lambda: f"shape ({kg}, {n}) (ceil(k / 256), n) for int4 per-group (K-G)",
                  lambda: f"shape {tuple(scale.shape)}", ValueError)
    checks.expect(offset is not None, OP, "offset",
                  "the float16 (ceil(k / 256), n) weight offset for int4 per-group (K-G)",
                  "None", ValueError)
    checks.expect_dtype(offset, (torch.float16,), OP, "offset")
    checks.expect(tuple(offset.shape) == (kg, n), OP, "offset", lambda: f"shape ({kg}, {n})",
                  lambda: f"shape {tuple(offset.shape)}", ValueError)
    checks.expect(pertoken_scale is not None, OP, "pertoken_scale",
                  "the float32 (m, 1) x1 scale for int4 per-group (K-G)", "None", ValueError)
    checks.expect_dtype(pertoken_scale, (torch.float32,), OP, "pertoken_scale")
    checks.expect(tuple(pertoken_scale.shape) in ((m, 1), (m,)), OP, "pertoken_scale",
                  lambda: f"shape ({m}, 1)", lambda: f"shape {tuple(pertoken_scale.shape)}",
                  ValueError)
    checks.expect(bias is None, OP, "bias", "None for int4 per-group (K-G)", "a tensor",
                  ValueError)
    checks.expect(y_scale is None, OP, "y_scale", "None (not implemented)", "a tensor",
                  NotImplementedError)
    checks.expect(x1.dim() == 2 and x2.dim() == 2, OP, "x2",
                  "2-D x1 and x2 for int4 per-group (K-G)",
                  lambda: f"shapes {tuple(x1.shape)} and {tuple(x2.shape)}", ValueError)
    checks.expect(k % 1024 == 0, OP, "x1", "a k that is a multiple of 1024 for int4 K-G", k,
                  ValueError)
    checks.expect(n % 256 == 0, OP, "x2", "an n that is a multiple of 256 for int4 K-G", n,
                  ValueError)
    _check_group_sizes(group_sizes, (1, 1, KG_GROUP))
    checks.expect_same_device({"x1": x1, "x2": x2, "scale": scale, "offset": offset,
                               "pertoken_scale": pertoken_scale}, OP)
    product = targets.expect_supported(OP, KG_SUPPORTED)
    if product in (Product.A2, Product.A3):
        checks.expect(code == 15, OP, "output_dtype",
                      lambda: f"torch.bfloat16 on {product.value} (K-G)",
                      lambda: quant_core.describe_code(output_dtype), ValueError)


def int4_per_group_reference(a: torch.Tensor, b: torch.Tensor, scale, offset, pertoken_scale,
                             out: torch.dtype) -> torch.Tensor:
    """``x1s * sum_g float32(x1_g @ (x2_g - offset_g)) * x2s_g`` over k-groups of 256.

    ``a`` / ``b`` are the unpacked int4 values (int8).  Each group's ``x1_g @ x2_g -
    rowsum(x1_g) * offset_g`` is exact in float64 (int4 products, float16 offsets) and rounded
    once to float32; then float32 products and sums in group order, times pertoken_scale.
    """
    av, bv = a.to(torch.float64), b.to(torch.float64)
    k = av.shape[-1]
    acc = None
    for g in range(-(-k // KG_GROUP)):
        lo, size = g * KG_GROUP, min(KG_GROUP, k - g * KG_GROUP)
        xa = av.narrow(-1, lo, size)
        dot = xa @ bv.narrow(-2, lo, size) - xa.sum(-1, keepdim=True) * offset[g].to(torch.float64)
        term = dot.to(torch.float32) * scale[g]
        acc = term if acc is None else acc + term
    return (acc * pertoken_scale.reshape(-1, 1)).to(out)
