"""npu_grouped_matmul_finalize_routing's a8w4 form: int8 x, packed int4 weight (MSD).

Documented by the torch_npu page (seed 004): weight int4 ND ``(e, k, n)`` (here int32
``[e, k, n/8]``, 8 int4 per word along n, as ``npu_quantize(..., torch.quint4x2)`` packs it),
"k只支持2048，n只支持7168"; scale int64 ``(e, 1, n)``; bias and offset float32, a8w4 only.
Numerics follow hicann/ops-transformer
``gmm/grouped_matmul_finalize_routing/op_kernel/grouped_matmul_finalize_routing_antiquant_a8w4_msd.h``
and its ``_msd_pre.h``; per row r of expert e::

    x = 16 * hi + lo + 8                      (hi = floor(x / 16), lo = (x & 15) - 8)
    D(a) = fp16 sum over k-groups g of fp16(int32(a[:, g] @ w[g]) * scale[g])   (half atomics)
    v = float32(D(lo)) + float32(D(hi)) * 16
    v = v + bias[e]                                       (the offline 8 * sum_k(w * scale))
    v = rowsum(x) * offset[e] + v             (with offset; rowsum exact in float32)
    y[row_index[r]] += v * (pertoken_scale[r] * logit[r])          (float32 atomic add)

The output starts as zeros with ``shared_input_weight * float32(shared_input)`` in the shared
rows, as the kernel's first pass writes it, and the rows are then added in order (the NPU's
atomic adds take them in any order).  The scale words hold the float32 scale in their low
32 bits, read as the fixpipe's fp19; the MSD steps are :mod:`..matmul._msd`'s.
"""

from __future__ import annotations

import torch

from ... import checks
from ..matmul import _msd as msd
from ..matmul.integer import unpack_int4_fast

INT4_PER_WORD = 8
DOC_KN = (2048, 7168)          # "k只支持2048，n只支持7168" (checked in strict mode)


def check(op, x, w, scale, bias, offset, product) -> None:
    """The a8w4 rules on w, scale, bias and offset (x and the routing inputs: the caller)."""
    checks.expect_dim(w, 3, op, "w")
    m, k = x.shape
    e, n = w.shape[0], w.shape[2] * INT4_PER_WORD
    checks.expect(w.shape[1] == k, op, "w", lambda: f"shape [e, {k}, n/8] (x's k)",
                  lambda: f"shape {tuple(w.shape)}")
    if product is not None:
        checks.expect((k, n) == DOC_KN, op, "w",
                      "k = 2048 and n = 7168 for a8w4 (the only supported shape)",
                      lambda: f"k = {k}, n = {n}", ValueError)
    checks.expect(scale is not None, op, "scale", "an int64 [e, 1, n] tensor for a8w4",
                  "None", ValueError)
    checks.expect_dtype(scale, (torch.int64,), op, "scale")
    g = scale.shape[1] if scale.dim() == 3 else 0
    checks.expect(scale.dim() == 3 and scale.shape[0] == e and scale.shape[2] == n
                  and g > 0 and k % g == 0, op, "scale",
                  lambda: f"shape ({e}, 1, {n}) (or ({e}, G, {n}) with G dividing k = {k})",
                  lambda: tuple(scale.shape))
    checks.expect(bias is not None, op, "bias",
                  "a float32 [e, n] tensor for a8w4 (8 * sum_k(w * scale), offline)", "None",
                  ValueError)
    checks.expect_dtype(bias, (torch.float32,), op, "bias")
    checks.expect(tuple(bias.shape) == (e, n), op, "bias", lambda: f"shape ({e}, {n})",
                  lambda: tuple(bias.shape))
    if offset is not None:
        checks.expect_dtype(offset, (torch.float32,), op, "offset")
        # The kernel reads one offset row per expert, so one k-group of scales goes with it.
        checks.expect(tuple(offset.shape) == (e, 1, n) and g == 1, op, "offset",
                      lambda: f"shape ({e}, 1, {n}) with a ({e}, 1, {n}) scale",
                      lambda: f"shape {tuple(offset.shape)}, scale {tuple(scale.shape)}")
    for name, t in (("bias", bias), ("offset", offset)):
        if t is not None:
            checks.expect(t.device == x.device, op, name, f"x's device ({x.device})",
                          t.device)


def expert_rows(x, w, scale, bias, offset, pertoken_scale, logit, segments) -> torch.Tensor:
    """float32 ``v * (pertoken_scale * logit)`` [m, n] per row; rows no group covers are 0."""
    (m, k), n = x.shape, w.shape[2] * INT4_PER_WORD
    out = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    row_scale = torch.ones(m, dtype=torch.float32, device=x.device)
    if pertoken_scale is not None:
        row_scale = row_scale * pertoken_scale.to(torch.float32)
    if logit is not None:
        row_scale = row_scale * logit.to(torch.float32)     # pertoken_scale * logit first
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        s = msd.scale_rows(scale[seg.expert])
        v = msd.rows(x[rows], unpack_int4_fast(w[seg.expert]), s, k // s.shape[0],
                     bias[seg.expert], None if offset is None else offset[seg.expert].reshape(1, n))
        out[rows] = v * row_scale[rows].unsqueeze(-1)
    return out
