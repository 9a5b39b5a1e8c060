"""The shared arithmetic of npu_grouped_matmul_swiglu_quant and its v2.

Steps and rounding order of the A2/A3 kernels (hicann/ops-transformer
``gmm/grouped_matmul_swiglu_quant/op_kernel/grouped_matmul_swiglu_quant.h``,
``..._a8w4_msd_post.h``; ``gmm/grouped_matmul_swiglu_quant_v2/op_kernel/..._a4w4_post.h``),
all in float32::

    A8W8  c = float32(x @ weight[e]) * x_scale[r] * weight_scale[e]      (int32 exact, in order)
    A8W4  c = (16 * D(hi) + D(lo) + weight_assist_matrix[e]) * x_scale[r]  (:mod:`.lowbit`)
    A4W4  c = D(x) * x_scale[r]
    a, g  = c[:, :n/2], c[:, n/2:];   s = a * sigmoid(a) * g   (the left half activated)
    A4W4  s = s * smooth_scale[e]      ([e, n/2], or one value per group)
    q_scale = max|s| / 127;  q = int8(rint(float16(s * m)))   per row

with ``m = 1 / q_scale`` (A8W8, A8W4) or ``127 / max|s|`` (A4W4), and the cast going through
float16 (``CastFp32ToInt8Template``: float32 -> float16 -> int8, each rounded half to even).
``D`` is the fixpipe's float16 dequantization of each k-group's int32 product, the groups
summed in float16 (:func:`.lowbit.dequant_sum`).  Rows past the last group are not computed
(the NPU leaves them dirty; the doc says to cut them off at the cumsum's end): here they come
out as 0 with scale 0.
"""

from __future__ import annotations

import torch

from ..matmul.integer import int_mm, unpack_int4_fast
from . import lowbit
from .grouping import Segment

QMAX = 127.0


def a8w8_dequant(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                 x_scale: torch.Tensor, segments: list[Segment]) -> torch.Tensor:
    """float32 ``c`` [m, n] of the int8 form (x_scale applied first, as the kernel does)."""
    m, n = x.shape[0], weight.shape[2]
    c = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        acc = int_mm(x[rows], weight[seg.expert]).to(torch.float32)      # exact int32
        c[rows] = acc * x_scale[rows].unsqueeze(-1) * weight_scale[seg.expert].to(torch.float32)
    return c


def int4_dequant(kind: str, x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                 assist, x_scale: torch.Tensor, segments: list[Segment]) -> torch.Tensor:
    """float32 ``c`` [m, n] of the A8W4 (``assist`` [e, n]) or A4W4 (packed int4 x) form.

    ``weight`` holds the int4 values as int8 ``[e, k, n]``; ``weight_scale`` int64 ``[e, n]``
    or ``[e, G, n]`` words whose low 32 bits hold the float32 scale.
    """
    n = weight.shape[2]
    xv = unpack_int4_fast(x) if kind == "a4w4" else x
    c = torch.zeros(x.shape[0], n, dtype=torch.float32, device=x.device)
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        w = weight[seg.expert]
        s = lowbit.decoded_scale(weight_scale[seg.expert])
        if kind == "a4w4":
            v = lowbit.dequant_sum(xv[rows], w, s).to(torch.float32)
        else:
            hi, lo = lowbit.msd_split(xv[rows])
            d_hi, d_lo = lowbit.dequant_sum(torch.cat((hi, lo)), w, s).to(
                torch.float32).split(seg.length)
            v = d_hi * 16 + d_lo + assist[seg.expert].to(torch.float32)
        c[rows] = v * x_scale[rows].unsqueeze(-1)
    return c


def swiglu_quant(c: torch.Tensor, *, smooth=None, segments=None,
                 scale_then_reciprocal: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """SwiGLU of float32 ``c`` [m, n], then per-row int8 quantization: (q [m, n/2], scale [m]).

    ``smooth`` (A4W4): ``[e, n/2]`` or ``[e]`` float32, applied per group of ``segments``.
    ``scale_then_reciprocal``: the multiplier is ``1 / (max / 127)`` (A8W8, A8W4) rather than
    ``127 / max`` (A4W4).
    """
    a, g = c.chunk(2, dim=-1)
    s = a * torch.sigmoid(a) * g
    if smooth is not None:
        for seg in segments:
            rows = slice(seg.start, seg.start + seg.length)
            f = smooth[seg.expert].to(torch.float32)
            s[rows] = s[rows] * (f if f.dim() == 1 else f.reshape(1))
    amax = s.abs().amax(dim=-1, keepdim=True)
    scale = amax / QMAX
    if scale_then_reciprocal:
        mult = torch.ones_like(scale) / scale
    else:
        mult = torch.full_like(amax, QMAX) / amax
    t = torch.nan_to_num(s * mult, nan=0.0)            # an all-zero row: 0 * inf
    q = torch.round(t.to(torch.float16)).clamp_(-128, 127).to(torch.int8)
    return q, scale.squeeze(-1)
