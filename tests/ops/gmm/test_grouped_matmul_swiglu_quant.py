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


def _kernel_steps(x, w, ws, xs):
    """The A2/A3 kernel's float32 steps: x_scale then weight_scale, scale = max / 127,
    multiplier 1 / scale, cast float32 -> float16 -> int8 (each half to even)."""
    c = torch.zeros(M, N)
    start = 0
    for e, cnt in enumerate(COUNTS):
        acc = (x[start:start + cnt].long() @ w[e].long()).float()
        c[start:start + cnt] = acc * xs[start:start + cnt, None] * ws[e].float()
        start += cnt
    a, gate = c[:, :N // 2], c[:, N // 2:]
    s = a * torch.sigmoid(a) * gate
    scale = s.abs().amax(-1, keepdim=True) / 127
    t = s * (torch.ones_like(scale) / scale)
    return torch.round(torch.nan_to_num(t).half()).to(torch.int8), scale.squeeze(-1)


def _compare(q, scale, x, w, ws, xs):
    gq, gs, valid = _golden(x, w, ws, xs)
    assert q.dtype == torch.int8 and q.shape == (M, N // 2)
    assert scale.dtype == torch.float32 and scale.shape == (M,)
    # int8 codes: within one step of the exact value (the float16 step of the cast and the
    # float32 chain may cross a .5 tie), and equal to the kernel's own rounding steps.
    assert (q[:valid].double() - gq[:valid]).abs().max() <= 1
    kq, ks = _kernel_steps(x, w, ws, xs)
    assert torch.equal(q[:valid], kq[:valid]) and torch.equal(scale[:valid], ks[:valid])
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


def _nz_tiles(w):
    """[e, k, n] -> the FRACTAL_NZ storage [e, n/32, k/16, 16, 32], tile by tile."""
    e, k, n = w.shape
    out = torch.empty(e, n // 32, k // 16, 16, 32, dtype=w.dtype)
    for nb in range(n // 32):
        for kb in range(k // 16):
            out[:, nb, kb] = w[:, kb * 16:(kb + 1) * 16, nb * 32:(nb + 1) * 32]
    return out


def test_v2_nz_weight_and_dequant_dtype():
    # The 5-D NZ weight holds the same values as the [e, k, n] one; torch.float32 / torch.int8
    # for dequant_dtype (what op-plugin passes) mean the float32 dequantization of the default.
    g = torch.Generator().manual_seed(5)
    k, n = 32, 64
    x = torch.randint(-128, 128, (M, k), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (E, k, n), dtype=torch.int8, generator=g)
    ws, xs = torch.rand(E, n, generator=g) * 0.02, torch.rand(M, generator=g) * 0.02
    gl = torch.tensor(COUNTS).cumsum(0)
    q, scale = na.npu_grouped_matmul_swiglu_quant_v2(x, [w], [ws], xs, gl)
    w5 = _nz_tiles(w)
    for dq in (torch.float32, torch.int8, 0):
        q5, s5 = na.npu_grouped_matmul_swiglu_quant_v2(x, [w5], [ws], xs, gl, dequant_dtype=dq)
        assert torch.equal(q5, q) and torch.equal(s5, scale)
    q1, s1, _ = na.npu_grouped_matmul_swiglu_quant(x, w5, gl, ws, xs)
    assert torch.equal(q1, q) and torch.equal(s1, scale)
    with pytest.raises(NotImplementedError, match="expected dequant_dtype 0, torch.int8 or"):
        na.npu_grouped_matmul_swiglu_quant_v2(x, [w5], [ws], xs, gl,
                                              dequant_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="expected weight a 3-D .* or its 5-D NZ form"):
        na.npu_grouped_matmul_swiglu_quant_v2(x, [w5[..., :16]], [ws], xs, gl)


def test_group_list_shorter_than_the_experts():
    # aclnn takes up to one entry per expert: the first len(group_list) experts take part.
    x, w, ws, xs = _inputs()
    full = torch.tensor(COUNTS[:2] + [0]).cumsum(0)
    q, scale = na.npu_grouped_matmul_swiglu_quant_v2(x, w, ws, xs, full)
    q2, s2 = na.npu_grouped_matmul_swiglu_quant_v2(x, w, ws, xs, full[:2])
    assert torch.equal(q, q2) and torch.equal(scale, s2)
    with pytest.raises(ValueError, match="expected group_list 1 to 3 entries"):
        na.npu_grouped_matmul_swiglu_quant_v2(x, w, ws, xs, torch.tensor([1, 2, 3, 4]))


def test_bad_inputs():
    x, w, ws, xs = _inputs()
    gl = torch.tensor(COUNTS).cumsum(0)
    op = na.npu_grouped_matmul_swiglu_quant
    with pytest.raises(ValueError, match=f"{op.__name__}: expected group_list a non-negative"):
        op(x, w, torch.tensor([4, 2, 9]), ws, xs)
    with pytest.raises(ValueError, match="expected bias None \\(a reserved input with an int8"):
        op(x, w, gl, ws, xs, bias=torch.zeros(E, N, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="expected weight_scale shape \\(3, 10\\)"):
        op(x, w, gl, ws[:, :4], xs)
    with pytest.raises(ValueError, match="expected weight an even n"):
        op(x, w[..., :9], gl, ws[:, :9], xs)
    v2 = na.npu_grouped_matmul_swiglu_quant_v2
    with pytest.raises(TypeError, match="expected weight int8, or int32 packing 8 int4"):
        op(x, w.to(torch.int16), gl, ws, xs)
    with pytest.raises(ValueError, match="expected quant_dtype int8"):
        v2(x, [w], [ws], xs, gl, quant_dtype=2)
    with pytest.raises(ValueError, match="expected smooth_scale None"):
        v2(x, [w], [ws], xs, gl, smooth_scale=torch.rand(E))
