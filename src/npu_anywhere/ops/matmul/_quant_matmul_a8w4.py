"""npu_quant_matmul's A8W4 mode: int8 x1 times an int4 weight packed in int32 (A2 / A3).

aclnnQuantMatmulV5 (hicann/ops-nn ``matmul/quant_batch_matmul_v4/docs/aclnnQuantMatmulV5.md``)
documents it in two quantization modes, told apart by the scales' ranks::

    out = ((x1 @ (x2 * scale)) + offset) * pertoken_scale

    K-C: scale (n,) per channel,             pertoken_scale (m,),    group_sizes unused
    K-G: scale (ceil(k / 256), n) per group, pertoken_scale (m, 1),  group_sizes [0, 0, 256]

``scale`` holds npu_trans_quant_param words (int64 / uint64); ``offset`` (op-plugin passes it
as aclnn's ``yOffset``) is the offline term ``8 * sum_k(x2 * scale)``: the kernel does not
multiply int8 by int4 directly but splits x1 into two int4 halves, and the low half is biased
by -8 so that it fits in int4.

Numerics follow the kernel (``op_kernel/quant_batch_matmul_v4_msd.h`` and its MSD pre-process)::

    hi = floor(x1 / 16),  lo = (x1 & 15) - 8          both in [-8, 7]; x1 = 16 hi + lo + 8
    D(a) = fp16 sum over groups g of fp16(int32(a[:, g] @ x2[g]) * fp19(scale[g]))
    out  = rint((16 * D(hi) + D(lo) + offset) * pertoken_scale)         (float32, then cast)

The cube unit dequantizes each group's exact int32 product with the fixpipe (the fp19 field
of the word, rounded to float16) and the groups are summed by float16 atomic adds in k order;
the vector unit finishes in float32.  K-C runs one group spanning all of k.  op-plugin's golden
(``test/test_custom_ops/test_npu_quant_matmul.py``, ``a8w4_quant_golden``) computes the same
steps.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...targets import Product
from ..quant import core as quant_core
from . import _msd as msd

OP = "npu_quant_matmul"
GROUP_K = 256                   # "[gsM, gsN, gsK] = [0, 0, 256]"
_SUPPORTED = frozenset({Product.A2, Product.A3})
_OUT_CODES = {5: torch.float16, 15: torch.bfloat16}


def is_a8w4(x1: torch.Tensor, x2: torch.Tensor) -> bool:
    return x1.dtype == torch.int8 and x2.dtype == torch.int32


def _out_dtype(output_dtype) -> torch.dtype:
    code = None if output_dtype is None else (
        quant_core.dtype_code(output_dtype) if isinstance(output_dtype, torch.dtype)
        else output_dtype)
    checks.expect(code in _OUT_CODES, OP, "output_dtype",
                  "torch.float16 or torch.bfloat16 for A8W4 (int8 x1, int4-packed int32 x2)",
                  lambda: "None" if output_dtype is None else quant_core.describe_code(output_dtype),
                  ValueError)
    return _OUT_CODES[code]


def _shape_is(t: torch.Tensor, name: str, shape: tuple[int, ...], mode: str) -> None:
    checks.expect(tuple(t.shape) == shape, OP, name, f"shape {shape} for A8W4 {mode}",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def check_a8w4(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype,
               pertoken_scale_dtype, scale_dtype, group_sizes, y_scale) -> torch.dtype:
    """The A8W4 rules of aclnnQuantMatmulV5 and op-plugin's binding; returns the output dtype."""
    product = targets.current()
    if product is not None:
        checks.expect(product in _SUPPORTED, OP, "x2",
                      "int8 like x1 on this product (A8W4 runs on A2 / A3 only)",
                      "dtype torch.int32", TypeError)
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect(t.dim() == 2, OP, name, "a 2-D tensor for A8W4",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
        checks.expect_nonempty(t, OP, name)
    checks.expect(x2.is_contiguous(), OP, "x2",
                  "a contiguous (k, n // 8) tensor for A8W4 (no transposed weight)",
                  lambda: f"strides {x2.stride()}", ValueError)
    m, k = x1.shape
    n = x2.shape[1] * 8
    checks.expect(x2.shape[0] == k, OP, "x2", lambda: f"a k dim equal to x1's ({k})",
                  lambda: x2.shape[0], RuntimeError)
    checks.expect(k % 2 == 0, OP, "x1", "an even k for A8W4", k, ValueError)
    out = _out_dtype(output_dtype)
    for name, v in (("pertoken_scale_dtype", pertoken_scale_dtype), ("scale_dtype", scale_dtype)):
        checks.expect(v is None, OP, name, "None for A8W4", lambda v=v: quant_core.describe_code(v),
                      ValueError)
    checks.expect(bias is None, OP, "bias", "None for A8W4 (offset carries the additive term)",
                  "a tensor", ValueError)
    checks.expect(y_scale is None, OP, "y_scale", "None for A8W4", "a tensor", ValueError)
    checks.expect(offset is not None, OP, "offset",
                  "a float32 (n,) tensor for A8W4 (8 * sum_k(x2 * scale))", "None", ValueError)
    checks.expect(pertoken_scale is not None, OP, "pertoken_scale",
                  "a float32 tensor for A8W4", "None", ValueError)
    checks.expect_dtype(scale, (torch.int64,), OP, "scale")
    checks.expect_dtype(offset, (torch.float32,), OP, "offset")
    checks.expect_dtype(pertoken_scale, (torch.float32,), OP, "pertoken_scale")
    _shape_is(offset, "offset", (n,), "")
    if scale.dim() == 1:
        mode = "K-C (per-channel scale)"
        _shape_is(scale, "scale", (n,), mode)
        _shape_is(pertoken_scale, "pertoken_scale", (m,), mode)
    else:
        mode = "K-G (per-group scale)"
        _shape_is(scale, "scale", (-(-k // GROUP_K), n), mode)
        _shape_is(pertoken_scale, "pertoken_scale", (m, 1), mode)
        gs = list(group_sizes) if group_sizes else []
        checks.expect(len(gs) == 3 and gs[2] == GROUP_K and all(0 <= g <= 65535 for g in gs),
                      OP, "group_sizes", f"[0, 0, {GROUP_K}] for A8W4 K-G",
                      lambda: gs if gs else "None", ValueError)
    checks.expect_same_device({"x1": x1, "x2": x2, "scale": scale, "offset": offset,
                               "pertoken_scale": pertoken_scale}, OP)
    return out


def a8w4_reference(x1, x2, scale, offset, pertoken_scale, out: torch.Tensor | torch.dtype):
    m, k = x1.shape
    w = quant_core.unpack_int4(x2)                                 # [k, n] int8 in [-8, 7]
    s = msd.scale_rows(scale)                                      # [G, n] (G = 1 for K-C)
    # The MSD steps (:mod:`._msd`); aclnn's offset is the MSD bias term.  K-C: one group.
    v = msd.rows(x1, w, s, GROUP_K if s.shape[0] > 1 else k, bias=offset)
    v = v * pertoken_scale.reshape(m, 1)
    # float32 -> float16 / bfloat16 is round-to-nearest-even, the kernel's CAST_RINT.
    return v.to(out)
