"""npu_add_rms_norm_dynamic_quant against float64 goldens of the doc formula::

    x = x1 + x2;  y = x / sqrt(mean(x^2) + eps) * gamma + beta;  v = y * smooth_scale
    scale = rowMax(|v|) / 127 (1 for an all-zero row);  q = rint(v / scale), saturated
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
from quant_goldens import hifloat8_golden  # noqa: E402

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F16, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * scale).to(dtype)


def golden(x1, x2, gamma, smooth=None, beta=None, eps=1e-6, qmax=127):
    x = x1.double() + x2.double()
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma.double()
    if beta is not None:
        y = y + beta.double()
    v = y * smooth.double() if smooth is not None else y
    scale = v.abs().amax(-1, keepdim=True) / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(v / scale).clamp(-qmax - 1, qmax)
    return q, scale.squeeze(-1), x.to(x1.dtype)


def within_one(got, want, max_mismatch=0.02):
    diff = (got.double() - want).abs()
    assert diff.max().item() <= 1
    assert (diff != 0).double().mean().item() <= max_mismatch


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_two_outputs_with_smooth_scales_and_beta(dtype):
    x1, x2 = make((3, 5, 32), dtype, 1), make((3, 5, 32), dtype, 2)
    gamma, beta = make((32,), dtype, 3), make((32,), dtype, 4, 0.1)
    s1, s2 = make((32,), dtype, 5).abs() + 0.5, make((32,), dtype, 6).abs() + 0.5
    y1, y2, x, sc1, sc2 = na.npu_add_rms_norm_dynamic_quant(
        x1, x2, gamma, smooth_scale1=s1, smooth_scale2=s2, beta=beta, output_mask=[True, True])
    q1, g1, want_x = golden(x1, x2, gamma, s1, beta)
    q2, g2, _ = golden(x1, x2, gamma, s2, beta)
    assert y1.dtype == y2.dtype == torch.int8 and sc1.dtype == sc2.dtype == F32
    assert y1.shape == (3, 5, 32) and sc1.shape == (3, 5)
    within_one(y1, q1)
    within_one(y2, q2)
    torch.testing.assert_close(sc1.double(), g1, rtol=1e-5, atol=0)
    torch.testing.assert_close(sc2.double(), g2, rtol=1e-5, atol=0)
    assert torch.equal(x, want_x)


def test_default_mask_only_first_output():
    x1, x2, gamma = make((4, 16), F16, 1), make((4, 16), F16, 2), make((16,), F16, 3)
    y1, y2, x, s1, s2 = na.npu_add_rms_norm_dynamic_quant(x1, x2, gamma)
    # op-plugin's eager kernel allocates an output that is off with an empty size list: 0-d.
    assert y2.shape == () and s2.shape == () and y2.dtype == torch.int8 and s2.dtype == F32
    q, g, _ = golden(x1, x2, gamma)
    within_one(y1, q)
    # the row max always maps to +-127
    assert (y1.abs().amax(-1) == 127).all()


def test_mask_second_only():
    x1, x2, gamma = make((4, 16), F16, 1), make((4, 16), F16, 2), make((16,), F16, 3)
    s2 = make((16,), F16, 4).abs() + 0.5
    y1, y2, _, s1, sc2 = na.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, smooth_scale2=s2,
                                                           output_mask=[False, True])
    assert y1.shape == () and s1.shape == () and y1.dtype == torch.int8 and s1.dtype == F32
    within_one(y2, golden(x1, x2, gamma, s2)[0])


@pytest.mark.parametrize("kw", [{}, {"output_mask": [True, False]},
                                {"output_mask": [False, True], "y_dtype": torch.quint4x2}])
def test_fake_outputs_match_eager_for_switched_off_outputs(kw):
    x1, x2, gamma = make((4, 16), F16, 1), make((4, 16), F16, 2), make((16,), F16, 3)
    if kw.get("output_mask") == [False, True]:
        kw = dict(kw, smooth_scale2=make((16,), F16, 4))
    eager = na.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, **kw)
    with FakeTensorMode() as mode:
        fake = na.npu_add_rms_norm_dynamic_quant(
            *(mode.from_tensor(t) for t in (x1, x2, gamma)),
            **{k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
               for k, v in kw.items()})
    assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in eager]
    assert sum(t.dim() == 0 for t in eager) == 2


def test_exact_ties_zero_row_and_nan():
    # eps = 0, x = +-1: rms 1, y = gamma; amax 254 -> scale 2: gamma / 2 gives the ties.
    gamma = torch.tensor([254.0, 5.0, -5.0, 7.0, 3.0, 1.0, -1.0, 0.0], dtype=F32)
    x1 = torch.tensor([[1.0] * 8, [0.0] * 8, [1.0] * 7 + [float("nan")]], dtype=F32)
    y1, _, _, s1, _ = na.npu_add_rms_norm_dynamic_quant(x1, torch.zeros_like(x1), gamma,
                                                        epsilon=0.0)
    assert y1[0].tolist() == [127, 2, -2, 4, 2, 0, 0, 0]   # 2.5->2, -2.5->-2, 3.5->4, 1.5->2
    assert s1[0].item() == 2.0
    assert y1[1].tolist() == [0] * 8 and s1[1].item() == 1.0   # all-zero row: scale 1
    assert y1[2].tolist() == [0] * 8                          # NaN row -> 0


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_hifloat8_exact_rows(dtype):
    # x = 1 everywhere and eps 0: rms 1, y = gamma + beta, v_i = y * smooth_i in float32;
    # scale_i = amax / 32768 (exact), then the CANN golden's cast of v_i / scale_i.
    x1 = torch.ones(3, 24, dtype=dtype)
    x1[2] = 0                                                   # an all-zero row
    gamma, beta = make((24,), dtype, 31, 4.0), make((24,), dtype, 32)
    s1, s2 = make((24,), dtype, 33).abs() + 0.5, make((24,), dtype, 34)
    y1, y2, _, sc1, sc2 = na.npu_add_rms_norm_dynamic_quant(
        x1, torch.zeros_like(x1), gamma, smooth_scale1=s1, smooth_scale2=s2, beta=beta,
        epsilon=0.0, y_dtype=290)
    assert y1.dtype == y2.dtype == torch.uint8 and y1.shape == (3, 24)
    rows = x1.float()[:2] * gamma.float() + beta.float()
    for y, sc, smooth in ((y1, sc1, s1), (y2, sc2, s2)):
        v = rows * smooth.float()
        scale = v.abs().amax(-1, keepdim=True) / 32768.0
        assert torch.equal(sc[:2], scale.squeeze(-1))
        assert torch.equal(y[:2], hifloat8_golden(v / scale))
        assert y[2].eq(0).all() and sc[2].item() == 1.0         # zero row: y 0, scale 1
        assert y[:2].eq(0x6E).logical_or(y[:2].eq(0xEE)).sum(-1).tolist() == [1, 1]


def test_int4_packed():
    gamma = torch.tensor([7.0, 3.5, 2.5, -7.0, 1.0, -1.0, 0.5, 0.0] * 2, dtype=F32)
    x1 = torch.ones(2, 16)
    y1, _, _, s1, _ = na.npu_add_rms_norm_dynamic_quant(x1, torch.zeros_like(x1), gamma,
                                                        epsilon=0.0, y_dtype=torch.quint4x2)
    assert y1.dtype == torch.int32 and y1.shape == (2, 2) and s1.tolist() == [1.0, 1.0]
    vals = [7, 4, 2, -7, 1, -1, 0, 0]
    word = sum((v & 0xF) << (4 * j) for j, v in enumerate(vals))
    word = word - 2 ** 32 if word >= 2 ** 31 else word
    assert y1.tolist() == [[word, word], [word, word]]


def test_noncontiguous_inputs_unchanged():
    x1 = make((16, 6), BF16, 1).t()
    x2 = make((16, 6), BF16, 2).t()
    gamma = make((16,), BF16, 3)
    before = [t.clone() for t in (x1, x2, gamma)]
    y1, *_ = na.npu_add_rms_norm_dynamic_quant(x1, x2, gamma)
    within_one(y1, golden(x1, x2, gamma)[0], max_mismatch=0.05)
    for a, b in zip(before, (x1, x2, gamma)):
        assert torch.equal(a, b)


def _args(**over):
    a = dict(x1=make((2, 16)), x2=make((2, 16)), gamma=make((16,)))
    a.update(over)
    return a


@pytest.mark.parametrize("over,error,match", [
    (dict(x1=make((16,)), x2=make((16,))), ValueError, "expected x1 a 2-D to 8-D"),
    (dict(gamma=make((1, 16))), RuntimeError, "expected gamma a 1-D tensor"),
    (dict(smooth_scale1=make((8,))), RuntimeError, "expected smooth_scale1 the shape"),
    (dict(beta=make((16,), BF16)), TypeError, "expected beta the same dtype as x1"),
    (dict(smooth_scale2=make((16,))), ValueError, "expected smooth_scale1 a tensor"),
    (dict(output_mask=[False, False]), ValueError, "expected output_mask at least one"),
    (dict(smooth_scale1=make((16,)), output_mask=[False, True]), ValueError,
     "expected output_mask output_mask\\[0\\] True"),
    (dict(x1=make((2, 12)), x2=make((2, 12)), gamma=make((12,)), y_dtype=torch.quint4x2),
     RuntimeError, "expected x1 a last dim divisible by 8"),
    (dict(y_dtype=torch.float8_e4m3fn), ValueError, "expected y_dtype one of"),
])
def test_bad_inputs(over, error, match):
    with pytest.raises(error, match="^npu_add_rms_norm_dynamic_quant: " + match):
        na.npu_add_rms_norm_dynamic_quant(**_args(**over))


def test_strict_rules_and_no_autograd():
    with na.strict("A2"):
        na.npu_add_rms_norm_dynamic_quant(**_args())
        with pytest.raises(ValueError, match="expected y_dtype torch.int8 or torch.quint4x2"):
            na.npu_add_rms_norm_dynamic_quant(**_args(y_dtype=290))
        with pytest.raises(TypeError, match="expected x1 dtype in"):
            na.npu_add_rms_norm_dynamic_quant(**_args(x1=make((2, 16), F32),
                                                      x2=make((2, 16), F32),
                                                      gamma=make((16,), F32)))
    with na.strict("950"), pytest.raises(RuntimeError, match="expected a product"):
        na.npu_add_rms_norm_dynamic_quant(**_args())
    x1 = make((2, 16), F32).requires_grad_()
    with pytest.raises(RuntimeError, match="expected inputs that do not require grad"):
        na.npu_add_rms_norm_dynamic_quant(**_args(x1=x1, x2=make((2, 16), F32),
                                                  gamma=make((16,), F32)))
