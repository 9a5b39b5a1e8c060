"""Tests for npu_convert_weight_to_int4pack: bit-exact int4 packing.

Golden: op-plugin test/test_custom_ops/test_npu_convert_weight_to_int4pack.py
``pack_int4_3dim`` (restated below with numpy): for each group of eight values w0..w7,
``(w0 & 0xf) + ((w1 & 0xf) << 4)`` forms byte 0, and so on, bytes assembled little endian.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import npu_anywhere as na


def pack_golden(w: np.ndarray) -> np.ndarray:
    *lead, n = w.shape
    flat = w.reshape(-1, n // 8, 8).astype(np.int64)
    out = np.zeros(flat.shape[:2], dtype=np.int64)
    for b in range(4):
        byte = (flat[..., 2 * b] & 0x0F) + ((flat[..., 2 * b + 1] & 0x0F) << 4)
        out += byte << (8 * b)
    out = np.where(out >= 2 ** 31, out - 2 ** 32, out).astype(np.int32)
    return out.reshape(*lead, n // 8)


@pytest.mark.parametrize("shape", [(64, 32), (32, 64), (17, 72), (1, 8)])
def test_2d_matches_golden(shape):
    g = torch.Generator().manual_seed(shape[0])
    w = torch.randint(-8, 8, shape, generator=g, dtype=torch.int32)
    out = na.npu_convert_weight_to_int4pack(w)
    assert out.dtype == torch.int32 and out.shape == (shape[0], shape[1] // 8)
    assert np.array_equal(out.numpy(), pack_golden(w.numpy()))


def test_3d_and_inner_k_tiles():
    w = torch.randint(-8, 8, (2, 8, 16), generator=torch.Generator().manual_seed(1),
                      dtype=torch.int32)
    out = na.npu_convert_weight_to_int4pack(w, inner_k_tiles=4)
    assert out.shape == (2, 8, 2)
    assert np.array_equal(out.numpy(), pack_golden(w.numpy()))


def test_bit_layout_by_hand():
    w = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8], [-1, -1, -1, -1, -1, -1, -1, -1],
                      [0, 0, 0, 0, 0, 0, 0, 7]], dtype=torch.int32)
    words = [v & 0xFFFFFFFF for v in na.npu_convert_weight_to_int4pack(w).flatten().tolist()]
    assert words == [0x87654321, 0xFFFFFFFF, 0x70000000]


def test_out_of_range_values_keep_their_low_nibble():
    w = torch.tensor([[16, 17, -9, 8, 0, 0, 0, 0]], dtype=torch.int32)
    assert na.npu_convert_weight_to_int4pack(w).item() & 0xFFFFFFFF == 0x00008710


def test_float4_e2m1_weights():
    # op-plugin's FP32_BIT_TO_FP4_E2M1 table (950): bits & 0xFFC00000 looked up; others -> 0
    values = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
              1.75, 0.25, 8.0, 5.0, 7.0, -1.99, 100.0, float("inf")]
    w = torch.tensor(values, dtype=torch.float32).reshape(3, 8)
    out = na.npu_convert_weight_to_int4pack(w)
    assert out.dtype == torch.float32 and out.shape == (3, 1)
    words = [v & 0xFFFFFFFF for v in out.view(torch.int32).flatten().tolist()]
    # 1.75 -> 1.5 (code 3), 0.25 -> 0, 8 -> 0, 5 -> 4 (6), 7 -> 6 (7), -1.99 -> -1.5 (0xB),
    # 100 -> 0, inf -> 0
    assert words == [0x76543210, 0xFEDCBA98, 0x00B76003]


def test_inputs_untouched():
    w = torch.randint(-8, 8, (8, 16), dtype=torch.int32)
    before = w.clone()
    na.npu_convert_weight_to_int4pack(w)
    assert torch.equal(w, before)


@pytest.mark.parametrize("w,error,match", [
    (torch.zeros(8, 16, dtype=torch.int64), TypeError, "expected weight dtype in"),
    (torch.zeros(2, 2, 2, 8, dtype=torch.int32), ValueError, "expected weight a 2-D"),
    (torch.zeros(0, 8, dtype=torch.int32), ValueError, "expected weight no empty dim"),
    (torch.zeros(8, 10, dtype=torch.int32), ValueError, "expected weight a last dim divisible"),
    (torch.zeros(16, 16, dtype=torch.int32)[:, ::2], ValueError, "expected weight a contiguous"),
])
def test_bad_inputs(w, error, match):
    with pytest.raises(error, match=f"^npu_convert_weight_to_int4pack: {match}"):
        na.npu_convert_weight_to_int4pack(w)


def test_strict_mode():
    with na.strict("A2"):
        na.npu_convert_weight_to_int4pack(torch.zeros(8, 16, dtype=torch.int32))
        with pytest.raises(TypeError, match="expected weight dtype int32 on A2"):
            na.npu_convert_weight_to_int4pack(torch.zeros(8, 16))
        with pytest.raises(ValueError, match="expected weight a 2-D tensor on A2"):
            na.npu_convert_weight_to_int4pack(torch.zeros(2, 8, 16, dtype=torch.int32))
    with na.strict("950"):
        na.npu_convert_weight_to_int4pack(torch.zeros(2, 8, 16))
