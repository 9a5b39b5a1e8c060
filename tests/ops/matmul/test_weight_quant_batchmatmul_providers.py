"""npu_weight_quant_batchmatmul's fast providers against float64 goldens of the doc formula
(aclnnWeightQuantBatchMatmulV2, op-plugin's golden precision: ``(weight + offset) * scale``
rounded to x's dtype, the product summed exactly here and rounded once).

The tiled path (weight_decode) runs eagerly on small tiles, so several tiles and a partial last
tile are exercised, and once through the compiled provider as the dispatcher picks it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere
from npu_anywhere.kernels import compiled as compiled_kernels
from npu_anywhere.ops.matmul import weight_decode
from npu_anywhere.ops.matmul import weight_quant_batchmatmul as wqbmm

F16, BF16 = torch.float16, torch.bfloat16


def _pack_int4(vals: torch.Tensor) -> torch.Tensor:
    """Eight int4 values per int32 word along the last dim, value j at bits 4j..4j+3."""
    v = vals.to(torch.int64) & 0xF
    v = v.reshape(*vals.shape[:-1], vals.shape[-1] // 8, 8)
    word = sum(v[..., j] << (4 * j) for j in range(8))
    return torch.where(word >= 2 ** 31, word - 2 ** 32, word).to(torch.int32)


def _golden(x, w_int, scale, offset=None, bias=None, group=0):
    """float64 x @ ((w + offset) * scale) + bias; the sum and the product rounded to x's dtype."""
    dt, k = x.dtype, w_int.shape[0]
    s, o = scale.reshape(-1, scale.shape[-1]), None
    if offset is not None:
        o = offset.reshape(-1, offset.shape[-1])
    if group:
        s = s.repeat_interleave(group, dim=0)[:k]
        o = None if o is None else o.repeat_interleave(group, dim=0)[:k]
    w = w_int.to(dt)
    if o is not None:
        w = w + o.to(dt)
    w = w * s.to(dt)
    y = x.double() @ w.double()
    if bias is not None:
        y = y + bias.double().reshape(-1)
    return y


def _close(out, golden, dtype):
    assert out.dtype == dtype
    tol = {F16: 2 ** -10, BF16: 2 ** -7}[dtype]
    torch.testing.assert_close(out.double(), golden, rtol=2 * tol, atol=2 * tol)


