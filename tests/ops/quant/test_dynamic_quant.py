"""Tests for npu_dynamic_quant against goldens written from the doc (seed 004)::

    scale = rowMax(abs(x * smooth_scales)) / DTYPE_MAX
    y     = round(x * smooth_scales / scale)

The float64 golden accepts either neighbour only within a hair of a .5 boundary (the NPU
computes in float32); the "kernel order" golden reproduces the A2/A3 kernel's float32 steps
(hicann/ops-nn quant/dynamic_quant/op_kernel/dynamic_quant.h: q = DTYPE_MAX / amax,
y = rint(x * q), scale = amax * float32(1/DTYPE_MAX)) and must match bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import (assert_quantized, float8_golden, hifloat8_golden,  # noqa: E402
                           rand, same_bits, smooth_rows_golden, unpack_int4_bytes)

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def doc_golden(x, smooth=None, group_index=None, dtype_max=127.0, mode="pertoken"):
    """float64: (unrounded y, scale)."""
    v = smooth_rows_golden(x, smooth if mode != "perchannel" else None, group_index)
    if mode == "perchannel":
        if smooth is not None:
            v = v * smooth.to(torch.float64)[:, None]
        amax = v.abs().amax(dim=-2, keepdim=True)
    elif mode == "pertensor":
        amax = v.abs().amax().reshape([1] * v.dim())
    else:
        amax = v.abs().amax(dim=-1, keepdim=True)
    scale = amax / dtype_max
    return v / scale, scale


def kernel_order_golden(x, smooth=None, dtype_max=127.0):
    """The A2/A3 kernel's float32 steps (pertoken, no group_index)."""
    v = x.to(torch.float32)
    if smooth is not None:
        v = v * smooth.to(torch.float32)
    amax = v.abs().amax(dim=-1, keepdim=True)
    q = torch.full_like(amax, dtype_max) / amax
    inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(dtype_max, dtype=torch.float32)
    y = torch.round(v * q)
    return y, (amax * inv).squeeze(-1)


# -- the doc formula ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (3, 5, 33), (64, 128)])
def test_int8_matches_doc_formula(dtype, shape):
    x = rand(shape, dtype, seed=shape[-1])
    y, scale = na.npu_dynamic_quant(x)
    assert y.dtype == torch.int8 and y.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == x.shape[:-1]
    exact, scale64 = doc_golden(x)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127)
    # every row's largest magnitude maps to +-127
    assert torch.equal(y.abs().amax(-1), torch.full(x.shape[:-1], 127, dtype=torch.int8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_kernel_order_bit_for_bit(dtype):
    x = rand((200, 96), dtype, seed=3)
    smooth = rand((96,), dtype, seed=4).abs() + 0.1
    for s in (None, smooth):
        y, scale = na.npu_dynamic_quant(x, smooth_scales=s)
        y_k, scale_k = kernel_order_golden(x, s)
        assert torch.equal(y.to(torch.float32), y_k)
        assert torch.equal(scale, scale_k)


def test_doc_examples_printed_npu_results():
    """The op-plugin doc (docs/zh/custom_APIs/torch_npu/torch_npu-npu_dynamic_quant.md) prints
    real NPU outputs for these inputs."""
    x = torch.tensor([[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279],
                      [0.8628, 0.6240, 0.9028]], dtype=torch.float16)
    y, scale = na.npu_dynamic_quant(x)
    assert y.tolist() == [[101, 52, 127], [115, 127, 16], [121, 88, 127]]
    torch.testing.assert_close(scale, torch.tensor([0.0072, 0.0079, 0.0071]), rtol=0, atol=5e-5)
    x = torch.tensor([[0.6680, 0.9492, 0.0845], [0.1924, 0.5278, 0.1484],
                      [0.6631, 0.9497, 0.0957]], dtype=torch.float16)
    s = torch.tensor([0.8042, 0.0884, 0.8901], dtype=torch.float16)
    y, scale = na.npu_dynamic_quant(x, smooth_scales=s)
    assert y.tolist() == [[127, 20, 18], [127, 38, 108], [127, 20, 20]]
    torch.testing.assert_close(scale, torch.tensor([0.0042, 0.0012, 0.0042]), rtol=0, atol=5e-5)


# -- rounding at exact ties, int4 ----------------------------------------------------------------

def test_int8_exact_ties_round_half_to_even():
    # amax 127 -> DTYPE_MAX / amax == 1 exactly, so y = rint(x) and scale == 1
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -125.5]],
                     dtype=torch.float16)
    y, scale = na.npu_dynamic_quant(x)
    assert y.tolist() == [[127, 0, 2, 2, 0, -2, -2, 126, -126]]
    assert scale.tolist() == [1.0]


