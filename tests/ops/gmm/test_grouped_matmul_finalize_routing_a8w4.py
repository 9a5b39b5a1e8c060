"""npu_grouped_matmul_finalize_routing's a8w4 form against the kernel's steps, written out.

Kernel ``grouped_matmul_finalize_routing_antiquant_a8w4_msd.h``: x = 16 * hi + lo + 8; each
half's k-group products times the scale rounded to float16 and summed in float16; then in
float32 ``lo + 16 * hi + bias [+ rowsum(x) * offset]``, times ``pertoken_scale * logit``,
added into the output rows (shared rows written first).  Scales are small multiples of 1/256,
so the float16 roundings are the only ones before the float32 epilogue.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from msd_golden import dequant_fp16_groups, pack_int4

op = na.npu_grouped_matmul_finalize_routing
COUNTS = [2, 0, 3]
E, M, K, N, BS = len(COUNTS), sum(COUNTS) + 1, 32, 16, 4     # one row past the groups


def _inputs(groups, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-8, 8, (E, K, N), dtype=torch.int8, generator=g)
    scales = torch.randint(1, 17, (E, groups, N), generator=g).float() / 256
    words = scales.view(torch.int32).long() & 0xFFFFFFFF
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    wf = w.double() * scales.repeat_interleave(K // groups, 1).double()
    bias = (8 * wf.sum(1)).float()
    pts = torch.rand(M, generator=g) * 0.1
    logit = torch.rand(M, generator=g)
    row_index = torch.randint(0, BS, (M,), generator=g)
    shared = torch.randn(2, N, generator=g).to(torch.bfloat16)
    return x, w, scales, words, bias, pts, logit, row_index, shared, wf


def _expert(r):
    return torch.repeat_interleave(torch.arange(E), torch.tensor(COUNTS))[r].item()


@pytest.mark.parametrize("groups,with_offset", [(1, True), (2, False)])
def test_a8w4_combine(groups, with_offset):
    x, w, scales, words, bias, pts, logit, row_index, shared, wf = _inputs(groups)
    offset = (torch.randint(-4, 5, (E, 1, N)).float() / 64) if with_offset else None
    y = op(x, pack_int4(w), torch.tensor(COUNTS), scale=words, bias=bias, offset=offset,
           pertoken_scale=pts, logit=logit, row_index=row_index, shared_input=shared,
           shared_input_weight=0.5, shared_input_offset=1, output_bs=BS)
    golden = torch.zeros(BS, N)
    golden[1:3] = 0.5 * shared.float()
    exact = torch.zeros(BS, N, dtype=torch.float64)
    exact[1:3] = 0.5 * shared.double()
    for r in range(sum(COUNTS)):                         # the extra last row adds nothing
        e = _expert(r)
        hi = torch.div(x[r:r + 1], 16, rounding_mode="floor")
        lo = torch.remainder(x[r:r + 1], 16) - 8
        v = dequant_fp16_groups(lo, w[e], scales[e]) + dequant_fp16_groups(hi, w[e], scales[e]) * 16
        v = v + bias[e]
        rowsum = float(x[r].long().sum())
        if with_offset:
            v = rowsum * offset[e, 0] + v
        golden[row_index[r]] += (v * (pts[r] * logit[r]))[0]
        c = x[r].double() @ wf[e] + (rowsum * offset[e, 0].double() if with_offset else 0)
        exact[row_index[r]] += c * pts[r].double() * logit[r].double()
    assert y.dtype == torch.float32 and y.shape == (BS, N)
    assert torch.equal(y, golden)
    # The formula it restores, y[row] += (x @ (w * scale) + rowsum(x) * offset) * pts * logit,
    # within the float16 group sums.
    assert ((y.double() - exact).abs() <= 2 ** -8 * exact.abs().max()).all()


def test_a8w4_rules():
    x, w, scales, words, bias, pts, logit, row_index, *_ = _inputs(1)
    wp, gl = pack_int4(w), torch.tensor(COUNTS)
    name = "npu_grouped_matmul_finalize_routing"
    with pytest.raises(ValueError, match=f"{name}: expected bias a float32 \\[e, n\\] tensor"):
        op(x, wp, gl, scale=words)
    with pytest.raises(TypeError, match="expected scale dtype in"):
        op(x, wp, gl, scale=scales, bias=bias)
    with pytest.raises(RuntimeError, match="expected scale shape \\(3, 1, 16\\)"):
        op(x, wp, gl, scale=words[:, 0], bias=bias)
    with pytest.raises(RuntimeError, match="expected bias shape \\(3, 16\\)"):
        op(x, wp, gl, scale=words, bias=bias[:, :8])
    with pytest.raises(RuntimeError, match="expected offset shape \\(3, 1, 16\\) with"):
        op(x, wp, gl, scale=words.repeat(1, 2, 1), bias=bias, offset=torch.zeros(E, 1, N))
    with pytest.raises(RuntimeError, match="expected w shape \\[e, 32, n/8\\]"):
        op(x, wp[:, :16], gl, scale=words, bias=bias)
    with na.strict("A2"), pytest.raises(ValueError, match="k = 2048 and n = 7168 for a8w4"):
        op(x, wp, gl, scale=words, bias=bias)
