"""npu_dequant_swiglu_quant against float64 goldens of the doc formula::

    d = (x + bias) * weight_scale[g] * activation_scale[r];   act = swiglu(d)  (mode 0 / 1 / 2)
    static: y = rint(act / quant_scale[g] + quant_offset[g]), scale 0
    dynamic: t = act * quant_scale[g], scale = max|t| / 127, y = rint(t * 127 / max|t|)

saturated to int8, NaN -> 0, groups given as token counts.  The library computes in float32:
random inputs are compared with |diff| <= 1 on a small fraction of elements; exact expectations
use inputs whose intermediates are exact (a gate of 1024: swish(1024) == 1024 in float32 and
float64; power-of-two scales).  float4 outputs (DTYPE_MAX 6 / 1.75, per-row float32 scales,
float32 -> bfloat16 -> float4 in the round mode) are checked code by code against the table
golden of ``fp4_goldens.py``; ``activate_dim`` other than the last dim against a golden that
takes the halves along that dim and quantizes along the last dim.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.ops.quant import mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from quant_goldens import (assert_hifloat8_near, float8_golden, hifloat8_golden,  # noqa: E402
                           same_bits)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fp4_goldens as fp4  # noqa: E402

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I32, I64 = torch.int32, torch.int64
OPF = na.npu_dequant_swiglu_quant


def make(shape, dtype=F32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def ints(shape, seed=0, lo=-10, hi=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=I32)


def golden(x, ws=None, acts=None, bias=None, qs=None, qo=None, gi=None, left=False, mode=0,
           swiglu_mode=0, limit=7.0, alpha=1.702, gbias=1.0, top=127.0, raw=False):
    """float64 golden; ``raw``: the value before the int8 rounding (for float outputs, whose
    dynamic ``DTYPE_MAX`` is ``top``)."""
    xd = x.reshape(-1, x.shape[-1])
    m, d = xd.shape
    h = d // 2
    counts = [m] if gi is None else gi.tolist()
    y = torch.zeros(m, h, dtype=F64)
    scale = torch.zeros(m, dtype=F64)
    sig = lambda v: 1.0 / (1.0 + torch.exp(-v))
    begin = 0
    for g, c in enumerate(counts):
        rows = slice(begin, begin + c)
        v = xd[rows]
        if x.dtype == I32:
            if bias is not None:
                b = bias if bias.dim() == 1 else bias[g]
                v = v.long() + b.long()
            v = v.double()
            if ws is not None:
                v = v * (ws if ws.dim() == 1 else ws[g]).double()
            if acts is not None:
                v = v * acts.reshape(-1, 1)[rows].double()
        else:
            v = v.double()
        if swiglu_mode == 0:
            a, b2 = v[:, :h], v[:, h:]
            act = a * sig(a) * b2 if left else a * b2 * sig(b2)
        else:
            if swiglu_mode == 1:
                gate, lin = v[:, 0::2], v[:, 1::2]
            else:
                gate, lin = (v[:, :h], v[:, h:]) if left else (v[:, h:], v[:, :h])
            gate = gate.clamp(max=limit)
            lin = lin.clamp(-limit, limit)
            act = gate * sig(alpha * gate) * (lin + gbias)
        if mode == 0:
            t = act
            if qs is not None:
                t = t / (qs[g] if qs.dim() == 2 else qs[g].expand(h)).double()
            if qo is not None:
                t = t + (qo[g] if qo.dim() == 2 else qo[g].expand(h)).double()
        else:
            t = act if qs is None else act * (qs if qs.dim() == 1 else qs[g]).double()
            mx = t.abs().amax(-1)
            scale[rows] = mx / top
            t = t * (top / mx)[:, None]
        y[rows] = t if raw else torch.nan_to_num(torch.round(t).clamp(-128, 127), nan=0.0)
        begin += c
    return y.reshape(*x.shape[:-1], h), scale.reshape(x.shape[:-1])


def close_ints(got, want, frac=1e-3):
    diff = (got.double() - want).abs()
    assert diff.max() <= 1
    assert (diff > 0).double().mean() <= frac


@pytest.mark.parametrize("swiglu_mode", [0, 1, 2])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("mode", [0, 1])
def test_int32_random_matches_golden(swiglu_mode, left, mode):
    x = ints((9, 32), 1)
    ws = torch.rand(1, 32) * 0.2
    acts = torch.rand(9, 1) + 0.5
    bias = ints((32,), 2, -3, 3)
    qs = torch.rand(1, 16) * 0.5 + 0.05
    qo = make((1, 16), F32, 3) if mode == 0 else None
    before = [t.clone() for t in (x, ws, acts, bias, qs)]
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, bias=bias, quant_scale=qs,
                   quant_offset=qo, activate_left=left, quant_mode=mode,
                   swiglu_mode=swiglu_mode)
    want, wscale = golden(x, ws, acts, bias, qs, qo, left=left, mode=mode,
                          swiglu_mode=swiglu_mode)
    assert y.dtype == torch.int8 and y.shape == (9, 16)
    assert scale.dtype == F32 and scale.shape == (9,)
    close_ints(y, want, frac=0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    for a, b in zip(before, (x, ws, acts, bias, qs)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("mode", [0, 1])
def test_float_x_matches_golden(dtype, mode):
    x = make((7, 3, 12), dtype, 4, 2.0)
    qs = torch.rand(1, 6) + 0.5
    y, scale = OPF(x, quant_scale=qs, quant_mode=mode)
    want, wscale = golden(x, qs=qs, mode=mode)
    assert y.shape == (7, 3, 6) and scale.shape == (7, 3)
    close_ints(y, want, frac=0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)


def test_dynamic_exact_ties_and_scale():
    # activate_left=False: act = A * swish(B); B = 1024 -> act = 1024 * A; quant_scale 1/1024.
    # max|t| = 127 and 254: DTYPE_MAX / max = 1 and 0.5 exactly, so the golden's multiply,
    # the A2/A3 kernel's multiply by 1 / scale and the 950 kernel's division by the scale all
    # land exactly on the .5 ties, which round half to even.
    a = torch.tensor([[127.0, 63.5, 62.5, -0.5, 1.5, 2.5, -2.5, 0.0],
                      [254.0, 5.0, -5.0, 7.0, 3.0, -1.0, 1.0, 0.0]])
    x = torch.cat([a, torch.full((2, 8), 1024.0)], dim=1).to(BF16)
    y, scale = OPF(x, quant_scale=torch.full((1, 8), 1 / 1024), quant_mode=1)
    assert y.tolist() == [[127, 64, 62, 0, 2, 2, -2, 0], [127, 2, -2, 4, 2, 0, 0, 0]]
    assert scale.tolist() == [1.0, 2.0]                          # max / 127


def test_static_int32_ties_saturation_and_int32_bias_order():
    # x + bias in int32, then * 2**-k: exact.  act = A * 1024 with B = 1024 (after the scales).
    a = torch.tensor([1, 3, 5, -1, -3, -5, 300, -300], dtype=I32)
    x = torch.cat([a, torch.full((8,), 2048, dtype=I32)])[None]
    ws = torch.full((16,), 0.5)
    bias = torch.cat([torch.zeros(8, dtype=I32), torch.zeros(8, dtype=I32)])
    qs = torch.tensor([1024.0])                                   # per-tensor, divided
    y, scale = OPF(x, weight_scale=ws, bias=bias, quant_scale=qs, quant_offset=torch.zeros(1))
    # t = A * 0.5: 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 150, -150
    assert y.tolist() == [[0, 2, 2, 0, -2, -2, 127, -128]]
    assert scale.tolist() == [0.0]


@pytest.mark.parametrize("product", [None, "950"])
def test_round_mode_is_rint_only_for_int8_and_float8(product):
    # aclnnDequantSwigluQuantV2.md / the 950 tiling: int8 and float8 output take "rint" only
    # (None means rint); the kernel's int8 cast is CAST_RINT whatever round_mode says.
    a = torch.tensor([2.5, -2.5, 1.5, -1.5, 0.25, -0.75, 3.0, 0.0])
    x = torch.cat([a, torch.full((8,), 1024.0)])[None]
    kw = dict(quant_scale=torch.full((1,), 1024.0), quant_offset=torch.zeros(1))
    ctx = na.strict(product) if product else contextlib.nullcontext()
    with ctx:
        for mode in (None, 0):
            y, _ = OPF(x.to(BF16) if product else x, round_mode=mode, **kw)
            assert y.tolist() == [[2, -2, 2, -2, 0, -1, 3, 0]], mode      # half to even
        for dst in (None, 291, 292):
            for mode in (1, 2, 3, 4):
                with pytest.raises(ValueError, match=r"expected round_mode None or 0 \(rint\) "
                                   "for int8 and float8 output, but got " + str(mode)):
                    OPF(x, round_mode=mode, dst_type=dst, **kw)


def test_float8_output():
    a = torch.tensor([1.0, -2.0, 1000.0, -1000.0])
    x = torch.cat([a, torch.full((4,), 1024.0)])[None]
    y, _ = OPF(x, quant_scale=torch.full((1,), 1024.0), quant_offset=torch.zeros(1),
               dst_type=292)
    assert y.dtype == torch.float8_e4m3fn
    assert y.float().tolist() == [[1.0, -2.0, 448.0, -448.0]]


@pytest.mark.parametrize("dst,fp8", [(291, torch.float8_e5m2), (292, torch.float8_e4m3fn)])
def test_float8_nan_gives_positive_zero(dst, fp8):
    # The 950 kernel's float8 cast (CAST_FP32_TO_FP8) is SatMode::SAT: NaN -> +0.
    # Static: act = 1024 * A (B = 1024), / 1024 -> t = A exactly.
    nan = float("nan")
    top = 448.0 if fp8 == torch.float8_e4m3fn else 57344.0
    a = torch.tensor([1.0, nan, -nan, 1e6, -3.0, 0.0])
    x = torch.cat([a, torch.full((6,), 1024.0)])[None]
    y, scale = OPF(x, quant_scale=torch.full((1,), 1024.0), quant_offset=torch.zeros(1),
                   dst_type=dst)
    assert same_bits(y, float8_golden(a[None], fp8))
    assert y.float().tolist() == [[1.0, 0.0, 0.0, top, -3.0, 0.0]]
    assert not y.float()[0, 1:3].signbit().any() and scale.tolist() == [0.0]
    # Dynamic: a NaN row (scale NaN, y all +0), an all-zero row (0 / 0 -> +0) and a plain row
    # t = A (quant_scale 1/1024): y = t * (DTYPE_MAX / max|t|), scale = max|t| / DTYPE_MAX.
    rows = torch.tensor([[2.0, nan, -1.0, 4.0], [0.0, 0.0, 0.0, 0.0], [4.0, -2.0, 1.0, 0.5]])
    x = torch.cat([rows, torch.full((3, 4), 1024.0)], dim=1)
    y, scale = OPF(x, quant_scale=torch.full((1, 4), 1 / 1024), quant_mode=1, dst_type=dst)
    assert y[:2].float().eq(0).all() and not y[:2].float().signbit().any()
    assert y[2].float().tolist() == [top, -top / 2, top / 4, top / 8]
    assert scale[0].isnan() and scale[1] == 0 and scale[2] == 4.0 / top


def test_hifloat8_output_static_exact():
    # act = A * swish(1024) = 1024 A exactly, / 1024: t = A; the CANN golden's cast of A.
    a = torch.tensor([1.0625, -14.5, 18.0, 40960.0, -1e6, 2.0 ** -23, 7.75, 0.0])
    x = torch.cat([a, torch.full((8,), 1024.0)])[None]
    y, _ = OPF(x, quant_scale=torch.full((1,), 1024.0), quant_offset=torch.zeros(1),
               dst_type=290, round_mode=1)
    assert y.dtype == torch.uint8
    assert torch.equal(y, hifloat8_golden(a)[None])
    assert y.tolist() == [[0x09, 0xAF, 0x41, 0x6E, 0xEE, 0x01, 0x28, 0x00]]


@pytest.mark.parametrize("mode", [0, 1])
def test_hifloat8_int32_random(mode):
    x = ints((9, 32), 21, -300, 300)
    ws = torch.rand(1, 32) * 0.1
    acts = torch.rand(9) + 0.5
    qs = torch.rand(1, 16) + 0.5 if mode else torch.tensor([0.01])
    qo = None if mode else torch.tensor([0.5])
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, quant_scale=qs, quant_offset=qo,
                   quant_mode=mode, dst_type=290, round_mode=1)
    want, wscale = golden(x, ws, acts, qs=qs, qo=qo, mode=mode, top=32768.0, raw=True)
    assert y.dtype == torch.uint8 and y.shape == (9, 16)
    assert_hifloat8_near(y, want, max_mismatch=0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)


@pytest.mark.parametrize("gi_dtype", [I64, I32])
def test_group_index_counts_with_empty_groups(gi_dtype):
    x = ints((10, 16), 5)
    ws = torch.rand(4, 16) * 0.2
    acts = torch.rand(10) + 0.5
    qs = torch.rand(4, 8) + 0.5
    gi = torch.tensor([3, 0, 4, 0], dtype=gi_dtype)       # rows 7-9 in no group
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, quant_scale=qs, group_index=gi,
                   quant_mode=1, activate_left=True)
    want, wscale = golden(x, ws, acts, qs=qs, gi=gi, left=True, mode=1)
    close_ints(y, want, frac=0.03)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    assert torch.equal(y[7:], torch.zeros(3, 8, dtype=torch.int8))


def test_group_index_static_per_tensor_outside_strict():
    x = ints((6, 8), 6)
    ws = torch.rand(2, 8)
    qs = torch.tensor([0.25, 4.0])
    qo = torch.tensor([1.0, -2.0])
    gi = torch.tensor([2, 4])
    y, _ = OPF(x, weight_scale=ws, quant_scale=qs, quant_offset=qo, group_index=gi)
    want, _ = golden(x, ws, qs=qs, qo=qo, gi=gi)
    close_ints(y, want, frac=0.05)


def test_zero_row_odd_sizes_noncontiguous_float64():
    x = ints((5, 2, 14), 7).transpose(0, 1)              # (2, 5, 14), non-contiguous
    x[1, 2] = 0
    assert not x.is_contiguous()
    ws = torch.rand(14, dtype=F64)
    y, scale = OPF(x, weight_scale=ws, quant_mode=1)
    want, wscale = golden(x, ws, mode=1)
    assert torch.equal(y.double(), want)
    assert scale[1, 2].item() == 0 and torch.equal(y[1, 2], torch.zeros(7, dtype=torch.int8))
    torch.testing.assert_close(scale.double(), wscale)


def test_seed_example_shapes_clamped_variant():
    x = ints((4, 6), 8)
    ws = torch.rand(1, 6)
    acts = torch.rand(4, 1)
    qs = torch.rand(1, 3) + 0.5
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, quant_scale=qs,
                   group_index=torch.tensor([4]), activate_left=True, quant_mode=1,
                   swiglu_mode=1, clamp_limit=0.5, glu_alpha=2.0, glu_bias=0.25)
    want, wscale = golden(x, ws, acts, qs=qs, gi=torch.tensor([4]), mode=1, swiglu_mode=1,
                          limit=0.5, alpha=2.0, gbias=0.25)
    close_ints(y, want, frac=0.1)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)


def test_no_autograd():
    x = make((2, 8), F32, 1).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_dequant_swiglu_quant: expected inputs that do"):
        OPF(x)


@pytest.mark.parametrize("kw,error,match", [
    (dict(x=ints((8,))), ValueError, "expected x a tensor with at least 2 dims"),
    (dict(x=ints((2, 7))), ValueError, "expected x an even last dim"),
    (dict(x=torch.ones(2, 8, dtype=torch.int8)), TypeError, "expected x dtype in"),
    (dict(quant_mode=2), ValueError, "expected quant_mode one of"),
    (dict(swiglu_mode=3), ValueError, "expected swiglu_mode one of"),
    (dict(clamp_limit=0.0), ValueError, "expected clamp_limit a positive finite"),
    (dict(glu_alpha=float("inf")), ValueError, "expected glu_alpha a finite"),
    (dict(glu_bias=float("nan")), ValueError, "expected glu_bias a finite"),
    (dict(round_mode=5), ValueError, "expected round_mode one of"),
    (dict(dst_type=3), ValueError, "expected dst_type one of"),
    (dict(dst_type=290), ValueError, r"expected round_mode 1 \(round\) for hifloat8"),
    (dict(dst_type=290, round_mode=0), ValueError, "expected round_mode 1"),
    (dict(round_mode=1), ValueError, r"expected round_mode None or 0 \(rint\) for int8"),
    (dict(dst_type=291, round_mode=4), ValueError, "expected round_mode None or 0"),
    (dict(x=ints((2, 6)), dst_type=296), ValueError,
     "expected x a y last dim that is even for float4 output"),
    (dict(dst_type=297, round_mode=5), ValueError, "expected round_mode one of"),
    (dict(activate_dim=0), NotImplementedError,
     r"expected quant_mode 1 \(dynamic\) when activate_dim is not the last dim"),
    (dict(activate_dim=0, quant_mode=1, swiglu_mode=2), NotImplementedError,
     "expected swiglu_mode 0 when activate_dim is not the last dim"),
    (dict(x=ints((3, 8)), activate_dim=0, quant_mode=1), ValueError,
     "expected x an even size at activate_dim 0"),
    (dict(activate_dim=-2, quant_mode=1, group_index=torch.tensor([2])), ValueError,
     "expected group_index None when activate_dim is not the last dim"),
    (dict(activate_dim=0, quant_mode=1, quant_scale=torch.ones(1, 4)), RuntimeError,
     "expected quant_scale shape"),
    (dict(activate_dim=2), ValueError, "expected activate_dim in"),
    (dict(activate_dim=-3), ValueError, "expected activate_dim in"),
    (dict(weight_scale=torch.ones(1, 6)), RuntimeError, "expected weight_scale shape"),
    (dict(weight_scale=torch.ones(1, 8, dtype=F16)), TypeError,
     "expected weight_scale dtype in"),
    (dict(activation_scale=torch.ones(3, 1)), RuntimeError, "expected activation_scale shape"),
    (dict(x=make((2, 8), F16), activation_scale=torch.ones(2, 1)), ValueError,
     "expected activation_scale None when x is not int32"),
    (dict(x=make((2, 8), BF16), bias=torch.ones(8, dtype=I32)), ValueError,
     "expected bias None when x is not int32"),
    (dict(bias=torch.ones(8, dtype=torch.int8)), TypeError, "expected bias dtype in"),
    (dict(quant_scale=torch.ones(1, 3), quant_mode=1), RuntimeError,
     "expected quant_scale shape"),
    (dict(quant_scale=torch.ones(2)), RuntimeError, "expected quant_scale shape"),
    (dict(quant_offset=torch.ones(1, 5)), RuntimeError, "expected quant_offset shape"),
    (dict(group_index=torch.tensor([1.0])), TypeError, "expected group_index dtype in"),
    (dict(group_index=torch.ones(1, 1, dtype=I64)), ValueError,
     "expected group_index a 1-D tensor"),
    (dict(weight_scale=torch.ones(1, 8), group_index=torch.tensor([1, 1])), RuntimeError,
     "expected weight_scale shape"),
])
def test_bad_inputs(kw, error, match):
    args = dict(x=ints((2, 8)))
    args.update(kw)
    x = args.pop("x")
    with pytest.raises(error, match="npu_dequant_swiglu_quant: " + match):
        OPF(x, **args)


@pytest.mark.parametrize("product", [None, "A2", "950"])
def test_calls_every_product_rejects(product):
    """int32 x without weight_scale, and static grouped quantization without quant_offset, are
    rejected in default mode too (the tilings and the aclnn doc forbid them on every product)."""
    x = ints((2, 128))
    ctx = na.strict(product) if product else contextlib.nullcontext()
    with ctx:
        with pytest.raises(ValueError, match="npu_dequant_swiglu_quant: expected weight_scale a "
                           "tensor when x is int32 .seed 004., but got None"):
            OPF(x, quant_mode=1)
        with pytest.raises(ValueError, match="npu_dequant_swiglu_quant: expected "):
            OPF(x, weight_scale=torch.ones(1, 128), quant_scale=torch.ones(1),
                group_index=torch.tensor([2]))
    if product is None:
        with pytest.raises(ValueError, match="expected quant_offset a tensor in static "
                           r"quantization \(quant_mode 0\) with group_index, but got None"):
            OPF(x, weight_scale=torch.ones(1, 128), quant_scale=torch.ones(1),
                group_index=torch.tensor([2]))


def test_strict_950_rejects_weight_scale_with_float_x():
    x = make((2, 8), F16)
    want = OPF(x, weight_scale=torch.ones(8), quant_mode=1)      # default mode: ignored
    assert torch.equal(want[0], OPF(x, quant_mode=1)[0])
    with na.strict("A2"):
        OPF(x, weight_scale=torch.ones(8), quant_mode=1)
    with na.strict("950"):
        OPF(x, quant_mode=1)
        with pytest.raises(ValueError, match="npu_dequant_swiglu_quant: expected weight_scale "
                           "None when x is float16 or bfloat16 on 950, but got a tensor"):
            OPF(x, weight_scale=torch.ones(8), quant_mode=1)


@pytest.mark.parametrize("x", [torch.zeros(4, 0, dtype=I32), torch.zeros(3, 0, dtype=F16),
                               torch.zeros(0, 0, dtype=BF16)], ids=["int32", "f16", "empty"])
@pytest.mark.parametrize("quant_mode", [0, 1])
def test_empty_last_dim_is_a_check_error(x, quant_mode):
    kw = dict(weight_scale=torch.ones(0)) if x.dtype == I32 else {}
    with pytest.raises(ValueError, match="npu_dequant_swiglu_quant: expected x a non-empty last "
                       "dim, but got shape"):
        OPF(x, quant_mode=quant_mode, **kw)
    with FakeTensorMode() as mode, pytest.raises(ValueError, match="expected x a non-empty"):
        OPF(mode.from_tensor(x), quant_mode=quant_mode,
            **{k: mode.from_tensor(v) for k, v in kw.items()})


def test_strict_rules():
    x = ints((2, 128))
    ws = torch.ones(1, 128)
    with na.strict("A2"):
        OPF(x, weight_scale=ws, quant_mode=1)
        with pytest.raises(ValueError, match="expected weight_scale a tensor when x is int32"):
            OPF(x)
        with pytest.raises(TypeError, match="expected x dtype in"):
            OPF(make((2, 8), F32))
        with pytest.raises(ValueError, match="expected quant_mode 1 .dynamic. when group"):
            OPF(x, weight_scale=ws, group_index=torch.tensor([2]))
        with pytest.raises(ValueError, match="expected x H = x.shape"):
            OPF(ints((2, 16)), weight_scale=torch.ones(1, 16), group_index=torch.tensor([2]),
                quant_mode=1)
        with pytest.raises(ValueError, match="expected dst_type torch.int8 on A2"):
            OPF(x, weight_scale=ws, dst_type=291)
        with pytest.raises(ValueError, match="expected round_mode None or 0"):
            OPF(x, weight_scale=ws, round_mode=1)
        with pytest.raises(TypeError, match="expected bias dtype in"):
            OPF(x, weight_scale=ws, bias=torch.ones(128))
        with pytest.raises(TypeError, match="expected quant_scale float32 in static"):
            OPF(x, weight_scale=ws, quant_scale=torch.ones(1, 64, dtype=F16))
        OPF(x, weight_scale=ws, group_index=torch.tensor([2]), quant_mode=1)
    with na.strict("310P"), pytest.raises(RuntimeError, match="expected a product"):
        OPF(x, weight_scale=ws)
        with pytest.raises(ValueError, match="expected dst_type torch.int8 on A2"):
            OPF(x, weight_scale=ws, dst_type=290, round_mode=1)
    with na.strict("950"):
        OPF(x, weight_scale=ws, dst_type=291, bias=torch.ones(128))
        OPF(x, weight_scale=ws, dst_type=290, round_mode=1)


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_strict_float4_and_other_dims_are_950_only(product):
    # aclnnDequantSwigluQuantV2.md (A2/A3): dstType INT8 only, activateDim -1 only.
    x = ints((4, 128))
    ws = torch.ones(1, 128)
    with na.strict(product):
        for dst in (296, 297):
            with pytest.raises(ValueError, match=f"expected dst_type torch.int8 on {product}"):
                OPF(x, weight_scale=ws, quant_mode=1, dst_type=dst)
        with pytest.raises(ValueError, match=f"expected activate_dim the last dim of x on "
                           f"{product}"):
            OPF(x, weight_scale=ws, quant_mode=1, activate_dim=0)
        OPF(x, weight_scale=ws, quant_mode=1, activate_dim=-1)
        OPF(x, weight_scale=ws, quant_mode=1, activate_dim=1)


def test_strict_950_float4_round_modes_and_other_dim_width():
    x = ints((4, 128))
    ws = torch.ones(1, 128)
    with na.strict("950"):
        for dst in (296, 297):
            for mode in (None, 0, 1, 2, 3, 4):
                y, _ = OPF(x, weight_scale=ws, quant_mode=1, dst_type=dst, round_mode=mode)
                assert y.shape == (4, 32) and y.dtype == torch.uint8
        y, s = OPF(x, weight_scale=ws, quant_mode=1, activate_dim=0, dst_type=297)
        assert y.shape == (2, 64) and s.shape == (2,)
        OPF(ints((2, 5120)), weight_scale=torch.ones(5120), quant_mode=1, activate_dim=0)
        with pytest.raises(ValueError, match="expected x a last dim .the last dim of y. of at "
                           "most 5120 when activate_dim is not the last dim, but got 5122"):
            OPF(ints((2, 5122)), weight_scale=torch.ones(5122), quant_mode=1, activate_dim=0)
    # outside strict mode the width is not limited (a UB limit of the 950 kernel)
    OPF(ints((2, 5122)), weight_scale=torch.ones(5122), quant_mode=1, activate_dim=0)


# -- float4 output ---------------------------------------------------------------------------

E2M1, E1M2 = 296, 297


def fp4_static(a, dst, mode):
    """Static quantization with t = A exactly: x = [A | 1024] (float32, loose mode),
    act = A * swish(1024) = 1024 A, quant_scale 1024 divides it back."""
    x = torch.cat([a, torch.full_like(a, 1024.0)], dim=-1)
    return OPF(x, quant_scale=torch.full((1,), 1024.0), quant_offset=torch.zeros(1),
               dst_type=dst, round_mode=mode)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dst", [E2M1, E1M2])
def test_float4_static_ties_saturation_nan_all_round_modes(dst, mode):
    fmt = fp4.CODES[dst]
    if dst == E2M1:      # ties 0.25 .. 5, beyond 6, a float32 just above a tie, just below 2
        vals = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5, -5.0, 6.0, 7.0, -100.0,
                2.5 + 2 ** -10, 2 - 2 ** -12, -(2 - 2 ** -12), 0.1, -0.1, 0.0, float("nan")]
    else:                # ties 0.125 .. 1.625, beyond 1.75
        vals = [0.125, 0.375, 0.625, 0.875, 1.125, 1.625, -0.125, -0.625, 1.75, 1.8, -3.0,
                0.375 + 2 ** -12, 1 - 2 ** -11, -(1 - 2 ** -11), 0.05, -0.05, 0.0, float("nan")]
    a = torch.tensor(vals)[None]
    y, scale = fp4_static(a, dst, mode)
    assert y.dtype == torch.uint8 and y.shape == (1, len(vals) // 2)
    want = fp4.fp4_codes(a, fmt, fp4.MODES[mode])
    assert torch.equal(fp4.unpack_nibbles(y), want)
    assert scale.tolist() == [0.0]


def test_float4_static_hand_checked_codes():
    # e2m1, rint: ties to the even code; 2.5 + 2**-10 first rounds to bfloat16 2.5, so it
    # rounds as the tie (2), not up to 3 as one rounding of the float32 value would.
    a = torch.tensor([[0.25, 0.75, 2.5, 3.5, 5.0, -1.25, 2.5 + 2 ** -10, 7.0, float("nan"),
                       -0.1]])
    y, _ = fp4_static(a, E2M1, 0)
    assert fp4.unpack_nibbles(y).tolist() == [[0, 2, 4, 6, 6, 10, 4, 7, 0, 8]]
    # e2m1, floor: 2 - 2**-12 is 2.0 in bfloat16, so floor gives 2 (code 4), not 1.5.
    a = torch.tensor([[2 - 2 ** -12, -0.1, 0.4, -6.5]])
    y, _ = fp4_static(a, E2M1, 2)
    assert fp4.unpack_nibbles(y).tolist() == [[4, 9, 0, 15]]
    # e1m2 (codes 4|v|): rint ties 0.375 -> 0.5, 0.625 -> 0.5; round 0.125 -> 0.25; packing:
    # element 2i in the low nibble.
    a = torch.tensor([[0.375, 0.625, 1.75, -0.25]])
    y, _ = fp4_static(a, E1M2, 0)
    assert y.tolist() == [[2 | 2 << 4, 7 | 9 << 4]]
    y, _ = fp4_static(torch.tensor([[0.125, -0.125]]), E1M2, 1)
    assert y.tolist() == [[1 | 9 << 4]]


@pytest.mark.parametrize("dst,vals,mult,scale", [
    (E2M1, [6.0, 2.5, -0.75, 0.25, 5.0, -3.5, 1.25, 0.0], 4.0, 4.0),
    (E1M2, [1.75, 0.375, -0.625, 0.125, 1.5, -0.875, 0.0, -1.75], 8.0, 8.0)])
def test_float4_dynamic_exact(dst, vals, mult, scale):
    # x = [A | 1024], quant_scale 1/1024: t = A = mult * vals, max|t| = mult * DTYPE_MAX, so
    # scale = max / DTYPE_MAX = mult exactly and t / scale = vals exactly (rint at the ties).
    nan = float("nan")
    rows = torch.tensor([[v * mult for v in vals], [0.0] * 8, [1.0, nan] + [0.0] * 6])
    x = torch.cat([rows, torch.full((3, 8), 1024.0)], dim=1).to(BF16)
    y, sc = OPF(x, quant_scale=torch.full((1, 8), 1 / 1024), quant_mode=1, dst_type=dst)
    fmt = fp4.CODES[dst]
    assert y.shape == (3, 4) and y.dtype == torch.uint8
    codes = fp4.unpack_nibbles(y)
    assert torch.equal(codes[0], fp4.fp4_codes(torch.tensor(vals), fmt))
    assert codes[1:].eq(0).all()                        # 0 / 0 and NaN rows: +0 codes
    assert sc[0].item() == scale and sc[1].item() == 0 and sc[2].isnan()


@pytest.mark.parametrize("mode", [0, 2, 3])
@pytest.mark.parametrize("dst", [E2M1, E1M2])
@pytest.mark.parametrize("quant_mode", [0, 1])
def test_float4_int32_random_matches_golden(dst, mode, quant_mode):
    x = ints((9, 48), 31, -40, 40)
    ws = torch.rand(1, 48) * 0.2
    acts = torch.rand(9) + 0.5
    bias = ints((48,), 32, -3, 3)
    qs = torch.rand(1, 24) + 0.5 if quant_mode else torch.tensor([0.7])
    qo = None if quant_mode else torch.tensor([0.25])
    before = [t.clone() for t in (x, ws, acts, bias, qs)]
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, bias=bias, quant_scale=qs,
                   quant_offset=qo, quant_mode=quant_mode, dst_type=dst, round_mode=mode)
    top = 6.0 if dst == E2M1 else 1.75
    raw, wscale = golden(x, ws, acts, bias, qs, qo, mode=quant_mode, top=top, raw=True)
    assert y.shape == (9, 12) and scale.shape == (9,)
    fp4.assert_fp4_near(y, fp4.fp4_codes(raw, fp4.CODES[dst], fp4.MODES[mode]), 0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    for a, b in zip(before, (x, ws, acts, bias, qs)):
        assert torch.equal(a, b)


def test_float4_groups_clamped_variant_noncontiguous():
    x = ints((16, 5, 3), 33).permute(1, 0, 2).reshape(5, 48)[:, :32]   # non-contiguous view
    assert not x.is_contiguous()
    ws = torch.rand(3, 32) * 0.3
    qs = torch.rand(3, 16) + 0.5
    gi = torch.tensor([2, 0, 2])                              # row 4 in no group
    y, scale = OPF(x, weight_scale=ws, quant_scale=qs, group_index=gi, quant_mode=1,
                   swiglu_mode=1, clamp_limit=3.0, dst_type=E2M1, round_mode=1)
    raw, wscale = golden(x, ws, qs=qs, gi=gi, mode=1, swiglu_mode=1, limit=3.0, top=6.0,
                         raw=True)
    want = fp4.fp4_codes(raw[:4], "float4_e2m1", "round")
    fp4.assert_fp4_near(y[:4], want, 0.05)
    assert y[4].eq(0).all() and scale[4] == 0
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)


@pytest.mark.parametrize("via", [False, True])
@pytest.mark.parametrize("fmt", ["float4_e2m1", "float4_e1m2"])
def test_mx_cast_fp4_sweep_against_table(fmt, via):
    # every multiple of 1/64 in [-8, 8], their midpoints and values a float32 ulp around them
    base = torch.arange(-1024, 1025, dtype=F64) / 128
    v = torch.cat([base, base + 2 ** -20, base - 2 ** -20, torch.tensor([float("nan")])])
    v = v.to(F32)[: (v.numel() // 2) * 2]
    for mode in fp4.MODES:
        got = mx.cast_fp4(v, mx.FLOAT4_FORMATS[fmt], mode, via_bfloat16=via)
        want = fp4.fp4_codes(v, fmt, mode, via_bfloat16=via)
        assert torch.equal(fp4.unpack_nibbles(got), want), mode
    codes = torch.arange(16)
    decode = mx.decode_e1m2 if fmt == "float4_e1m2" else mx.decode_e2m1
    vals = decode(codes)
    assert vals.tolist() == [fp4.code_value(c, fmt) for c in range(16)]
    assert torch.equal(mx.encode_fp4(vals, mx.FLOAT4_FORMATS[fmt]).long(), codes)


# -- activate_dim other than the last dim ----------------------------------------------------

def golden_other_dim(x, axis, ws=None, acts=None, bias=None, qs=None, left=False, top=127.0):
    """float64 golden for halves along ``axis``: dequantize x (weight_scale / bias along the
    last dim, one activation scale per x.shape[:-1] element), act = swish(A) * B, then dynamic
    quantization of each row along the last dim.  Returns (raw t * DTYPE_MAX / max, scale)."""
    v = x.double()
    if x.dtype == I32:
        if bias is not None:
            v = (x.long() + bias.long()).double()
        if ws is not None:
            v = v * ws.double()
        if acts is not None:
            v = v * acts.double().reshape(x.shape[:-1]).unsqueeze(-1)
    n = x.shape[axis] // 2
    first, second = v.narrow(axis, 0, n), v.narrow(axis, n, n)
    a, b = (first, second) if left else (second, first)
    t = a / (1 + torch.exp(-a)) * b
    if qs is not None:
        t = t * qs.double().reshape(-1)
    mx = t.abs().amax(-1, keepdim=True)
    return t * (top / mx), (mx / top).squeeze(-1)


@pytest.mark.parametrize("axis", [0, 1, -2])
@pytest.mark.parametrize("left", [False, True])
def test_other_dim_int32_matches_golden(axis, left):
    x = ints((4, 6, 10), 41, -50, 50)
    ws = torch.rand(10) * 0.2
    acts = torch.rand(4, 6) + 0.5                          # every row its own scale
    bias = ints((10,), 42, -3, 3)
    qs = torch.rand(10) + 0.5
    before = [t.clone() for t in (x, ws, acts, bias, qs)]
    y, scale = OPF(x, weight_scale=ws, activation_scale=acts, bias=bias, quant_scale=qs,
                   quant_mode=1, activate_dim=axis, activate_left=left)
    raw, wscale = golden_other_dim(x, axis, ws, acts, bias, qs, left)
    out = list(x.shape)
    out[axis] //= 2
    assert y.shape == tuple(out) and y.dtype == torch.int8 and scale.shape == tuple(out[:-1])
    close_ints(y, torch.round(raw), frac=0.02)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    for a, b in zip(before, (x, ws, acts, bias, qs)):
        assert torch.equal(a, b)


def test_other_dim_exact_halves_and_activate_left():
    # x (2, 4, 8) split along dim 1: rows 0-1 are A, rows 2-3 are B = 1024, so act = 1024 A
    # (activate_left=False: swish of the second half); quant_scale 1/1024 gives t = A.
    a = torch.tensor([[[127.0, 63.5, -2.5, 1.5, 0.5, 0.0, 3.0, -127.0],
                       [254.0, 5.0, -5.0, 7.0, 3.0, -1.0, 1.0, 0.0]],
                      [[0.0] * 8, [12.7, -12.7, 6.35, 1.27, 0.0, 0.0, 0.0, 0.0]]])
    x = torch.cat([a, torch.full((2, 2, 8), 1024.0)], dim=1)
    qs = torch.full((8,), 1 / 1024)
    y, scale = OPF(x.to(BF16), quant_scale=qs, quant_mode=1, activate_dim=1)
    assert y.shape == (2, 2, 8) and scale.shape == (2, 2)
    assert y[0].tolist() == [[127, 64, -2, 2, 0, 0, 3, -127], [127, 2, -2, 4, 2, 0, 0, 0]]
    assert y[1, 0].eq(0).all() and scale[0].tolist() == [1.0, 2.0] and scale[1, 0] == 0
    # activate_left=True swishes the first half: with the halves swapped the result is equal
    y2, scale2 = OPF(torch.cat([x[:, 2:], x[:, :2]], dim=1).to(BF16), quant_scale=qs,
                     quant_mode=1, activate_dim=-2, activate_left=True)
    assert torch.equal(y2, y) and torch.equal(scale2, scale)


@pytest.mark.parametrize("dst,mode", [(E2M1, 0), (E1M2, 3), (291, 0), (290, 1)])
def test_other_dim_float_x_formats_noncontiguous(dst, mode):
    x = make((7, 6, 4), F16, 43, 2.0).transpose(0, 1)         # (6, 7, 4) non-contiguous
    assert not x.is_contiguous()
    y, scale = OPF(x, quant_mode=1, activate_dim=0, dst_type=dst, round_mode=mode)
    top = {E2M1: 6.0, E1M2: 1.75, 291: 57344.0, 290: 32768.0}[dst]
    raw, wscale = golden_other_dim(x, 0, top=top)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    if dst in (E2M1, E1M2):
        assert y.shape == (3, 7, 2) and y.dtype == torch.uint8
        fp4.assert_fp4_near(y, fp4.fp4_codes(raw, fp4.CODES[dst], fp4.MODES[mode]), 0.05)
    elif dst == 291:
        assert y.shape == (3, 7, 4) and y.dtype == torch.float8_e5m2
        torch.testing.assert_close(y.double(), raw.to(torch.float8_e5m2).double(),
                                   rtol=0.25, atol=0)
    else:
        assert y.shape == (3, 7, 4) and y.dtype == torch.uint8
        assert_hifloat8_near(y, raw, max_mismatch=0.05)


def test_other_dim_odd_last_dim_and_float4_needs_even():
    x = ints((6, 3, 5), 44)
    ws = torch.rand(5)
    y, scale = OPF(x, weight_scale=ws, quant_mode=1, activate_dim=0)
    raw, wscale = golden_other_dim(x, 0, ws)
    assert y.shape == (3, 3, 5)
    close_ints(y, torch.round(raw), frac=0.05)
    torch.testing.assert_close(scale.double(), wscale, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="expected x a y last dim that is even for float4 "
                       r"output \(two values per byte\), but got y last dim 5"):
        OPF(x, weight_scale=ws, quant_mode=1, activate_dim=0, dst_type=E2M1)
