"""npu_moe_init_routing_v2's HIF8 (6, 7, 8), FP8 per-block (11, 12) and INT4 (13) modes, and
unquantized float8 / hifloat8 / float4 rows (quant_mode -1 with x_dtype).

Goldens (op-plugin test/test_custom_ops/test_npu_moe_init_routing_v2.py ``cpu_op_exec``, written
again here in float64): HIF8 through ``en_dtypes.hifloat8`` (the golden's own cast) after the
golden's clip to +-32768; FP8 per block of 128 with ``scale = blockmax / FP8_MAX``; INT4 as
the dynamic int8 formula with 7 for 127 and two values per byte.  The routing part is
test_init_routing's ``golden_v2``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import npu_anywhere as na

from .test_init_routing import feats, golden_v2, ids

HIFLOAT8, FLOAT4_E2M1FN_X2, INT4 = 290, 296, 285      # torch_npu dtype codes
en_dtypes = pytest.importorskip("en_dtypes")


def hif8_codes(values: torch.Tensor) -> torch.Tensor:
    """uint8 hifloat8 codes of float64 values, by en_dtypes' cast."""
    as_np = values.double().numpy().astype(np.float32).astype(en_dtypes.hifloat8)
    return torch.from_numpy(as_np.view(np.uint8).copy())


def _route(x, e, **kw):
    return golden_v2(x, e, **kw)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("quant_mode", [6, 7, 8])
def test_hif8_dropless(quant_mode, dtype):
    x = (feats(6, 14, dtype=torch.float64) * 300).to(dtype)
    x[1] = 0
    e = ids(6, 3, 8, seed=4)
    scale = torch.tensor([0.75]) if quant_mode == 7 else None
    ex, eri, tok, es = na.npu_moe_init_routing_v2(
        x, e, scale=scale, expert_num=8, quant_mode=quant_mode, active_expert_range=[0, 6],
        expert_tokens_num_flag=True, expert_tokens_num_type=1)
    wex, weri, wtok, _ = _route(x, e, expert_num=8, start=0, end=6)
    assert eri.tolist() == weri and tok.tolist() == wtok
    assert ex.dtype == torch.uint8 and ex.shape == (18, 14)
    v = wex.double()
    if quant_mode == 7:
        v = (v * 0.75).clamp(-32768, 32768)
    if quant_mode == 8:
        s = v.abs().amax(dim=-1) / 32768
        v = (v / torch.where(s == 0, 1.0, s).unsqueeze(-1)).clamp(-32768, 32768)
        torch.testing.assert_close(es, s.float(), rtol=0, atol=0)
    else:
        assert es.dtype == torch.float32 and es.shape == (18,)
    assert torch.equal(ex, hif8_codes(v))


def test_hif8_drop_pad_rows_are_the_int8_buffer():
    x = (feats(5, 16, dtype=torch.float64) * 8).to(torch.bfloat16)
    e = ids(5, 2, 4, seed=5)
    ex, eri, _, es = na.npu_moe_init_routing_v2(
        x, e, scale=torch.tensor([2.0]), offset=torch.tensor([0.5]), expert_num=4,
        drop_pad_mode=1, expert_capacity=2, quant_mode=7)
    wex, weri, _, _ = _route(x, e, expert_num=4, drop_pad_mode=1, capacity=2)
    assert ex.dtype == torch.int8 and ex.shape == (4, 2, 16)
    assert eri.tolist() == weri
    want = hif8_codes((wex.reshape(8, 16).double() * 2).clamp(-32768, 32768))
    assert torch.equal(ex.reshape(8, 16).view(torch.uint8), want)   # the offset is unused
    assert es.shape == (8,)


@pytest.mark.parametrize("quant_mode,fp8,max_norm", [(11, torch.float8_e5m2, 57344.0),
                                                     (12, torch.float8_e4m3fn, 448.0)])
