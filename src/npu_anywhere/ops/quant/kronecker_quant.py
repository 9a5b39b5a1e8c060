"""torch_npu.npu_kronecker_quant: two small matmuls (the Kronecker factors of a FlatQuant
transform) followed by per-token int4 quantization packed eight to an int32, or (Ascend 950)
MX float4_e2m1 quantization in blocks of 32 of every flattened token.

Formula (CANN ``aclnnFlatQuant`` / ``aclnnFlatQuantV2``)::

    x'         = x @ kronecker_p2                 # (K, M, N) @ (N, N)
    x''        = kronecker_p1 @ x'                # (M, M) @ (K, M, N)
    int4:  quant_scale[k] = max(|x''[k]|) / (7 / clip_ratio)
           out            = int4(x'' / quant_scale)
    MX:    out, quant_scale = mx_quantize(x''.reshape(K, M * N), block 32)   # ops/quant/mx.py

Precision and rounding: see :func:`npu_kronecker_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...dtypes import FLOATING
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core, mx

OP = "npu_kronecker_quant"
SCHEMA = ("npu_kronecker_quant(Tensor x, Tensor kronecker_p1, Tensor kronecker_p2, "
          "float? clip_ratio=None, int? dst_dtype=None, float? dst_type_max=None) "
          "-> (Tensor out, Tensor quant_scale)")

MAX_K = 262144
MAX_MN = 256
INT4 = core.FORMATS["int4"]
FP4 = mx.FORMATS["float4_e2m1"]
_DST_SPELLED = ("torch.int32 (3, default)", "torch_npu.int4 (285)",
                "torch_npu.float4_e2m1fn_x2 (296, Ascend 950)")
DST_TYPE_MAX_RANGE = (6.0, 12.0)          # float4_e2m1 output; 0 also allowed
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_A2_A3 = frozenset({Product.A2, Product.A3})


def _is_mx(dst_dtype) -> bool:
    """True for the float4_e2m1 (MX) output, ``torch_npu.float4_e2m1fn_x2`` (296)."""
    return isinstance(dst_dtype, int) and not isinstance(dst_dtype, bool) \
        and dst_dtype == dtypes.FLOAT4_E2M1FN_X2


def _check_p(name, p, size, x, allow_empty=False):
    checks.expect(p.dtype == x.dtype, OP, name, lambda: f"the dtype of x ({x.dtype})",
                  lambda: str(p.dtype), TypeError)
    ok = tuple(p.shape) == (size, size) or (allow_empty and tuple(p.shape) == (0, 0))
    req = f"shape ({size}, {size})" + (" or (0, 0)" if allow_empty else "")
    checks.expect(ok, OP, name, req, lambda: f"shape {tuple(p.shape)}")


def _finite_int4_factor(clip_ratio: float) -> bool:
    clip = core._f32(clip_ratio)
    return clip > 0.0 and 7.0 / clip <= torch.finfo(torch.float32).max


def check_kronecker_quant(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None,
                          dst_type_max=None):
    is_mx = _is_mx(dst_dtype)
    if not is_mx and dst_dtype is not None:
        core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype", allowed=("int32", "int4"),
                            spelled=_DST_SPELLED)
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect_dim(x, 3, OP, "x")
    k, m, n = x.shape
    checks.expect(1 <= k <= MAX_K and 1 <= m <= MAX_MN and 1 <= n <= MAX_MN, OP, "x",
                  f"shape (K, M, N) with 1 <= K <= {MAX_K} and 1 <= M, N <= {MAX_MN}",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    if is_mx:
        checks.expect(n % 2 == 0, OP, "x",
                      "an even last dim (N) for float4_e2m1 output (two per byte)", n,
                      ValueError)
    else:
        checks.expect(n % 8 == 0, OP, "x", "a last dim (N) divisible by 8 (int4 packed in int32)",
                      n, ValueError)
    _check_p("kronecker_p1", kronecker_p1, m, x)
    _check_p("kronecker_p2", kronecker_p2, n, x, allow_empty=is_mx)
    checks.expect_same_device({"x": x, "kronecker_p1": kronecker_p1,
                               "kronecker_p2": kronecker_p2}, OP)
    if clip_ratio is not None:
        checks.expect(0.0 < clip_ratio <= 1.0, OP, "clip_ratio", "a value in (0, 1]",
                      clip_ratio, ValueError)
        # The kernel multiplies by 7 / clip_ratio in float32: clip_ratio must stay non-zero in
        # float32 and that factor finite (1e-300 rounds to 0; 1e-40 gives an inf factor).
        checks.expect(_finite_int4_factor(clip_ratio), OP, "clip_ratio", "a value whose "
                      "float32 rounding gives a finite float32 factor 7 / clip_ratio "
                      "(clip_ratio >= about 2.06e-38)", clip_ratio, ValueError)
    dmax = 0.0 if dst_type_max is None else dst_type_max
    if is_mx:
        lo, hi = DST_TYPE_MAX_RANGE
        checks.expect(dmax == 0.0 or lo <= dmax <= hi, OP, "dst_type_max",
                      f"0 or a value in [{lo}, {hi}] for float4_e2m1 output", dmax, ValueError)
    else:
        checks.expect(dmax == 0.0, OP, "dst_type_max",
                      "0 for int4/int32 output (6..12 applies to float4_e2m1 only)", dmax,
                      ValueError)
    product = targets.expect_supported(OP, SUPPORTED)
    if product is not None:
        checks.expect(not (is_mx and product in _A2_A3), OP, "dst_dtype",
                      lambda: f"torch.int32 or torch_npu.int4 on {product.value} (float4_e2m1 "
                      "output is Ascend 950 only)", lambda: core.describe_code(dst_dtype),
                      ValueError)
        checks.expect(x.dtype in (torch.float16, torch.bfloat16), OP, "x",
                      lambda: f"dtype float16 or bfloat16 on {product.value}", str(x.dtype),
                      TypeError)


def _transform(x, kronecker_p1, kronecker_p2):
    """``kronecker_p1 @ (x @ kronecker_p2)`` in float32.  The right matmul accumulates in
    float32 and is stored in x's dtype (skipped for a (0, 0) ``kronecker_p2``); the left one
    is returned in float32."""
    x1 = x
    if kronecker_p2.numel() > 0:
        x1 = torch.matmul(x.to(torch.float32), kronecker_p2.to(torch.float32)).to(x.dtype)
    return torch.matmul(kronecker_p1.to(torch.float32), x1.to(torch.float32))


def _mx_reference(x, kronecker_p1, kronecker_p2, dst_type_max):
    k, m, n = x.shape
    # the kernel rounds x'' to bfloat16 (CAST_RINT) for float16 inputs as well
    v = _transform(x, kronecker_p1, kronecker_p2).to(torch.bfloat16).reshape(k, m * n)
    dmax = core._f32(0.0 if dst_type_max is None else dst_type_max)     # a float attribute
    y, codes = mx.quantize(v, FP4, scale_alg=0 if dmax == 0.0 else 2, dst_type_max=dmax,
                           code0_zeros=False)
    return y, codes.view(torch.float8_e8m0fnu)


def kronecker_quant_reference(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None,
                              dst_type_max=None):
    if _is_mx(dst_dtype):
        return _mx_reference(x, kronecker_p1, kronecker_p2, dst_type_max)
    clip = core._f32(1.0 if clip_ratio is None else clip_ratio)
    # x'' rounded to float16 (CAST_RINT) for every input dtype
    h = _transform(x, kronecker_p1, kronecker_p2).to(torch.float16).to(torch.float32)
    amax = h.abs().amax(dim=(1, 2))                                  # (K,)
    scale = amax * clip / 7.0                                        # float32, in that order
    mult = torch.where(amax != 0, core._f32(7.0 / clip) / amax, torch.full_like(amax, 7.0))
    t = (h * mult[:, None, None]).to(torch.float16).to(torch.float32)
    out = core.cast_to(t, INT4, round_mode="rint", inplace=True)
    return out, scale


kronecker_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_kronecker_quant,
                           reference=kronecker_quant_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
kronecker_quant_op.forbid_autograd("npu_kronecker_quant has no backward on the NPU")


def npu_kronecker_quant(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None,
                        dst_type_max=None):
    """FlatQuant: ``kronecker_p1 @ x @ kronecker_p2`` per token, then int4 quantization with
    one scale per token (per ``x[k]``), packed eight values to an int32, or (Ascend 950) MX
    float4_e2m1 quantization of every flattened token in blocks of 32.

    Formula (CANN ``aclnnFlatQuant`` / ``aclnnFlatQuantV2``)::

        x'             = x @ kronecker_p2
        x''            = kronecker_p1 @ x'
        int4:  quant_scale[k] = max(|x''[k, :, :]|) * clip_ratio / 7
               out            = int4(x'' / quant_scale)
        MX:    x2 = x''.reshape(K, M * N), cut into blocks of 32 along the last dim
               dst_type_max 0:    shared_exp = floor(log2(max|V_i|)) - 2   (emax of e2m1)
               dst_type_max 6/7:  as 0, but rounded up when the block maximum's mantissa
                                  exceeds that of 6 / 7
               other (6..12):     shared_exp = ceil(log2(max|V_i| / dst_type_max))
               quant_scale = 2^shared_exp (float8_e8m0);  out = float4_e2m1(V_i / quant_scale)

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted outside strict mode), shape ``(K, M, N)``
        with K <= 262144, M, N <= 256; N divisible by 8 (int4 output) or even (float4_e2m1
        output); any strides.
    kronecker_p1 : Tensor
        ``(M, M)``, x's dtype.
    kronecker_p2 : Tensor
        ``(N, N)``, x's dtype.  With float4_e2m1 output also ``(0, 0)``: no right matmul
        (``x' = x``).
    clip_ratio : float, optional
        In (0, 1], default 1.  int4: values above ``clip_ratio * max`` saturate at 7 / -8.
        Checked but without effect for float4_e2m1 output (the 950 MX kernel does not read it).
    dst_dtype : int or dtype, optional
        ``torch.int32`` (default, also None) or ``torch_npu.int4`` (285): both give the packed
        int32 output.  ``torch_npu.float4_e2m1fn_x2`` (296): the MX output (Ascend 950).
    dst_type_max : float, optional
        float4_e2m1 output: 0 (default) or a value in [6, 12] (see the formula).  int4/int32
        output: None or 0.

    Returns
    -------
    (out, quant_scale)
        int4/int32: ``out`` int32 ``(K, M, N // 8)``; element ``8j + i`` of a row sits in bits
        ``4i .. 4i+3`` of int32 ``j`` (low nibble first).  ``quant_scale``: float32 ``(K,)``.
        float4_e2m1: ``out`` uint8 ``(K, M * N // 2)``, two float4_e2m1 codes per byte
        (element ``2i`` of the flattened token in the low nibble); ``quant_scale``
        ``torch.float8_e8m0fnu`` ``(K, ceil(M * N / 64), 2)``: the scale of block ``j`` of
        token ``k`` at ``[k, j // 2, j % 2]``, an odd block count padded with code 0.

    Constraints
    -----------
    x, kronecker_p1 and kronecker_p2 share one dtype.  Strict mode: float16/bfloat16 only;
    float4_e2m1 output on the Ascend 950 only (aclnnFlatQuantV2: not supported on A2/A3).

    Notes
    -----
    int4, operation order of the A2/A3 kernel (hicann/ops-nn ``quant/flat_quant/op_kernel/
    flat_quant_high.h``): ``x' = x @ p2`` accumulated in float32 and stored in x's dtype;
    ``x'' = p1 @ x'`` stored in float32 and then rounded to **float16** (CAST_RINT, also for
    bfloat16 inputs); ``amax`` over that float16 tensor; ``quant_scale = amax * clip / 7``;
    ``q = (7 / clip) / amax`` (7 when amax == 0); ``out = int4(float16_rint(x''_fp16 * q))``,
    rounded half to even and saturated to [-8, 7].  This settles the clip direction
    (``/ (7 / clip_ratio)`` in aclnnFlatQuant.md) against op-plugin's golden
    (``test/test_custom_ops/test_npu_kronecker_quant.py``: ``scale = amax / (7 * clip)`` and a
    truncating float16 -> int8 cast; its tests are skipped).  Packing: op-plugin
    ``KroneckerQuantKernelNpuOpApi.cpp`` (int32 output, last dim / 8) and the golden's nibble
    unpacking.

    float4_e2m1 (the MX path is in no torch_npu doc page; its facts come from op-plugin's
    ``KroneckerQuantKernelNpuOpApi.cpp`` and meta function (shapes), hicann/ops-nn
    ``quant/flat_quant/docs/aclnnFlatQuantV2.md`` (formula, 950 only, N even, p2 (0, 0),
    dst_type_max 0 or [6, 12]) and the 950 kernels ``op_kernel/arch35/flat_quant_high_v2.h``
    and ``matmul/common/cmct/epilogue/block_epilogue_flat_quant.h``): ``x''`` (float32) is
    rounded to **bfloat16** (CAST_RINT, also for float16 inputs); per block of 32 the scale
    comes from that bfloat16 maximum -- dst_type_max 0 its exponent field minus 2 (OCP),
    6 / 7 the same plus one when the 7-bit mantissa exceeds 0x40 / 0x60, others the float32
    quotient ``max * float32(1 / dst_type_max)`` with its exponent rounded up
    (:func:`mx.scale_codes` scale_alg 0, 2 and 2; the division it uses gives the same codes
    for every bfloat16 maximum, checked for dst_type_max on a 0.001 grid of [6, 12]);
    dst_type_max is a float32 attribute.  Elements are multiplied by the power-of-two
    reciprocal and cast half to even, saturating (:func:`mx.quantize`).  Unlike
    DynamicMxQuant, a block with scale code 0 is written as zeros only if its maximum is zero
    or subnormal; other code-0 blocks (maxima below 2^-124) are multiplied by 2^127.
    The doc says the scale is float8_e8m0 and the C++ wrapper allocates FLOAT8_E8M0, while
    op-plugin's meta function returns uint8 for both outputs: we return uint8 ``out`` and
    ``float8_e8m0fnu`` ``quant_scale`` (as :func:`npu_rotate_quant` does).

    The matmul accumulation order differs from the NPU's cube unit, so elements near a
    rounding boundary can differ by one step.  No backward.

    Examples
    --------
    >>> x = torch.ones(1, 1, 8, dtype=torch.float16)
    >>> out, scale = npu_anywhere.npu_kronecker_quant(x, torch.ones(1, 1, dtype=torch.float16),
    ...                                               torch.eye(8, dtype=torch.float16))
    >>> hex(out.item() & 0xFFFFFFFF), scale
    ('0x77777777', tensor([0.1429]))
    >>> out, scale = npu_anywhere.npu_kronecker_quant(
    ...     torch.ones(2, 4, 16, dtype=torch.bfloat16), torch.eye(4, dtype=torch.bfloat16),
    ...     torch.eye(16, dtype=torch.bfloat16), dst_dtype=296)
    >>> out.dtype, out.shape, scale.dtype, scale.shape
    (torch.uint8, torch.Size([2, 32]), torch.float8_e8m0fnu, torch.Size([2, 1, 2]))
    """
    return kronecker_quant_op(x, kronecker_p1, kronecker_p2, clip_ratio, dst_dtype,
                              dst_type_max)


TORCH_NPU_FUNCTIONS = {"npu_kronecker_quant": npu_kronecker_quant}
