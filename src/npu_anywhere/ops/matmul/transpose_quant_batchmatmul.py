"""torch_npu.npu_transpose_quant_batchmatmul: float8 / hifloat8 batched matmul with permuted
operands and result, dequantized in one of three documented modes (Ascend 950).

Formula (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_transpose_quant_batchmatmul.md``;
the seed doc is empty; shapes from ``op_plugin/ops/opapi/TransposeQuantBatchMatMulKernelNpuOpApi.cpp``
and the meta registration; the mx layout from the CPU goldens of ``test/test_custom_ops/
test_npu_transpose_quant_batchmatmul.py``)::

    out = ((x1^T1 @ x2^T2 + bias) * x2_scale * x1_scale)^Ty          # x1 [M, B, K] -> [M, B, N]

    K-C (x1 / x2 float8, float32 scales):    x1_scale[m] (M,), x2_scale[n] (N,); K = 512, N = 128
    T-C (x1 / x2 hifloat8, float32 scales):  x1_scale (1,) or None, x2_scale[n] (N,)
    mx  (x1 / x2 float8_e4m3fn, e8m0 scales, group_sizes [*, *, 32]): one power-of-two scale per
        32 consecutive k of every row of x1 and column of x2:
        x1_scale (M, B, K/64, 2)  -> scale of x1[m, b, k] = x1_scale[m, b, k // 64, (k // 32) % 2]
        x2_scale (B, K/64, N, 2)  -> scale of x2[b, k, n] = x2_scale[b, k // 64, n, (k // 32) % 2]
                 (B, N, K/64, 2)  for perm_x2 [0, 2, 1] (x2 stored [B, N, K])

float8 / hifloat8 products are exact in float32; the sums run in float32, the scales are applied
in float32 and the result is rounded once to ``dtype``.  hifloat8 inputs are uint8 codes (as
op-plugin maps Byte to ACL_HIFLOAT8), decoded exactly.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..quant import core as quant_core

OP = "npu_transpose_quant_batchmatmul"
SCHEMA = ("npu_transpose_quant_batchmatmul(Tensor x1, Tensor x2, int dtype, *, Tensor? bias=None, "
          "Tensor? x1_scale=None, Tensor? x2_scale=None, int[]? group_sizes=None, "
          "int[]? perm_x1=None, int[]? perm_x2=None, int[]? perm_y=None, "
          "int? batch_split_factor=1, int? x1_dtype=None, int? x2_dtype=None) -> Tensor")

_SUPPORTED = frozenset({Product.ASCEND_950})
_OUT_CODES = {5: torch.float16, 15: torch.bfloat16}
_STORAGE_FORMATS = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
                    torch.uint8: "hifloat8"}
MX_GROUP_SIZES = ([0, 0, 32], [0, 1, 32], [1, 0, 32], [1, 1, 32])
KC_K, KC_N = 512, 128
MX_GROUP = 32


def _perm(value, default: list[int]) -> list[int]:
    return list(value) if value else default


def _input_format(t: torch.Tensor, code, name: str) -> str:
    """The format x1 / x2 carry: their storage dtype, which ``x*_dtype`` may only confirm."""
    fmt = _STORAGE_FORMATS.get(t.dtype)
    checks.expect(fmt is not None, OP, name,
                  "float8_e4m3fn, float8_e5m2 or hifloat8 (uint8 codes)", str(t.dtype),
                  TypeError)
    if code is not None:
        named = quant_core.format_of(code)
        checks.expect(named is not None and named.name == fmt, OP, f"{name}_dtype",
                      lambda: f"None or the format of {name} ({fmt})",
                      lambda: quant_core.describe_code(code), ValueError)
    return fmt


def output_dtype_of(dtype) -> torch.dtype:
    code = quant_core.dtype_code(dtype) if isinstance(dtype, torch.dtype) else dtype
    checks.expect(code not in (dtypes.HIFLOAT8, 0), OP, "dtype",
                  "torch.float16 or torch.bfloat16 (a hifloat8 output's rounding is not "
                  "documented: not implemented)", lambda: quant_core.describe_code(dtype),
                  NotImplementedError)
    checks.expect(code in _OUT_CODES, OP, "dtype", "torch.float16 or torch.bfloat16",
                  lambda: quant_core.describe_code(dtype), ValueError)
    return _OUT_CODES[code]


def _mode(fmt: str, x1_scale, x2_scale) -> str:
    scales = [s for s in (x1_scale, x2_scale) if s is not None]
    for name, s in (("x1_scale", x1_scale), ("x2_scale", x2_scale)):
        if s is not None:
            checks.expect(s.dtype != torch.int64, OP, name,
                          "float32 or float8_e8m0fnu (int64 scales are not described by the "
                          "doc: not implemented)", "dtype int64", NotImplementedError)
            checks.expect_dtype(s, (torch.float32, torch.float8_e8m0fnu), OP, name)
    checks.expect(x2_scale is not None, OP, "x2_scale", "a tensor (every quantization mode "
                  "needs it)", "None", ValueError)
    if x2_scale.dtype == torch.float8_e8m0fnu or any(
            s.dtype == torch.float8_e8m0fnu for s in scales):
        return "mx"
    return "t-c" if fmt == "hifloat8" else "k-c"


def _check_per_channel(mode: str, x1_scale, x2_scale, m: int, n: int) -> None:
    if mode == "k-c":
        checks.expect(x1_scale is not None, OP, "x1_scale", "a tensor in K-C quantization",
                      "None", ValueError)
        checks.expect(x1_scale.dim() == 1 and x1_scale.shape[0] == m, OP, "x1_scale",
                      lambda: f"a 1-D tensor of size m ({m}) in K-C quantization",
                      lambda: f"shape {tuple(x1_scale.shape)}", ValueError)
    elif x1_scale is not None:
        checks.expect(tuple(x1_scale.shape) == (1,), OP, "x1_scale",
                      "None or of shape (1,) in T-C quantization",
                      lambda: f"shape {tuple(x1_scale.shape)}", ValueError)
    checks.expect(x2_scale.dim() == 1 and x2_scale.shape[0] == n, OP, "x2_scale",
                  lambda: f"a 1-D tensor of size n ({n})",
                  lambda: f"shape {tuple(x2_scale.shape)}", ValueError)


def _check_mx(x1, x1_scale, x2_scale, group_sizes, p2, m, b, k, n) -> None:
    checks.expect(x1.dtype == torch.float8_e4m3fn, OP, "x1",
                  "float8_e4m3fn in mx quantization", str(x1.dtype), TypeError)
    checks.expect(k % 64 == 0, OP, "x1", "a k dim that is a multiple of 64 in mx quantization",
                  k, ValueError)
    sizes = list(group_sizes) if group_sizes else None
    checks.expect(sizes in MX_GROUP_SIZES, OP, "group_sizes",
                  lambda: f"one of {list(MX_GROUP_SIZES)} in mx quantization", sizes,
                  ValueError)
    checks.expect(x1_scale is not None and x1_scale.dtype == torch.float8_e8m0fnu, OP,
                  "x1_scale", "a float8_e8m0fnu tensor in mx quantization",
                  lambda: "None" if x1_scale is None else f"dtype {x1_scale.dtype}", TypeError)
    want1 = (m, b, k // 64, 2)
    checks.expect(tuple(x1_scale.shape) == want1, OP, "x1_scale",
                  f"shape {want1} (m, b, k / 64, 2) in mx quantization",
                  lambda: tuple(x1_scale.shape), ValueError)
    checks.expect(x2_scale.dtype == torch.float8_e8m0fnu, OP, "x2_scale",
                  "a float8_e8m0fnu tensor in mx quantization", lambda: str(x2_scale.dtype),
                  TypeError)
    want2 = (b, k // 64, n, 2) if p2 == [0, 1, 2] else (b, n, k // 64, 2)
    checks.expect(tuple(x2_scale.shape) == want2, OP, "x2_scale",
                  lambda: f"shape {want2} for perm_x2 {p2} in mx quantization",
                  lambda: tuple(x2_scale.shape), ValueError)


def check_transpose_quant_batchmatmul(x1, x2, dtype, *, bias=None, x1_scale=None,
                                      x2_scale=None, group_sizes=None, perm_x1=None,
                                      perm_x2=None, perm_y=None, batch_split_factor=1,
                                      x1_dtype=None, x2_dtype=None):
    output_dtype_of(dtype)
    p1, p2, py = _perm(perm_x1, [1, 0, 2]), _perm(perm_x2, [0, 1, 2]), _perm(perm_y, [1, 0, 2])
    checks.expect(p1 == [1, 0, 2], OP, "perm_x1", "[1, 0, 2]", p1, ValueError)
    checks.expect(p2 in ([0, 1, 2], [0, 2, 1]), OP, "perm_x2", "[0, 1, 2] or [0, 2, 1]", p2,
                  ValueError)
    checks.expect(py == [1, 0, 2], OP, "perm_y", "[1, 0, 2]", py, ValueError)
    factor = 1 if batch_split_factor is None else batch_split_factor
    checks.expect(factor == 1, OP, "batch_split_factor", "1 (the only supported value)", factor,
                  ValueError)
    checks.expect(bias is None, OP, "bias", "None (the op does not support bias)", "a tensor",
                  ValueError)
    fmt1 = _input_format(x1, x1_dtype, "x1")
    fmt2 = _input_format(x2, x2_dtype, "x2")
    checks.expect(fmt2 == fmt1, OP, "x2", lambda: f"the format of x1 ({fmt1})", fmt2, TypeError)
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect_dim(t, 3, OP, name)
        checks.expect_nonempty(t, OP, name)
    m, b, k = x1.shape
    if p2 == [0, 1, 2]:
        wb, wk, n = x2.shape
    else:
        wb, n, wk = x2.shape
    checks.expect(wb == b, OP, "x2", lambda: f"a batch dim equal to x1's ({b})", wb,
                  RuntimeError)
    checks.expect(wk == k, OP, "x2", lambda: f"a k dim equal to x1's ({k})", wk, RuntimeError)
    mode = _mode(fmt1, x1_scale, x2_scale)
    if mode == "mx":
        _check_mx(x1, x1_scale, x2_scale, group_sizes, p2, m, b, k, n)
    else:
        checks.expect(not group_sizes or all(g == 0 for g in group_sizes), OP, "group_sizes",
                      "None (group sizes are for mx quantization)", lambda: list(group_sizes),
                      ValueError)
        _check_per_channel(mode, x1_scale, x2_scale, m, n)
    if mode == "k-c":
        checks.expect(p2 == [0, 1, 2], OP, "perm_x2", "[0, 1, 2] in K-C quantization", p2,
                      ValueError)
        checks.expect(k == KC_K, OP, "x1", f"a k dim of {KC_K} in K-C quantization", k,
                      ValueError)
        checks.expect(n == KC_N, OP, "x2", f"an n dim of {KC_N} in K-C quantization", n,
                      ValueError)
    named = {"x1": x1, "x2": x2, "x2_scale": x2_scale}
    if x1_scale is not None:
        named["x1_scale"] = x1_scale
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, _SUPPORTED)


def _values(t: torch.Tensor) -> torch.Tensor:
    """float32 values of float8 storage or hifloat8 codes."""
    if t.dtype == torch.uint8:
        return quant_core.decode(t, quant_core.FORMATS["hifloat8"])
    return t.to(torch.float32)


def _mx_scales(scale: torch.Tensor, k_axis: int) -> torch.Tensor:
    """e8m0 ``(..., k / 64, 2)``-blocked scales as float32 repeated over their 32 k each, the
    k axis placed at ``k_axis`` of the operand's layout."""
    s = scale.to(torch.float32)
    if k_axis == -1:                                   # (..., k/64, 2) trails: k is last
        return s.flatten(-2).repeat_interleave(MX_GROUP, dim=-1)
    # (b, k/64, n, 2): bring the pair next to k/64, then expand k.
    s = s.permute(0, 1, 3, 2).flatten(1, 2)            # (b, k/32, n)
    return s.repeat_interleave(MX_GROUP, dim=1)


