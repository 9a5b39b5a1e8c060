"""npu_sim_exponential_: in place, exponential of rate lambd (seed 004: -ln(1-u)/lambd).

The NPU's random stream is not public, so the numbers are tested in distribution: a
Kolmogorov-Smirnov statistic against the exponential CDF 1 - exp(-lambd x), computed here in
float64, with fixed generator seeds (deterministic, no flakiness), plus the mean, positivity,
reproducibility under a seeded generator and op-plugin's edge rules (inf -> zeros, lambd <= 0
raises "expects lambd > 0.0").
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na


def ks_statistic(samples: torch.Tensor, lambd: float) -> float:
    x = samples.double().flatten().sort().values
    n = x.numel()
    cdf = 1.0 - torch.exp(-lambd * x)
    upper = (torch.arange(1, n + 1, dtype=torch.float64) / n - cdf).max()
    lower = (cdf - torch.arange(0, n, dtype=torch.float64) / n).max()
    return float(torch.maximum(upper, lower))


@pytest.mark.parametrize("dtype,lambd", [(torch.float32, 1.0), (torch.float32, 0.5),
                                         (torch.float16, 2.0), (torch.bfloat16, 5.0)])
def test_distribution_is_exponential(dtype, lambd):
    gen = torch.Generator().manual_seed(11)
    x = torch.zeros(20000, dtype=dtype)
    out = na.npu_sim_exponential_(x, lambd=lambd, generator=gen)
    assert out is x and x.dtype == dtype
    n = x.numel()
    # 16-bit results are rounded (bfloat16: 8 significant bits), which moves the empirical CDF
    # by up to half a rounding step; allow for it on top of the 1% critical value.
    rounding = {torch.float32: 0.0, torch.float16: 2 ** -11, torch.bfloat16: 2 ** -8}[dtype]
    assert ks_statistic(x, lambd) < 1.63 / math.sqrt(n) + rounding
    assert abs(float(x.double().mean()) * lambd - 1.0) < 0.05
    assert bool((x > 0).all())


def test_seeded_generator_repeats_and_default_generator_follows_manual_seed():
    a, b = torch.empty(3, 7), torch.empty(3, 7)
    na.npu_sim_exponential_(a, 1.5, generator=torch.Generator().manual_seed(12345))
    na.npu_sim_exponential_(b, 1.5, generator=torch.Generator().manual_seed(12345))
    assert torch.equal(a, b)
    torch.manual_seed(3)
    c = torch.ops.npu.npu_sim_exponential_(torch.empty(5, 2, 3), 1.0)
    torch.manual_seed(3)
    d = na.npu_sim_exponential_(torch.empty(5, 2, 3))
    assert torch.equal(c, d)
    e = na.npu_sim_exponential_(torch.empty(5, 2, 3))
    assert not torch.equal(d, e)          # the generator advanced


def test_formula_on_the_drawn_uniforms():
    # The draw is torch.rand (1 - u, on [0, 1)) from the generator, float32; result -ln(.)/lambd
    gen = torch.Generator().manual_seed(4)
    one_minus_u = torch.rand(6, 5, generator=gen, dtype=torch.float32).double()
    want = -torch.log(one_minus_u) / 3.0
    got = na.npu_sim_exponential_(torch.empty(6, 5), 3.0,
                                  generator=torch.Generator().manual_seed(4))
    assert bool(((got.double() - want).abs() <= 2e-7 * want.abs()).all())


def test_infinite_rate_zero_fills_and_empty_and_scalar():
    x = torch.full((2, 5), 7.0, dtype=torch.bfloat16)
    assert torch.equal(na.npu_sim_exponential_(x, float("inf")), torch.zeros(2, 5).bfloat16())
    assert na.npu_sim_exponential_(torch.empty(0)).numel() == 0
    s = na.npu_sim_exponential_(torch.zeros(()))
    assert s.dim() == 0 and float(s) > 0
    eight = na.npu_sim_exponential_(torch.zeros([2] + [1] * 7))
    assert bool((eight > 0).all())


@pytest.mark.parametrize("make,lambd,error,match", [
    (lambda: torch.zeros(4), -0.5, ValueError, "expects lambd > 0.0"),
    (lambda: torch.zeros(4), 0.0, ValueError, "expected lambd > 0.0"),
    (lambda: torch.zeros(4), float("nan"), ValueError, "expected lambd > 0.0"),
    (lambda: torch.zeros(4, 3).t(), 1.0, RuntimeError, "expected self a contiguous tensor"),
    (lambda: torch.zeros(4, dtype=torch.float64), 1.0, TypeError, "expected self dtype in"),
    (lambda: torch.zeros([1] * 9), 1.0, ValueError, "expected self at most 8 dims"),
])
def test_bad_inputs_leave_self_untouched(make, lambd, error, match):
    x = make()
    before = x.clone()
    with pytest.raises(error, match=match):
        na.npu_sim_exponential_(x, lambd)
    assert torch.equal(x, before)


def test_self_alias_and_no_backward():
    assert na.npu_sim_exponential_(self=torch.zeros(3), lambd=2.0).min() > 0
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        na.npu_sim_exponential_(x)


def test_random_ops_carry_the_seeded_tag():
    from npu_anywhere.library import REGISTRY
    for name in ("npu_sim_exponential_", "_npu_sim_exponential_inplace", "npu_top_k_top_p_sample"):
        assert torch.Tag.nondeterministic_seeded in REGISTRY[name].overload.tags, name
    assert torch.Tag.nondeterministic_seeded not in REGISTRY["npu_top_k_top_p"].overload.tags

