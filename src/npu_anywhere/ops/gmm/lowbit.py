"""npu_grouped_matmul's int4 paths: A8W4 (int8 x, int4 weight) and A4W4 (int4 x and weight).

Documented by op-plugin's npu_grouped_matmul page (A4W4, formula 3-3) and ops-transformer's
``gmm/grouped_matmul/README.md`` (both, with their constraints); numerics follow the kernels
``op_kernel/grouped_matmul_antiquant_a8w4_msd.h`` (+ ``_msd_pre.h``) and
``op_kernel/grouped_matmul_a4w4.h``, and op-plugin's A8W4 golden
(``test/test_custom_ops/test_npu_grouped_matmul.py``, ``gmm_a8w4_golden``).

Both run the cube unit once per quantisation group of k: an exact int32 product, dequantized
by the fixpipe with that group's scale (the float32 in the low word of a uint64, of which the
fixpipe keeps the fp19 bits) and rounded to float16, the groups summed by float16 atomic adds::

    D(a) = fp16 sum over g of fp16(int32(a[:, g] @ w[g]) * scale[g])

    A4W4:  y = rint(float32(D(x)) * per_token_scale)                (per_token_scale 1 if None)
    A8W4:  x = 16 * hi + lo + 8 with hi = floor(x / 16), lo = (x & 15) - 8, both in [-8, 7]
           y = rint((16 * D(hi) + D(lo) + bias [+ rowsum(x) * offset]) * per_token_scale)

A8W4's ``bias`` is the offline term ``8 * sum_k(weight * scale)`` that restores the ``+ 8``
(the README's ``y = ((x - 8) @ weight * scale + bias) * per_token_scale``), and ``offset`` the
asymmetric term ``antiquant_offset * scale`` times x's row sums, so that
``y ~ (x @ ((weight + antiquant_offset) * scale)) * per_token_scale``.
Reading the scale as fp19 is the fixpipe's rule for npu_trans_quant_param words, assumed
here for these words too; the goldens use float16-representable scales, where it is exact.
The FRACTAL_NZ weight format is a physical layout: an NZ weight (npu_format_cast 29) holds the
same logical values here.  The MSD steps (split, float16 group sums, the combine) are shared by
every A8W4 op from :mod:`..matmul._msd`.
"""

from __future__ import annotations

import torch

from ... import checks
from ..matmul import _msd as msd
from ..matmul.integer import unpack_int4_fast

OP = "npu_grouped_matmul"
KINDS = ("a8w4", "a4w4")
A8W4_GROUP = 256               # "当前支持quantGroupSize=256"
A8W4_MAX_K = 18432             # "k <= 18432"
# The asymmetric A8W4 template's only {k, n} shapes ("{7168, 4096}或者{2048, 7168}").
A8W4_OFFSET_SHAPES = ((7168, 4096), (2048, 7168))
_OUT = (torch.float16, torch.bfloat16)


def kind_of(x0: torch.Tensor, w0: torch.Tensor):
    """"a8w4" / "a4w4" when weight is packed int4 (int32) and x int8 / packed int4, else None."""
    if w0.dtype != torch.int32:
        return None
    if x0.dtype == torch.int8:
        return "a8w4"
    if x0.dtype == torch.int32:
        return "a4w4"
    return None


def _one(name: str, tensors, dtype, shape) -> None:
    checks.expect(tensors is not None and len(tensors) == 1, OP, name,
                  "a list of one tensor (x, weight and y are single tensors here)",
                  lambda: "None" if tensors is None else f"{len(tensors)} tensors", ValueError)
    checks.expect_dtype(tensors[0], (dtype,), OP, name)
    checks.expect(tuple(tensors[0].shape) == shape, OP, name, lambda: f"shape {shape}",
                  lambda: tuple(tensors[0].shape))


