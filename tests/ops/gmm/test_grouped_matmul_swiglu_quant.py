"""npu_grouped_matmul_swiglu_quant (v1, v2) against a float64 golden of the formula.

    c = (x @ w[e]) * weight_scale[e] * x_scale[r];  s = silu(c[:, :n/2]) * c[:, n/2:]
    q = round(s * 127 / max|s|) (int8, per row),  q_scale = max|s| / 127
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

E, K, N = 3, 16, 10
COUNTS = [4, 0, 5]
M = sum(COUNTS) + 2          # two rows past the groups


def _inputs(scale_dtype=torch.float32):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (E, K, N), dtype=torch.int8, generator=g)
    ws = (torch.rand(E, N, generator=g) * 0.02).to(scale_dtype)
    xs = torch.rand(M, generator=g) * 0.02
    return x, w, ws, xs


def _golden(x, w, ws, xs):
    c = torch.zeros(M, N, dtype=torch.float64)
    start = 0
    for e, cnt in enumerate(COUNTS):
        acc = x[start:start + cnt].long() @ w[e].long()
        c[start:start + cnt] = acc.double() * ws[e].double() * xs[start:start + cnt, None].double()
        start += cnt
    a, gate = c[:, :N // 2], c[:, N // 2:]
    s = a / (1 + torch.exp(-a)) * gate
    amax = s.abs().amax(-1, keepdim=True)
    q = torch.where(amax > 0, s * 127 / amax, torch.zeros_like(s))
    return q, (amax / 127).squeeze(-1), start


def _compare(q, scale, x, w, ws, xs):
    gq, gs, valid = _golden(x, w, ws, xs)
    assert q.dtype == torch.int8 and q.shape == (M, N // 2)
    assert scale.dtype == torch.float32 and scale.shape == (M,)
    # int8 codes: within one step of the exact value (the float32 chain may cross a .5 tie)
    assert ((q[:valid].double() - gq[:valid]).abs() <= 0.5 + 1e-3).float().mean() > 0.98
    assert (q[:valid].double() - gq[:valid]).abs().max() <= 1
    assert_close_to_golden(scale[:valid], gs[:valid], rtol=1e-5, atol=1e-12)
    assert (q[valid:] == 0).all() and (scale[valid:] == 0).all()


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_v1(scale_dtype):
    x, w, ws, xs = _inputs(scale_dtype)
    q, scale, offset = na.npu_grouped_matmul_swiglu_quant(
        x, w, torch.tensor(COUNTS).cumsum(0), ws, xs)
    assert offset.shape == () and offset.dtype == torch.float32
    _compare(q, scale, x, w, ws, xs)


@pytest.mark.parametrize("group_list_type", [0, 1])
def test_v2(group_list_type):
    x, w, ws, xs = _inputs()
    gl = torch.tensor(COUNTS)
    if group_list_type == 0:
        gl = gl.cumsum(0)
    q, scale = torch.ops.npu.npu_grouped_matmul_swiglu_quant_v2(
        x, [w], [ws], xs, gl, group_list_type=group_list_type)
    _compare(q, scale, x, w, ws, xs)
    q2, s2 = na.npu_grouped_matmul_swiglu_quant_v2(x, w, ws, xs, gl, quant_dtype=0,
                                                   group_list_type=group_list_type)
    assert torch.equal(q, q2) and torch.equal(scale, s2)


def test_bad_inputs():
    x, w, ws, xs = _inputs()
    gl = torch.tensor(COUNTS).cumsum(0)
    op = na.npu_grouped_matmul_swiglu_quant
    with pytest.raises(ValueError, match=f"{op.__name__}: expected group_list a non-negative"):
        op(x, w, torch.tensor([4, 2, 9]), ws, xs)
    with pytest.raises(ValueError, match="expected bias None \\(a reserved input\\)"):
        op(x, w, gl, ws, xs, bias=torch.zeros(E, N, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="expected weight_scale shape \\(3, 10\\)"):
        op(x, w, gl, ws[:, :4], xs)
    with pytest.raises(ValueError, match="expected weight an even n"):
        op(x, w[..., :9], gl, ws[:, :9], xs)
    v2 = na.npu_grouped_matmul_swiglu_quant_v2
    with pytest.raises(NotImplementedError, match="expected weight int8"):
        v2(x, [torch.zeros(E, K, 2, dtype=torch.int32)], [torch.rand(E, 16)], xs, gl)
    with pytest.raises(ValueError, match="expected quant_dtype int8"):
        v2(x, [w], [ws], xs, gl, quant_dtype=2)
    with pytest.raises(ValueError, match="expected smooth_scale None"):
        v2(x, [w], [ws], xs, gl, smooth_scale=torch.rand(E))
