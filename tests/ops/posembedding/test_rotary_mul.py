"""Tests for npu_rotary_mul / npu_rotary_mul_backward against goldens written from the doc.

Spec: seed 004, entry "npu_rotary_mul"::

    half:        x1, x2 = torch.chunk(input, 2, -1)
                 x_new = torch.cat((-x2, x1), dim=-1)
    interleave:  x1 = input[..., ::2]; x2 = input[..., 1::2]
                 x_new = rearrange(torch.stack((-x2, x1), dim=-1), "... d two -> ...(d two)")
    rotate:      x_new = input @ rotate
    output = r1 * input + r2 * x_new

Every expected value below is computed from those lines in float64 (never by the library).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
MODES = ["half", "interleave"]

# Documented r1/r2 broadcast patterns per input layout (seed 004, jit_compile=False, half).
PATTERNS = [
    ("BNSD", "11SD"), ("BNSD", "B1SD"), ("BNSD", "BNSD"),
    ("BSND", "1S1D"), ("BSND", "BS1D"), ("BSND", "BSND"),
    ("SBND", "S11D"), ("SBND", "SB1D"), ("SBND", "SBND"),
]
SIZES = {"B": 3, "S": 7, "N": 5}


# -- goldens (literal doc formulas, float64) -------------------------------------------------

def golden_x_new(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "half":
        x1, x2 = torch.chunk(x, 2, -1)
        return torch.cat((-x2, x1), dim=-1)
    assert mode == "interleave"
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    # rearrange(stack((-x2, x1), -1), "... d two -> ...(d two)", two=2)
    st = torch.stack((-x2, x1), dim=-1)
    return st.reshape(*st.shape[:-2], st.shape[-2] * 2)


def golden_rotary_mul(x, r1, r2, mode="half", rotate=None):
    """fp64 golden of the doc formula (inputs are upcast, so differentiable in fp64)."""
    x, r1, r2 = x.double(), r1.double(), r2.double()
    if rotate is not None:
        x_new = x @ rotate.double()
    else:
        x_new = golden_x_new(x, mode)
    return r1 * x + r2 * x_new


def golden_rotary_mul_fp32(x, r1, r2, mode="half"):
    """The same formula evaluated in float32 (the documented compute precision)."""
    x, r1, r2 = x.float(), r1.float(), r2.float()
    return r1 * x + r2 * golden_x_new(x, mode)


def golden_grads(grad, x, r1, r2, mode="half", rotate=None):
    """(d input, d r1, d r2) of the fp64 golden by torch autograd."""
    xs = [t.detach().double().requires_grad_(True) for t in (x, r1, r2)]
    out = golden_rotary_mul(*xs, mode=mode, rotate=rotate)
    return torch.autograd.grad(out, xs, grad.double())


# -- helpers ---------------------------------------------------------------------------------

def shape_of(layout: str, d: int) -> tuple[int, ...]:
    return tuple(SIZES[c] if c != "D" else d for c in layout)


def pattern_shape(layout: str, pattern: str, d: int) -> tuple[int, ...]:
    return tuple(1 if p == "1" else (d if p == "D" else SIZES[p]) for p in pattern)


def make(shape, dtype, *, unit=False, seed=None):
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 10_000)
    t = torch.randn(shape, generator=g, dtype=torch.float64)
    if unit:  # r1/r2 documented in [-1, 1]
        t = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    return t.to(dtype)


def make_inputs(x_shape, r_shape, dtype, seed=0):
    x = make(x_shape, dtype, seed=seed)
    r1 = make(r_shape, dtype, unit=True, seed=seed + 1)
    r2 = make(r_shape, dtype, unit=True, seed=seed + 2)
    return x, r1, r2


def half_rotate_matrix(n, dtype):
    # Doc example 3, literally.
    rotate = torch.zeros(n, n, dtype=dtype)
    half = n // 2
    rotate[:half, half:] = torch.eye(half)
    rotate[half:, :half] = -torch.eye(half)
    return rotate


def interleave_rotate_matrix(n, dtype):
    # Doc example 2, literally (note: no minus sign anywhere).
    rotate = torch.zeros(n, n, dtype=dtype)
    for i in range(0, n, 2):
        rotate[i + 0, i + 1] = 1
        rotate[i + 1, i + 0] = 1
    return rotate


# -- forward values --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout,pattern", PATTERNS, ids=[f"{l}-{p}" for l, p in PATTERNS])
def test_forward_matches_doc_formula(layout, pattern, mode, dtype):
    d = 10
    x, r1, r2 = make_inputs(shape_of(layout, d), pattern_shape(layout, pattern, d), dtype)
    x_before, r1_before, r2_before = x.clone(), r1.clone(), r2.clone()
    out = na.npu_rotary_mul(x, r1, r2, rotary_mode=mode)
    assert out.shape == x.shape
    assert out.dtype == dtype
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, mode), dtype=dtype)
    # inputs untouched
    assert torch.equal(x, x_before) and torch.equal(r1, r1_before) and torch.equal(r2, r2_before)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", [2, 6, 10, 128])
def test_forward_various_head_dims(mode, d):
    x, r1, r2 = make_inputs((2, 3, 1, d), (1, 3, 1, d), torch.float32, seed=d)
    out = na.npu_rotary_mul(x, r1, r2, mode)
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, mode))


def test_default_mode_is_half():
    x, r1, r2 = make_inputs((2, 3, 5, 6), (1, 3, 1, 6), torch.float64)
    out = na.npu_rotary_mul(x, r1, r2)
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "half"))
    # ... and differs from interleave (so the assertion above can discriminate)
    assert not torch.allclose(out, golden_rotary_mul(x, r1, r2, "interleave"))


def test_doc_example_1():
    # x (2, 2, 5, 128), r1/r2 (1, 2, 1, 128): out has x's shape.
    g = torch.Generator().manual_seed(7)
    x = torch.rand(2, 2, 5, 128, generator=g)
    r1 = torch.rand(1, 2, 1, 128, generator=g)
    r2 = torch.rand(1, 2, 1, 128, generator=g)
    out = na.npu_rotary_mul(x, r1, r2)
    assert out.shape == torch.Size([2, 2, 5, 128])
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "half"))


def test_known_values_half_and_interleave():
    # D=4, r1 = 0, r2 = 1: the output is x_new itself.
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).reshape(1, 1, 1, 4)
    zero = torch.zeros(1, 1, 1, 4, dtype=torch.float64)
    one = torch.ones(1, 1, 1, 4, dtype=torch.float64)
    half = na.npu_rotary_mul(x, zero, one, "half")
    inter = na.npu_rotary_mul(x, zero, one, "interleave")
    assert half.flatten().tolist() == [-3.0, -4.0, 1.0, 2.0]
    assert inter.flatten().tolist() == [-2.0, 1.0, -4.0, 3.0]
    # r1 = 1, r2 = 0: identity
    assert torch.equal(na.npu_rotary_mul(x, one, zero, "interleave"), x)


# -- non-contiguous inputs -------------------------------------------------------------------

def _noncontig_cases():
    base = make((3, 7, 5, 10), torch.float32, seed=11)             # BSND storage
    wide = make((3, 5, 7, 20), torch.float32, seed=12)
    strided = make((6, 5, 7, 10), torch.float32, seed=13)
    lastdim = make((3, 5, 7, 20), torch.float32, seed=14)
    return {
        "transposed": base.transpose(1, 2),                      # (3, 5, 7, 10) BNSD view
        "permuted": base.permute(2, 0, 1, 3),                    # (5, 3, 7, 10)
        "last-dim-slice": wide[..., 3:13],                       # (3, 5, 7, 10)
        "batch-step-slice": strided[::2],                        # (3, 5, 7, 10)
        "last-dim-step": lastdim[..., ::2],                      # stride 2 in D
    }


@pytest.mark.parametrize("case", list(_noncontig_cases()))
@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous_input(case, mode):
    x = _noncontig_cases()[case]
    assert not x.is_contiguous()
    r_shape = (1, 1, x.shape[2], x.shape[3])
    r1 = make(r_shape, torch.float32, unit=True, seed=21)
    r2 = make(r_shape, torch.float32, unit=True, seed=22)
    x_before = x.clone()
    out = na.npu_rotary_mul(x, r1, r2, mode)
    assert out.shape == x.shape
    assert_close_to_golden(out, golden_rotary_mul(x.contiguous(), r1, r2, mode))
    assert torch.equal(x, x_before)


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous_r1_r2(mode):
    x = make((2, 3, 4, 8), torch.float32, seed=31)
    # expanded (stride-0) and transposed r1/r2
    r1 = make((1, 3, 1, 8), torch.float32, unit=True, seed=32).expand(2, 3, 4, 8)
    r2 = make((2, 3, 1, 16), torch.float32, unit=True, seed=33)[..., 1::2]  # (2, 3, 1, 8)
    assert not r2.is_contiguous()
    out = na.npu_rotary_mul(x, r1, r2, mode)
    assert_close_to_golden(out, golden_rotary_mul(x, r1.contiguous(), r2.contiguous(), mode))


# -- rotate matrix ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotate_doc_half_matrix(dtype):
    n = 8
    x, r1, r2 = make_inputs((2, 2, 5, n), (1, 1, 5, n), dtype, seed=41)
    rotate = half_rotate_matrix(n, dtype)
    out = na.npu_rotary_mul(x, r1, r2, "half", rotate)
    assert out.dtype == dtype and out.shape == x.shape
    # literally x @ rotate ...
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, rotate=rotate), dtype=dtype)
    # ... which for this matrix is the half-mode rotation
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "half"), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotate_doc_interleave_matrix_is_used_literally(dtype):
    n = 8
    x, r1, r2 = make_inputs((2, 2, 5, n), (1, 1, 5, n), dtype, seed=42)
    rotate = interleave_rotate_matrix(n, dtype)
    out = na.npu_rotary_mul(x, r1, r2, "interleave", rotate)
    # x_new = input @ rotate: pairs swapped, without a minus sign.
    golden = golden_rotary_mul(x, r1, r2, rotate=rotate)
    assert_close_to_golden(out, golden, dtype=dtype)
    xd = x.double()
    swapped = torch.stack((xd[..., 1::2], xd[..., ::2]), dim=-1).flatten(-2)
    assert_close_to_golden(out, r1.double() * xd + r2.double() * swapped, dtype=dtype)
    # not the (signed) interleave rotation
    assert not torch.allclose(out.double(), golden_rotary_mul(x, r1, r2, "interleave"),
                              atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_rotate_random_matrix(mode, dtype):
    n = 6
    x, r1, r2 = make_inputs((3, 7, 5, n), (1, 7, 1, n), dtype, seed=43)
    rotate = (make((n, n), torch.float64, seed=44) / n ** 0.5).to(dtype)
    out = na.npu_rotary_mul(x, r1, r2, mode, rotate)
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, rotate=rotate), dtype=dtype)


def test_rotate_keyword():
    n = 4
    x, r1, r2 = make_inputs((1, 2, 3, n), (1, 2, 1, n), torch.float64, seed=45)
    rotate = make((n, n), torch.float64, seed=46)
    out = na.npu_rotary_mul(x, r1, r2, rotate=rotate)
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, rotate=rotate))


# -- precision order -------------------------------------------------------------------------

def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map fp16/bf16 bit patterns to integers whose order is the float order (+0 == -0)."""
    bits = t.view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_computed_in_fp32_rounded_once(mode, dtype):
    x, r1, r2 = make_inputs((4, 16, 4, 32), (1, 16, 1, 32), dtype, seed=51)
    out = na.npu_rotary_mul(x, r1, r2, mode)
    expected = golden_rotary_mul_fp32(x, r1, r2, mode).to(dtype)
    ulps = (_ordered_bits(out) - _ordered_bits(expected)).abs()
    assert int(ulps.max()) <= 1, f"max ulp difference {int(ulps.max())}"
    identical = float((ulps == 0).double().mean())
    assert identical >= 0.99, f"only {identical:.4f} of elements bit-identical"