def test_fp8_per_block(quant_mode, fp8, max_norm):
    h = 300                                             # 3 blocks of 128, padded to 4 scales
    x = (feats(4, h, dtype=torch.float64) * 5).to(torch.bfloat16)
    x[2, 128:256] = 0                                   # a zero block: scale 0, zeros
    e = ids(4, 2, 4, seed=6)
    ex, eri, _, es = na.npu_moe_init_routing_v2(x, e, expert_num=4, quant_mode=quant_mode)
    wex, weri, _, _ = _route(x, e, expert_num=4)
    assert eri.tolist() == weri
    assert ex.dtype == fp8 and es.dtype == torch.float32 and es.shape == (8, 2, 2)
    rows = wex.double()
    for r in range(8):
        for b in range(4):
            block = rows[r, 128 * b:128 * (b + 1)]
            want = float(torch.tensor(block.abs().max().item() / max_norm if block.numel()
                                      else 0.0, dtype=torch.float32)) if b < 3 else 0.0
            assert float(es.reshape(8, 4)[r, b]) == want
            if b < 3:
                q = (block / want).clamp(-max_norm, max_norm) if want else torch.zeros_like(block)
                assert torch.equal(ex[r, 128 * b:128 * (b + 1)].double(),
                                   q.float().to(fp8).double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_scale", [False, True])
def test_int4_dynamic(dtype, with_scale):
    x = (feats(4, 16, dtype=torch.float64) * 3).to(dtype)
    e = ids(4, 2, 8, seed=7)
    scale = torch.linspace(0.5, 1.5, 16).reshape(1, 16) if with_scale else None
    ex, eri, tok, es = na.npu_moe_init_routing_v2(
        x, e, scale=scale, expert_num=8, quant_mode=13, active_expert_range=[0, 8],
        expert_tokens_num_flag=True, expert_tokens_num_type=1, x_dtype=INT4)
    wex, weri, wtok, _ = _route(x, e, expert_num=8)
    assert eri.tolist() == weri and tok.tolist() == wtok
    assert ex.dtype == torch.uint8 and ex.shape == (8, 8) and es.shape == (8,)
    v = wex.double() * (scale.double() if with_scale else 1.0)
    s = (v.abs().amax(dim=-1, keepdim=True).float() / 7).double()
    torch.testing.assert_close(es, s.squeeze(-1).float(), rtol=0, atol=0)
    q = torch.round(v.float().double() / s).clamp(-8, 7).long() & 0xF
    assert torch.equal(ex.long(), q[:, 0::2] | (q[:, 1::2] << 4))


def test_int4_bad_inputs():
    x, e = feats(4, 16), ids(4, 2, 4)
    f = na.npu_moe_init_routing_v2
    with pytest.raises(ValueError, match="expected x_dtype torch_npu.int4 or None when quant_mode=13"):
        f(x, e, expert_num=4, quant_mode=13, x_dtype=HIFLOAT8)
    with pytest.raises(ValueError, match="expected drop_pad_mode 0 when quant_mode is 13"):
        f(x, e, expert_num=4, quant_mode=13, drop_pad_mode=1, expert_capacity=2)


def test_unquantized_float8_rows_travel_with_their_mx_scales():
    x = feats(4, 100).to(torch.float8_e4m3fn)
    scale = torch.randint(100, 140, (4, 2, 2), dtype=torch.uint8).view(torch.float8_e8m0fnu)
    e = ids(4, 3, 8, seed=8)
    ex, eri, _, es = na.npu_moe_init_routing_v2(x, e, scale=scale, expert_num=8,
                                                active_expert_range=[0, 5])
    perm = [i for i, v in sorted(enumerate(e.reshape(-1).tolist()),
                                 key=lambda t: (t[1] if t[1] >= 0 else 2 ** 31, t[0]))]
    valid = sum(1 for v in e.reshape(-1).tolist() if v < 5)
    src = torch.tensor([p // 3 for p in perm[:valid]])
    assert ex.dtype == torch.float8_e4m3fn and es.dtype == torch.uint8
    assert torch.equal(ex[:valid].view(torch.uint8), x.view(torch.uint8)[src])
    assert torch.equal(es[:valid], scale.view(torch.uint8)[src])
    assert not ex[valid:].view(torch.uint8).any()


@pytest.mark.parametrize("x_dtype", [HIFLOAT8, FLOAT4_E2M1FN_X2])
def test_unquantized_uint8_rows_named_by_x_dtype(x_dtype):
    x = torch.randint(0, 256, (4, 14), dtype=torch.uint8)
    e = ids(4, 2, 4, seed=9)
    kw = {}
    if x_dtype == HIFLOAT8:
        kw["scale"] = torch.rand(4)
    else:                                # 14 bytes hold 28 float4 values: one scale pair
        kw["scale"] = torch.randint(0, 255, (4, 1, 2), dtype=torch.uint8)
    ex, _, _, es = na.npu_moe_init_routing_v2(x, e, expert_num=4, x_dtype=x_dtype, **kw)
    wex, _, _, _ = _route(x.float(), e, expert_num=4)
    assert ex.dtype == torch.uint8 and torch.equal(ex.float(), wex)
    assert es.shape[0] == 8
    with pytest.raises(RuntimeError, match="expected scale shape \\(NUM_ROWS, CeilDiv\\(H, 64\\)"):
        na.npu_moe_init_routing_v2(x.view(torch.float8_e5m2), e, expert_num=4,
                                   scale=torch.zeros(4, 3, 2, dtype=torch.uint8))
