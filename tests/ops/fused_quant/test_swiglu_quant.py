"""npu_swiglu_quant against float64 goldens of the doc formula (aclnnSwiGluQuantV2)::

    act = swish(A) * B (activate_left) or A * swish(B);  t = act * smooth[g] (+ offsets[g])
    static: y = rint(t);  dynamic: scale = DTYPE_MAX / max|t|, y = rint(t * scale)

saturated to int8 / int4, NaN -> 0.  The library computes in float32, so random inputs may land
on the other side of a .5 tie: they are compared with |diff| <= 1 on a tiny fraction of the
elements; exact expectations use inputs whose intermediates are exact (smooth_scales 0 with
offsets, or a gate of 1024 where swish(1024) == 1024 in float32 and float64).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I32 = torch.int32


def make(shape, dtype=F32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def golden(x, smooth=None, offsets=None, group_index=None, left=False, mode=0, count=False,
           qmax=127):
    """float64 from the doc formula; returns (y values unpacked, scale, rows-in-a-group mask)."""
    xd = x.double().reshape(-1, x.shape[-1])
    n = xd.shape[-1] // 2
    a, b = xd[:, :n], xd[:, n:]
    swish = lambda v: v / (1.0 + torch.exp(-v))
    act = swish(a) * b if left else a * swish(b)
    m = act.shape[0]
    per_row_s = torch.ones(m, n, dtype=F64)
    per_row_o = torch.zeros(m, n, dtype=F64)
    inside = torch.ones(m, dtype=torch.bool)
    if smooth is not None:
        s = smooth.double()
        s = s[:, None].expand(-1, n) if s.dim() == 1 else s
        o = None
        if offsets is not None and mode == 0:
            o = offsets.double()
            o = o[:, None].expand(-1, n) if o.dim() == 1 else o
        if group_index is None:
            per_row_s[:] = s[0]
            if o is not None:
                per_row_o[:] = o[0]
        else:
            inside[:] = False
            begin = 0
            for i, v in enumerate(group_index.tolist()):
                end = begin + v if count else v
                per_row_s[begin:end] = s[i]
                if o is not None:
                    per_row_o[begin:end] = o[i]
                inside[begin:end] = True
                begin = end
    t = act * per_row_s + per_row_o
    if mode == 1:
        scale = qmax / t.abs().amax(-1)
        t = t * scale[:, None]
    else:
        scale = torch.zeros(m, dtype=F64)
    y = torch.nan_to_num(torch.round(t).clamp(-qmax - 1, qmax), nan=0.0)
    y[~inside] = 0
    scale[~inside] = 0
    lead = x.shape[:-1]
    return y.reshape(*lead, n), scale.reshape(lead)


def close_ints(got, want, frac=1e-3):
    diff = (got.double() - want.double()).abs()
    assert diff.max() <= 1
    assert (diff > 0).double().mean() <= frac


def unpack_pairs(y8):
    """int8 bytes -> int4 values, low nibble first (sign-extended)."""
    b = y8.to(torch.int32) & 0xFF
    lo, hi = b & 0xF, (b >> 4) & 0xF
    lo = torch.where(lo >= 8, lo - 16, lo)
    hi = torch.where(hi >= 8, hi - 16, hi)
    return torch.stack([lo, hi], -1).reshape(*y8.shape[:-1], y8.shape[-1] * 2)


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("mode", [0, 1])
def test_random_matches_golden(dtype, left, mode):
    x = make((5, 3, 64), dtype, 1, 2.0)
    smooth = torch.rand(1, 32, dtype=F32) + 0.5
    offsets = make((1, 32), F32, 2) if mode == 0 else None
    x0 = x.clone()
    y, scale = na.npu_swiglu_quant(x, smooth_scales=smooth, offsets=offsets,
                                   activate_left=left, quant_mode=mode)
    want, wscale = golden(x, smooth, offsets, left=left, mode=mode)
    assert y.dtype == torch.int8 and y.shape == (5, 3, 32)
    assert scale.dtype == F32 and scale.shape == (5, 3)
    close_ints(y, want, frac=0.01)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    assert torch.equal(x, x0)


def test_activate_left_picks_the_half():
    # x = [A | B], A = 1024 (swish(1024) == 1024), B = 2:
    # left -> swish(A) * B = 2048, right -> A * swish(B)
    x = torch.tensor([[1024.0, 2.0]])
    y_left, _ = na.npu_swiglu_quant(x, smooth_scales=torch.full((1, 1), 1 / 32),
                                    offsets=torch.zeros(1, 1), activate_left=True)
    y_right, _ = na.npu_swiglu_quant(x, smooth_scales=torch.full((1, 1), 1 / 32),
                                     offsets=torch.zeros(1, 1), activate_left=False)
    assert y_left.item() == 64                                   # 2048 / 32
    assert y_right.item() == round(1024 * 2 / (1 + torch.exp(torch.tensor(-2.0)).item()) / 32)


def test_static_ties_and_saturation():
    # smooth 0 and offsets o: t == o exactly.
    o = torch.tensor([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, 128.0, -128.5, -300.0, 3.4999,
                       1e30]])
    x = make((2, 24), F32, 3)
    y, scale = na.npu_swiglu_quant(x, smooth_scales=torch.zeros_like(o), offsets=o)
    want = torch.tensor([0, 2, 2, 0, -2, -2, 127, 127, -128, -128, 3, 127], dtype=torch.int8)
    assert torch.equal(y, want.expand(2, -1))
    assert torch.equal(scale, torch.zeros(2))


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_dynamic_ties(dtype):
    # gate B = 1024: swish(B) == 1024 exactly; smooth 1/1024: t == A, and max|A| = 127 -> scale 1.
    a = torch.tensor([127.0, 63.5, 62.5, -0.5, 1.5, 2.5, -2.5, 0.0])
    x = torch.cat([a, torch.full((8,), 1024.0)]).to(dtype)[None]
    y, scale = na.npu_swiglu_quant(x, smooth_scales=torch.full((1, 8), 1 / 1024), quant_mode=1)
    assert torch.equal(y, torch.tensor([[127, 64, 62, 0, 2, 2, -2, 0]], dtype=torch.int8))
    assert scale.item() == 1.0


def test_dynamic_int4_ties_and_packing():
    # max |A| = 7 -> scale 1; values already exact ties.
    a = torch.tensor([7.0, -3.5, 2.5, -0.5, 1.5, -7.0, 0.0, 5.0])
    x = torch.cat([a, torch.full((8,), 1024.0)])[None]
    y, scale = na.npu_swiglu_quant(x, smooth_scales=torch.full((1, 8), 1 / 1024), quant_mode=1,
                                   dst_type=torch.quint4x2)
    assert y.dtype == torch.int8 and y.shape == (1, 4)
    assert unpack_pairs(y).tolist() == [[7, -4, 2, 0, 2, -7, 0, 5]]
    assert scale.item() == 1.0                            # 7 / max|t| = 7 / 7
    # the doc's integer spelling 29 is int4 too
    y29, _ = na.npu_swiglu_quant(x, smooth_scales=torch.full((1, 8), 1 / 1024), quant_mode=1,
                                 dst_type=29)
    assert torch.equal(y29, y)


@pytest.mark.parametrize("mode", [0, 1])
def test_int4_random_and_saturation(mode):
    x = make((7, 16), F32, 4, 3.0)
    smooth = torch.rand(1, 8) + 0.5
    offsets = make((1, 8), F32, 5) * 4 if mode == 0 else None
    y, scale = na.npu_swiglu_quant(x, smooth_scales=smooth, offsets=offsets, quant_mode=mode,
                                   dst_type=torch.quint4x2)
    want, wscale = golden(x, smooth, offsets, mode=mode, qmax=7)
    assert y.shape == (7, 4)
    close_ints(unpack_pairs(y), want, frac=0.02)
    assert want.min() >= -8 and want.max() <= 7
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)


@pytest.mark.parametrize("count", [False, True])
@pytest.mark.parametrize("mode", [0, 1])
def test_group_index_with_empty_groups(count, mode):
    x = make((9, 12), F32, 6, 2.0)
    smooth = torch.rand(4, 6) + 0.5
    offsets = make((4, 6), F32, 7) if mode == 0 else None
    # groups: rows 0-2, none, 3-6, none; rows 7-8 belong to no group
    gi = torch.tensor([3, 0, 4, 0] if count else [3, 3, 7, 7], dtype=I32)
    y, scale = na.npu_swiglu_quant(x, smooth_scales=smooth, offsets=offsets, group_index=gi,
                                   quant_mode=mode, group_list_type=int(count))
    want, wscale = golden(x, smooth, offsets, gi, mode=mode, count=count)
    close_ints(y, want, frac=0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    assert torch.equal(y[7:], torch.zeros(2, 6, dtype=torch.int8))


def test_group_index_per_tensor_scales_and_3d():
    x = make((2, 4, 8), BF16, 8)
    smooth = torch.tensor([0.5, 2.0, 4.0])
    offsets = torch.tensor([0.25, -1.0, 3.0])
    gi = torch.tensor([2, 5, 8], dtype=I32)
    y, scale = na.npu_swiglu_quant(x, smooth_scales=smooth, offsets=offsets, group_index=gi)
    want, _ = golden(x, smooth, offsets, gi)
    assert y.shape == (2, 4, 4) and scale.shape == (2, 4)
    close_ints(y, want, frac=0.05)


def test_no_smooth_scales_all_zero_row_odd_sizes_noncontiguous():
    base = make((6, 3, 22), F16, 9)
    x = base.transpose(0, 1)[:, ::2]                      # (3, 3, 22), non-contiguous
    x[1, 1] = 0
    assert not x.is_contiguous()
    x0 = x.clone()
    y, scale = na.npu_swiglu_quant(x, quant_mode=1)
    want, wscale = golden(x, mode=1)
    close_ints(y, want, frac=0.01)
    assert torch.isinf(scale[1, 1]) and torch.equal(y[1, 1], torch.zeros(11, dtype=torch.int8))
    finite = torch.isfinite(wscale)
    torch.testing.assert_close(scale.double()[finite], wscale[finite], rtol=1e-5, atol=0)
    assert torch.equal(x, x0)


def test_nan_and_inf_inputs_static():
    x = torch.tensor([[float("nan"), 1.0, 1.0, 1.0], [1024.0, 1.0, 1.0, 1024.0]])
    y, _ = na.npu_swiglu_quant(x, smooth_scales=torch.ones(1, 2), offsets=torch.zeros(1, 2),
                               activate_left=True)
    assert y[0, 0].item() == 0                            # NaN -> 0
    assert y[1, 0].item() == 127 and y[1, 1].item() == 127   # 1024 and 1024*1 saturate


def test_float64_outside_strict_and_one_row():
    x = make((1, 10), F64, 10)
    y, scale = na.npu_swiglu_quant(x, quant_mode=1)
    want, wscale = golden(x, mode=1)
    assert torch.equal(y.double(), want)
    torch.testing.assert_close(scale.double(), wscale)


def test_no_autograd():
    x = make((2, 8), F32, 1).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_swiglu_quant: expected inputs that do"):
        na.npu_swiglu_quant(x)


@pytest.mark.parametrize("kw,error,match", [
    (dict(x=make((8,))), ValueError, "expected x a tensor with more than 1 dim"),
    (dict(x=make((2, 7))), ValueError, "expected x an even last dim"),
    (dict(x=make((3, 0)), quant_mode=1), ValueError, "expected x a non-empty last dim"),
    (dict(x=make((1, 8194))), ValueError, "expected x a last dim of at most 8192"),
    (dict(x=make((2, 6)), dst_type=torch.quint4x2), ValueError,
     "expected x a last dim divisible by 4"),
    (dict(dst_type=torch.float16), ValueError, "expected dst_type one of"),
    (dict(quant_mode=2), ValueError, "expected quant_mode one of"),
    (dict(group_list_type=2), ValueError, "expected group_list_type one of"),
    (dict(x=torch.ones(2, 8, dtype=I32)), TypeError, "expected x dtype in"),
    (dict(smooth_scales=torch.ones(1, 4, dtype=F16)), TypeError,
     "expected smooth_scales dtype in"),
    (dict(smooth_scales=torch.ones(1, 3)), RuntimeError, "expected smooth_scales shape"),
    (dict(smooth_scales=torch.ones(2, 4), group_index=torch.tensor([1, 2, 2], dtype=I32)),
     RuntimeError, "expected smooth_scales shape"),
    (dict(smooth_scales=torch.ones(1, 4), offsets=torch.ones(4)), RuntimeError,
     "expected offsets the shape of smooth_scales"),
    (dict(offsets=torch.ones(1, 4)), ValueError, "expected offsets to come with smooth_scales"),
    (dict(smooth_scales=torch.ones(1, 4), group_index=torch.tensor([1.0])), TypeError,
     "expected group_index dtype in"),
    (dict(smooth_scales=torch.ones(1, 4), group_index=torch.ones(1, 1, dtype=I32)),
     ValueError, "expected group_index a 1-D tensor"),
])
def test_bad_inputs(kw, error, match):
    args = dict(x=make((2, 8)))
    args.update(kw)
    x = args.pop("x")
    with pytest.raises(error, match="npu_swiglu_quant: " + match):
        na.npu_swiglu_quant(x, **args)


@pytest.mark.parametrize("mode", [0, 1])
def test_zero_rows_agree_in_eager_and_fake(mode):
    """No rows (a valid empty batch): empty outputs of the documented shapes, and FakeTensor
    returns the same metadata instead of failing in its norm."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = make((0, 3, 10))
    q, scale = na.npu_swiglu_quant(x, quant_mode=mode)
    assert q.shape == (0, 3, 5) and q.dtype == torch.int8
    assert scale.shape == (0, 3) and scale.dtype == torch.float32
    with FakeTensorMode() as fm:
        fq, fs = na.npu_swiglu_quant(fm.from_tensor(x), quant_mode=mode)
    for f, e in ((fq, q), (fs, scale)):
        assert (f.shape, f.dtype, f.stride()) == (e.shape, e.dtype, e.stride())


def test_strict_rules():
    with na.strict("A2"):
        na.npu_swiglu_quant(make((2, 8), BF16))
        with pytest.raises(TypeError, match="npu_swiglu_quant: expected x dtype in"):
            na.npu_swiglu_quant(make((2, 8), F64))
        with pytest.raises(TypeError, match="npu_swiglu_quant: expected group_index dtype"):
            na.npu_swiglu_quant(make((2, 8)), smooth_scales=torch.ones(1, 4),
                                group_index=torch.tensor([2]))
    with na.strict("310P"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_swiglu_quant(make((2, 8)))
    with na.strict("950"):
        na.npu_swiglu_quant(make((2, 8)), quant_mode=1)