# -- self= alias -----------------------------------------------------------------------------

def test_self_alias():
    x, r1, r2 = make_inputs((2, 3, 4, 6), (1, 3, 1, 6), torch.float64, seed=61)
    a = na.npu_rotary_mul(self=x, r1=r1, r2=r2, rotary_mode="interleave")
    b = na.npu_rotary_mul(input=x, r1=r1, r2=r2, rotary_mode="interleave")
    assert torch.equal(a, b)
    assert_close_to_golden(a, golden_rotary_mul(x, r1, r2, "interleave"))
    with pytest.raises(TypeError):
        na.npu_rotary_mul(x, r1, r2, self=x)


def test_torch_ops_entry_points():
    x, r1, r2 = make_inputs((2, 3, 4, 6), (1, 3, 1, 6), torch.float64, seed=62)
    out = torch.ops.npu.npu_rotary_mul(x, r1, r2, "interleave")
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "interleave"))
    g = make((2, 3, 4, 6), torch.float64, seed=63)
    dx, dr1, dr2 = torch.ops.npu.npu_rotary_mul_backward(g, x, r1, r2, "half")
    gx, gr1, gr2 = golden_grads(g, x, r1, r2, "half")
    assert_close_to_golden(dx, gx)
    assert_close_to_golden(dr1, gr1)
    assert_close_to_golden(dr2, gr2)