def test_int4_packed_ties_and_layout():
    x = torch.tensor([[7.0, 0.5, 1.5, 2.5, -3.5, -7.0, 6.5, 0.0],
                      [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, -7.0]], dtype=torch.float16)
    for dst in (torch.quint4x2, 285):
        y, scale = na.npu_dynamic_quant(x, dst_type=dst)
        assert y.dtype == torch.int32 and y.shape == (2, 1)
        assert scale.tolist() == [1.0, 1.0]
        assert unpack_int4_bytes(y).tolist() == [[7, 0, 2, 2, -4, -7, 6, 0],
                                                 [1, 2, 3, 4, 5, 6, 7, -7]]
        assert y[1].item() & 0xFFFFFFFF == 0x97654321


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_int4_matches_doc_formula(dtype):
    x = rand((2, 9, 64), dtype, seed=11)
    y, scale = na.npu_dynamic_quant(x, dst_type=torch.quint4x2)
    assert y.shape == (2, 9, 8)
    exact, scale64 = doc_golden(x, dtype_max=7.0)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(unpack_int4_bytes(y), exact, -8, 7)


# -- smooth scales, MoE groups, modes ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_smooth_scales(dtype):
    x, s = rand((4, 3, 40), dtype, seed=5), rand((40,), dtype, seed=6)
    y, scale = na.npu_dynamic_quant(x, smooth_scales=s)
    exact, scale64 = doc_golden(x, s)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127)


@pytest.mark.parametrize("dst,dtype_max", [(torch.int8, 127.0), (torch.quint4x2, 7.0)])
def test_moe_group_index(dst, dtype_max):
    x = rand((2, 7, 16), torch.bfloat16, seed=7)          # 14 rows
    s = rand((5, 16), torch.bfloat16, seed=8)
    group_index = torch.tensor([3, 3, 8, 13, 14], dtype=torch.int32)   # an empty group
    y, scale = na.npu_dynamic_quant(x, smooth_scales=s, group_index=group_index, dst_type=dst)
    exact, scale64 = doc_golden(x, s, group_index, dtype_max)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    q = unpack_int4_bytes(y) if dst == torch.quint4x2 else y
    assert_quantized(q, exact, -dtype_max - 1, dtype_max)


def test_pertensor_and_perchannel():
    x = rand((2, 6, 10), torch.float16, seed=9)
    y, scale = na.npu_dynamic_quant(x, quant_mode="pertensor")
    exact, scale64 = doc_golden(x, mode="pertensor")
    assert scale.shape == (1,)
    torch.testing.assert_close(scale.double(), scale64.reshape(1), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127)
    s = rand((6,), torch.float16, seed=10)
    y, scale = na.npu_dynamic_quant(x, quant_mode="perchannel", smooth_scales=s)
    exact, scale64 = doc_golden(x, s, mode="perchannel")
    assert scale.shape == (2, 10)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-2), rtol=3e-7, atol=0)
    assert_quantized(y, exact, -128, 127)


@pytest.mark.parametrize("dst,name", [(torch.float8_e4m3fn, "float8_e4m3fn"),
                                      (292, "float8_e4m3fn"), (torch.float8_e5m2, "float8_e5m2"),
                                      (291, "float8_e5m2")])
def test_float8_outputs(dst, name):
    dtype_max = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}[name]
    x = rand((5, 32), torch.bfloat16, seed=12)
    y, scale = na.npu_dynamic_quant(x, dst_type=dst)
    assert y.dtype == getattr(torch, name)
    exact, scale64 = doc_golden(x, dtype_max=dtype_max)
    torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
    # one rounding to float8 (3 / 2 mantissa bits): within half an ulp, plus float32 noise
    rel = 2.0 ** -4 if name == "float8_e4m3fn" else 2.0 ** -3
    torch.testing.assert_close(y.double(), exact, rtol=rel * 1.01, atol=2.0 ** -9 * dtype_max / 448)
    assert y.float().abs().amax().item() == dtype_max


