"""torch_npu.npu_transpose_batchmatmul: a batched matmul whose operands and result are permuted.

Formulas (op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_transpose_batchmatmul.md``;
shapes from ``op_plugin/ops/opapi/TransposeBatchMatMulKernelNpuOpApi.cpp`` and the meta
registration; numbers from the CPU goldens in ``test/test_custom_ops/
test_npu_transpose_batchmatmul.py``)::

    a = input.permute(perm_x1)          # [B, M, K]   (input is [B, M, K] or [M, B, K])
    b = weight.permute(perm_x2)         # [B, K, N]
    y = (a @ b).permute(perm_y)         # [M, B, N]   (perm_y is always [1, 0, 2])
    scale given:            y = int8(y.reshape(M, 1, B * N) * scale)    scale: [B * N] words
    batch_split_factor f>1: y = y.reshape(M, f, B * N / f).transpose(0, 1)   -> [f, M, B*N/f]

The cube unit multiplies float16 / bfloat16 (and float32, KEEP_DTYPE) operands with a float32
accumulator; the result is rounded once to the input dtype.  With ``scale`` the fixed-point pipe
quantizes the float32 accumulator: ``scale`` holds npu_trans_quant_param words (fp19 scale, int9
offset), the value ``acc * scale + offset`` is rounded half to even and saturated to int8, as in
npu_quant_matmul's packed-scale path (``integer.unpack_scale_word``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import integer

OP = "npu_transpose_batchmatmul"
SCHEMA = ("npu_transpose_batchmatmul(Tensor input, Tensor weight, *, Tensor? bias=None, "
          "Tensor? scale=None, int[]? perm_x1=None, int[]? perm_x2=None, int[]? perm_y=None, "
          "int? batch_split_factor=1) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SCALE_DTYPES = (torch.int64, torch.uint64)
PERM_X1 = ([0, 1, 2], [1, 0, 2])
# [0, 2, 1] (weight stored [B, N, K]) is the Ascend 950 kernel's (aclnnTransposeBatchMatMul,
# CANN >= 8.5 in op-plugin's meta); A2 / A3 take [0, 1, 2] only.
PERM_X2 = ([0, 1, 2], [0, 2, 1])
PERM_Y = ([1, 0, 2],)
LIMIT = 65536              # B, N, B * N (with scale), K or B * K: each below 2**16
ALIGN = 16                 # K and N must be multiples of 16


def _perm(value, default: list[int]) -> list[int]:
    # op-plugin's meta reads ``perm or default``: None and [] both mean the default.
    return list(value) if value else default


def _check_perms(perm_x1, perm_x2, perm_y) -> tuple[list[int], list[int], list[int]]:
    p1, p2, py = _perm(perm_x1, [0, 1, 2]), _perm(perm_x2, [0, 1, 2]), _perm(perm_y, [1, 0, 2])
    checks.expect(p1 in PERM_X1, OP, "perm_x1", "[0, 1, 2] or [1, 0, 2]", p1, ValueError)
    checks.expect(p2 in PERM_X2, OP, "perm_x2", "[0, 1, 2] or [0, 2, 1]", p2, ValueError)
    checks.expect(py in PERM_Y, OP, "perm_y", "[1, 0, 2]", py, ValueError)
    return p1, p2, py


def _check_strict(input, p2) -> None:
    product = targets.expect_supported(OP, _SUPPORTED)
    if product is None:
        return
    rule = f"on {product.value}"
    checks.expect(input.dtype in _DTYPES, OP, "input", f"float16, bfloat16 or float32 {rule}",
                  str(input.dtype), TypeError)
    checks.expect(p2 == [0, 1, 2], OP, "perm_x2", f"[0, 1, 2] {rule}", p2, ValueError)


def check_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None,
                                perm_x2=None, perm_y=None, batch_split_factor=1):
    p1, p2, _ = _check_perms(perm_x1, perm_x2, perm_y)
    for name, t in (("input", input), ("weight", weight)):
        checks.expect_dtype(t, _DTYPES + (torch.float64,), OP, name)
        checks.expect_dim(t, 3, OP, name)
        checks.expect_nonempty(t, OP, name)
        checks.expect(t.shape[-1] < LIMIT, OP, name, f"a last dim <= {LIMIT - 1}",
                      lambda t=t: t.shape[-1], ValueError)
    checks.expect_same_dtype({"input": input, "weight": weight}, OP)
    checks.expect(bias is None, OP, "bias", "None (the op does not support bias)", "a tensor",
                  ValueError)
    b, m, k = (input.shape[d] for d in p1)
    wb, wk, n = (weight.shape[d] for d in p2)
    checks.expect(wb == b, OP, "weight", lambda: f"a batch dim equal to input's ({b})", wb,
                  RuntimeError)
    checks.expect(wk == k, OP, "weight", lambda: f"a reduce (k) dim equal to input's ({k})", wk,
                  RuntimeError)
    checks.expect(b < LIMIT, OP, "input", f"a batch dim B < {LIMIT}", b, ValueError)
    checks.expect(n < LIMIT, OP, "weight", f"an n dim < {LIMIT}", n, ValueError)
    if p1 == [1, 0, 2]:
        checks.expect(b * k < LIMIT, OP, "input", f"B * K < {LIMIT} when perm_x1 is [1, 0, 2]",
                      lambda: f"B * K = {b * k}", ValueError)
    checks.expect(k % ALIGN == 0, OP, "input", f"a k dim divisible by {ALIGN}", k, ValueError)
    checks.expect(n % ALIGN == 0, OP, "weight", f"an n dim divisible by {ALIGN}", n, ValueError)
    factor = 1 if batch_split_factor is None else batch_split_factor
    # op-plugin's doc splits N ("[1, N], N divisible"), aclnn's splits B ("[1, B], B
    # divisible"); the output [f, M, B * N / f] is the same reshape either way: accept both.
    checks.expect(factor >= 1 and (b % factor == 0 or n % factor == 0), OP,
                  "batch_split_factor", lambda: f"a divisor of B ({b}) or N ({n})", factor,
                  ValueError)
    named = {"input": input, "weight": weight}
    if scale is not None:
        checks.expect_dtype(scale, _SCALE_DTYPES, OP, "scale")
        checks.expect(scale.dim() == 1 and scale.shape[0] == b * n, OP, "scale",
                      lambda: f"a 1-D tensor of size B * N ({b * n})",
                      lambda: f"shape {tuple(scale.shape)}", ValueError)
        checks.expect(b * n < LIMIT, OP, "scale", f"B * N < {LIMIT}", lambda: b * n,
                      ValueError)
        checks.expect(input.dtype == torch.float16, OP, "input",
                      "float16 when scale is given (int8 output)", str(input.dtype), TypeError)
        checks.expect(factor == 1, OP, "batch_split_factor", "1 when scale is given", factor,
                      ValueError)
        named["scale"] = scale
    checks.expect_same_device(named, OP)
    _check_strict(input, p2)


def transpose_batchmatmul_reference(input, weight, *, bias=None, scale=None, perm_x1=None,
                                    perm_x2=None, perm_y=None, batch_split_factor=1):
    p1, p2, py = _perm(perm_x1, [0, 1, 2]), _perm(perm_x2, [0, 1, 2]), _perm(perm_y, [1, 0, 2])
    ct = torch.float64 if input.dtype == torch.float64 else torch.float32
    acc = torch.bmm(input.permute(p1).to(ct), weight.permute(p2).to(ct))   # [B, M, N]
    y = acc.permute(py)                                                     # [M, B, N]
    m, b, n = y.shape
    if scale is not None:
        s, off = integer.unpack_scale_word(scale.view(torch.int64))
        q = integer.to_int8_saturated(y.reshape(m, b * n).to(torch.float32) * s + off)
        return q.reshape(m, 1, b * n)
    factor = 1 if batch_split_factor is None else batch_split_factor
    if factor > 1:
        y = y.reshape(m, factor, b * n // factor).transpose(0, 1)
    return y.to(input.dtype).contiguous()


transpose_batchmatmul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_transpose_batchmatmul,
                                 reference=transpose_batchmatmul_reference, metadata_check=True,
                                 info=OpInfo(api="torch_npu"))
transpose_batchmatmul_op.forbid_autograd(
    "npu_transpose_batchmatmul has no backward on the NPU (derivatives.yaml lists none)")


def npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None,
                              perm_x2=None, perm_y=None, batch_split_factor=1):
    """Batched matmul of permuted 3-D operands, output permuted to ``[M, B, N]``.

    Formula::

        y = (input.permute(perm_x1) @ weight.permute(perm_x2)).permute(perm_y)     # [M, B, N]
        scale:                  y = int8(round(y.reshape(M, 1, B*N) * scale + offset))
        batch_split_factor f>1: y = y.reshape(M, f, B*N // f).transpose(0, 1)      # [f, M, B*N/f]

    Parameters
    ----------
    input : Tensor
        3-D ``[B, M, K]`` (perm_x1 ``[0, 1, 2]``) or ``[M, B, K]`` (perm_x1 ``[1, 0, 2]``);
        float16, bfloat16 or float32 (float64 also accepted outside strict mode).
    weight : Tensor
        3-D ``[B, K, N]`` (perm_x2 ``[0, 1, 2]``) or ``[B, N, K]`` (``[0, 2, 1]``, Ascend 950's
        kernel); input's dtype.
    bias : Tensor, optional
        Not supported by the op: must be None.
    scale : Tensor, optional
        int64 / uint64 ``[B * N]``: npu_trans_quant_param words (fp19 scale, int9 offset) that
        quantize the result to int8.  float16 inputs only.
    perm_x1 : list of int, optional
        ``[0, 1, 2]`` (default) or ``[1, 0, 2]``.
    perm_x2 : list of int, optional
        ``[0, 1, 2]`` (default); ``[0, 2, 1]`` outside strict A2 / A3.
    perm_y : list of int, optional
        ``[1, 0, 2]`` (default, the only value).
    batch_split_factor : int, optional
        1 (default) or a divisor of B or N; must be 1 with ``scale``.

    Returns
    -------
    Tensor: ``[M, B, N]`` of input's dtype; ``[M, 1, B * N]`` int8 with ``scale``;
    ``[f, M, B * N / f]`` for ``batch_split_factor`` f > 1.

    Constraints
    -----------
    A2 / A3: B and N below 65536, last dims at most 65535, B * K below 65536 when perm_x1 is
    ``[1, 0, 2]``, K and N multiples of 16, B * N below 65536 with ``scale``.  Strict A2 / A3
    also rejects perm_x2 ``[0, 2, 1]`` and float64.

    Notes
    -----
    Float operands are multiplied in float32 (float64 for float64) and rounded once.  The int8
    path rounds half to even and saturates.  Inference only (no backward).

    Examples
    --------
    >>> x1 = torch.randn(32, 16, 512, dtype=torch.float16)        # [M, B, K]
    >>> x2 = torch.randn(16, 512, 128, dtype=torch.float16)       # [B, K, N]
    >>> npu_anywhere.npu_transpose_batchmatmul(x1, x2, perm_x1=[1, 0, 2]).shape
    torch.Size([32, 16, 128])
    """
    return transpose_batchmatmul_op(input, weight, bias=bias, scale=scale, perm_x1=perm_x1,
                                    perm_x2=perm_x2, perm_y=perm_y,
                                    batch_split_factor=batch_split_factor)


TORCH_NPU_FUNCTIONS = {"npu_transpose_batchmatmul": npu_transpose_batchmatmul}
