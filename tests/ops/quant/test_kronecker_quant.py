"""Tests for npu_kronecker_quant against the CANN aclnnFlatQuant formula::

    x''            = kronecker_p1 @ (x @ kronecker_p2)
    quant_scale[k] = max(|x''[k]|) / (7 / clip_ratio)
    out            = int4(x'' / quant_scale), packed eight to an int32 (low nibble first)

The float64 golden checks the formula up to the kernel's intermediate roundings (|diff| <= 1);
the kernel-order golden (float32 / float16 steps of hicann/ops-nn
quant/flat_quant/op_kernel/flat_quant_high.h) must match bit for bit.
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


def doc_golden(x, p1, p2, clip=1.0):
    v = p1.to(torch.float64) @ (x.to(torch.float64) @ p2.to(torch.float64))
    scale = v.abs().amax(dim=(1, 2)) / (7.0 / clip)
    return v / scale[:, None, None], scale


def kernel_golden(x, p1, p2, clip=1.0):
    c = torch.tensor(clip, dtype=torch.float32)
    x1 = (x.to(torch.float64) @ p2.to(torch.float64)).to(torch.float32).to(x.dtype)
    x2 = (p1.to(torch.float64) @ x1.to(torch.float64)).to(torch.float32)
    h = x2.to(torch.float16).to(torch.float32)
    amax = h.abs().amax(dim=(1, 2))
    scale = amax * c / 7
    q = torch.where(amax != 0, (torch.tensor(7.0) / c) / amax, torch.tensor(7.0))
    t = (h * q[:, None, None]).to(torch.float16).to(torch.float32)
    return torch.round(t).clamp(-8, 7), scale


def unpacked(out):
    return unpack_int4_bytes(out).to(torch.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,m,n", [(1, 1, 8), (3, 5, 16), (4, 7, 24)])
@pytest.mark.parametrize("clip", [None, 0.7848])
def test_matches_formula(dtype, k, m, n, clip):
    x = rand((k, m, n), dtype, seed=m + n)
    p1 = rand((m, m), dtype, seed=1)
    p2 = rand((n, n), dtype, seed=2)
    out, scale = na.npu_kronecker_quant(x, p1, p2, clip)
    assert out.dtype == torch.int32 and out.shape == (k, m, n // 8)
    assert scale.dtype == torch.float32 and scale.shape == (k,)
    c = 1.0 if clip is None else clip
    exact, scale64 = doc_golden(x, p1, p2, c)
    want = half_even(exact).clamp(-8, 7)
    assert (unpacked(out) - want).abs().max() <= 1
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3     # x' is stored in x's dtype
    torch.testing.assert_close(scale.double(), scale64, rtol=tol, atol=0)
    yk, sk = kernel_golden(x, p1, p2, c)
    # float32 matmul accumulation order may move a value across a float16 rounding point:
    # allow a handful of +-1 differences
    diff = (unpacked(out) - yk.double()).abs()
    assert diff.max() <= 1 and int((diff > 0).sum()) <= max(2, diff.numel() // 200)
    torch.testing.assert_close(scale, sk, rtol=1e-3, atol=0)


def test_exact_ties_and_packing():
    # identity transforms, amax 7 -> scale 1 and q 1: x'' / scale hits .5 exactly
    row = [7.0, 2.5, 3.5, -0.5, 1.5, -2.5, 0.0, -7.0]
    x = torch.tensor([[row]], dtype=torch.float16)
    out, scale = na.npu_kronecker_quant(x, torch.eye(1, dtype=torch.float16),
                                        torch.eye(8, dtype=torch.float16))
    assert scale.tolist() == [1.0]
    assert unpacked(out).flatten().tolist() == [7, 2, 4, 0, 2, -2, 0, -7]
    # nibble j of the int32 holds element j (low nibble first)
    word = out.item() & 0xFFFFFFFF
    nibbles = [(word >> (4 * j)) & 0xF for j in range(8)]
    assert nibbles == [7, 2, 4, 0, 2, 0xE, 0, 0x9]


def test_clip_saturates():
    x = torch.tensor([[[7.0, -7.0, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0]]], dtype=torch.bfloat16)
    out, scale = na.npu_kronecker_quant(x, torch.eye(1, dtype=torch.bfloat16),
                                        torch.eye(8, dtype=torch.bfloat16), clip_ratio=0.5)
    assert scale.tolist() == [0.5]
    assert unpacked(out).flatten().tolist() == [7, -8, 6, 2, 0, 0, 0, 0]


def test_zero_token():
    x = torch.zeros(2, 2, 8, dtype=torch.float16)
    x[1, 0, 0] = 3.5
    out, scale = na.npu_kronecker_quant(x, torch.eye(2, dtype=torch.float16),
                                        torch.eye(8, dtype=torch.float16))
    assert scale[0].item() == 0.0 and out[0].eq(0).all()
    assert scale[1].item() == pytest.approx(0.5)


def test_dst_dtype_spellings():
    x, p1, p2 = rand((2, 3, 8), seed=3), rand((3, 3), seed=4), rand((8, 8), seed=5)
    ref = na.npu_kronecker_quant(x, p1, p2)
    for dst in (torch.int32, 3, 285):
        out, scale = na.npu_kronecker_quant(x, p1, p2, dst_dtype=dst, dst_type_max=0.0)
        assert torch.equal(out, ref[0]) and torch.equal(scale, ref[1])


def test_non_contiguous_and_inputs_unchanged():
    x = rand((16, 3, 2), torch.float16, seed=6).permute(2, 1, 0)        # (2, 3, 16)
    p1 = rand((3, 3), torch.float16, seed=7).t()
    p2 = rand((16, 16), torch.float16, seed=8)
    saved = [t.clone() for t in (x, p1, p2)]
    out, scale = na.npu_kronecker_quant(x, p1, p2)
    assert all(torch.equal(a, b) for a, b in zip((x, p1, p2), saved))
    out2, scale2 = na.npu_kronecker_quant(x.contiguous(), p1.contiguous(), p2)
    assert torch.equal(out, out2) and torch.equal(scale, scale2)


@pytest.mark.parametrize("shapes,kwargs,exc,msg", [
    (((2, 3, 12), (3, 3), (12, 12)), {}, ValueError, "expected x a last dim"),
    (((2, 3, 8), (2, 2), (8, 8)), {}, RuntimeError, "expected kronecker_p1 shape"),
    (((2, 3, 8), (3, 3), (8, 8)), {"clip_ratio": 0.0}, ValueError, "expected clip_ratio"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_dtype": 296}, NotImplementedError,
     "expected dst_dtype a format"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_dtype": 1}, ValueError, "expected dst_dtype one of"),
    (((2, 3, 8), (3, 3), (8, 8)), {"dst_type_max": 7.0}, ValueError,
     "expected dst_type_max 0"),
    (((1, 257, 8), (257, 257), (8, 8)), {}, ValueError, "expected x shape"),
])
def test_bad_inputs(shapes, kwargs, exc, msg):
    x, p1, p2 = (torch.ones(s, dtype=torch.float16) for s in shapes)
    with pytest.raises(exc, match="npu_kronecker_quant: " + msg):
        na.npu_kronecker_quant(x, p1, p2, **kwargs)


def test_bad_dtypes():
    x = torch.ones(2, 3, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="npu_kronecker_quant: expected kronecker_p2 the dtype"):
        na.npu_kronecker_quant(x, torch.ones(3, 3, dtype=torch.float16), torch.ones(8, 8))
    with pytest.raises(TypeError, match="npu_kronecker_quant: expected x dtype"):
        na.npu_kronecker_quant(x.double(), torch.ones(3, 3).double(), torch.ones(8, 8).double())


def test_strict_products():
    x, p1, p2 = torch.ones(2, 3, 8), torch.ones(3, 3), torch.ones(8, 8)
    na.npu_kronecker_quant(x, p1, p2)                    # float32: default mode only
    with targets.strict("A2"):
        with pytest.raises(TypeError, match="expected x dtype float16 or bfloat16"):
            na.npu_kronecker_quant(x, p1, p2)
        na.npu_kronecker_quant(x.half(), p1.half(), p2.half())
    with targets.strict("310P"):
        with pytest.raises(Exception, match="npu_kronecker_quant"):
            na.npu_kronecker_quant(x.half(), p1.half(), p2.half())


def test_no_autograd():
    x = torch.ones(2, 3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="npu_kronecker_quant: expected inputs"):
        na.npu_kronecker_quant(x, torch.ones(3, 3), torch.ones(8, 8))
