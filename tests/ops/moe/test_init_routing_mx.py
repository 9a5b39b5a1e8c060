"""npu_moe_init_routing_v2's MX modes: MXFP8 RoundScale (quant_mode 2 / 3, and 16 / 17 with
the amax clamp) and MXFP4 (9).

Golden, written again here in float64: op-plugin test/test_custom_ops/
test_npu_moe_init_routing_v2.py, ``mxfp8_roundscale_quantize`` (blocks of 32 along H; the
scale is the power of two at or above ``float32(amax / FP8_MAX)``, its exponent at least -126;
float16 inputs take their block maxima from the values cut to bfloat16; 16 / 17 raise amax to
at least 1e-4) and ``simplified_mx_quantize`` for float4_e2m1 (``floor(log2 amax) - 2``
clamped at -127).  Elements are rounded half to even on the target grid, subnormals included.
A zero block has code 0 here (see the module docstring of init_routing_v2_quant).  The routing
part of the golden is test_init_routing's ``golden_v2``.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na

from .test_init_routing import feats, golden_v2, ids

# quant_mode: (expanded_x dtype, exponent bits, mantissa bits, largest normal)
FORMATS = {2: (torch.float8_e5m2, 5, 2, 57344.0), 3: (torch.float8_e4m3fn, 4, 3, 448.0)}
FORMATS[16], FORMATS[17] = FORMATS[2], FORMATS[3]
E2M1 = (None, 2, 1, 6.0)


def _round_to_grid(v: float, ebits: int, mbits: int, max_norm: float) -> float:
    if v == 0:
        return 0.0
    min_exp = -(2 ** (ebits - 1)) + 2
    p = max(math.floor(math.log2(abs(v))), min_exp)
    step = 2.0 ** (mbits - p)
    return min(max(round(v * step) / step, -max_norm), max_norm)   # round(): half to even


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))


def _bf16_cut(v: float) -> float:
    bits = torch.tensor([v], dtype=torch.float32).view(torch.int32) & -65536
    return float(bits.view(torch.float32))


def _blockwise(rows: torch.Tensor, fmt, exponent_of):
    """(float64 element values, uint8 codes (rows, even blocks)): each block of 32 scaled by
    ``2^exponent_of(block)`` (None: a zero block, code 0), its elements put on ``fmt``'s grid."""
    _, ebits, mbits, max_norm = fmt
    n, h = rows.shape
    blocks = math.ceil(h / 32)
    values = torch.zeros(n, h, dtype=torch.float64)
    codes = torch.zeros(n, blocks + blocks % 2, dtype=torch.uint8)
    for r in range(n):
        for b in range(blocks):
            block = rows[r, 32 * b:32 * (b + 1)].double().tolist()
            exp = exponent_of(block)
            if exp is None:
                continue
            codes[r, b] = exp + 127
            for j, v in enumerate(block):
                values[r, 32 * b + j] = _round_to_grid(v * 2.0 ** -exp, ebits, mbits,
                                                       max_norm) * 2.0 ** exp
    return values, codes


def mx_golden(rows: torch.Tensor, quant_mode: int, src_dtype=torch.float32):
    """The MXFP8 RoundScale golden: (float64 element values, uint8 e8m0 codes)."""
    max_norm = FORMATS[quant_mode][3]

    def exponent(block):
        probe = [_bf16_cut(v) for v in block] if src_dtype == torch.float16 else block
        amax = max(abs(v) for v in probe)
        if quant_mode in (16, 17):
            amax = max(amax, _f32(1e-4))
        if amax == 0:
            return None
        m, e = math.frexp(_f32(amax / max_norm))    # quotient = m * 2^e, m in [0.5, 1)
        return max(e - 1 if m == 0.5 else e, -126)  # the power of two at or above it

    return _blockwise(rows, FORMATS[quant_mode], exponent)


def mxfp4_golden(rows: torch.Tensor):
    """The e2m1 golden: (float64 element values, uint8 codes (rows, blocks / 2, 2))."""
    def exponent(block):
        amax = max(abs(v) for v in block)
        return None if amax == 0 else max(math.floor(math.log2(amax)) - 2, -127)

    values, codes = _blockwise(rows, E2M1, exponent)
    return values, codes.reshape(rows.shape[0], -1, 2)


E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """float64 values of packed e2m1 pairs (even element in the low nibble)."""
    lo, hi = (packed & 0xF).long(), (packed >> 4).long()
    both = torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1)
    mag = torch.tensor(E2M1_VALUES, dtype=torch.float64)[both & 7]
    return torch.where(both >= 8, -mag, mag)


def _check(got, want_rows, want_eri, want_tok, quant_mode, src_dtype):
    ex, eri, tok, es = got
    fmt = FORMATS[quant_mode][0]
    assert ex.dtype == fmt and es.dtype == torch.float8_e8m0fnu
    assert eri.tolist() == want_eri and tok.tolist() == want_tok
    flat = ex.reshape(-1, ex.shape[-1])
    values, codes = mx_golden(want_rows.reshape(-1, want_rows.shape[-1]), quant_mode, src_dtype)
    assert es.shape == codes.shape
    assert torch.equal(es.view(torch.uint8), codes)
    scale = torch.pow(2.0, codes.double() - 127).repeat_interleave(32, dim=1)[:, :flat.shape[1]]
    assert torch.equal(flat.double() * scale, values)