def transpose_quant_batchmatmul_reference(x1, x2, dtype, *, bias=None, x1_scale=None,
                                          x2_scale=None, group_sizes=None, perm_x1=None,
                                          perm_x2=None, perm_y=None, batch_split_factor=1,
                                          x1_dtype=None, x2_dtype=None):
    out = output_dtype_of(dtype)
    p2 = _perm(perm_x2, [0, 1, 2])
    a = _values(x1)                                                    # [M, B, K]
    w = _values(x2)                                                    # [B, K, N] / [B, N, K]
    mx = x2_scale.dtype == torch.float8_e8m0fnu
    if mx:
        a = a * _mx_scales(x1_scale, -1)
        w = w * _mx_scales(x2_scale, -1 if p2 == [0, 2, 1] else 1)
    acc = torch.bmm(a.transpose(0, 1), w.permute(p2))                  # [B, M, N], float32
    y = acc.transpose(0, 1)                                            # [M, B, N]
    if not mx:
        y = y * x2_scale
        if x1_scale is not None:
            y = y * x1_scale.reshape(-1, 1, 1)        # (m,) per token or (1,) per tensor
    return y.to(out).contiguous()


transpose_quant_batchmatmul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                       check=check_transpose_quant_batchmatmul,
                                       reference=transpose_quant_batchmatmul_reference,
                                       metadata_check=True, info=OpInfo(api="torch_npu"))
