"""npu_grouped_matmul_finalize_routing against a float64 golden of the seed 004 formula.

    mm[r] = (x[r] @ w[e(r)]) * scale[e(r)] * pertoken_scale[r];  out[r] = mm[r] * logit[r]
    y[row_index[r]] += out[r];  y[offset : offset + b] += shared_input_weight * shared_input
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

op = na.npu_grouped_matmul_finalize_routing
E, K, N, TOPK, BATCH = 4, 16, 24, 2, 9
COUNTS = [5, 0, 7, 6]
M = sum(COUNTS)


def _inputs(extra_rows=0):
    g = torch.Generator().manual_seed(1)
    m = M + extra_rows
    x = torch.randint(-128, 128, (m, K), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (E, K, N), dtype=torch.int8, generator=g)
    scale = torch.rand(E, N, generator=g) * 0.01
    pts = torch.rand(m, generator=g) * 0.01
    logit = torch.rand(m, generator=g)
    row_index = torch.randperm(m, generator=g) % BATCH
    return x, w, scale, pts, logit, row_index


def _golden(x, w, scale, pts, logit, row_index, rows, shared=None, offset=0, weight=1.0):
    mm = torch.zeros(x.shape[0], N, dtype=torch.float64)
    start = 0
    for e, c in enumerate(COUNTS):
        acc = x[start:start + c].long() @ w[e].long()
        mm[start:start + c] = acc.double() * scale[e].double() * pts[start:start + c, None].double()
        start += c
    out = mm * logit.double()[:, None]
    y = torch.zeros(rows, N, dtype=torch.float64)
    for r in range(x.shape[0]):
        y[row_index[r]] += out[r]
    if shared is not None:
        y[offset:offset + shared.shape[0]] += weight * shared.double()
    return y


@pytest.mark.parametrize("group_list_type", [0, 1])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_combine_with_shared_expert(group_list_type, index_dtype):
    x, w, scale, pts, logit, row_index = _inputs(extra_rows=2)   # 2 rows past the groups
    gl = torch.tensor(COUNTS)
    if group_list_type == 0:
        gl = gl.cumsum(0)
    shared = torch.randn(4, N).bfloat16()
    y = op(x, w, gl, scale=scale, pertoken_scale=pts, shared_input=shared, logit=logit,
           row_index=row_index.to(index_dtype), shared_input_weight=0.5, shared_input_offset=3,
           output_bs=BATCH, group_list_type=group_list_type)
    assert y.dtype == torch.float32 and y.shape == (BATCH, N)
    # rows past the groups contribute nothing
    ri, lg = row_index.clone(), logit.clone()
    golden = _golden(x[:M], w, scale, pts[:M], lg[:M], ri[:M], BATCH, shared, 3, 0.5)
    assert_close_to_golden(y, golden)


def test_no_routing_arguments_and_aliases():
    x, w, scale, pts, _, _ = _inputs()
    y = torch.ops.npu.npu_grouped_matmul_finalize_routing(
        x, w, torch.tensor(COUNTS), scale=scale, pertoken_scale=pts)
    golden = _golden(x, w, scale, pts, torch.ones(M), torch.arange(M), M)
    assert_close_to_golden(y, golden)
    y2 = op(x, w=w, group_list=torch.tensor(COUNTS), scale=scale, pertoken_scale=pts)
    assert torch.equal(y, y2)


@pytest.mark.parametrize("over,error,match", [
    ({"row_index": torch.full((M,), BATCH)}, ValueError, "expected row_index values in \\[0, 9\\)"),
    ({"group_list": torch.tensor([5, 0, 7, 9])}, ValueError, "expected group_list groups covering"),
    ({"scale": torch.rand(E, N).half()}, TypeError, "expected scale dtype in"),
    ({"dtype": torch.bfloat16}, ValueError, "expected dtype None or torch.float32"),
    ({"bias": torch.rand(E, N)}, ValueError, "expected bias None with int8 w"),
    ({"group_list_type": 2}, ValueError, "expected group_list_type 0 \\(cumsum\\) or 1"),
    ({"shared_input": torch.randn(8, N).bfloat16(), "shared_input_offset": 3}, RuntimeError,
     "expected shared_input \\[b, 24\\] rows fitting"),
])
def test_bad_inputs(over, error, match):
    x, w, scale, pts, logit, row_index = _inputs()
    args = dict(group_list=torch.tensor(COUNTS), scale=scale, pertoken_scale=pts, logit=logit,
                row_index=row_index, output_bs=BATCH)
    args.update(over)
    with pytest.raises(error, match=f"npu_grouped_matmul_finalize_routing: {match}"):
        op(x, w, **args)


def test_weight_dtype():
    x, w, scale, *_ = _inputs()
    with pytest.raises(TypeError, match="expected w int8, or int32 packing 8 int4"):
        op(x, w.to(torch.int16), torch.tensor(COUNTS), scale=scale)