@pytest.mark.parametrize("quant_mode", [2, 3, 16, 17])
@pytest.mark.parametrize("dtype,h", [(torch.float16, 40), (torch.bfloat16, 70),
                                     (torch.float32, 64)])
def test_mxfp8_dropless(quant_mode, dtype, h):
    x = (feats(6, h, dtype=torch.float64) * 4).to(dtype)
    x[2] = 0                                                # an all-zero row
    x[3, :32] *= 1e-3
    x[4, 32:] *= 1e-7                                       # below the 16 / 17 amax floor
    x[5, 0] = 448.0 * 1.1                                   # floor(log2) would saturate it
    e = ids(6, 2, 5)
    got = na.npu_moe_init_routing_v2(x, e, expert_num=5, active_num=9, quant_mode=quant_mode,
                                     expert_tokens_num_flag=True, expert_tokens_num_type=1,
                                     active_expert_range=[1, 5], row_idx_type=0)
    wex, weri, wtok, _ = golden_v2(x, e, expert_num=5, start=1, end=5, active_num=9)
    _check(got, wex, weri, wtok, quant_mode, dtype)


@pytest.mark.parametrize("quant_mode", [3, 16])
def test_mxfp8_drop_pad(quant_mode):
    x = (feats(7, 48) * 100).to(torch.bfloat16)
    e = ids(7, 2, 4, seed=3)
    got = na.npu_moe_init_routing_v2(x, e, expert_num=4, drop_pad_mode=1, expert_capacity=2,
                                     quant_mode=quant_mode, expert_tokens_num_flag=True,
                                     expert_tokens_num_type=1)
    wex, weri, wtok, _ = golden_v2(x, e, expert_num=4, drop_pad_mode=1, capacity=2)
    assert got[0].shape == (4, 2, 48)
    _check(got, wex, weri, wtok, quant_mode, torch.bfloat16)


def test_mxfp8_rounds_the_scale_up_instead_of_saturating():
    x = torch.full((1, 32), 1.0)
    x[0, 0] = 500.0                 # 500 / 448 > 1: the scale is 2, nothing saturates
    e = torch.zeros(1, 1, dtype=torch.int32)
    ex, _, _, es = na.npu_moe_init_routing_v2(x, e, expert_num=1, quant_mode=3)
    assert es.view(torch.uint8).tolist() == [[128, 0]]
    assert float(ex[0, 0].float()) * 2 == 512.0 and float(ex[0, 1].float()) == 0.5
    # (FakeTensor / compile of these modes: the opdb samples mxfp8_*, run by tests/generic.)


def test_mxfp8_ignores_a_scale_as_the_golden_does():
    x, e = feats(4, 32), ids(4, 2, 4)
    f = na.npu_moe_init_routing_v2
    plain = f(x, e, expert_num=4, quant_mode=2)
    scaled = f(x, e, expert_num=4, quant_mode=2, scale=torch.rand(8, 32))
    assert all(torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b)
               for a, b in zip(plain, scaled))
    with pytest.raises(ValueError, match="expected quant_mode -1 for an int8 x"):
        f(x.to(torch.int8), e, expert_num=4, quant_mode=3)


@pytest.mark.parametrize("dtype,h", [(torch.bfloat16, 70), (torch.float16, 64)])
def test_mxfp4(dtype, h):
    x = (feats(5, h, dtype=torch.float64) * 3).to(dtype)
    x[1] = 0
    x[2, :32] *= 1e-3
    e = ids(5, 2, 4, seed=2)
    ex, eri, tok, es = na.npu_moe_init_routing_v2(x, e, expert_num=4, quant_mode=9,
                                                  expert_tokens_num_flag=True,
                                                  expert_tokens_num_type=1)
    wex, weri, wtok, _ = golden_v2(x, e, expert_num=4)
    assert eri.tolist() == weri and tok.tolist() == wtok
    assert ex.dtype == torch.uint8 and ex.shape == (10, h // 2)
    values, codes = mxfp4_golden(wex)
    assert es.dtype == torch.uint8 and es.shape == (10, math.ceil(h / 64), 2)
    assert torch.equal(es, codes)
    scale = torch.pow(2.0, codes.reshape(10, -1).double() - 127).repeat_interleave(32, dim=1)
    assert torch.equal(unpack_e2m1(ex) * scale[:, :h], values)


def test_mxfp4_needs_dropless_and_an_even_h():
    f = na.npu_moe_init_routing_v2
    with pytest.raises(RuntimeError, match="expected x an even hidden size when quant_mode is 9"):
        f(feats(4, 33), ids(4, 2, 4), expert_num=4, quant_mode=9)