transpose_quant_batchmatmul_op.forbid_autograd(
    "npu_transpose_quant_batchmatmul has no backward on the NPU (derivatives.yaml lists none)")


def npu_transpose_quant_batchmatmul(x1, x2, dtype, *, bias=None, x1_scale=None, x2_scale=None,
                                    group_sizes=None, perm_x1=None, perm_x2=None, perm_y=None,
                                    batch_split_factor=1, x1_dtype=None, x2_dtype=None):
    """Quantized batched matmul of a ``[M, B, K]`` x1 and a ``[B, K, N]`` x2 into ``[M, B, N]``.

    Formula::

        out = ((x1^T1 @ x2^T2 + bias) * x2_scale * x1_scale)^Ty

        K-C: x1_scale[m] per token, x2_scale[n] per channel (float32)
        T-C: x1_scale (1,) per tensor or None, x2_scale[n] per channel (float32)
        mx:  one e8m0 scale (2**e) per 32 consecutive k of each x1 row / x2 column

    Parameters
    ----------
    x1 : Tensor
        3-D ``(m, b, k)``: float8_e4m3fn, float8_e5m2, or hifloat8 as uint8 codes.
    x2 : Tensor
        3-D ``(b, k, n)`` (perm_x2 ``[0, 1, 2]``) or ``(b, n, k)`` (``[0, 2, 1]``), x1's format.
    dtype : torch.dtype or int
        Output dtype: torch.float16 or torch.bfloat16 (torch_npu.hifloat8 is not implemented).
    bias : Tensor, optional
        Not supported by the op: must be None.
    x1_scale, x2_scale : Tensor, optional
        K-C: float32 ``(m,)`` and ``(n,)``.  T-C: float32 ``(1,)`` or None, and ``(n,)``.
        mx: float8_e8m0fnu ``(m, b, k / 64, 2)`` and ``(b, k / 64, n, 2)`` (``(b, n, k / 64, 2)``
        for perm_x2 ``[0, 2, 1]``).  int64 scales are not implemented.
    group_sizes : list of int, optional
        mx: one of ``[0, 0, 32]``, ``[0, 1, 32]``, ``[1, 0, 32]``, ``[1, 1, 32]``; otherwise None.
    perm_x1, perm_x2, perm_y : list of int, optional
        ``[1, 0, 2]`` (default and only value); ``[0, 1, 2]`` (default) or ``[0, 2, 1]``;
        ``[1, 0, 2]`` (default and only value).
    batch_split_factor : int, optional
        1 (the only value).
    x1_dtype, x2_dtype : int, optional
        None or the format the tensor holds (e.g. ``torch_npu.hifloat8`` for uint8 codes).

    Returns
    -------
    Tensor ``(m, b, n)`` of ``dtype``.

    Constraints
    -----------
    Ascend 950 only (strict mode rejects other products).  K-C: k = 512, n = 128, perm_x2
    ``[0, 1, 2]``.  mx: float8_e4m3fn inputs, k a multiple of 64.

    Notes
    -----
    float8 / hifloat8 products are exact in float32; sums and scaling run in float32 and round
    once.  FRACTAL_NZ x2 is accepted as the ND tensor npu_format_cast returns here.  No backward
    (derivatives.yaml lists none): autograd raises.

    Examples
    --------
    >>> M, K, N, B = 32, 512, 128, 4
    >>> x1 = torch.randint(-5, 5, (M, B, K), dtype=torch.int8).to(torch.float8_e4m3fn)
    >>> x2 = torch.randint(-5, 5, (B, K, N), dtype=torch.int8).to(torch.float8_e4m3fn)
    >>> y = npu_anywhere.npu_transpose_quant_batchmatmul(
    ...     x1, x2, dtype=torch.float16, x1_scale=torch.rand(M), x2_scale=torch.rand(N))
    >>> y.shape
    torch.Size([32, 4, 128])
    """
    return transpose_quant_batchmatmul_op(
        x1, x2, dtype, bias=bias, x1_scale=x1_scale, x2_scale=x2_scale, group_sizes=group_sizes,
        perm_x1=perm_x1, perm_x2=perm_x2, perm_y=perm_y, batch_split_factor=batch_split_factor,
        x1_dtype=x1_dtype, x2_dtype=x2_dtype)


TORCH_NPU_FUNCTIONS = {"npu_transpose_quant_batchmatmul": npu_transpose_quant_batchmatmul}
