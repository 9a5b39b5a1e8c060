"""npu_weight_quant_batchmatmul against goldens written from aclnnWeightQuantBatchMatmulV2's
formula, with op-plugin's golden precision: ``(weight + offset) * scale`` in x's dtype, then the
product of the x-dtype operands (accumulated here in float64) rounded once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere import targets

F16, BF16 = torch.float16, torch.bfloat16


def _w(*shape, lo=-8, hi=8):
    return torch.randint(lo, hi, shape, dtype=torch.int8)


def _golden(x, w_int, scale, offset=None, bias=None, group=0):
    """float64 result of x @ ((w + offset) * scale) + bias, the weight rounded to x's dtype."""
    dt = x.dtype
    k = w_int.shape[-2]
    s, o = scale, offset
    if group:
        s = s.repeat_interleave(group, dim=0)[:k]
        o = o.repeat_interleave(group, dim=0)[:k] if o is not None else None
    w = w_int.to(dt)
    if o is not None:
        w = w + o.to(dt)                 # rounded to x's dtype, like the golden's fp16 sum
    w = w * s.to(dt)
    y = x.double() @ w.double()
    if bias is not None:
        y = y + bias.double().reshape(-1)
    return y


def _pack_int4(vals: torch.Tensor) -> torch.Tensor:
    v = vals.to(torch.int64) & 0xF
    v = v.reshape(*vals.shape[:-1], vals.shape[-1] // 8, 8)
    word = sum(v[..., j] << (4 * j) for j in range(8))
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word).to(torch.int32)


def _close(out, golden, dtype):
    tol = {F16: 2 ** -10, BF16: 2 ** -7}[dtype]
    torch.testing.assert_close(out.double(), golden, rtol=2 * tol, atol=2 * tol)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("mode", ["per_tensor", "per_channel", "per_group"])
def test_int8_weight_modes(dtype, mode):
    m, k, n = 5, 96, 7
    x = torch.randn(m, k).to(dtype)
    w = _w(k, n)
    group = 32 if mode == "per_group" else 0
    shape = {"per_tensor": (1,), "per_channel": (1, n), "per_group": (3, n)}[mode]
    scale = (torch.rand(shape) * 0.1).to(dtype)
    offset = torch.randn(shape).to(dtype)
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, scale, offset,
                                                    antiquant_group_size=group)
    assert out.dtype == dtype and out.shape == (m, n)
    _close(out, _golden(x, w, scale, offset, group=group), dtype)


def test_group_size_not_dividing_k():
    m, k, n = 3, 80, 4                     # ceil(80 / 32) = 3 groups, the last one short
    x = torch.randn(m, k).to(F16)
    w = _w(k, n)
    scale = (torch.rand(3, n) * 0.1).to(F16)
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, scale, antiquant_group_size=32)
    _close(out, _golden(x, w, scale, group=32), F16)


@pytest.mark.parametrize("layout", ["kn", "nk_transposed"])
def test_int4_weight(layout):
    m, k, n = 4, 64, 16
    x = torch.randn(m, k).to(BF16)
    vals = torch.randint(-8, 8, (k, n))
    packed = _pack_int4(vals) if layout == "kn" else _pack_int4(vals.t().contiguous()).t()
    scale = (torch.rand(2, n) * 0.1).to(BF16)
    bias = torch.randn(n)
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale, bias=bias,
                                                    antiquant_group_size=32)
    _close(out, _golden(x, vals.to(torch.int8), scale, bias=bias, group=32), BF16)


def test_transposed_weight_and_x_views():
    x = torch.randn(24, 6).to(F16).t()                  # (6, 24) view
    w = _w(5, 24).t()
    scale = (torch.rand(5, 1) * 0.1).to(F16).t()
    offset = torch.randn(5, 1).to(F16).t()
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, scale, offset)
    _close(out, _golden(x, w, scale, offset), F16)


def test_int8_output_with_quant_scale():
    x = torch.randn(6, 32).to(F16)
    w = _w(32, 8)
    scale = (torch.rand(1, 8) * 0.05).to(F16)
    qs, qo = torch.rand(1, 8) * 0.5, torch.randn(1, 8) * 2
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, scale, quant_scale=qs, quant_offset=qo)
    # quant_scale is packed to fp19 (float32 bits & 0xFFFFE000); the offset to a rounded integer.
    qs19 = torch.from_numpy((qs.numpy().view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))
    golden = torch.round(_golden(x, w, scale) * qs19.double() + torch.round(qo.double()))
    golden = golden.clamp(-128, 127)
    assert out.dtype == torch.int8
    assert (out.double() - golden).abs().max() <= 1
    assert (out.double() != golden).float().mean() < 0.05


