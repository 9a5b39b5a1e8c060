"""Unit tests of the quantization core (npu_anywhere.ops.quant.core).

Expected values are written by hand (ties, saturation, bit layouts) from the rules the core
documents: CAST_RINT / CAST_ROUND rounding, saturating integer casts with NaN -> 0, saturating
round-half-even float8 casts with NaN -> +0 (SatMode::SAT), int4 element 8k+j in bits 4j..4j+3
of an int32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from npu_anywhere.ops.quant import core

NAN, INF = float("nan"), float("inf")


def _t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# -- rounding ----------------------------------------------------------------------------------

TIES = [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]
ROUNDED = {
    "rint": [-4, -2, -2, 0, 0, 2, 2, 4],
    "round": [-4, -3, -2, -1, 1, 2, 3, 4],
    "floor": [-4, -3, -2, -1, 0, 1, 2, 3],
    "ceil": [-3, -2, -1, 0, 1, 2, 3, 4],
    "trunc": [-3, -2, -1, 0, 0, 1, 2, 3],
}


@pytest.mark.parametrize("mode", core.ROUND_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_round_values_at_exact_ties(mode, dtype):
    out = core.round_values(_t(TIES, dtype), mode)
    assert out.dtype == dtype
    assert out.tolist() == ROUNDED[mode]


def test_round_half_away_is_exact_next_to_the_tie():
    below = 0.5 - 2.0 ** -25                                # the float32 just below 0.5
    x = _t([below, -below, 2.5 - 2 ** -22, 1.5 + 2 ** -22, 8388607.5, -8388607.5])
    # floor(|x| + 0.5) would give 1 for 0.49999997 (the sum rounds to 1.0 in float32).
    assert core.round_values(x, "round").tolist() == [0, 0, 2, 2, 8388608, -8388608]
    assert core.round_values(x, "rint").tolist() == [0, 0, 2, 2, 8388608, -8388608]


@pytest.mark.parametrize("mode", core.ROUND_MODES)
def test_round_values_passes_inf_and_nan(mode):
    out = core.round_values(_t([INF, -INF, NAN, 1e30]), mode)
    assert out[0] == INF and out[1] == -INF and math.isnan(out[2]) and out[3] == 1e30


def test_round_values_rejects_unknown_mode():
    with pytest.raises(ValueError, match="round_values: expected mode one of"):
        core.round_values(_t([1.0]), "nearest")


# -- integer casts -------------------------------------------------------------------------

def test_int8_saturates_and_maps_nan_to_zero():
    y = _t([127.5, -128.5, 126.5, -127.5, 1e9, -1e9, INF, -INF, NAN, 0.5, -0.5])
    out = core.cast_to(y, core.FORMATS["int8"])
    assert out.dtype == torch.int8
    # rint(127.5) = 128 -> 127; rint(-128.5) = -128; rint(126.5) = 126; rint(-127.5) = -128.
    assert out.tolist() == [127, -128, 126, -128, 127, -128, 127, -128, 0, 0, 0]


def test_int8_round_half_away_mode():
    out = core.cast_to(_t([126.5, -127.5, 0.5, -0.5]), core.FORMATS["int8"], round_mode="round")
    assert out.tolist() == [127, -128, 1, -1]


def test_uint8_int32_int4_ranges():
    assert core.cast_to(_t([-1.0, 255.5, 254.5, NAN, INF]), core.FORMATS["uint8"]).tolist() == \
        [0, 255, 254, 0, 255]
    out = core.cast_to(_t([3e9, -3e9, 2147483520.0, NAN, -INF]), core.FORMATS["int32"])
    assert out.dtype == torch.int32
    assert out.tolist() == [2147483647, -2147483648, 2147483520, 0, -2147483648]
    q = core.cast_to(_t([7.5, -8.5, 6.5, -7.5, 100.0, NAN, 0.5, -INF]), core.FORMATS["int4"],
                     pack=False)
    assert q.dtype == torch.int8
    assert q.tolist() == [7, -8, 6, -8, 7, 0, 0, -8]


# -- float8 casts ----------------------------------------------------------------------------

def test_float8_e4m3fn_saturates_and_rounds_half_to_even():
    fmt = core.FORMATS["float8_e4m3fn"]
    y = _t([500.0, 1e30, INF, -INF, -449.0, 1.0625, 1.1875, 3 * 2.0 ** -10, NAN, -NAN])
    out = core.cast_to(y, fmt)
    assert out.dtype == torch.float8_e4m3fn
    got = out.float()
    # 1.0625 is halfway between 1.0 (even) and 1.125; 1.1875 between 1.125 and 1.25 (even);
    # 3 * 2**-10 is halfway between the subnormals 2**-9 and 2 * 2**-9 (even); NaN of either
    # sign -> +0 (saturation mode).
    assert got.tolist() == [448.0, 448.0, 448.0, -448.0, -448.0, 1.0, 1.25, 2 * 2.0 ** -9,
                            0.0, 0.0]
    assert not got[8:].signbit().any()


def test_float8_e5m2_saturates():
    y = _t([60000.0, 1e9, -INF, 57344.0, 1.125, NAN, -NAN])
    out = core.cast_to(y, core.FORMATS["float8_e5m2"])
    got = out.float()
    # 1.125: tie -> 1.0 (even); NaN -> +0
    assert got.tolist() == [57344.0, 57344.0, -57344.0, 57344.0, 1.0, 0.0, 0.0]
    assert not got[5:].signbit().any()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_nan_to_zero_on_every_path(name):
    """cast_float8, cast_to and cast_to(inplace=True) agree; the caller's tensor is untouched
    unless it is handed over; NaN payloads of both signs all give +0."""
    fmt = core.FORMATS[name]
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x3F800000], np.uint32)
    y = torch.from_numpy(bits.view(np.float32).copy())
    keep = y.clone()
    want = [0.0, 0.0, 0.0, 0.0, 1.0]
    assert core.cast_float8(y, fmt).float().tolist() == want
    assert core.cast_to(y, fmt).float().tolist() == want
    assert torch.equal(y.view(torch.int32), keep.view(torch.int32))
    assert core.cast_to(y.clone(), fmt, inplace=True).float().tolist() == want
    assert not core.cast_to(y, fmt).float().signbit().any()


def test_float8_without_saturation_overflows_like_ieee():
    e4 = core.cast_float8(_t([464.0, 465.0, -1e6, INF, NAN]), core.FORMATS["float8_e4m3fn"],
                          saturate=False).float()
    assert e4[0] == 448.0 and all(math.isnan(v) for v in e4[1:].tolist())
    e5 = core.cast_float8(_t([61439.0, 61440.0, -1e6, NAN]), core.FORMATS["float8_e5m2"],
                          saturate=False).float()
    assert e5[:3].tolist() == [57344.0, INF, -INF] and math.isnan(e5[3])   # NaN stays NaN


def test_hifloat8_cast_saturates_and_decodes():
    # Codes by hand (tests/ops/quant/test_hifloat8.py has the full checks): 1.0625 is a tie
    # (-> 1.125, away from zero); 40960 = 1.25 * 2^15 overflows and saturates to 2^15; NaN -> 0.
    fmt = core.FORMATS["hifloat8"]
    assert core.max_value(fmt) == 32768
    out = core.cast_to(_t([1.0625, -40960.0, INF, NAN, 16.0]), fmt)
    assert out.dtype == torch.uint8 and out.tolist() == [0x09, 0xEE, 0x6E, 0x00, 0x40]
    assert core.cast_to(_t([16.0]), fmt, round_mode="hybrid").tolist() == [0x41]   # 20.0
    assert core.cast_to(_t([INF]), fmt, saturate=False).tolist() == [0x6F]
    assert core.decode(out, fmt).tolist() == [1.125, -32768.0, 32768.0, 0.0, 16.0]


def test_max_values():
    assert [core.max_value(core.FORMATS[n]) for n in
            ("int8", "int4", "float8_e4m3fn", "float8_e5m2", "uint8")] == [127, 7, 448, 57344, 255]


# -- int4 packing ----------------------------------------------------------------------------

def test_pack_int4_bit_layout():
    values = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8], [-1, 0, 0, 0, 0, 0, 0, 0],
                           [0, 0, 0, 0, 0, 0, 0, -1]], dtype=torch.int32)
    packed = core.pack_int4(values)
    assert packed.dtype == torch.int32 and packed.shape == (3, 1)
    words = [v & 0xFFFFFFFF for v in packed.flatten().tolist()]
    assert words == [0x87654321, 0x0000000F, 0xF0000000]
    # In memory (little endian): byte b holds element 2b in its low nibble.
    assert packed[0].numpy().tobytes() == bytes([0x21, 0x43, 0x65, 0x87])


def test_pack_int4_masks_out_of_range_values():
    values = torch.tensor([17, -9, 8, 0, 0, 0, 0, 0])       # low nibbles 1, 7, 8
    assert core.pack_int4(values).item() & 0xFFFFFFFF == 0x00000871


def test_pack_unpack_round_trip_all_positions():
    g = torch.Generator().manual_seed(0)
    values = torch.randint(-8, 8, (5, 3, 64), generator=g, dtype=torch.int8)
    packed = core.pack_int4(values)
    assert packed.shape == (5, 3, 8)
    assert torch.equal(core.unpack_int4(packed), values)
    # every 32-bit pattern unpacks and re-packs to itself
    words = torch.randint(-2 ** 31, 2 ** 31 - 1, (100, 4), generator=g, dtype=torch.int32)
    assert torch.equal(core.pack_int4(core.unpack_int4(words)), words)


def test_unpack_int4_by_hand():
    word = torch.tensor([0x87654321 - 2 ** 32], dtype=torch.int32)
    assert core.unpack_int4(word).tolist() == [1, 2, 3, 4, 5, 6, 7, -8]


def test_pack_int4_needs_multiple_of_8():
    with pytest.raises(RuntimeError, match="divisible by 8"):
        core.pack_int4(torch.zeros(12, dtype=torch.int32))


# -- dtype codes -----------------------------------------------------------------------------

ALL = tuple(core.FORMATS)


@pytest.mark.parametrize("value,name", [
    (None, "int8"), (torch.int8, "int8"), (1, "int8"), (torch.qint8, "int8"), (12, "int8"),
    (torch.quint4x2, "int4"), (16, "int4"), (285, "int4"), (torch.uint8, "uint8"),
    (torch.quint8, "uint8"), (13, "uint8"), (torch.int32, "int32"), (torch.qint32, "int32"),
    (14, "int32"), (torch.float8_e5m2, "float8_e5m2"), (23, "float8_e5m2"),
    (291, "float8_e5m2"), (torch.float8_e4m3fn, "float8_e4m3fn"), (24, "float8_e4m3fn"),
    (292, "float8_e4m3fn"),
])
def test_parse_dst_type_codes(value, name):
    assert core.parse_dst_type(value, op="op", param="dst_type", allowed=ALL).name == name


def test_parse_dst_type_errors():
    with pytest.raises(ValueError, match=r"^op: expected dst_type one of \['int8', 'int4'\], "
                                         r"but got torch.float16 \(5\)"):
        core.parse_dst_type(5, op="op", param="dst_type", allowed=("int8", "int4"))
    with pytest.raises(ValueError, match="but got torch.float8_e5m2"):
        core.parse_dst_type(torch.float8_e5m2, op="op", param="dst_type", allowed=("int8",))
    with pytest.raises(ValueError, match="but got dtype code 999"):
        core.parse_dst_type(999, op="op", param="dst_type", allowed=ALL)
    with pytest.raises(ValueError, match=r"op: expected dst_type one of \['int8'\], "
                                         r"but got torch_npu.hifloat8 \(290\)"):
        core.parse_dst_type(290, op="op", param="dst_type", allowed=("int8",))
    assert core.parse_dst_type(290, op="op", param="dst_type", allowed=ALL).name == "hifloat8"


# -- dynamic helpers -------------------------------------------------------------------------

def test_dynamic_symmetric_both_orders_by_hand():
    v = _t([[2.0, -1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    for reciprocal in (True, False):
        y, scale = core.dynamic_symmetric(v, core.FORMATS["int8"], -1, reciprocal=reciprocal)
        # row 0: q = 63.5 -> 127, -63.5 -> -64 (tie to even), 31.75 -> 32, 0
        assert y.tolist() == [[127, -64, 32, 0], [0, 0, 0, 0]]
        assert scale.shape == (2, 1)
        assert scale[1].item() == 0.0
        assert scale[0].item() == torch.tensor(2.0 * (1 / 127), dtype=torch.float32).item()


def test_dynamic_asymmetric_by_hand():
    v = _t([[-1.0, 0.0, 0.5, 1.0]])
    y, scale, offset = core.dynamic_asymmetric(v, core.FORMATS["int8"], -1, reciprocal=True)
    assert y.tolist() == [[-128, 0, 63, 127]]
    # float32 steps of the A2 kernel: scale = 2 / 255, offset = 127 - 1 / scale
    s32 = np.float32(2.0) / np.float32(255.0)
    assert scale.item() == s32
    assert offset.item() == np.float32(127.0) - np.float32(1.0) / s32
    y4, _, off4 = core.dynamic_asymmetric(_t([[0.0, 15.0] + [7.5] * 6]), core.FORMATS["int4"], -1,
                                          reciprocal=True, pack=False)
    # scale 1, offset 7 - 15 = -8: values -8, 7, and 7.5 - 8 = -0.5 -> 0 (tie to even)
    assert off4.item() == -8.0 and y4.tolist() == [[-8, 7, 0, 0, 0, 0, 0, 0]]