# -- autograd --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout,pattern", [("BNSD", "11SD"), ("BNSD", "B1SD"),
                                            ("BSND", "1S1D"), ("SBND", "SB1D"),
                                            ("BSND", "BSND")])
def test_gradcheck(layout, pattern, mode):
    sizes = {"B": 2, "S": 3, "N": 2}
    d = 4
    x_shape = tuple(sizes[c] if c != "D" else d for c in layout)
    r_shape = tuple(1 if c == "1" else (d if c == "D" else sizes[c]) for c in pattern)
    x, r1, r2 = (t.requires_grad_(True) for t in make_inputs(x_shape, r_shape, torch.float64,
                                                             seed=71))
    assert torch.autograd.gradcheck(
        lambda a, b, c: na.npu_rotary_mul(a, b, c, mode), (x, r1, r2))


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_with_rotate_matrix(mode):
    d = 4
    x, r1, r2 = (t.requires_grad_(True) for t in make_inputs((2, 3, 2, d), (1, 3, 1, d),
                                                             torch.float64, seed=72))
    rotate = make((d, d), torch.float64, seed=73)
    assert torch.autograd.gradcheck(
        lambda a, b, c: na.npu_rotary_mul(a, b, c, mode, rotate), (x, r1, r2))


@pytest.mark.parametrize("mode", MODES)
def test_autograd_grads_match_golden_with_broadcast(mode):
    x, r1, r2 = (t.requires_grad_(True) for t in make_inputs((3, 7, 5, 6), (1, 7, 1, 6),
                                                             torch.float64, seed=74))
    g = make((3, 7, 5, 6), torch.float64, seed=75)
    out = na.npu_rotary_mul(x, r1, r2, mode)
    got = torch.autograd.grad(out, (x, r1, r2), g)
    want = golden_grads(g, x, r1, r2, mode)
    assert got[1].shape == r1.shape and got[2].shape == r2.shape
    for a, b in zip(got, want):
        assert_close_to_golden(a, b)


