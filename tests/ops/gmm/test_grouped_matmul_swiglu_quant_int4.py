"""npu_grouped_matmul_swiglu_quant_v2's A8W4 (MSD) and A4W4 forms against the kernels' steps.

Doc (op-plugin ``torch_npu-npu_grouped_matmul_swiglu_quant_v2.md``)::

    A8W4: x = 16 * hi + lo + 8;  C = (C_hi * 16 + C_lo + weight_assist_matrix) * x_scale
    A4W4: C = (x @ w) * x_scale * w_scale;  S = swiglu(C) * smooth_scale
    S = silu(C[:, :n/2]) * C[:, n/2:];  Q = round(S / (max|S| / 127))

The golden writes the kernel's rounding steps out: each k-group's int32 product times its
scale rounded to float16 and the groups summed in float16; float32 from there on; the int8
cast through float16.  Scales are small multiples of 1/256, so every product is exact in
float32 and the float16 roundings are the only ones before the epilogue.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from msd_golden import dequant_fp16_groups, pack_int4

v2 = na.npu_grouped_matmul_swiglu_quant_v2
COUNTS = [2, 0, 3]
E, M, K, N = len(COUNTS), sum(COUNTS) + 1, 32, 16      # one row past the groups


def _scale_words(scales: torch.Tensor) -> torch.Tensor:
    """float32 scales in the low 32 bits of int64 words."""
    return scales.float().view(torch.int32).long() & 0xFFFFFFFF


def _inputs(groups, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-8, 8, (E, K, N), dtype=torch.int8, generator=g)
    scales = torch.randint(1, 17, (E, groups, N), generator=g).float() / 256
    xs = torch.rand(M, generator=g)
    return g, w, scales, xs


def _swiglu_quant_steps(c, smooth_rows=None, reciprocal_of_scale=True):
    a, gate = c[:, :N // 2], c[:, N // 2:]
    s = a * torch.sigmoid(a) * gate
    if smooth_rows is not None:
        s = s * smooth_rows
    amax = s.abs().amax(-1, keepdim=True)
    scale = amax / 127
    mult = torch.ones_like(scale) / scale if reciprocal_of_scale else \
        torch.full_like(amax, 127.0) / amax
    q = torch.round(torch.nan_to_num(s * mult).half()).to(torch.int8)
    return q, scale.squeeze(-1)


def _rows():
    return torch.repeat_interleave(torch.arange(E), torch.tensor(COUNTS))


@pytest.mark.parametrize("groups", [1, 2])           # per channel (mode 0), per k-group (1)
def test_a8w4(groups):
    g, w, scales, xs = _inputs(groups)
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    assist = 8 * torch.einsum("ekn,ekn->en", w.double(),
                              scales.repeat_interleave(K // groups, 1).double()).float()
    ws = _scale_words(scales if groups > 1 else scales[:, 0])
    q, scale = v2(x, [pack_int4(w)], [ws], xs, torch.tensor(COUNTS).cumsum(0),
                  weight_assist_matrix=[assist], dequant_mode=groups - 1)
    valid = sum(COUNTS)
    c = torch.zeros(valid, N)
    for r, e in enumerate(_rows().tolist()):
        hi, lo = torch.div(x[r:r + 1], 16, rounding_mode="floor"), (x[r:r + 1] & 15) - 8
        v = dequant_fp16_groups(hi, w[e], scales[e]) * 16 + dequant_fp16_groups(lo, w[e], scales[e])
        c[r] = ((v + assist[e]) * xs[r])[0]
    gq, gs = _swiglu_quant_steps(c)
    assert torch.equal(q[:valid], gq) and torch.equal(scale[:valid], gs)
    assert (q[valid:] == 0).all() and (scale[valid:] == 0).all()
    # The formula it restores: C = x @ (w * scale) * x_scale (float64), within float16 steps.
    wf = w.double() * scales.repeat_interleave(K // groups, 1).double()
    exact = torch.stack([x[r].double() @ wf[e] * xs[r] for r, e in enumerate(_rows().tolist())])
    assert ((c.double() - exact).abs() <= 2 ** -9 * exact.abs().amax(-1, keepdim=True)).all()


@pytest.mark.parametrize("smooth_shape", [(E, N // 2), (E,)])
def test_a4w4_with_smooth_scale(smooth_shape):
    g, w, scales, xs = _inputs(2, seed=1)
    x = torch.randint(-8, 8, (M, K), dtype=torch.int8, generator=g)
    smooth = torch.rand(smooth_shape, generator=g) + 0.5
    gl = torch.tensor(COUNTS)
    q, scale = v2(pack_int4(x), [pack_int4(w)], [_scale_words(scales)], xs, gl,
                  smooth_scale=smooth, group_list_type=1)
    valid = sum(COUNTS)
    rows = _rows().tolist()
    c = torch.stack([dequant_fp16_groups(x[r:r + 1], w[e], scales[e])[0] * xs[r]
                     for r, e in enumerate(rows)])
    sm = smooth[rows] if smooth.dim() == 2 else smooth[rows][:, None]
    gq, gs = _swiglu_quant_steps(c, sm, reciprocal_of_scale=False)
    assert torch.equal(q[:valid], gq) and torch.equal(scale[:valid], gs)
    assert (q[valid:] == 0).all()


def test_nz_int4_weight_matches_nd():
    # FRACTAL_NZ int4 storage [e, n/64, k/16, 16, 8]: 16 x 64 tiles, n-block major.
    g, _, _, xs = _inputs(1, seed=2)
    n = 64
    w = torch.randint(-8, 8, (E, K, n), dtype=torch.int8, generator=g)
    scales = torch.randint(1, 17, (E, n), generator=g).float() / 256
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    assist = torch.randn(E, n, generator=g)
    gl = torch.tensor(COUNTS).cumsum(0)
    nz = pack_int4(w.reshape(E, K // 16, 16, n // 64, 64).permute(0, 3, 1, 2, 4))
    assert nz.shape == (E, 1, K // 16, 16, 8)
    outs = [v2(x, [wt], [_scale_words(scales)], xs, gl, weight_assist_matrix=[assist])
            for wt in (pack_int4(w), nz)]
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_int4_rules():
    g, w, scales, xs = _inputs(1)
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    wp, ws, gl = pack_int4(w), _scale_words(scales[:, 0]), torch.tensor(COUNTS).cumsum(0)
    assist = [torch.zeros(E, N)]
    with pytest.raises(ValueError, match="expected weight_assist_matrix a list of one"):
        v2(x, [wp], [ws], xs, gl)
    with pytest.raises(ValueError, match="expected dequant_mode 0 with a \\[e, n\\]"):
        v2(x, [wp], [ws], xs, gl, weight_assist_matrix=assist, dequant_mode=1)
    with pytest.raises(TypeError, match="expected weight_scale dtype in"):
        v2(x, [wp], [scales[:, 0]], xs, gl, weight_assist_matrix=assist)
    x4 = pack_int4(torch.zeros(M, K, dtype=torch.int8))
    with pytest.raises(ValueError, match="expected smooth_scale a tensor for A4W4"):
        v2(x4, [wp], [ws], xs, gl)
    with pytest.raises(RuntimeError, match="expected smooth_scale shape \\(3, 8\\) or \\(3,\\)"):
        v2(x4, [wp], [ws], xs, gl, smooth_scale=torch.ones(E, N))
    with na.strict("950"), pytest.raises(ValueError, match="A8W4 / A4W4 are A2 / A3 forms"):
        v2(x, [wp], [ws], xs, gl, weight_assist_matrix=assist)


# v1 (npu_grouped_matmul_swiglu_quant) A8W4: the same kernels, ``bias`` as the assist matrix,
# the mode read off weight_scale's rank, a reserved 0-D offset output.
v1 = na.npu_grouped_matmul_swiglu_quant


@pytest.mark.parametrize("groups", [1, 2])
def test_v1_a8w4_per_channel_and_per_group_nz(groups):
    g, _, _, xs = _inputs(groups, seed=3)
    n = 64                                           # one 64-wide NZ tile of n
    w = torch.randint(-8, 8, (E, K, n), dtype=torch.int8, generator=g)
    scales = torch.randint(1, 17, (E, groups, n), generator=g).float() / 256
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    assist = 8 * torch.einsum("ekn,ekn->en", w.double(),
                              scales.repeat_interleave(K // groups, 1).double()).float()
    ws = _scale_words(scales if groups > 1 else scales[:, 0])
    # op-plugin's layout: the NZ-cast int4 storage viewed as int32 [e, n/64, k/16, 16, 8].
    nz = pack_int4(w.reshape(E, K // 16, 16, 1, 64).permute(0, 3, 1, 2, 4))
    q, scale, offset = v1(x, nz, torch.tensor(COUNTS).cumsum(0), ws, xs, bias=assist)
    valid = sum(COUNTS)
    c = torch.zeros(valid, n)
    for r, e in enumerate(_rows().tolist()):
        hi, lo = torch.div(x[r:r + 1], 16, rounding_mode="floor"), (x[r:r + 1] & 15) - 8
        v = dequant_fp16_groups(hi, w[e], scales[e]) * 16 + dequant_fp16_groups(lo, w[e], scales[e])
        c[r] = ((v + assist[e]) * xs[r])[0]
    a, gate = c[:, :n // 2], c[:, n // 2:]
    s = a * torch.sigmoid(a) * gate
    gs = s.abs().amax(-1, keepdim=True) / 127
    gq = torch.round((s * (torch.ones_like(gs) / gs)).half()).to(torch.int8)
    assert q.shape == (M, n // 2) and offset.shape == () and offset.dtype == torch.float32
    assert torch.equal(q[:valid], gq) and torch.equal(scale[:valid], gs.squeeze(-1))
    assert (q[valid:] == 0).all() and (scale[valid:] == 0).all()
    # The 3-D packed weight [e, k, n/8] gives the same numbers.
    q3, s3, _ = v1(x, pack_int4(w), torch.tensor(COUNTS).cumsum(0), ws, xs, bias=assist)
    assert torch.equal(q3, q) and torch.equal(s3, scale)


def test_v1_a8w4_rules():
    g, w, scales, xs = _inputs(1)
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    wp, ws, gl = pack_int4(w), _scale_words(scales[:, 0]), torch.tensor(COUNTS).cumsum(0)
    bias = torch.zeros(E, N)
    name = "npu_grouped_matmul_swiglu_quant"
    with pytest.raises(ValueError, match=f"{name}: expected bias a float32 \\[e, n\\] tensor"):
        v1(x, wp, gl, ws, xs)
    with pytest.raises(RuntimeError, match="expected bias shape \\(3, 16\\)"):
        v1(x, wp, gl, ws, xs, bias=bias[:, :8])
    with pytest.raises(TypeError, match="expected bias dtype in"):
        v1(x, wp, gl, ws, xs, bias=bias.half())
    with pytest.raises(TypeError, match="expected weight_scale dtype in"):
        v1(x, wp, gl, scales[:, 0], xs, bias=bias)
    with pytest.raises(TypeError, match="expected x dtype in"):   # no A4W4 in v1
        v1(pack_int4(x.clamp(-8, 7)), wp, gl, ws, xs, bias=bias)
    with pytest.raises(RuntimeError, match="expected weight_scale shape \\(3, 16\\) or"):
        v1(x, wp, gl, _scale_words(torch.ones(E, 3, N)), xs, bias=bias)
    with pytest.raises(ValueError, match="expected group_list 1 to 3 entries"):
        v1(x, wp, torch.tensor([1, 2, 3, 4]), ws, xs, bias=bias)
    with na.strict("950"), pytest.raises(RuntimeError, match="supports \\(A2, A3\\)"):
        v1(x, wp, gl, ws, xs, bias=bias)