def _inputs(dtype, packed, mode, m=5, k=64, n=56, offset=False, bias=False):
    x = torch.randn(m, k).to(dtype)
    w_int = torch.randint(-8, 8, (k, n), dtype=torch.int8) if packed else \
        torch.randint(-128, 128, (k, n), dtype=torch.int8)
    group = 32 if mode == "per_group" else 0
    shape = {"per_tensor": (1,), "per_channel": (1, n), "per_group": (k // 32, n)}[mode]
    scale = (torch.rand(shape) * (0.1 if packed else 0.01)).to(dtype)
    off = torch.randn(shape).to(dtype) if offset else None
    b = None
    if bias:
        b = torch.randn(n).to(F16 if dtype == F16 else torch.float32)
    weight = _pack_int4(w_int) if packed else w_int
    return x, w_int, weight, scale, off, b, group


@pytest.fixture
def small_tiles(monkeypatch):
    # 64-deep weights: 24 columns per tile, so n = 56 gives tiles of 3, 3 and 1 int4 words
    # (24, 24 and 8 columns) and of 24, 24 and 8 int8 columns.
    monkeypatch.setattr(weight_decode, "TILE_BYTES", 2 * 64 * 24)


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("packed", [True, False], ids=["int4", "int8"])
@pytest.mark.parametrize("mode", ["per_tensor", "per_channel", "per_group"])
def test_tiles_match_golden(small_tiles, dtype, packed, mode):
    x, w_int, weight, scale, off, _, group = _inputs(dtype, packed, mode,
                                                     offset=mode != "per_tensor")
    out = wqbmm.tiled_weight_quant_batchmatmul(x, weight, scale, off,
                                               antiquant_group_size=group, run_tile=None)
    _close(out, _golden(x, w_int, scale, off, group=group), dtype)


def test_tile_layout_and_weight_rounding(small_tiles):
    # The dequantized tile, put back in column order, is the golden's rounded weight exactly.
    _, w_int, weight, scale, off, _, group = _inputs(BF16, True, "per_group", offset=True)
    planes = weight_decode._planes(scale.reshape(2, -1))
    offsets = weight_decode._planes(off.reshape(2, -1))
    tile = weight_decode.int4_tile(weight, planes, offsets, BF16)
    back = tile.view(64, 8, 7).transpose(1, 2).reshape(64, 56)
    expect = (w_int.to(BF16) + off.repeat_interleave(32, 0)) * scale.repeat_interleave(32, 0)
    assert torch.equal(back, expect)


@pytest.mark.parametrize("packed", [True, False], ids=["int4", "int8"])
def test_tiles_bias_quant_and_whole_weight(small_tiles, monkeypatch, packed):
    x, w_int, weight, scale, off, b, group = _inputs(BF16, packed, "per_channel", m=6,
                                                     offset=True, bias=True)
    golden = _golden(x, w_int, scale, off, b)
    out = wqbmm.tiled_weight_quant_batchmatmul(x, weight, scale, off, bias=b, run_tile=None)
    _close(out, golden, BF16)
    # Many rows of x: one tile spans the whole weight.
    monkeypatch.setattr(weight_decode, "WHOLE_WEIGHT_ROWS", 2)
    _close(wqbmm.tiled_weight_quant_batchmatmul(x, weight, scale, off, bias=b, run_tile=None),
           golden, BF16)
    qs, qo = torch.rand(1, 56) * 0.5, torch.randn(1, 56) * 2
    q = wqbmm.tiled_weight_quant_batchmatmul(x, weight, scale, off, qs, qo, b, run_tile=None)
    qs19 = torch.from_numpy((qs.numpy().view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))
    gq = torch.round(golden * qs19.double() + torch.round(qo.double())).clamp(-128, 127)
    assert q.dtype == torch.int8
    assert (q.double() - gq).abs().max() <= 1


def test_tiles_batched_x_non_contiguous(small_tiles):
    x, w_int, weight, scale, _, _, group = _inputs(F16, True, "per_group", m=3)
    x3 = torch.randn(2, 64, 3).to(F16).transpose(1, 2)          # (2, 3, 64), strided
    out = wqbmm.tiled_weight_quant_batchmatmul(x3, weight, scale, antiquant_group_size=group,
                                               run_tile=None)
    assert out.shape == (2, 3, 56)
    _close(out, _golden(x3.reshape(-1, 64), w_int, scale, group=group).reshape(2, 3, 56), F16)


def test_compiled_provider_int4_and_int8():
    # The dispatcher's path: compiled tile kernels (one tile each here), against float64.
    x, w_int, weight, scale, _, _, group = _inputs(BF16, True, "per_group")
    x8, w8, weight8, scale8, off8, b8, _ = _inputs(F16, False, "per_channel", offset=True,
                                                   bias=True)
    with compiled_kernels.compiling_after(0), npu_anywhere.use_providers("compiled"):
        out = npu_anywhere.npu_weight_quant_batchmatmul(x, weight, scale,
                                                        antiquant_group_size=group)
        out8 = npu_anywhere.npu_weight_quant_batchmatmul(x8, weight8, scale8, off8, bias=b8)
    for kind in ("int4", "int8"):
        assert wqbmm._TILE_KERNELS[kind]._disabled is None
        assert wqbmm._TILE_KERNELS[kind]._compiled
    _close(out, _golden(x, w_int, scale, group=group), BF16)
    _close(out8, _golden(x8, w8, scale8, off8, b8), F16)


def test_compiled_provider_declines_other_layouts():
    x, w_int, weight, scale, _, _, _ = _inputs(BF16, True, "per_channel")
    transposed = _pack_int4(w_int.t().contiguous()).t()                   # (n, k // 8) storage
    assert "transposed" in wqbmm._tiled_supports(x, transposed, scale)
    assert "batched" in wqbmm._tiled_supports(x, weight.expand(2, -1, -1), scale)
    partial = torch.rand(3, 56).to(BF16)                                  # k = 64, group 48
    assert "partial group" in wqbmm._tiled_supports(x, weight, partial,
                                                    antiquant_group_size=48)
    # A declined layout still gets the documented result through the op.
    with compiled_kernels.compiling_after(0), npu_anywhere.use_providers("compiled"):
        out = npu_anywhere.npu_weight_quant_batchmatmul(x, transposed, scale)
    _close(out, _golden(x, w_int, scale), BF16)