def test_autograd_grads_with_random_rotate_match_golden():
    d = 6
    x, r1, r2 = (t.requires_grad_(True) for t in make_inputs((2, 3, 4, d), (2, 3, 1, d),
                                                             torch.float64, seed=76))
    rotate = make((d, d), torch.float64, seed=77)
    g = make((2, 3, 4, d), torch.float64, seed=78)
    got = torch.autograd.grad(na.npu_rotary_mul(x, r1, r2, "half", rotate), (x, r1, r2), g)
    want = golden_grads(g, x, r1, r2, rotate=rotate)
    for a, b in zip(got, want):
        assert_close_to_golden(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout,pattern", [("BNSD", "11SD"), ("BSND", "BS1D"),
                                            ("SBND", "SBND"), ("SBND", "S11D")])
def test_backward_op_matches_golden_grads(layout, pattern, mode, dtype):
    d = 6
    x, r1, r2 = make_inputs(shape_of(layout, d), pattern_shape(layout, pattern, d), dtype,
                            seed=81)
    g = make(x.shape, dtype, seed=82)
    dx, dr1, dr2 = na.npu_rotary_mul_backward(g, x, r1, r2, rotary_mode=mode)
    gx, gr1, gr2 = golden_grads(g, x, r1, r2, mode)
    assert (dx.shape, dr1.shape, dr2.shape) == (x.shape, r1.shape, r2.shape)
    assert dx.dtype == dr1.dtype == dr2.dtype == dtype
    assert_close_to_golden(dx, gx, dtype=dtype)
    assert_close_to_golden(dr1, gr1, dtype=dtype)
    assert_close_to_golden(dr2, gr2, dtype=dtype)


