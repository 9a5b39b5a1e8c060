"""Tests for npu_rotate_quant (int8 / int4, the A2/A3 outputs) against the doc's definition
(op-plugin torch_npu-npu_rotate_quant.md and its golden test_npu_rotate_quant.py)::

    x_rot = (x.reshape(M, N / K, K) @ rotation).reshape(M, N)      # in x's dtype
    scale = rowMax(|x_rot|) / DTYPE_MAX
    y     = round(x_rot / scale)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_goldens import half_even, rand, unpack_int4_bytes  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def golden(x, rot, dtype_max):
    m, n = x.shape
    k = rot.shape[0]
    v = (x.to(torch.float64).reshape(m, n // k, k) @ rot.to(torch.float64)).reshape(m, n)
    v = v.to(x.dtype).to(torch.float64)          # the rotation's result is stored in x's dtype
    amax = v.abs().amax(dim=-1, keepdim=True)
    return v / (amax / dtype_max), (amax / dtype_max).squeeze(-1)


def compare(y, exact, lo, hi):
    """equal to round-half-even of the exact quotient except rare +-1 steps (float32 vs
    float64 accumulation can move the x-dtype rounding of the rotation by one ulp)."""
    diff = (y.to(torch.float64) - half_even(exact).clamp(lo, hi)).abs()
    assert diff.max() <= 1
    assert int((diff > 0).sum()) <= max(3, diff.numel() // 200)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 128, 16), (3, 136, 17), (5, 256, 64), (2, 1024, 1024)])
def test_int8_matches_formula(dtype, m, n, k):
    x = rand((m, n), dtype, seed=n)
    rot = rand((k, k), dtype, seed=k) / k ** 0.5
    y, scale = na.npu_rotate_quant(x, rot)
    assert y.dtype == torch.int8 and y.shape == (m, n)
    assert scale.dtype == torch.float32 and scale.shape == (m,)
    exact, scale64 = golden(x, rot, 127.0)
    compare(y, exact, -128, 127)
    torch.testing.assert_close(scale.double(), scale64, rtol=1e-2 if dtype != torch.float32
                               else 1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_matches_formula(dtype):
    x = rand((4, 256), dtype, seed=9)
    rot = rand((32, 32), dtype, seed=10) / 32 ** 0.5
    for dst in (torch.quint4x2, 285):
        y, scale = na.npu_rotate_quant(x, rot, dst_dtype=dst)
        assert y.dtype == torch.int32 and y.shape == (4, 32) and scale.shape == (4,)
        exact, _ = golden(x, rot, 7.0)
        compare(unpack_int4_bytes(y), exact, -8, 7)


ROW = [127.0, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -1.5]


@pytest.mark.parametrize("mode,want", [("rint", [127, 2, 4, -2, 0, 0, 2, -2]),
                                       ("round", [127, 3, 4, -3, 1, -1, 2, -2]),
                                       ("floor", [127, 2, 3, -3, 0, -1, 1, -2])])
def test_round_modes_at_exact_ties(mode, want):
    # identity rotation and amax 127: scale 1, x_rot / scale hits .5 exactly
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    x[0, :8] = torch.tensor(ROW)
    y, scale = na.npu_rotate_quant(x, torch.eye(16, dtype=torch.bfloat16), round_mode=mode)
    assert scale.tolist() == [1.0]
    assert y[0, :8].tolist() == want and y[0, 8:].eq(0).all()


def test_int4_ties_and_saturation_free_range():
    x = torch.zeros(1, 128, dtype=torch.float16)
    x[0, :8] = torch.tensor([7.0, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -7.0])
    y, scale = na.npu_rotate_quant(x, torch.eye(16, dtype=torch.float16), dst_dtype=285)
    assert scale.tolist() == [1.0]
    assert unpack_int4_bytes(y)[0, :8].tolist() == [7, 2, 4, -2, 0, 0, 2, -7]


def test_rotation_is_applied_per_block():
    # a permutation rotation moves columns inside each block of K
    k = 16
    perm = torch.eye(k)[torch.arange(k).flip(0)]
    x = torch.arange(128, dtype=torch.float32).reshape(1, 128) - 60
    y, _ = na.npu_rotate_quant(x, perm)
    y_ref, _ = na.npu_rotate_quant(x.reshape(1, 8, k).flip(-1).reshape(1, 128), torch.eye(k))
    assert torch.equal(y, y_ref)


def test_zero_and_nan_rows():
    x = rand((3, 128), torch.float32, seed=11)
    x[0] = 0
    x[1, 3] = float("nan")
    y, scale = na.npu_rotate_quant(x, torch.eye(16))
    assert scale[0].item() == 0.0 and y[0].eq(0).all()
    assert torch.isnan(scale[1]) and y[1].eq(0).all()
    assert y[2].abs().max().item() == 127


def test_non_contiguous_and_inputs_unchanged():
    x = rand((128, 3), torch.float16, seed=12).t()
    rot = rand((16, 16), torch.float16, seed=13).t()
    saved = (x.clone(), rot.clone())
    y, scale = na.npu_rotate_quant(x, rot)
    assert torch.equal(x, saved[0]) and torch.equal(rot, saved[1])
    y2, scale2 = na.npu_rotate_quant(x.contiguous(), rot.contiguous())
    assert torch.equal(y, y2) and torch.equal(scale, scale2)


@pytest.mark.parametrize("kwargs,exc,msg", [
    ({"dst_dtype": torch.float8_e4m3fn}, NotImplementedError, "expected dst_dtype torch.int8"),
    ({"dst_dtype": torch.float8_e5m2}, NotImplementedError, "expected dst_dtype torch.int8"),
    ({"dst_dtype": 296}, NotImplementedError, "expected dst_dtype torch.int8"),
    ({"dst_dtype": torch.float16}, ValueError, "expected dst_dtype one of"),
    ({"axis": 0}, ValueError, "expected axis -1 or 1"),
    ({"round_mode": "ceil"}, ValueError, "expected round_mode one of"),
    ({"scale_alg": 1}, ValueError, "expected scale_alg 0"),
    ({"dst_type_max": 6.0}, ValueError, "expected dst_type_max 0.0"),
    ({"transpose_y": True}, ValueError, "expected transpose_y False"),
])
def test_bad_arguments(kwargs, exc, msg):
    x, rot = torch.ones(2, 128, dtype=torch.float16), torch.eye(16, dtype=torch.float16)
    with pytest.raises(exc, match="npu_rotate_quant: " + msg):
        na.npu_rotate_quant(x, rot, **kwargs)


@pytest.mark.parametrize("xs,rs,exc,msg", [
    ((2, 128), (8, 8), ValueError, "expected rotation K in"),
    ((2, 120), (20, 20), RuntimeError, "expected x a last dim in"),
    ((2, 136), (16, 16), RuntimeError, "expected x a last dim in"),
    ((2, 16008), (24, 24), RuntimeError, "expected x a last dim in"),
    ((2, 128), (16, 8), RuntimeError, "expected rotation a square"),
    ((2, 2, 128), (16, 16), ValueError, "expected x a 2-D tensor"),
])
def test_bad_shapes(xs, rs, exc, msg):
    with pytest.raises(exc, match="npu_rotate_quant: " + msg):
        na.npu_rotate_quant(torch.ones(xs), torch.ones(rs))


def test_bad_dtypes():
    with pytest.raises(TypeError, match="npu_rotate_quant: expected rotation the dtype of x"):
        na.npu_rotate_quant(torch.ones(2, 128), torch.eye(16, dtype=torch.float16))
    with pytest.raises(TypeError, match="npu_rotate_quant: expected x dtype"):
        na.npu_rotate_quant(torch.ones(2, 128).double(), torch.eye(16).double())


def test_alpha_and_strict_products():
    x, rot = torch.ones(2, 128, dtype=torch.bfloat16), torch.eye(16, dtype=torch.bfloat16)
    y, s = na.npu_rotate_quant(x, rot, alpha=torch.tensor([0.5]))     # no effect on int output
    assert torch.equal(y, na.npu_rotate_quant(x, rot)[0])
    with targets.strict("A2"):
        na.npu_rotate_quant(x, rot)
        with pytest.raises(ValueError, match="npu_rotate_quant: expected alpha None"):
            na.npu_rotate_quant(x, rot, alpha=torch.tensor([0.5]))
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_rotate_quant(x.float(), rot.float())
    with targets.strict("950"):
        with pytest.raises(ValueError, match="npu_rotate_quant: expected dst_dtype an MX"):
            na.npu_rotate_quant(x, rot)


def test_no_autograd():
    with pytest.raises(RuntimeError, match="npu_rotate_quant: expected inputs"):
        na.npu_rotate_quant(torch.ones(2, 128, requires_grad=True), torch.eye(16))


def test_compiled_provider_matches_reference():
    kwargs = {"dst_dtype": torch.quint4x2, "round_mode": "round"}
    from npu_anywhere import use_providers
    from npu_anywhere.kernels import compiled
    x, rot = rand((5, 256), torch.float16, seed=23), rand((32, 32), torch.float16, seed=24)
    with use_providers("reference"):
        ref = na.npu_rotate_quant(x, rot, **kwargs)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = na.npu_rotate_quant(x, rot, **kwargs)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape and torch.equal(r, g)
