"""The int4-weight forms of the grouped matmul SwiGLU quant ops: A8W4 (MSD) and A4W4.

v2 has both; v1 (npu_grouped_matmul_swiglu_quant) has A8W4 only, with ``bias`` in the place of
``weight_assist_matrix`` and the per-channel / per-group mode read off weight_scale's rank
(hicann/ops-transformer ``aclnn_grouped_matmul_swiglu_quant.cpp``, whose
``aclnnGroupedMatmulSwigluQuantWeightNZ`` op-plugin calls; the same
``grouped_matmul_swiglu_quant_a8w4_msd_{pre,mid,post}.h`` kernels compute both).

Documented by op-plugin's ``torch_npu-npu_grouped_matmul_swiglu_quant_v2.md`` (formulas, shapes,
"A4W4 场景下 smooth_scale 必填"); numerics in :mod:`.swiglu_quant_core` (kernels
``grouped_matmul_swiglu_quant_v2_a8w4_msd_*.h`` and ``..._a4w4_mid.h`` / ``_post.h``).

Inputs::

    x                    A8W8/A8W4: int8 [m, k];  A4W4: int32 [m, k/8] (8 int4 per word)
    weight               int32 [e, k, n/8] (8 int4 per word along n), or its FRACTAL_NZ
                         storage [e, n/64, k/16, 16, 8] (16 x 64 int4 tiles)
    weight_scale         int64 [e, n] (per channel) or [e, G, n] (per k-group); the low 32 bits
                         of each word hold the float32 scale (read as fp19, as the fixpipe does)
    weight_assist_matrix A8W4 only: float32 [e, n], 8 * sum_k(weight * scale) computed offline
    smooth_scale         A4W4 only (required): float32 [e, n/2] or [e]
"""

from __future__ import annotations

import torch

from ... import checks
from ..matmul.integer import unpack_int4_fast

NZ_K0, NZ_WORDS = 16, 8        # an int4 NZ tile: 16 rows of k, 8 int32 words = 64 int4 of n
INT4_PER_WORD = 8


def logical_kn(w: torch.Tensor) -> tuple[int, int]:
    """(k, n) of a packed int4 weight, 3-D or 5-D NZ."""
    if w.dim() == 5:
        return w.shape[2] * NZ_K0, w.shape[1] * NZ_WORDS * INT4_PER_WORD
    return w.shape[1], w.shape[2] * INT4_PER_WORD


def weight_values(w: torch.Tensor) -> torch.Tensor:
    """int8 ``[e, k, n]`` int4 values of a packed weight, 3-D or 5-D NZ (tiles undone)."""
    values = unpack_int4_fast(w)
    if w.dim() != 5:
        return values
    e, (k, n) = w.shape[0], logical_kn(w)
    return values.permute(0, 2, 3, 1, 4).reshape(e, k, n)


def _check_shapes(op, kind, x, w, weight_scale, x_scale) -> tuple[int, int]:
    """x, weight, weight_scale and x_scale of both int4 forms; returns (e, n)."""
    checks.expect_dtype(x, (torch.int8, torch.int32), op, "x")
    checks.expect_dim(x, 2, op, "x")
    checks.expect(w.dim() == 3 or (w.dim() == 5 and tuple(w.shape[3:]) == (NZ_K0, NZ_WORDS)),
                  op, "weight",
                  "an int32 [e, k, n/8] tensor or its NZ form [e, n/64, k/16, 16, 8]",
                  lambda: f"shape {tuple(w.shape)}", ValueError)
    e, (k, n) = w.shape[0], logical_kn(w)
    m = x.shape[0]
    kx = x.shape[1] * (INT4_PER_WORD if kind == "a4w4" else 1)
    checks.expect(kx == k, op, "x", lambda: f"k = {k} (weight's k)",
                  lambda: f"shape {tuple(x.shape)}")
    checks.expect(n % 2 == 0, op, "weight", "an even n (SwiGLU halves it)", n, ValueError)
    ws = weight_scale
    checks.expect_dtype(ws, (torch.int64,), op, "weight_scale")
    g = ws.shape[1] if ws.dim() == 3 else 1
    checks.expect(ws.dim() in (2, 3) and ws.shape[0] == e and ws.shape[-1] == n
                  and g > 0 and k % g == 0, op, "weight_scale",
                  lambda: f"shape ({e}, {n}) or ({e}, G, {n}) with G dividing k = {k}",
                  lambda: tuple(ws.shape))
    checks.expect_dtype(x_scale, (torch.float32,), op, "x_scale")
    checks.expect(tuple(x_scale.shape) == (m,), op, "x_scale", lambda: f"shape ({m},)",
                  lambda: tuple(x_scale.shape))
    for name, t in (("weight", w), ("weight_scale", ws), ("x_scale", x_scale)):
        checks.expect(t.device == x.device, op, name, f"x's device ({x.device})", t.device)
    return e, n


