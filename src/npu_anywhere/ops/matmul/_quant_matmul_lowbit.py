"""The Ascend 950 low-bit modes of npu_quant_matmul: float8 / hifloat8 / float4 inputs.

Modes (hicann/ops-nn ``matmul/quant_batch_matmul_v4/docs/aclnnQuantMatmulV5.md``, the 950
sections; op-plugin ``op_plugin/ops/opapi/QuantMatmulKernelNpuOpApi.cpp`` for how the torch_npu
arguments map onto it -- ``pertoken_scale`` is ``x1Scale``, ``scale`` is ``x2Scale``)::

    T-C / T-T, static (int64 scale, or a float32 scale without pertoken_scale, which op-plugin
        first packs with npu_trans_quant_param):  out = (x1 @ x2 + bias) * scale
    T-C / K-C / K-T, dynamic (float32 scale and pertoken_scale):
                                                   out = x1 @ x2 * scale * pertoken_scale + bias
    MX (e8m0 scales, group_sizes [1, 1, 32]):
        out[m, n] = sum_j (sum_{k in block j} x1[m, k] x2[k, n]) * x1s[m, j] * x2s[j, n] + bias[n]
    G-B / B-B (float32 2-D scales, group_sizes [1, 128, 128] / [128, 128, 128]):
        out[m, n] = sum_j (sum_{k in group j} x1[m, k] x2[k, n])
                    * (x1s[m / gm, j] * x2s[j, n / 128])
        with x1s (..., m, ceil(k / 128)) (G-B) or (..., ceil(m / 128), ceil(k / 128)) (B-B) and
        x2s (..., ceil(k / 128), ceil(n / 128)); float32 terms added for j = 0, 1, ... in order

Element formats: ``torch.float8_e4m3fn`` / ``torch.float8_e5m2`` tensors (or int8 / uint8
carriers with ``x1_dtype`` / ``x2_dtype`` 292 / 291), hifloat8 (uint8 / int8 codes with
``x*_dtype=torch_npu.hifloat8``, 290, decoded by :mod:`..quant.hifloat8`), float4_e2m1 (two
codes per byte along the tensor's contiguous dim, ``x*_dtype=torch_npu.float4_e2m1fn_x2``,
296; MX only, with a float4 x1 or, as MX pseudo-quant, a float8_e4m3fn x1 and a bias in the
output dtype).  MX scales are e8m0 codes (uint8 / int8 / ``torch.float8_e8m0fnu`` tensors;
``scale_dtype`` / ``pertoken_scale_dtype`` 293 or ``torch.float8_e8m0fnu``) in the layout
npu_dynamic_mx_quant writes: ``pertoken_scale (..., m, ceil(k / 64), 2)`` and ``scale
(..., ceil(k / 64), n, 2)`` (the transpose of a weight's ``(n, ceil(k / 64), 2)`` scale), block
``2i + j`` of a row at ``[i, j]``.

Numerics: every product of two decoded elements (times their power-of-two MX scales) is exact
in float64, and the products are summed in float64 (exact for float8_e4m3fn at any k <= 65535;
for e5m2 / hifloat8 / MX exact unless one sum spans more than 53 bits of magnitude), then
rounded once to float32 -- the correctly rounded float32 value of the dot product, which the
cube's float32 accumulation approximates (its summation order is not documented).
Dequantization is then float32 in the doc's order, and one rounding to ``output_dtype``.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...targets import Product
from ..quant import core as quant_core
from ..quant import hifloat8, mx
from ..quant.trans_quant_param import trans_quant_param_reference
from . import integer

OP = "npu_quant_matmul"
SUPPORTED = frozenset({Product.ASCEND_950})
OUT_CODES = {5: torch.float16, 15: torch.bfloat16, 6: torch.float32}
MX_BLOCK = mx.BLOCK_SIZE
_FLOAT8 = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}
_CARRIERS = (torch.int8, torch.uint8)
_TORCH_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0_CODES = (dtypes.FLOAT8_E8M0FNU, 44)          # torch_npu code, ScalarType value
_FORMAT_CODES = {dtypes.HIFLOAT8: "hifloat8", dtypes.FLOAT8_E5M2: "float8_e5m2",
                 dtypes.FLOAT8_E4M3FN: "float8_e4m3fn", 23: "float8_e5m2",
                 24: "float8_e4m3fn", dtypes.FLOAT4_E2M1FN_X2: "float4_e2m1",
                 45: "float4_e2m1"}
_SPELLED = ("torch_npu.hifloat8 (290)", "torch.float8_e5m2 (23 / 291)",
            "torch.float8_e4m3fn (24 / 292)", "torch_npu.float4_e2m1fn_x2 (296)")


def _code(value):
    """An ``int?`` dtype argument as an int code (a torch.dtype arrives in eager calls)."""
    if value is None or isinstance(value, int):
        return value
    if _TORCH_FP4 is not None and value is _TORCH_FP4:
        return 45
    if value == torch.float8_e8m0fnu:
        return 44
    try:
        return quant_core.dtype_code(value)
    except ValueError:
        return -1                         # a dtype with no code: rejected by the caller's check


def operand_format(t: torch.Tensor, declared, name: str) -> str | None:
    """The element format of x1 / x2, or None for the integer inputs of the A2 / A3 paths."""
    code = _code(declared)
    if code is None:
        if t.dtype in _FLOAT8:
            return _FLOAT8[t.dtype]
        if _TORCH_FP4 is not None and t.dtype == _TORCH_FP4:
            return "float4_e2m1"
        return None
    checks.expect(code in _FORMAT_CODES, OP, f"{name}_dtype", f"one of {list(_SPELLED)}",
                  lambda: quant_core.describe_code(declared), ValueError)
    fmt = _FORMAT_CODES[code]
    ok = t.dtype in _CARRIERS or (fmt in _FLOAT8.values() and _FLOAT8.get(t.dtype) == fmt) or \
        (fmt == "float4_e2m1" and _TORCH_FP4 is not None and t.dtype == _TORCH_FP4)
    checks.expect(ok, OP, name, lambda: f"an int8 / uint8 tensor carrying {fmt} codes (or the "
                  f"matching torch dtype) with {name}_dtype "
                  f"{quant_core.describe_code(declared)}",
                  lambda: f"dtype {t.dtype}", TypeError)
    return fmt


def is_e8m0(t: torch.Tensor | None, declared) -> bool:
    if t is None:
        return False
    return t.dtype == torch.float8_e8m0fnu or _code(declared) in _E8M0_CODES


def is_lowbit(x1, x2, x1_dtype, x2_dtype, scale, scale_dtype) -> bool:
    return (x1_dtype is not None or x2_dtype is not None or x1.dtype in _FLOAT8
            or x2.dtype in _FLOAT8 or is_e8m0(scale, scale_dtype)
            or (_TORCH_FP4 is not None and _TORCH_FP4 in (x1.dtype, x2.dtype)))


def output_dtype_of(output_dtype) -> torch.dtype:
    code = _code(output_dtype)
    checks.expect(code in OUT_CODES, OP, "output_dtype",
                  "torch.float16, torch.bfloat16 or torch.float32 for float8 / hifloat8 / "
                  "float4 inputs", lambda: quant_core.describe_code(output_dtype), ValueError)
    return OUT_CODES[code]


def _transposed(t: torch.Tensor) -> bool:
    """op-plugin's is_transpose_last_two_dims: the last two dims are a transposed contiguous
    matrix (so a packed float4 tensor is packed along dim -2)."""
    if t.dim() < 2 or (t.shape[-1] == 1 and t.shape[-2] == 1):
        return False
    return t.stride(-2) == 1 and t.stride(-1) == t.shape[-2]


def _packed_dim(t: torch.Tensor) -> int:
    return -2 if _transposed(t) else -1


def logical_shape(t: torch.Tensor, fmt: str) -> tuple[int, ...]:
    """The element shape: a packed float4 dim counts two elements per byte."""
    shape = list(t.shape)
    if fmt == "float4_e2m1":
        shape[_packed_dim(t)] *= 2
    return tuple(shape)


def decode(t: torch.Tensor, fmt: str) -> torch.Tensor:
    """float64 values of an operand (exact for every format)."""
    if fmt in ("float8_e4m3fn", "float8_e5m2"):
        dtype = torch.float8_e4m3fn if fmt == "float8_e4m3fn" else torch.float8_e5m2
        v = t if t.dtype == dtype else t.view(torch.uint8).view(dtype)
        return v.to(torch.float64)
    codes = t.view(torch.uint8) if t.dtype != torch.uint8 else t       # same itemsize: any strides
    if fmt == "hifloat8":
        return hifloat8.decode_hifloat8(codes).to(torch.float64)
    dim = _packed_dim(t)                   # float4: unpack along the packed (contiguous) dim
    nibbles = mx.unpack_fp4(codes.movedim(dim, -1)).movedim(-1, dim)
    return mx.decode_e2m1(nibbles).to(torch.float64)


def scale_values(t: torch.Tensor) -> torch.Tensor:
    """float64 values ``2^(code - 127)`` of e8m0 codes (NaN for 255)."""
    codes = t.view(torch.uint8) if t.dtype in (torch.float8_e8m0fnu, torch.int8) else t
    return mx.e8m0_to_float(codes).to(torch.float64)


# -- checks --------------------------------------------------------------------------------------

def _check_bias(bias, n: int, batch: tuple[int, ...]) -> None:
    checks.expect_dtype(bias, (torch.float32,), OP, "bias")
    out_dim = len(batch) + 2
    allowed = [(n,)] + ([(1, n)] if out_dim == 2 else []) + \
        ([(batch[0], 1, n)] if out_dim == 3 else [])
    checks.expect(tuple(bias.shape) in allowed, OP, "bias",
                  lambda: f"one of the shapes {allowed} for a {out_dim}-D output",
                  tuple(bias.shape), ValueError)


def _check_mx_scale(name: str, t, want: tuple[int, ...], batch_src: tuple[int, ...],
                    declared) -> None:
    checks.expect(t.dtype in (torch.uint8, torch.int8, torch.float8_e8m0fnu), OP, name,
                  "uint8 / int8 e8m0 codes or torch.float8_e8m0fnu in the MX mode",
                  lambda: f"dtype {t.dtype}", TypeError)
    checks.expect(is_e8m0(t, declared), OP, f"{name}_dtype" if name != "scale" else
                  "scale_dtype", "torch_npu.float8_e8m0fnu (293) for MX scales",
                  lambda: quant_core.describe_code(declared), ValueError)
    shapes = [want, (*batch_src, *want)] if batch_src else [want]
    checks.expect(tuple(t.shape) in shapes, OP, name,
                  lambda: " or ".join(str(s) for s in shapes) + " (MX e8m0 blocks of 32 along k)",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def _check_group_sizes(group_sizes, want: tuple[int, int, int]) -> None:
    if not group_sizes:
        return
    gs = list(group_sizes)
    checks.expect(len(gs) == 3 and all(0 <= g <= 65535 for g in gs), OP, "group_sizes",
                  "three values in [0, 65535] ([group_m, group_n, group_k])", gs, ValueError)
    inferred = [w if g == 0 else g for g, w in zip(gs, want)]
    checks.expect(tuple(inferred) == want, OP, "group_sizes",
                  lambda: f"{list(want)} (0 entries are inferred) for this mode", gs,
                  ValueError)


def check_lowbit(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype, x1_dtype,
                 x2_dtype, pertoken_scale_dtype, scale_dtype, group_sizes, y_scale) -> None:
    f1 = operand_format(x1, x1_dtype, "x1")
    f2 = operand_format(x2, x2_dtype, "x2")
    checks.expect(f1 is not None, OP, "x1",
                  lambda: f"a float8 / hifloat8 / float4 operand like x2 ({f2})",
                  lambda: f"dtype {x1.dtype}", TypeError)
    checks.expect(f2 is not None, OP, "x2",
                  lambda: f"a float8 / hifloat8 / float4 operand like x1 ({f1})",
                  lambda: f"dtype {x2.dtype}", TypeError)
    fp8 = ("float8_e4m3fn", "float8_e5m2")
    pseudo = f1 == "float8_e4m3fn" and f2 == "float4_e2m1"      # MX pseudo-quant (A8W4)
    same_family = (f1 in fp8 and f2 in fp8) or f1 == f2 or pseudo
    checks.expect(same_family, OP, "x2",
                  lambda: f"a format matching x1's {f1} (float8 e4m3fn / e5m2 mix; hifloat8 "
                  "and float4 pair with themselves; float8_e4m3fn x1 with float4 x2)", f2,
                  TypeError)
    out = output_dtype_of(output_dtype)
    for name, t in (("x1", x1), ("x2", x2)):
        checks.expect(2 <= t.dim() <= 6, OP, name, "a tensor with 2 to 6 dims",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
        checks.expect_nonempty(t, OP, name)
    s1, s2 = logical_shape(x1, f1), logical_shape(x2, f2)
    m, k, k2, n = s1[-2], s1[-1], s2[-2], s2[-1]
    checks.expect(k == k2, OP, "x2", lambda: f"a k dim equal to x1's ({k})", k2, RuntimeError)
    try:
        batch = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError:
        batch = None
    checks.expect(batch is not None, OP, "x2", lambda: f"batch dims broadcastable with x1's "
                  f"{tuple(x1.shape[:-2])}", lambda: tuple(x2.shape[:-2]), RuntimeError)
    checks.expect(offset is None, OP, "offset", "None for float8 / hifloat8 / float4 inputs",
                  "a tensor", ValueError)
    checks.expect(y_scale is None, OP, "y_scale",
                  "None (the T-CG float8 x float4 mode is not implemented)", "a tensor",
                  NotImplementedError)
    if pseudo:
        _check_pseudo(x1, x2, bias, out, k)
    elif bias is not None:
        _check_bias(bias, n, batch)
    if is_e8m0(scale, scale_dtype) or is_e8m0(pertoken_scale, pertoken_scale_dtype):
        checks.expect(pertoken_scale is not None, OP, "pertoken_scale",
                      "the x1 e8m0 scale in the MX mode", "None", ValueError)
        kb = -(-k // (2 * MX_BLOCK))
        _check_mx_scale("pertoken_scale", pertoken_scale, (m, kb, 2), tuple(x1.shape[:-2]),
                        pertoken_scale_dtype)
        _check_mx_scale("scale", scale, (kb, n, 2), tuple(x2.shape[:-2]), scale_dtype)
        _check_group_sizes(group_sizes, (1, 1, MX_BLOCK))
        if f1 == "float4_e2m1":
            checks.expect(k % 2 == 0 and k > 2, OP, "x1", "an even k above 2 for float4",
                          k, ValueError)
    else:
        checks.expect(f2 != "float4_e2m1", OP, "scale",
                      "e8m0 MX scales (scale_dtype torch_npu.float8_e8m0fnu) for float4 inputs "
                      "(the T-CG float8 x float4 mode with y_scale is not implemented)",
                      lambda: f"dtype {scale.dtype}", ValueError)
        checks.expect(scale_dtype is None and pertoken_scale_dtype is None, OP, "scale_dtype",
                      "None for float32 / int64 scales", lambda: quant_core.describe_code(
                          scale_dtype if scale_dtype is not None else pertoken_scale_dtype),
                      ValueError)
        if scale.dim() >= 2 or (pertoken_scale is not None and pertoken_scale.dim() >= 2):
            _check_per_block(x1, x2, scale, pertoken_scale, bias, group_sizes, m, k, n)
        else:
            _check_per_channel(scale, pertoken_scale, group_sizes, m, n)
    named = {"x1": x1, "x2": x2, "scale": scale}
    for name, t in (("pertoken_scale", pertoken_scale), ("bias", bias)):
        if t is not None:
            named[name] = t
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, SUPPORTED)
    del out


def _check_pseudo(x1, x2, bias, out, k) -> None:
    """MX pseudo-quant, float8_e4m3fn x1 with float4_e2m1 x2 (aclnnQuantMatmulV5 MX伪量化)."""
    checks.expect(x1.dim() == 2 and x2.dim() == 2, OP, "x2",
                  "2-D x1 and x2 (no batch) for float8 x float4",
                  lambda: f"shapes {tuple(x1.shape)} and {tuple(x2.shape)}", ValueError)
    checks.expect(_transposed(x2) and not _transposed(x1), OP, "x2",
                  "the transpose of a contiguous (n, k / 2) weight, with a non-transposed x1, "
                  "for float8 x float4", "another layout", ValueError)
    checks.expect(k % 8 == 0, OP, "x1", "a k divisible by 8 for float8 x float4", k,
                  ValueError)
    checks.expect(out in (torch.float16, torch.bfloat16), OP, "output_dtype",
                  "torch.float16 or torch.bfloat16 for float8 x float4", str(out), ValueError)
    if bias is not None:
        n = x2.shape[-1]
        checks.expect(bias.dtype == out, OP, "bias",
                      lambda: f"dtype {out} (the output's) for float8 x float4",
                      lambda: f"dtype {bias.dtype}", TypeError)
        checks.expect(tuple(bias.shape) in ((1, n), (n,)), OP, "bias",
                      lambda: f"shape (1, {n}) (or ({n},)) for float8 x float4",
                      lambda: f"shape {tuple(bias.shape)}", ValueError)


GROUP = 128


def block_group_m(pertoken_scale: torch.Tensor, m: int) -> int:
    """groupSizeM from x1's scale: 1 (G-B, one row per scale) or 128 (B-B)."""
    return 1 if pertoken_scale.shape[-2] == m else GROUP