def test_backward_op_self_alias_and_default_mode():
    x, r1, r2 = make_inputs((2, 3, 4, 6), (1, 3, 1, 6), torch.float64, seed=83)
    g = make(x.shape, torch.float64, seed=84)
    a = na.npu_rotary_mul_backward(g, self=x, r1=r1, r2=r2)
    want = golden_grads(g, x, r1, r2, "half")
    for got, exp in zip(a, want):
        assert_close_to_golden(got, exp)


# -- errors ----------------------------------------------------------------------------------

def _ok_inputs(dtype=torch.float32, d=8):
    return make_inputs((2, 3, 4, d), (1, 3, 1, d), dtype, seed=91)


def _raises(exc, fn, prefix="npu_rotary_mul: expected"):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)
    return info


def test_error_quarter_mode():
    x, r1, r2 = _ok_inputs()
    _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "quarter"))


def test_error_unknown_mode():
    x, r1, r2 = _ok_inputs()
    _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "bogus"))


def test_error_odd_head_dim():
    x, r1, r2 = make_inputs((2, 3, 4, 7), (1, 3, 1, 7), torch.float32)
    _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2))
    _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "interleave"))


def test_error_3d_input():
    x, r1, r2 = make_inputs((3, 4, 8), (1, 4, 8), torch.float32)
    _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2))


def test_error_3d_r1():
    x = make((2, 3, 4, 8), torch.float32)
    r = make((3, 1, 8), torch.float32, unit=True)
    r2 = make((1, 3, 1, 8), torch.float32, unit=True)
    with pytest.raises(Exception) as info:
        na.npu_rotary_mul(x, r, r2)
    assert str(info.value).startswith("npu_rotary_mul: expected")


@pytest.mark.parametrize("x_dtype,r_dtype", [(torch.bfloat16, torch.float32),
                                              (torch.float32, torch.float16),
                                              (torch.float16, torch.bfloat16)])
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_mixed_dtypes_round_r1_r2_to_input_dtype(x_dtype, r_dtype, mode):
    # op-plugin casts r1/r2 to the input dtype before the kernel (RotaryMulKernelNpuOpApi.cpp).
    x = make((2, 3, 4, 8), x_dtype, seed=5)
    r1 = make((1, 3, 1, 8), r_dtype, unit=True, seed=6)
    r2 = make((1, 3, 1, 8), r_dtype, unit=True, seed=7)
    out = na.npu_rotary_mul(x, r1, r2, mode)
    assert out.dtype == x_dtype
    golden = golden_rotary_mul(x, r1.to(x_dtype), r2.to(x_dtype), mode)
    assert_close_to_golden(out, golden, dtype=x_dtype)


