"""npu_moe_init_routing_v2's MXFP8 RoundScale modes (quant_mode 2 / 3).

Golden: op-plugin's npu_moe_init_routing_v2 page, ``simplified_mx_quantize`` (written again
here in float64): blocks of 32 along H, ``shared_exp = floor(log2 amax) - emax`` clamped at
-127, elements rounded half to even on the float8 grid (subnormals included) and clipped to
the largest normal, the e8m0 scales padded to an even block count with code 0.  The routing
part of the golden is test_init_routing's ``golden_v2``.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na

from .test_init_routing import feats, golden_v2, ids

FORMATS = {2: (torch.float8_e5m2, 15, 2, 57344.0), 3: (torch.float8_e4m3fn, 8, 3, 448.0)}


def mx_golden(rows: torch.Tensor, quant_mode: int):
    """(float64 element values, uint8 e8m0 codes (rows, even blocks)) of the doc golden."""
    _, emax, mbits, max_norm = FORMATS[quant_mode]
    min_exp = -(2 ** ({2: 5, 3: 4}[quant_mode] - 1)) + 2
    n, h = rows.shape
    blocks = math.ceil(h / 32)
    values = torch.zeros(n, h, dtype=torch.float64)
    codes = torch.zeros(n, blocks + blocks % 2, dtype=torch.uint8)
    for r in range(n):
        for b in range(blocks):
            block = rows[r, 32 * b:32 * (b + 1)].double()
            amax = float(block.abs().max())
            if amax == 0:
                continue                               # zeros; the golden's code is 0
            share = max(math.floor(math.log2(amax)) - emax, -127)
            codes[r, b] = share + 127
            for j, v in enumerate((block / 2.0 ** share).tolist()):
                if v == 0:
                    continue
                p = max(math.floor(math.log2(abs(v))), min_exp)
                step = 2.0 ** (mbits - p)
                q = min(max(round(v * step) / step, -max_norm), max_norm)  # round: half even
                values[r, 32 * b + j] = q * 2.0 ** share
    return values, codes


def _check(got, want_rows, want_eri, want_tok, quant_mode):
    ex, eri, tok, es = got
    fmt = FORMATS[quant_mode][0]
    assert ex.dtype == fmt and es.dtype == torch.float8_e8m0fnu
    assert eri.tolist() == want_eri and tok.tolist() == want_tok
    flat = ex.reshape(-1, ex.shape[-1])
    values, codes = mx_golden(want_rows.reshape(-1, want_rows.shape[-1]), quant_mode)
    assert es.shape == codes.shape
    assert torch.equal(es.view(torch.uint8), codes)
    scale = torch.pow(2.0, codes.double() - 127).repeat_interleave(32, dim=1)[:, :flat.shape[1]]
    assert torch.equal(flat.double() * scale, values)


@pytest.mark.parametrize("quant_mode", [2, 3])
@pytest.mark.parametrize("dtype,h", [(torch.float16, 40), (torch.bfloat16, 70),
                                     (torch.float32, 64)])
def test_mxfp8_dropless(quant_mode, dtype, h):
    x = (feats(6, h, dtype=torch.float64) * 4).to(dtype)
    x[2] = 0                                                # an all-zero row: code 0, zeros
    x[3, :32] *= 1e-3
    e = ids(6, 2, 5)
    got = na.npu_moe_init_routing_v2(x, e, expert_num=5, active_num=9, quant_mode=quant_mode,
                                     expert_tokens_num_flag=True, expert_tokens_num_type=1,
                                     active_expert_range=[1, 5], row_idx_type=0)
    wex, weri, wtok, _ = golden_v2(x, e, expert_num=5, start=1, end=5, active_num=9)
    _check(got, wex, weri, wtok, quant_mode)


@pytest.mark.parametrize("quant_mode", [2, 3])
def test_mxfp8_drop_pad(quant_mode):
    x = (feats(7, 48) * 100).to(torch.bfloat16)
    e = ids(7, 2, 4, seed=3)
    got = na.npu_moe_init_routing_v2(x, e, expert_num=4, drop_pad_mode=1, expert_capacity=2,
                                     quant_mode=quant_mode, expert_tokens_num_flag=True,
                                     expert_tokens_num_type=1)
    wex, weri, wtok, _ = golden_v2(x, e, expert_num=4, drop_pad_mode=1, capacity=2)
    assert got[0].shape == (4, 2, 48)
    _check(got, wex, weri, wtok, quant_mode)


def test_mxfp8_saturates():
    # 448 * 1.06 rounds past the float8_e4m3fn grid's top inside its block: clipped to 448.
    x = torch.full((1, 32), 1.0)
    x[0, 0] = 2.0 ** 8 * 1.99
    e = torch.zeros(1, 1, dtype=torch.int32)
    ex, _, _, es = na.npu_moe_init_routing_v2(x, e, expert_num=1, quant_mode=3)
    values, codes = mx_golden(x, 3)
    assert torch.equal(es.view(torch.uint8), codes)
    assert float(ex[0, 0].float()) == 448.0
    # (FakeTensor / compile of these modes: the opdb samples mxfp8_*, run by tests/generic.)


def test_mxfp8_bad_inputs():
    x, e = feats(4, 32), ids(4, 2, 4)
    f = na.npu_moe_init_routing_v2
    with pytest.raises(ValueError, match="npu_moe_init_routing_v2: expected scale None when "
                                         "quant_mode is 2 or 3"):
        f(x, e, expert_num=4, quant_mode=2, scale=torch.ones(1, 32))
    with pytest.raises(ValueError, match="expected quant_mode -1 for an int8 x"):
        f(x.to(torch.int8), e, expert_num=4, quant_mode=3)