def _check_assist(op, name, a, x, e, n) -> None:
    checks.expect_dtype(a, (torch.float32,), op, name)
    checks.expect(tuple(a.shape) == (e, n), op, name, lambda: f"shape ({e}, {n})",
                  lambda: tuple(a.shape))
    checks.expect(a.device == x.device, op, name, f"x's device ({x.device})", a.device)


def check_v1(op, x, w, weight_scale, x_scale, bias) -> None:
    """npu_grouped_matmul_swiglu_quant's A8W4 form (aclnnGroupedMatmulSwigluQuantWeightNZ).

    int8 x only (v1 has no A4W4); per channel or per k-group as weight_scale's rank says (v1
    has no dequant_mode); ``bias`` is the A8W4 assist matrix and is required ("When x is Int8
    and weight is int4, bias serves as an auxiliary matrix to weight").
    """
    checks.expect_dtype(x, (torch.int8,), op, "x")
    e, n = _check_shapes(op, "a8w4", x, w, weight_scale, x_scale)
    checks.expect(bias is not None, op, "bias",
                  "a float32 [e, n] tensor with an int4 weight (the A8W4 assist matrix, "
                  "8 * sum_k(weight * scale))", "None", ValueError)
    _check_assist(op, "bias", bias, x, e, n)


def check(op, x, w, weight_scale, x_scale, smooth_scale, weight_assist_matrix,
          dequant_mode) -> str:
    """The v2 A8W4 / A4W4 rules; returns the kind.  (group_list is checked by the caller.)"""
    kind = "a8w4" if x.dtype == torch.int8 else "a4w4"
    e, n = _check_shapes(op, kind, x, w, weight_scale, x_scale)
    ws = weight_scale
    mode = 0 if dequant_mode is None else dequant_mode
    if kind == "a8w4":
        checks.expect(mode == (1 if ws.dim() == 3 else 0), op, "dequant_mode",
                      "0 with a [e, n] weight_scale, 1 with a per-group [e, G, n] one (A8W4)",
                      repr(dequant_mode), ValueError)
        checks.expect(smooth_scale is None, op, "smooth_scale", "None for A8W4 (int8 x)",
                      "a tensor", ValueError)
        checks.expect(weight_assist_matrix is not None and len(weight_assist_matrix) == 1,
                      op, "weight_assist_matrix", "a list of one [e, n] tensor for A8W4",
                      lambda: "None" if weight_assist_matrix is None
                      else f"{len(weight_assist_matrix)} tensors", ValueError)
        _check_assist(op, "weight_assist_matrix", weight_assist_matrix[0], x, e, n)
    else:
        checks.expect(mode == 0, op, "dequant_mode", "0 for A4W4", repr(dequant_mode),
                      ValueError)
        checks.expect(weight_assist_matrix is None, op, "weight_assist_matrix",
                      "None for A4W4", "a list", ValueError)
        checks.expect(smooth_scale is not None, op, "smooth_scale",
                      "a tensor for A4W4 (it is required there)", "None", ValueError)
        checks.expect_dtype(smooth_scale, (torch.float32,), op, "smooth_scale")
        checks.expect(tuple(smooth_scale.shape) in ((e, n // 2), (e,)), op, "smooth_scale",
                      lambda: f"shape ({e}, {n // 2}) or ({e},)",
                      lambda: tuple(smooth_scale.shape))
    return kind