@pytest.mark.parametrize("mode", ["pertoken", "pertensor", "perchannel"])
@pytest.mark.parametrize("dst_type_max", [0.0, 15.0, 1000.0])
def test_hifloat8_kernel_order(mode, dst_type_max):
    # The 950 kernel (quant/dynamic_quant/op_kernel/arch35/): v = float32(x) * smooth,
    # scale = amax * float32(1 / DTYPE_MAX) with DTYPE_MAX = dst_type_max (0 -> 32768),
    # y = v / scale, then the CANN golden's hifloat8 cast (en_dtypes, clip to 2^15).
    x = rand((3, 6, 40), torch.bfloat16, seed=int(dst_type_max) + len(mode), scale=50.0)
    s = rand((6,) if mode == "perchannel" else (40,), torch.bfloat16, seed=13)
    y, scale = na.npu_dynamic_quant(x, smooth_scales=s, dst_type=290, quant_mode=mode,
                                    dst_type_max=dst_type_max)
    assert y.dtype == torch.uint8 and y.shape == x.shape
    m = dst_type_max or 32768.0
    v = x.float() * (s.float()[:, None] if mode == "perchannel" else s.float())
    dims = {"pertoken": (-1,), "perchannel": (-2,), "pertensor": (0, 1, 2)}[mode]
    amax = v.abs().amax(dim=dims, keepdim=True)
    want_scale = amax * torch.tensor(1.0 / m, dtype=torch.float32)
    assert torch.equal(y, hifloat8_golden(v / want_scale))
    want_scale = want_scale.reshape(1) if mode == "pertensor" else want_scale.squeeze(dims[0])
    assert torch.equal(scale, want_scale)


def test_hifloat8_by_hand():
    # amax 32768 -> scale 1 exactly: y is the hifloat8 cast of x itself (ties away from zero)
    x = torch.tensor([[32768.0, 1.0625, -14.5, 18.0, 7.75, 0.0], [0.0] * 6])
    y, scale = na.npu_dynamic_quant(x, dst_type=290)
    assert scale.tolist() == [1.0, 0.0]
    assert y.tolist() == [[0x6E, 0x09, 0xAF, 0x41, 0x28, 0x00], [0] * 6]   # 0 / 0 -> 0


# -- special values -----------------------------------------------------------------------------

def test_zero_inf_nan_rows():
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [float("inf"), 1.0, -2.0, 0.0],
                      [float("nan"), 1.0, 2.0, 3.0], [1.0, -1.0, 0.5, 0.25]], dtype=torch.float16)
    y, scale = na.npu_dynamic_quant(x)
    assert y[:3].tolist() == [[0] * 4] * 3
    assert y[3].tolist() == [127, -127, 64, 32]     # 63.5 -> 64 (even), 31.75 -> 32
    assert scale[0].item() == 0.0 and scale[1].item() == float("inf")
    assert torch.isnan(scale[2])


@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_zero_inf_nan_rows(dst):
    # The 950 kernels (float8 output): scale = amax * float32(1 / DTYPE_MAX), y = v / scale,
    # cast with castTraitF32tofp8 (SatMode::SAT), which turns every NaN quotient into +0:
    # the zero row (0 / 0), the inf row's inf element (inf / inf), the NaN row (all / NaN).
    top = 448.0 if dst == torch.float8_e4m3fn else 57344.0
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [float("inf"), 1.0, -2.0, 0.0],
                      [float("nan"), 1.0, 2.0, 3.0], [-float("nan"), 0.5, 1.0, 0.0],
                      [1.0, -1.0, 0.5, 0.25]], dtype=torch.bfloat16)
    y, scale = na.npu_dynamic_quant(x, dst_type=dst)
    v = x.to(torch.float32)
    want_scale = v.abs().amax(dim=-1, keepdim=True) * torch.tensor(1.0 / top, dtype=torch.float32)
    assert same_bits(y, float8_golden(v / want_scale, dst))
    assert y[0].float().tolist() == [0.0] * 4 and y[2:4].float().eq(0).all()
    assert y[1].float().tolist() == [0.0, 0.0, -0.0, 0.0]          # x / inf; inf / inf -> 0
    assert y[4].float().tolist() == [top, -top, top / 2, top / 4]
    assert not y[2:4].float().signbit().any()
    assert scale[0] == 0 and scale[1] == float("inf") and scale[2:4].isnan().all()


# -- layouts, inputs, aliases --------------------------------------------------------------------