def _check_per_block(x1, x2, scale, pertoken_scale, bias, group_sizes, m, k, n) -> None:
    """G-B / B-B: float32 (.., m or ceil(m / 128), ceil(k / 128)) and (.., ceil(k / 128),
    ceil(n / 128)) scales."""
    checks.expect(pertoken_scale is not None and pertoken_scale.dim() >= 2, OP,
                  "pertoken_scale", "a 2-D (or batched) float32 x1 scale with a 2-D scale "
                  "(the G-B / B-B per-block modes)", lambda: "None" if pertoken_scale is None
                  else f"shape {tuple(pertoken_scale.shape)}", ValueError)
    checks.expect_dtype(scale, (torch.float32,), OP, "scale")
    checks.expect_dtype(pertoken_scale, (torch.float32,), OP, "pertoken_scale")
    kb, nb, mb = -(-k // GROUP), -(-n // GROUP), -(-m // GROUP)
    s1 = (*pertoken_scale.shape[:-2], m, kb), (*pertoken_scale.shape[:-2], mb, kb)
    checks.expect(tuple(pertoken_scale.shape) in s1 and
                  pertoken_scale.shape[:-2] in (x1.shape[:-2], ()), OP, "pertoken_scale",
                  lambda: f"({m}, {kb}) (G-B) or ({mb}, {kb}) (B-B), with x1's batch dims or "
                  "none", lambda: f"shape {tuple(pertoken_scale.shape)}", ValueError)
    checks.expect(tuple(scale.shape[-2:]) == (kb, nb) and scale.dim() >= 2 and
                  scale.shape[:-2] in (x2.shape[:-2], ()), OP, "scale",
                  lambda: f"({kb}, {nb}) (ceil(k / 128), ceil(n / 128)), with x2's batch dims "
                  "or none", lambda: f"shape {tuple(scale.shape)}", ValueError)
    _check_group_sizes(group_sizes, (block_group_m(pertoken_scale, m), GROUP, GROUP))
    if x1.dtype == torch.int8 and x2.dtype == torch.int8:
        return                               # int8 G-B takes a float32 bias (checked there)
    checks.expect(bias is None, OP, "bias",
                  "None in the G-B / B-B modes for float8 / hifloat8 inputs", "a tensor",
                  ValueError)


def _check_per_channel(scale, pertoken_scale, group_sizes, m, n) -> None:
    """T-C / T-T / K-C / K-T: 1-D scales."""
    checks.expect(not group_sizes, OP, "group_sizes",
                  "None with 1-D scales (it selects the MX / G-B / B-B modes)",
                  lambda: list(group_sizes), ValueError)
    if pertoken_scale is None:
        checks.expect_dtype(scale, (torch.float32, torch.int64), OP, "scale")
    else:
        checks.expect_dtype(scale, (torch.float32,), OP, "scale")
        checks.expect_dtype(pertoken_scale, (torch.float32,), OP, "pertoken_scale")
        checks.expect(pertoken_scale.shape[0] in (1, m), OP, "pertoken_scale",
                      lambda: f"a 1-D tensor of size 1 or {m}",
                      lambda: f"shape {tuple(pertoken_scale.shape)}", ValueError)
    checks.expect(scale.shape[0] in (1, n), OP, "scale", lambda: f"a 1-D tensor of size 1 or {n}",
                  lambda: f"shape {tuple(scale.shape)}", ValueError)


# -- reference -----------------------------------------------------------------------------------

def _expand_k(values: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    """Repeat per-block scales 32 times along ``dim`` and cut to k."""
    return values.repeat_interleave(MX_BLOCK, dim=dim).narrow(dim, 0, k)


def _per_block(a: torch.Tensor, b: torch.Tensor, s2: torch.Tensor,
               s1: torch.Tensor) -> torch.Tensor:
    """G-B / B-B: per k-group j, the float32 (exactly rounded) group dot product times
    float32 ``x1s * x2s``, the terms added in float32 for j = 0, 1, ..."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    gm = block_group_m(s1, m)
    rows = s1.repeat_interleave(gm, dim=-2).narrow(-2, 0, m)          # (.., m, kb)
    cols = s2.repeat_interleave(GROUP, dim=-1).narrow(-1, 0, n)       # (.., kb, n)
    acc = None
    for j in range(-(-k // GROUP)):
        lo, size = j * GROUP, min(GROUP, k - j * GROUP)
        part = torch.matmul(a.narrow(-1, lo, size), b.narrow(-2, lo, size)).to(torch.float32)
        term = part * (rows[..., j:j + 1] * cols[..., j:j + 1, :])
        acc = term if acc is None else acc + term
    return acc


def lowbit_reference(x1, x2, scale, *, pertoken_scale, bias, output_dtype, x1_dtype,
                     x2_dtype, pertoken_scale_dtype, scale_dtype) -> torch.Tensor:
    out = output_dtype_of(output_dtype)
    f1 = operand_format(x1, x1_dtype, "x1")
    f2 = operand_format(x2, x2_dtype, "x2")
    a, b = decode(x1, f1), decode(x2, f2)
    k = a.shape[-1]
    if is_e8m0(scale, scale_dtype):
        # x1 scale (..., m, kb, 2) -> (..., m, 2 kb); x2 scale (..., kb, n, 2) -> (..., 2 kb, n)
        s1 = scale_values(pertoken_scale).flatten(-2)
        s2 = scale_values(scale).movedim(-1, -2).flatten(-3, -2)
        a = a * _expand_k(s1, k, -1)
        b = b * _expand_k(s2, k, -2)
        acc = torch.matmul(a, b).to(torch.float32)
        if bias is not None:                  # float32, or the output dtype (A8W4), in float32
            acc = acc + bias.to(torch.float32)
        return acc.to(out)
    if scale.dim() >= 2:
        return _per_block(a, b, scale, pertoken_scale).to(out)
    acc = torch.matmul(a, b).to(torch.float32)
    if pertoken_scale is None:
        # static T-C / T-T: an int64 word, or op-plugin packs the float32 scale first
        if scale.dtype == torch.int64:
            word = scale
        else:
            word = trans_quant_param_reference(scale, None)
        s, _ = integer.unpack_scale_word(word)
        if bias is not None:
            acc = acc + bias
        return (acc * s).to(out)
    v = acc * scale * pertoken_scale.unsqueeze(-1)
    if bias is not None:
        v = v + bias
    return v.to(out)

