"""Tests for npu_trans_quant_param: the packed int64 scale word, bit for bit.

Golden (op-plugin test/test_custom_ops/test_npu_trans_quant_param.py, CANN
aclnnTransQuantParamV3 formula)::

    out = (scale_bits & 0xFFFFE000) | (1 << 46)
    with offset: out |= (clamp(round_half_even(offset), -256, 255) & 0x1FF) << 37

round_mode=1 rounds the float32 to its top 19 bits (sign, exponent, 10 mantissa bits) to
nearest-even first; expected words below are written out in hex by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na

FLAG = 1 << 46


def scales(*bit_patterns: int) -> torch.Tensor:
    """float32 tensor with exactly these bit patterns (NaN payloads included)."""
    return torch.from_numpy(np.array(bit_patterns, dtype=np.uint32).view(np.float32).copy())


def opplugin_golden(scale: np.ndarray) -> np.ndarray:
    """op-plugin's golden, restated: numpy view of the float32 bits, mask, set bit 46."""
    bits = scale.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits & np.uint64(0xFFFFE000)) | np.uint64(FLAG)).astype(np.int64)


def test_matches_opplugin_golden_random():
    g = np.random.default_rng(0)
    for shape in ((1,), (16,), (1, 33)):
        s = g.uniform(-3, 3, size=shape).astype(np.float32)
        out = na.npu_trans_quant_param(torch.from_numpy(s))
        assert out.dtype == torch.int64 and out.shape == shape
        assert np.array_equal(out.numpy(), opplugin_golden(s))


def test_round_mode_0_truncates_by_hand():
    s = scales(0x3F800000, 0x3F801FFF, 0xBF80F123, 0x00402000, 0x7F800000, 0x00000000)
    out = na.npu_trans_quant_param(s).tolist()
    assert out == [0x3F800000 | FLAG, 0x3F800000 | FLAG, 0xBF80E000 | FLAG, 0x00402000 | FLAG,
                   0x7F800000 | FLAG, FLAG]


def test_round_mode_1_rounds_to_nearest_even_by_hand():
    s = scales(
        0x3F801000,   # exactly half, kept LSB even -> down
        0x3F803000,   # exactly half, kept LSB odd  -> up to 0x3F804000
        0x3F801001,   # above half -> up
        0x3F800FFF,   # below half -> down
        0x3FFFF000,   # all-ones mantissa, half, odd -> carries into the exponent: 2.0
        0x7F7FF000,   # largest exponent + carry -> the infinity pattern
        0x00402000,   # subnormal -> +0 (exponent 0 keeps only the sign)
        0x80001234,   # negative subnormal -> -0
        0x7FC01FFF,   # NaN: exponent 255 is truncated, never rounded
        0xBF803001,   # negative, above half -> up in magnitude
    )
    out = na.npu_trans_quant_param(s, round_mode=1).tolist()
    assert [v & ~FLAG for v in out] == [0x3F800000, 0x3F804000, 0x3F802000, 0x3F800000,
                                        0x40000000, 0x7F800000, 0x00000000, 0x80000000,
                                        0x7FC00000, 0xBF804000]
    assert all(v & FLAG for v in out)


def test_offsets_round_half_to_even_and_clamp_to_int9():
    offset = torch.tensor([2.5, -0.5, 3.5, 300.0, -300.0, -1.0, 255.4, -256.6, 0.0])
    out = na.npu_trans_quant_param(torch.tensor([1.0]), offset)
    assert out.shape == (9,)
    ints = [2, 0, 4, 255, -256, -1, 255, -256, 0]
    want = [0x3F800000 | FLAG | ((i & 0x1FF) << 37) for i in ints]
    assert out.tolist() == want
    # the 9-bit field decodes back to the clamped integer
    field = (out >> 37) & 0x1FF
    assert [f - 512 if f >= 256 else f for f in field.tolist()] == ints


def test_shapes_and_broadcasting():
    s = torch.tensor([0.5, 0.25, 2.0, 4.0])
    assert na.npu_trans_quant_param(s, torch.tensor([1.0])).shape == (4,)
    out = na.npu_trans_quant_param(torch.tensor([0.5]), torch.tensor([1.0, -1.0, 3.0]))
    assert out.shape == (3,)
    assert out.tolist() == [0x3F000000 | FLAG | (o << 37) for o in (1, 0x1FF, 3)]
    two_d = na.npu_trans_quant_param(s.reshape(1, 4), torch.ones(1, 4), round_mode=None)
    assert two_d.shape == (1, 4)
    assert torch.equal(two_d.reshape(-1), na.npu_trans_quant_param(s, torch.ones(4)))


def test_special_offsets_and_inputs_untouched():
    s = torch.tensor([1.5, -1.5])
    o = torch.tensor([float("nan"), float("inf")])
    before = (s.clone(), o.clone())
    out = na.npu_trans_quant_param(s, o)
    assert out.tolist() == [0x3FC00000 | FLAG, 0xBFC00000 | FLAG | (255 << 37)]
    assert torch.equal(s, before[0])
    assert torch.equal(o.view(torch.int32), before[1].view(torch.int32))


@pytest.mark.parametrize("args,kwargs,error,match", [
    ((torch.ones(4, dtype=torch.float64),), {}, TypeError, "expected scale dtype in"),
    ((torch.ones(2, 4),), {}, ValueError, r"expected scale shape \(t,\) or \(1, n\)"),
    ((torch.ones(4), torch.ones(1, 4)), {}, RuntimeError, "expected offset a 1-D tensor"),
    ((torch.ones(4),), {"round_mode": -1}, ValueError, "expected round_mode 0"),
    ((torch.ones(4), torch.ones(2, dtype=torch.bfloat16)), {}, TypeError,
     "expected offset dtype in"),
])
def test_bad_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=f"^npu_trans_quant_param: {match}"):
        na.npu_trans_quant_param(*args, **kwargs)


def test_strict_mode():
    with na.strict("910"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            na.npu_trans_quant_param(torch.ones(2))
    with na.strict("310P"):
        na.npu_trans_quant_param(torch.ones(2))