def test_non_contiguous_and_inputs_untouched():
    base = rand((16, 24), torch.float16, seed=13)
    x = base.t()                                       # (24, 16), non-contiguous
    s = rand((32,), torch.float16, seed=14)[::2]       # (16,), strided
    before = (x.clone(), s.clone())
    y, scale = na.npu_dynamic_quant(x, smooth_scales=s)
    assert y.is_contiguous() and scale.is_contiguous()
    y2, scale2 = na.npu_dynamic_quant(x.contiguous(), smooth_scales=s.contiguous())
    assert torch.equal(y, y2) and torch.equal(scale, scale2)
    assert torch.equal(x, before[0]) and torch.equal(s, before[1])


def test_input_alias_and_torch_ops_entry():
    x = rand((3, 8), seed=15)
    y, scale = na.npu_dynamic_quant(input=x)
    y2, scale2 = torch.ops.npu.npu_dynamic_quant(x, dst_type=1)
    assert torch.equal(y, y2) and torch.equal(scale, scale2)
    with pytest.raises(TypeError, match="both 'x' and its alias 'input'"):
        na.npu_dynamic_quant(x, input=x)


def test_no_autograd():
    x = rand((3, 8), torch.float32, seed=16).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_dynamic_quant: expected inputs that do not "
                                           "require grad"):
        na.npu_dynamic_quant(x)


# -- bad inputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,match", [
    (dict(smooth_scales=torch.ones(2, 8, dtype=torch.float16)), RuntimeError,
     "expected smooth_scales a 1-D tensor of size 8"),
    (dict(smooth_scales=torch.ones(3, 7, dtype=torch.float16),
          group_index=torch.tensor([1, 2, 4], dtype=torch.int32)), RuntimeError,
     r"expected smooth_scales shape \(E, 8\)"),
    (dict(smooth_scales=torch.ones(3, 8, dtype=torch.float16),
          group_index=torch.tensor([1, 2, 4], dtype=torch.int32), quant_mode="pertensor"),
     ValueError, "expected group_index None unless quant_mode is 'pertoken'"),
    (dict(smooth_scales=torch.ones(8, dtype=torch.float16), quant_mode="perchannel"),
     RuntimeError, r"expected smooth_scales a 1-D tensor of size 4, the second-to-last dim"),
    (dict(smooth_scales=torch.ones(8, dtype=torch.int32)), TypeError,
     "expected smooth_scales dtype in"),
    (dict(dst_type=torch.uint8), ValueError, "expected dst_type one of"),
])
def test_bad_inputs(kwargs, error, match):
    x = rand((4, 8), seed=17)
    before = x.clone()
    with pytest.raises(error, match=f"^npu_dynamic_quant: {match}"):
        na.npu_dynamic_quant(x, **kwargs)
    assert torch.equal(x, before)


def test_too_many_experts():
    x = rand((4, 8), seed=18)
    with pytest.raises(ValueError, match="between 1 and 1024 experts"):
        na.npu_dynamic_quant(x, smooth_scales=torch.ones(1025, 8, dtype=torch.float16),
                             group_index=torch.arange(1025, dtype=torch.int32))


# -- strict mode -------------------------------------------------------------------------------

def test_strict_mode_rules():
    x = rand((4, 8), seed=19)
    with na.strict("A2"):
        na.npu_dynamic_quant(x, dst_type=torch.quint4x2)
        with pytest.raises(ValueError,
                           match="expected dst_type torch.int8 or torch.quint4x2 on A2"):
            na.npu_dynamic_quant(x, dst_type=torch.float8_e4m3fn)
        with pytest.raises(ValueError, match="expected quant_mode 'pertoken' on A2"):
            na.npu_dynamic_quant(x, quant_mode="pertensor")
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16 on A2"):
            na.npu_dynamic_quant(x.float())
        with pytest.raises(TypeError, match="expected smooth_scales the dtype of x"):
            na.npu_dynamic_quant(x, smooth_scales=torch.ones(8, dtype=torch.bfloat16))
        with pytest.raises(ValueError,
                           match="expected dst_type torch.int8 or torch.quint4x2 on A2"):
            na.npu_dynamic_quant(x, dst_type=290)
    with na.strict("950"):
        na.npu_dynamic_quant(x, dst_type=torch.float8_e4m3fn, quant_mode="perchannel")
        na.npu_dynamic_quant(x, dst_type=290, dst_type_max=224.0)
    with na.strict("310P"):
        with pytest.raises(RuntimeError, match="expected a product the op supports"):
            na.npu_dynamic_quant(x)