def test_mixed_dtype_backward_matches_rounded_golden():
    x = make((2, 3, 4, 8), torch.float32, seed=8)
    r1 = make((1, 3, 1, 8), torch.float16, unit=True, seed=9)
    r2 = make((1, 3, 1, 8), torch.float16, unit=True, seed=10)
    g = make((2, 3, 4, 8), torch.bfloat16, seed=11)
    dx, dr1, dr2 = na.npu_rotary_mul_backward(g, x, r1, r2)
    want = golden_grads(g.float(), x, r1.float(), r2.float())
    for got, exp in zip((dx, dr1, dr2), want):
        assert got.dtype == torch.float32
        assert_close_to_golden(got, exp, dtype=torch.float32)


def test_error_integer_dtype():
    x, r1, r2 = _ok_inputs()
    _raises(TypeError, lambda: na.npu_rotary_mul(x.int(), r1.int(), r2.int()))


@pytest.mark.parametrize("r_shape", [(1, 2, 1, 8), (2, 3, 4, 4), (1, 1, 1, 16), (4, 3, 1, 8)])
def test_error_r1_not_broadcastable(r_shape):
    x = make((2, 3, 4, 8), torch.float32)
    r1 = make(r_shape, torch.float32, unit=True)
    r2 = make((1, 3, 1, 8), torch.float32, unit=True)
    _raises(RuntimeError, lambda: na.npu_rotary_mul(x, r1, r2))
    _raises(RuntimeError, lambda: na.npu_rotary_mul(x, r2, r1))


@pytest.mark.parametrize("rot_shape", [(8, 6), (6, 6), (8,), (1, 8, 8)])
def test_error_wrong_rotate_shape(rot_shape):
    x, r1, r2 = _ok_inputs()
    rotate = torch.zeros(rot_shape)
    _raises(RuntimeError, lambda: na.npu_rotary_mul(x, r1, r2, "half", rotate))


def test_rotate_of_another_float_dtype_is_accepted():
    # Seed 004 examples 2 and 3 pass a bfloat16 rotate with float32 input.
    x, r1, r2 = _ok_inputs()
    rotate = torch.randn(8, 8).to(torch.bfloat16)
    out = na.npu_rotary_mul(x, r1, r2, "half", rotate)
    xd = x.double()
    golden = r1.double() * xd + r2.double() * (xd @ rotate.double())
    assert out.dtype == x.dtype
    torch.testing.assert_close(out.double(), golden, rtol=1e-5, atol=1e-5)


def test_error_rotate_integer_dtype():
    x, r1, r2 = _ok_inputs()
    _raises(TypeError, lambda: na.npu_rotary_mul(x, r1, r2, "half",
                                                 torch.zeros(8, 8, dtype=torch.int32)))


def test_error_backward_grad_shape():
    x, r1, r2 = _ok_inputs()
    g = torch.zeros(2, 3, 4, 6)
    _raises(RuntimeError, lambda: na.npu_rotary_mul_backward(g, x, r1, r2),
            prefix="npu_rotary_mul_backward: expected")


def test_error_backward_quarter():
    x, r1, r2 = _ok_inputs()
    _raises(ValueError, lambda: na.npu_rotary_mul_backward(x, x, r1, r2, "quarter"),
            prefix="npu_rotary_mul_backward: expected")


def test_failed_call_leaves_inputs_untouched():
    x, r1, r2 = _ok_inputs()
    before = [t.clone() for t in (x, r1, r2)]
    with pytest.raises(ValueError):
        na.npu_rotary_mul(x, r1, r2, "quarter")
    for t, b in zip((x, r1, r2), before):
        assert torch.equal(t, b)


# -- strict mode -----------------------------------------------------------------------------

def test_strict_310p_rejects_bf16():
    x, r1, r2 = make_inputs((2, 3, 4, 128), (1, 3, 1, 128), torch.bfloat16)
    with na.strict("310P"):
        _raises(TypeError, lambda: na.npu_rotary_mul(x, r1, r2))
    # fp16 with D=128 is fine on 310P
    xh, r1h, r2h = (t.half() for t in (x, r1, r2))
    with na.strict("310P"):
        out = na.npu_rotary_mul(xh, r1h, r2h)
    assert_close_to_golden(out, golden_rotary_mul(xh, r1h, r2h), dtype=torch.float16)


