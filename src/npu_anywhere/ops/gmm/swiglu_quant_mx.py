"""npu_grouped_matmul_swiglu_quant_v2's Ascend 950 MXFP8 form (quant_mode 2).

Doc (op-plugin ``torch_npu-npu_grouped_matmul_swiglu_quant_v2.md``, 950 MX scene)::

    C = (X @ W) * x_scale * w_scale        (one e8m0 scale per 32 elements of k, each side)
    S = silu(C[:, :n/2]) * C[:, n/2:]
    shared_exp = floor(log2(max |S_block|)) - emax;  Q_scale = 2 ** shared_exp
    Q = quantize_to_element_format(S / Q_scale)     (blocks of 32 along n/2)

Inputs: x float8_e4m3fn / float8_e5m2 ``[m, k]``; weight float8 ``[e, k, n]`` (one tensor),
e tensors ``[k, n]``, or the FRACTAL_NZ storage ``[e, n/32, k/16, 16, 32]``; weight_scale
e8m0 codes (uint8 or float8_e8m0fnu) ``[e, ceil(k/64), n, 2]`` (or e of ``[ceil(k/64), n, 2]``):
k-block ``j`` of column ``c`` at ``[.., j // 2, c, j % 2]``; x_scale ``[m, ceil(k/64), 2]``.
Outputs: float8 ``[m, n/2]`` (or float4_e2m1 packed two per uint8, ``[m, n/4]``) and the e8m0
scale ``[m, ceil(n/2/64), 2]`` (float8_e8m0fnu).

Numerics: the scales are powers of two, so scaling each element by its block scale before a
float32 GEMM is exact; the GEMM accumulates in float32 (the cube's order of the k-sum is not
reproduced), SwiGLU in float32, and the output quantization is :func:`quant.mx.quantize` with
the OCP scale (scale_alg 0, the doc's ``shared_exp``) and round-half-even elements.  The
float4 inputs (``x_dtype`` / ``weight_dtype``), the transposed weight and the 950 per-token
float8 / hifloat8 forms are not emulated.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes
from ..quant import mx
from .grouping import Segment

BLOCK = 32
NZ_K0, NZ_N0 = 16, 32
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_E8M0 = (torch.uint8, torch.float8_e8m0fnu)
_OUT_FORMATS = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
                dtypes.FLOAT4_E2M1FN_X2: "float4_e2m1"}


def is_mx(x, weight_scale_dtype, x_scale_dtype, quant_mode, dequant_mode) -> bool:
    """The call asks for the MX form: float8 x, e8m0 scale dtypes or an MX mode."""
    return (x.dtype in _FP8 or weight_scale_dtype is not None or x_scale_dtype is not None
            or quant_mode == 2 or dequant_mode == 2)


def out_format(quant_dtype):
    value = dtypes.code_to_dtype(quant_dtype) if quant_dtype is not None else None
    if isinstance(value, int) and value in (dtypes.FLOAT8_E4M3FN, dtypes.FLOAT8_E5M2):
        value = dtypes.code_to_dtype(value)
    return _OUT_FORMATS.get(value)


def _kn(w: torch.Tensor, single: bool) -> tuple[int, int]:
    if w.dim() == 5:
        return w.shape[2] * NZ_K0, w.shape[1] * NZ_N0
    return (w.shape[1], w.shape[2]) if single else (w.shape[0], w.shape[1])


def logical_n(weight) -> int:
    w = weight[0]
    return _kn(w, len(weight) == 1 and w.dim() != 2)[1]


def check(op, x, weight, weight_scale, x_scale, quant_dtype, quant_mode, dequant_mode,
          x_dtype, weight_dtype, weight_scale_dtype, x_scale_dtype) -> int:
    """The MXFP8 rules; returns the number of experts."""
    for name, value in (("x_dtype", x_dtype), ("weight_dtype", weight_dtype)):
        checks.expect(value is None, op, name,
                      "None (the float4 / hifloat8 inputs are not emulated)",
                      lambda value=value: dtypes.name(value), NotImplementedError)
    for name, value in (("weight_scale_dtype", weight_scale_dtype),
                        ("x_scale_dtype", x_scale_dtype)):
        checks.expect(value in (None, dtypes.FLOAT8_E8M0FNU), op, name,
                      "None or torch_npu.float8_e8m0fnu in the MX form",
                      lambda value=value: dtypes.name(value), ValueError)
    checks.expect_dtype(x, _FP8, op, "x")
    checks.expect_dim(x, 2, op, "x")
    per_token = weight_scale_dtype is None and x_scale_dtype is None and quant_mode != 2
    checks.expect(not per_token, op, "x",
                  "int8 (the Ascend 950 per-token float8 form is not emulated; the MX form "
                  "takes quant_mode 2 with e8m0 scales)", x.dtype, NotImplementedError)
    checks.expect(quant_mode == 2, op, "quant_mode", "2 (MX) with e8m0 scales",
                  repr(quant_mode), ValueError)
    checks.expect(dequant_mode in (None, 0, 2), op, "dequant_mode", "0 or 2 in the MX form",
                  repr(dequant_mode), ValueError)
    checks.expect(out_format(quant_dtype) is not None, op, "quant_dtype",
                  "torch.float8_e4m3fn, torch.float8_e5m2 or torch_npu.float4_e2m1fn_x2 in the "
                  "MX form", lambda: dtypes.name(quant_dtype), ValueError)
    w0 = weight[0]
    single = len(weight) == 1 and w0.dim() != 2
    checks.expect(single or all(w.dim() == 2 for w in weight), op, "weight",
                  "one [e, k, n] (or 5-D NZ) tensor, or e tensors [k, n]",
                  lambda: [tuple(w.shape) for w in weight], ValueError)
    checks.expect(w0.dim() != 5 or tuple(w0.shape[3:]) == (NZ_K0, NZ_N0), op, "weight",
                  "the NZ form [e, n/32, k/16, 16, 32]", lambda: tuple(w0.shape), ValueError)
    e = w0.shape[0] if single else len(weight)
    k, n = _kn(w0, single)
    m = x.shape[0]
    for i, w in enumerate(weight):
        checks.expect_dtype(w, _FP8, op, f"weight[{i}]")
        checks.expect(_kn(w, single) == (k, n), op, f"weight[{i}]",
                      lambda: f"k = {k}, n = {n}", lambda w=w: tuple(w.shape))
    checks.expect(x.shape[1] == k, op, "x", lambda: f"k = {k} (weight's k)",
                  lambda: tuple(x.shape))
    checks.expect(n % 128 == 0, op, "weight", "n a multiple of 128 in the MX form", n,
                  ValueError)
    kb = -(-k // 64)
    want = (e, kb, n, 2) if single else (kb, n, 2)
    checks.expect(len(weight_scale) == len(weight), op, "weight_scale",
                  lambda: f"{len(weight)} tensors (one per weight)", len(weight_scale),
                  ValueError)
    for i, s in enumerate(weight_scale):
        checks.expect_dtype(s, _E8M0, op, f"weight_scale[{i}]")
        checks.expect(tuple(s.shape) == want, op, f"weight_scale[{i}]",
                      lambda: f"shape {want}", lambda s=s: tuple(s.shape))
    checks.expect_dtype(x_scale, _E8M0, op, "x_scale")
    checks.expect(tuple(x_scale.shape) == (m, kb, 2), op, "x_scale",
                  lambda: f"shape ({m}, {kb}, 2)", lambda: tuple(x_scale.shape))
    return e


def _codes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e8m0fnu else t


def _weight(weight, weight_scale, expert: int, k: int) -> torch.Tensor:
    """float32 [k, n]: expert e's weight times its k-block scales (exact: powers of two)."""
    w0 = weight[0]
    if len(weight) == 1 and w0.dim() == 5:
        w = w0[expert].permute(1, 2, 0, 3).reshape(k, -1)
    elif len(weight) == 1 and w0.dim() == 3:
        w = w0[expert]
    else:
        w = weight[expert]
    s = _codes(weight_scale[0][expert] if len(weight_scale) == 1 and len(weight) == 1
               else weight_scale[expert])                      # [kb, n, 2]
    blocks = mx.e8m0_to_float(s.permute(0, 2, 1).reshape(-1, s.shape[1]))   # [2 kb, n]
    return w.to(torch.float32) * blocks.repeat_interleave(BLOCK, 0)[:k]


def compute(x, weight, weight_scale, x_scale, segments: list[Segment], quant_dtype):
    m, k = x.shape
    n = logical_n(weight)
    xs = mx.e8m0_to_float(_codes(x_scale).reshape(m, -1))          # [m, 2 kb]
    xf = x.to(torch.float32) * xs.repeat_interleave(BLOCK, 1)[:, :k]
    c = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        c[rows] = xf[rows] @ _weight(weight, weight_scale, seg.expert, k)
    a, g = c.chunk(2, dim=-1)
    s = a * torch.sigmoid(a) * g
    y, scale = mx.quantize(s, mx.FORMATS[out_format(quant_dtype)], scale_alg=0)
    return y, scale.view(torch.float8_e8m0fnu)


def fake_outputs(x, weight, quant_dtype):
    m, n = x.shape[0], logical_n(weight)
    half = n // 2
    fp4 = out_format(quant_dtype) == "float4_e2m1"
    y = x.new_empty((m, half // 2) if fp4 else (m, half),
                    dtype=torch.uint8 if fp4 else mx.FORMATS[out_format(quant_dtype)].storage)
    return y, x.new_empty(mx.scale_shape((m, half)), dtype=torch.float8_e8m0fnu)
