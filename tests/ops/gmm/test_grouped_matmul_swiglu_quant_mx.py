"""npu_grouped_matmul_swiglu_quant_v2's Ascend 950 MXFP8 form against a float64 golden.

Doc formula: ``C = (X @ W) * x_scale * w_scale`` with one e8m0 scale per 32 elements of k on
each side; ``S = silu(C[:, :n/2]) * C[:, n/2:]``; per 32-block of S
``shared_exp = floor(log2(max|S|)) - emax``, ``Q = S / 2**shared_exp`` rounded to the element
format (saturating).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import dtypes

v2 = na.npu_grouped_matmul_swiglu_quant_v2
COUNTS = [3, 0, 4]
E, M, K, N = len(COUNTS), sum(COUNTS) + 1, 96, 128          # k: three 32-blocks (ceil/64 = 2)
EMAX = {torch.float8_e4m3fn: 8, torch.float8_e5m2: 15}
FMAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(E, K, N, generator=g)).to(torch.float8_e4m3fn)
    kb = -(-K // 64)
    ws = torch.randint(120, 130, (E, kb, N, 2), dtype=torch.uint8, generator=g)
    xs = torch.randint(120, 130, (M, kb, 2), dtype=torch.uint8, generator=g)
    return x, w, ws, xs


def _golden(x, w, ws, xs, out_dtype):
    """float64 C, S and the MX quantization of S (codes and element values)."""
    xsf = (2.0 ** (xs.double() - 127)).reshape(M, -1).repeat_interleave(32, 1)[:, :K]
    rows = torch.repeat_interleave(torch.arange(E), torch.tensor(COUNTS))
    c = torch.zeros(M, N, dtype=torch.float64)
    for r, e in enumerate(rows.tolist()):
        wsf = (2.0 ** (ws[e].double() - 127)).permute(0, 2, 1).reshape(-1, N)
        wsf = wsf.repeat_interleave(32, 0)[:K]
        c[r] = (x[r].double() * xsf[r]) @ (w[e].double() * wsf)
    a, gate = c[:, :N // 2], c[:, N // 2:]
    s = a / (1 + torch.exp(-a)) * gate
    blocks = s.reshape(M, -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax)), torch.full_like(amax, -127.0))
    shared = (exp - EMAX[out_dtype]).clamp(min=-127)
    q = (blocks / 2.0 ** shared).clamp(-FMAX[out_dtype], FMAX[out_dtype]).to(out_dtype)
    return s, q.reshape(M, -1), (shared + 127).to(torch.uint8).reshape(M, -1), len(rows)


@pytest.mark.parametrize("out_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_mxfp8(out_dtype):
    x, w, ws, xs = _inputs()
    y, scale = v2(x, [w], [ws], xs, torch.tensor(COUNTS).cumsum(0), dequant_mode=2,
                  quant_mode=2, quant_dtype=out_dtype, dequant_dtype=torch.float32,
                  weight_scale_dtype=dtypes.FLOAT8_E8M0FNU, x_scale_dtype=dtypes.FLOAT8_E8M0FNU)
    assert y.dtype == out_dtype and y.shape == (M, N // 2)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (M, 1, 2)
    s, gq, gcodes, valid = _golden(x, w, ws, xs, out_dtype)
    codes = scale.view(torch.uint8).reshape(M, -1)
    assert torch.equal(codes[:valid], gcodes[:valid])
    # Elements: the golden's rounding of the exact S (the float32 GEMM may cross a tie).
    same = (y[:valid].float() == gq[:valid].float()).float().mean()
    assert same > 0.98
    block_scale = (2.0 ** (codes[:valid].double() - 127)).repeat_interleave(32, 1)
    deq = y[:valid].double() * block_scale
    # one element ulp (relative), or the format's subnormal step times the block scale
    e4m3 = out_dtype == torch.float8_e4m3fn
    ulp, sub = (2.0 ** -3, 2.0 ** -9) if e4m3 else (2.0 ** -2, 2.0 ** -16)
    assert ((deq - s[:valid]).abs() <= ulp * s[:valid].abs() + sub * block_scale).all()
    assert (y[valid:].float() == 0).all()


def test_mxfp8_weight_lists_nz_and_fp4_output():
    x, w, ws, xs = _inputs(seed=1)
    gl = torch.tensor(COUNTS)
    common = dict(group_list_type=1, dequant_mode=2, quant_mode=2,
                  quant_dtype=torch.float8_e4m3fn, x_scale_dtype=dtypes.FLOAT8_E8M0FNU,
                  weight_scale_dtype=dtypes.FLOAT8_E8M0FNU)
    y, scale = v2(x, [w], [ws], xs, gl, **common)
    # e tensors [k, n] with e scales [ceil(k/64), n, 2]; the NZ storage [e, n/32, k/16, 16, 32].
    y2, s2 = v2(x, list(w.unbind(0)), list(ws.unbind(0)), xs, gl, **common)
    w_nz = w.view(torch.uint8).reshape(E, K // 16, 16, N // 32, 32).permute(0, 3, 1, 2, 4)
    y3, s3 = v2(x, [w_nz.contiguous().view(torch.float8_e4m3fn)], [ws], xs, gl, **common)
    for yy, ss in ((y2, s2), (y3, s3)):
        assert torch.equal(yy.view(torch.uint8), y.view(torch.uint8))
        assert torch.equal(ss.view(torch.uint8), scale.view(torch.uint8))
    y4, s4 = v2(x, [w], [ws], xs, gl, **{**common, "quant_dtype": dtypes.FLOAT4_E2M1FN_X2})
    assert y4.dtype == torch.uint8 and y4.shape == (M, N // 4) and s4.shape == (M, 1, 2)


def test_mx_rules():
    x, w, ws, xs = _inputs()
    gl = torch.tensor(COUNTS).cumsum(0)
    mx_args = dict(dequant_mode=2, quant_mode=2, quant_dtype=torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="per-token float8 form is not emulated"):
        v2(x, [w], [torch.rand(E, N)], torch.rand(M), gl)
    with pytest.raises(ValueError, match="expected n a multiple of 128|expected weight n a"):
        v2(x, [w[..., :64]], [ws[:, :, :64]], xs, gl, **mx_args)
    with pytest.raises(RuntimeError, match="expected x_scale shape \\(8, 2, 2\\)"):
        v2(x, [w], [ws], xs[:, :1], gl, **mx_args)
    with pytest.raises(ValueError, match="expected quant_dtype torch.float8_e4m3fn"):
        v2(x, [w], [ws], xs, gl, **{**mx_args, "quant_dtype": torch.int8})
    with pytest.raises(NotImplementedError, match="expected x_dtype None"):
        v2(x, [w], [ws], xs, gl, **mx_args, x_dtype=dtypes.FLOAT4_E2M1FN_X2)
    with na.strict("A2"), pytest.raises(ValueError, match="float8 / MX forms are Ascend 950"):
        v2(x, [w], [ws], xs, gl, **mx_args)
    with na.strict("950"):
        y, _ = v2(x, [w], [ws], xs, gl, **mx_args)
    assert y.shape == (M, N // 2)


def test_mx_under_fake_tensor():
    # The op database cannot hold float8 samples (opcheck multiplies its inputs), so the fake
    # kernel and an error under FakeTensor are checked here.
    from torch._subclasses.fake_tensor import FakeTensorMode
    x, w, ws, xs = _inputs(seed=2)
    args = (x, [w], [ws], xs, torch.tensor(COUNTS).cumsum(0))
    kwargs = dict(dequant_mode=2, quant_mode=2, quant_dtype=torch.float8_e5m2,
                  weight_scale_dtype=dtypes.FLOAT8_E8M0FNU, x_scale_dtype=dtypes.FLOAT8_E8M0FNU)
    op = torch.ops.npu.npu_grouped_matmul_swiglu_quant_v2
    eager = op(*args, **kwargs)
    fake_mode = FakeTensorMode()

    def conv(v):
        if isinstance(v, list):
            return [conv(t) for t in v]
        return fake_mode.from_tensor(v) if isinstance(v, torch.Tensor) else v

    with fake_mode:
        fake = op(*[conv(a) for a in args], **kwargs)
    for f, e in zip(fake, eager):
        assert f.shape == e.shape and f.dtype == e.dtype and f.stride() == e.stride()
    bad = (x, [w], [ws], xs[:, :1], args[4])
    with pytest.raises(RuntimeError) as eager_error:
        op(*bad, **kwargs)
    with pytest.raises(RuntimeError) as fake_error, fake_mode:
        op(*[conv(a) for a in bad], **kwargs)
    assert str(fake_error.value) == str(eager_error.value)