def test_strict_310p_only_half_d128():
    x, r1, r2 = make_inputs((2, 3, 4, 64), (1, 3, 1, 64), torch.float16)
    with na.strict("310P"):
        _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2))
    x, r1, r2 = make_inputs((2, 3, 4, 128), (1, 3, 1, 128), torch.float16)
    with na.strict("310P"):
        _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "interleave"))


def test_strict_950_not_documented():
    x, r1, r2 = _ok_inputs(d=128)
    with na.strict("950"):
        _raises(RuntimeError, lambda: na.npu_rotary_mul(x, r1, r2))


def test_strict_a2_head_dim():
    x, r1, r2 = make_inputs((2, 3, 1, 896), (1, 3, 1, 896), torch.float32)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2))
    x, r1, r2 = make_inputs((2, 3, 4, 128), (1, 3, 1, 128), torch.float32)
    with na.strict("A2"):
        out = na.npu_rotary_mul(x, r1, r2)
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2))


def test_strict_a2_rejects_fp64():
    x, r1, r2 = make_inputs((2, 3, 4, 128), (1, 3, 1, 128), torch.float64)
    with na.strict("A2"):
        _raises(TypeError, lambda: na.npu_rotary_mul(x, r1, r2))


def test_strict_a2_interleave_patterns():
    # BSND input (B=2, S=3, N=4): interleave documents only 1S1D; BS1D is half-only.
    x, r1, r2 = make_inputs((2, 3, 4, 128), (2, 3, 1, 128), torch.float32)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "interleave"))
        out_half = na.npu_rotary_mul(x, r1, r2, "half")
        s1, s2 = r1[:1], r2[:1]                              # 1S1D
        out_inter = na.npu_rotary_mul(x, s1, s2, "interleave")
    assert_close_to_golden(out_half, golden_rotary_mul(x, r1, r2, "half"))
    assert_close_to_golden(out_inter, golden_rotary_mul(x, s1, s2, "interleave"))
    # default mode accepts the same BS1D interleave call
    out = na.npu_rotary_mul(x, r1, r2, "interleave")
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "interleave"))


def test_strict_is_scoped():
    x, r1, r2 = make_inputs((2, 3, 1, 896), (1, 3, 1, 896), torch.float32)
    with na.strict("A2"):
        with pytest.raises(ValueError):
            na.npu_rotary_mul(x, r1, r2)
    out = na.npu_rotary_mul(x, r1, r2)  # default mode again
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2))


@pytest.mark.parametrize("product", ["910", "310P"])
def test_strict_jit_compile_products_half_d128_only(product):
    # Atlas training (910) / inference (310P): only the jit_compile=True kernel, half, D=128.
    x, r1, r2 = make_inputs((2, 3, 4, 128), (1, 3, 1, 128), torch.float16)
    with na.strict(product):
        out = na.npu_rotary_mul(x, r1, r2, "half")
        _raises(ValueError, lambda: na.npu_rotary_mul(x, r1, r2, "interleave"))
        x6, a6, b6 = make_inputs((2, 3, 4, 6), (1, 3, 1, 6), torch.float16)
        _raises(ValueError, lambda: na.npu_rotary_mul(x6, a6, b6, "half"))
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "half"), dtype=torch.float16)


def test_strict_a3_like_a2():
    x, r1, r2 = make_inputs((2, 3, 4, 256), (1, 3, 1, 256), torch.bfloat16)
    with na.strict("A3"):
        out = na.npu_rotary_mul(x, r1, r2, "interleave")
        xb, a, b = make_inputs((2, 3, 1, 900), (1, 3, 1, 900), torch.bfloat16)
        _raises(ValueError, lambda: na.npu_rotary_mul(xb, a, b))
    assert_close_to_golden(out, golden_rotary_mul(x, r1, r2, "interleave"), dtype=torch.bfloat16)