def test_int64_antiquant_scale():
    m, k, n = 3, 64, 64
    x = torch.randn(m, k).to(F16)
    w = _w(n, k).t()
    s = torch.rand(n) * 0.01 + 0.001
    word = npu_anywhere.npu_trans_quant_param(s)
    off = torch.randint(-3, 3, (n,), dtype=torch.int32)
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, word, off)
    s19 = torch.from_numpy((s.numpy().view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))
    golden = x.double() @ ((w.float() + off.float()) * s19).to(F16).double()
    _close(out, golden, F16)


def test_batched_and_untouched():
    x = torch.randn(2, 3, 16).to(F16)
    w = _w(2, 16, 5)
    scale = (torch.rand(5) * 0.1).to(F16)
    before = (x.clone(), w.clone(), scale.clone())
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, w, scale)
    _close(out, _golden(x, w, scale), F16)
    assert all(torch.equal(a, b) for a, b in zip((x, w, scale), before))


def test_ops_path_identical():
    x, w, s = torch.randn(3, 8).to(F16), _w(8, 4), torch.rand(4).to(F16)
    a = npu_anywhere.npu_weight_quant_batchmatmul(x, w, s)
    b = torch.ops.npu.npu_weight_quant_batchmatmul(x, w, s)
    assert torch.equal(a, b)


def test_strict_310p_rules():
    x, w, s = torch.randn(3, 64).to(F16), _w(64, 4), torch.rand(2, 4).to(F16)
    with targets.strict("310P"):
        with pytest.raises(ValueError, match="expected antiquant_group_size 0 on 310P"):
            npu_anywhere.npu_weight_quant_batchmatmul(x, w, s, antiquant_group_size=32)
        with pytest.raises(TypeError, match="expected x float16 on 310P"):
            npu_anywhere.npu_weight_quant_batchmatmul(x.to(BF16), w, s[0].to(BF16))


def test_unemulated_weight_dtype():
    with pytest.raises(NotImplementedError, match="expected weight_dtype None"):
        npu_anywhere.npu_weight_quant_batchmatmul(torch.randn(3, 8).to(F16), _w(8, 4),
                                                  torch.rand(4).to(F16), weight_dtype=34)


_FP4_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _pack_fp4_words(codes: torch.Tensor) -> torch.Tensor:
    """Eight 4-bit codes per float32 word along the last dim, code j in bits 4j..4j+3."""
    c = codes.to(torch.int64).reshape(*codes.shape[:-1], -1, 8)
    word = sum(c[..., j] << (4 * j) for j in range(8))
    return (word - ((word >> 31) << 32)).to(torch.int32).view(torch.float32)


def test_float4_weight_with_e8m0_group_scales():
    # Ascend 950 MX A16W4 (op-plugin test_npu_convert_weight_to_int4pack.py): float32 words of
    # float4_e2m1 codes, uint8 e8m0 scales 2**(code - 127) per 32 rows of k; float64 golden.
    torch.manual_seed(5)
    m, k, n = 5, 64, 16
    codes = torch.randint(0, 16, (k, n))
    scale = torch.randint(120, 134, (k // 32, n), dtype=torch.uint8)
    x = torch.randn(m, k).to(F16)
    w64 = torch.tensor(_FP4_E2M1, dtype=torch.float64)[codes]
    s64 = (2.0 ** (scale.double() - 127)).repeat_interleave(32, dim=0)
    golden = x.double() @ (w64 * s64)
    packed = _pack_fp4_words(codes)
    out = npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale, antiquant_group_size=32)
    assert out.dtype == F16 and out.shape == (m, n)
    torch.testing.assert_close(out.double(), golden, rtol=2e-3, atol=2e-3)
    # the transpose of a contiguous (n, k // 8) packs along k
    packed_t = _pack_fp4_words(codes.T.contiguous()).T
    out_t = npu_anywhere.npu_weight_quant_batchmatmul(x, packed_t, scale, antiquant_group_size=32)
    torch.testing.assert_close(out_t.double(), golden, rtol=2e-3, atol=2e-3)
    with targets.strict("950"):
        npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale, antiquant_group_size=32)
    with targets.strict("A2"), pytest.raises(TypeError, match="Ascend 950 only"):
        npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale, antiquant_group_size=32)
    with pytest.raises(ValueError, match="expected antiquant_group_size 32 when weight is float32"):
        npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale, antiquant_group_size=0)
    with pytest.raises(TypeError, match="expected antiquant_scale dtype in"):
        npu_anywhere.npu_weight_quant_batchmatmul(x, packed, scale.to(F16), antiquant_group_size=32)