def check(kind, x, weight, bias, scale, offset, per_token_scale, antiquant_scale,
          antiquant_offset, act_type, out, single_weight, product) -> torch.dtype:
    """The A8W4 / A4W4 rules (group_type 0 and split_item 2/3 are checked by the caller)."""
    label = "A8W4" if kind == "a8w4" else "A4W4"
    checks.expect(len(x) == 1 and single_weight, OP, "weight",
                  f"one 3-D [E, k, n / 8] tensor with a single x for {label}",
                  lambda: f"{len(weight)} tensors of shape {tuple(weight[0].shape)}", ValueError)
    w0, x0 = weight[0], x[0]
    checks.expect(w0.stride(-1) == 1, OP, "weight",
                  f"an untransposed packed int4 weight for {label}",
                  lambda: f"strides {w0.stride()}", ValueError)
    e, k, n = w0.shape[0], w0.shape[1], w0.shape[2] * 8
    m = x0.shape[0]
    for name, value in (("antiquant_scale", antiquant_scale),
                        ("antiquant_offset", antiquant_offset)):
        checks.expect(value is None, OP, name, f"None for {label}", "a value", ValueError)
    checks.expect(act_type == 0, OP, "act_type", f"0 for {label} (no fused activation)",
                  act_type, ValueError)
    checks.expect(out in _OUT, OP, "output_dtype", f"float16 or bfloat16 for {label}",
                  out, ValueError)
    checks.expect(scale is not None, OP, "scale", f"a list of one int64 (uint64) tensor for "
                  f"{label}", "None", ValueError)
    s0 = scale[0]
    if kind == "a8w4":
        checks.expect(k % A8W4_GROUP == 0 and k <= A8W4_MAX_K, OP, "weight",
                      f"k a multiple of {A8W4_GROUP} and at most {A8W4_MAX_K} for A8W4",
                      lambda: f"k = {k}", ValueError)
        groups = 1 if offset is not None else k // A8W4_GROUP
        _one("scale", scale, torch.int64, (e, groups, n))
        _one("bias", bias, torch.float32, (e, n))
        # aclnn checks no shape for the symmetric form and wants (m, 1) for the asymmetric
        # one (CheckA8W4AsymQuantParamsRelationship); op-plugin's golden passes (m, 1).
        pts_shape = (m, 1) if per_token_scale and per_token_scale[0].dim() == 2 else (m,)
        _one("per_token_scale", per_token_scale, torch.float32, pts_shape)
        if offset is not None:
            _one("offset", offset, torch.float32, (e, 1, n))
            checks.expect(out == torch.float16, OP, "output_dtype",
                          "float16 for A8W4 with offset (asymmetric)", out, ValueError)
            if product is not None:
                checks.expect((k, n) in A8W4_OFFSET_SHAPES, OP, "weight",
                              "{k, n} = {7168, 4096} or {2048, 7168} for asymmetric A8W4",
                              lambda: f"{{{k}, {n}}}", ValueError)
        return out
    # A4W4
    for name, value in (("bias", bias), ("offset", offset)):
        checks.expect(value is None, OP, name, "None for A4W4", "a value", ValueError)
    checks.expect_dtype(s0, (torch.int64,), OP, "scale")
    checks.expect(len(scale) == 1 and s0.dim() in (2, 3) and s0.shape[0] == e
                  and s0.shape[-1] == n, OP, "scale",
                  lambda: f"one per-channel [{e}, {n}] or per-group [{e}, G, {n}] tensor",
                  lambda: [tuple(t.shape) for t in scale])
    g = s0.shape[1] if s0.dim() == 3 else 1
    checks.expect(g > 0 and k % g == 0 and (k // g) % 2 == 0, OP, "scale",
                  lambda: f"a group count G dividing k = {k} into groups of even length",
                  lambda: f"G = {g}", ValueError)
    if per_token_scale is not None:
        _one("per_token_scale", per_token_scale, torch.float32, (m,))
    return out


# The MSD helpers, under the names the gmm modules use (one implementation: ..matmul._msd).
decoded_scale = msd.scale_rows
msd_split = msd.split


def dequant_sum(a: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float16 ``D(a)`` (:func:`..matmul._msd.group_sums`) with k cut into ``G`` equal groups
    (``scale`` [G, n]; the callers check that G divides k)."""
    return msd.group_sums(a, w, scale, w.shape[0] // scale.shape[0])


def groups(kind, x2, segments, weight, bias, scale, offset, per_token_scale, n, out_dtype):
    """m-axis groups of the A8W4 / A4W4 paths; rows no group covers are zero."""
    y = torch.zeros(x2.shape[0], n, dtype=out_dtype, device=x2.device)
    xv = unpack_int4_fast(x2) if kind == "a4w4" else x2
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        w = unpack_int4_fast(weight[seg.expert])
        s = decoded_scale(scale[seg.expert])
        pts = None if per_token_scale is None else per_token_scale[rows].reshape(-1, 1)
        if kind == "a4w4":
            v = dequant_sum(xv[rows], w, s).to(torch.float32)
        else:
            v = msd.rows(xv[rows], w, s, w.shape[0] // s.shape[0], bias[seg.expert],
                         offset[seg.expert].reshape(1, n) if offset else None)
        if pts is not None:
            v = v * pts
        y[rows] = v.to(out_dtype)
    return y

