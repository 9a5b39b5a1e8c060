"""torch_npu.npu_kronecker_quant: two small matmuls (the Kronecker factors of a FlatQuant
transform) followed by per-token int4 quantization, packed eight to an int32.

Formula (CANN ``aclnnFlatQuant``)::

    x'         = x @ kronecker_p2                 # (K, M, N) @ (N, N)
    x''        = kronecker_p1 @ x'                # (M, M) @ (K, M, N)
    quant_scale[k] = max(|x''[k]|) / (7 / clip_ratio)
    out        = int4(x'' / quant_scale)

Precision and rounding: see :func:`npu_kronecker_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...dtypes import FLOATING
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_kronecker_quant"
SCHEMA = ("npu_kronecker_quant(Tensor x, Tensor kronecker_p1, Tensor kronecker_p2, "
          "float? clip_ratio=None, int? dst_dtype=None, float? dst_type_max=None) "
          "-> (Tensor out, Tensor quant_scale)")

MAX_K = 262144
MAX_MN = 256
INT4 = core.FORMATS["int4"]
_DST_SPELLED = ("torch.int32 (3, default)", "torch_npu.int4 (285)",
                "torch_npu.float4_e2m1fn_x2 (296, not emulated)")
SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def _check_dst(dst_dtype) -> None:
    if dst_dtype is None:
        return
    if isinstance(dst_dtype, int) and not isinstance(dst_dtype, bool) \
            and dst_dtype == dtypes.FLOAT4_E2M1FN_X2:
        checks.expect(False, OP, "dst_dtype",
                      "a format npu_anywhere can emulate (the float4_e2m1 MX path of "
                      "aclnnFlatQuantV2 is not emulated)", core.describe_code(dst_dtype),
                      NotImplementedError)
    core.parse_dst_type(dst_dtype, op=OP, param="dst_dtype", allowed=("int32", "int4"),
                        spelled=_DST_SPELLED)


def check_kronecker_quant(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None,
                          dst_type_max=None):
    checks.expect_dtype(x, FLOATING, OP, "x")
    checks.expect_dim(x, 3, OP, "x")
    k, m, n = x.shape
    checks.expect(1 <= k <= MAX_K and 1 <= m <= MAX_MN and 1 <= n <= MAX_MN, OP, "x",
                  f"shape (K, M, N) with 1 <= K <= {MAX_K} and 1 <= M, N <= {MAX_MN}",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(n % 8 == 0, OP, "x", "a last dim (N) divisible by 8 (int4 packed in int32)",
                  n, ValueError)
    for name, p, size in (("kronecker_p1", kronecker_p1, m), ("kronecker_p2", kronecker_p2, n)):
        checks.expect(p.dtype == x.dtype, OP, name, lambda: f"the dtype of x ({x.dtype})",
                      lambda p=p: str(p.dtype), TypeError)
        checks.expect(tuple(p.shape) == (size, size), OP, name,
                      lambda size=size: f"shape ({size}, {size})",
                      lambda p=p: f"shape {tuple(p.shape)}")
    checks.expect_same_device({"x": x, "kronecker_p1": kronecker_p1,
                               "kronecker_p2": kronecker_p2}, OP)
    if clip_ratio is not None:
        checks.expect(0.0 < clip_ratio <= 1.0, OP, "clip_ratio", "a value in (0, 1]",
                      clip_ratio, ValueError)
    _check_dst(dst_dtype)
    if dst_type_max is not None:
        checks.expect(dst_type_max == 0.0, OP, "dst_type_max",
                      "0 for int4/int32 output (6..12 applies to float4_e2m1 only)",
                      dst_type_max, ValueError)
    product = targets.expect_supported(OP, SUPPORTED)
    if product is not None:
        checks.expect(x.dtype in (torch.float16, torch.bfloat16), OP, "x",
                      lambda: f"dtype float16 or bfloat16 on {product.value}", str(x.dtype),
                      TypeError)


def kronecker_quant_reference(x, kronecker_p1, kronecker_p2, clip_ratio=None, dst_dtype=None,
                              dst_type_max=None):
    clip = core._f32(1.0 if clip_ratio is None else clip_ratio)
    # right matmul: float32 accumulation, result in x's dtype
    x1 = torch.matmul(x.to(torch.float32), kronecker_p2.to(torch.float32)).to(x.dtype)
    # left matmul: float32 result, then rounded to float16 (CAST_RINT) for every input dtype
    x2 = torch.matmul(kronecker_p1.to(torch.float32), x1.to(torch.float32))
    h = x2.to(torch.float16).to(torch.float32)
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
    one scale per token (per ``x[k]``), packed eight values to an int32.

    Formula (CANN ``aclnnFlatQuant``)::

        x'             = x @ kronecker_p2
        x''            = kronecker_p1 @ x'
        quant_scale[k] = max(|x''[k, :, :]|) * clip_ratio / 7
        out            = int4(x'' / quant_scale)

    Parameters
    ----------
    x : Tensor
        float16 or bfloat16 (float32 also accepted outside strict mode), shape ``(K, M, N)``
        with K <= 262144, M, N <= 256 and N divisible by 8; any strides.
    kronecker_p1 : Tensor
        ``(M, M)``, x's dtype.
    kronecker_p2 : Tensor
        ``(N, N)``, x's dtype.
    clip_ratio : float, optional
        In (0, 1], default 1.  Values above ``clip_ratio * max`` saturate at 7 / -8.
    dst_dtype : int or dtype, optional
        ``torch.int32`` (default, also None) or ``torch_npu.int4`` (285): both give the packed
        int32 output.  ``torch_npu.float4_e2m1fn_x2`` (296, the 950's MX path) raises
        NotImplementedError.
    dst_type_max : float, optional
        Applies to the float4_e2m1 path only; must be None or 0 here.

    Returns
    -------
    (out, quant_scale)
        ``out``: int32 ``(K, M, N // 8)``; element ``8j + i`` of a row sits in bits
        ``4i .. 4i+3`` of int32 ``j`` (low nibble first).  ``quant_scale``: float32 ``(K,)``.

    Constraints
    -----------
    x, kronecker_p1 and kronecker_p2 share one dtype.  Strict mode: float16/bfloat16 only.

    Notes
    -----
    Operation order of the A2/A3 kernel (hicann/ops-nn ``quant/flat_quant/op_kernel/
    flat_quant_high.h``): ``x' = x @ p2`` accumulated in float32 and stored in x's dtype;
    ``x'' = p1 @ x'`` stored in float32 and then rounded to **float16** (CAST_RINT, also for
    bfloat16 inputs); ``amax`` over that float16 tensor; ``quant_scale = amax * clip / 7``;
    ``q = (7 / clip) / amax`` (7 when amax == 0); ``out = int4(float16_rint(x''_fp16 * q))``,
    rounded half to even and saturated to [-8, 7].  This settles the clip direction
    (``/ (7 / clip_ratio)`` in aclnnFlatQuant.md) against op-plugin's golden
    (``test/test_custom_ops/test_npu_kronecker_quant.py``: ``scale = amax / (7 * clip)`` and a
    truncating float16 -> int8 cast; its tests are skipped).  Packing: op-plugin
    ``KroneckerQuantKernelNpuOpApi.cpp`` (int32 output, last dim / 8) and the golden's nibble
    unpacking.  The matmul accumulation order differs from the NPU's cube unit, so elements
    near a rounding boundary can differ by 1.  No backward.

    Examples
    --------
    >>> x = torch.ones(1, 1, 8, dtype=torch.float16)
    >>> out, scale = npu_anywhere.npu_kronecker_quant(x, torch.ones(1, 1, dtype=torch.float16),
    ...                                               torch.eye(8, dtype=torch.float16))
    >>> hex(out.item() & 0xFFFFFFFF), scale
    ('0x77777777', tensor([0.1429]))
    """
    return kronecker_quant_op(x, kronecker_p1, kronecker_p2, clip_ratio, dst_dtype,
                                       dst_type_max)


TORCH_NPU_FUNCTIONS = {"npu_kronecker_quant": npu_kronecker_quant}
