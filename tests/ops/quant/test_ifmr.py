"""Tests for npu_ifmr against the IFMR search as op-plugin's CPU golden defines it
(test/test_base_ops/test_ifmr.py), written here in numpy float32, plus a float64 check that
the chosen candidate really minimizes the reconstruction loss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

ARGS = dict(min_percentile=0.999999, max_percentile=0.999999, search_start=0.7, search_end=1.3,
            search_step=0.01)


def numpy_golden(data, cumsum, lo, hi, with_offset, min_percentile, max_percentile,
                 search_start, search_end, search_step):
    f = np.float32
    d = data.astype(f).reshape(-1)
    bins = f(cumsum.size)
    cdf = cumsum.astype(f) / f(d.size)
    max_index = f((cdf < f(max_percentile)).sum())
    min_index = f((cdf < f(1 - min_percentile)).sum())
    lo, hi = f(lo), f(hi)
    max_init = max_index / bins * (hi - lo) + lo
    min_init = min_index / bins * (hi - lo) + lo
    steps = np.arange(search_start, search_end, search_step, dtype=f)
    if with_offset:
        max_init = max(max_init, f(0))
        min_init = min(min_init, f(0))
        min_list = min_init * np.ones(steps.shape, dtype=f)
        max_list = max_init * steps
        scale = (max_list - min_list) / f(255)
        scale = np.where(scale < f(1.192092896e-07), f(1), scale).astype(f)
        offset = -(np.round(min_list / scale) + f(128))
    else:
        scale = max(abs(max_init), abs(min_init)) * steps / f(127)
        offset = np.zeros_like(scale)
    losses = []
    for s, o in zip(scale, offset):
        q = np.clip(np.round(d / s) + o, -128, 127)
        losses.append(np.sum(np.square((q - o) * s - d)))
    i = int(np.argmin(losses))
    return float(scale[i]), float(offset[i]), scale, offset


def loss64(data, s, o):
    d = data.to(torch.float64).reshape(-1)
    q = (torch.round(d / s) + o).clamp(-128, 127)
    return float((((q - o) * s - d) ** 2).sum())


def make(shape, dtype=torch.float32, seed=0, lo=-1.0, hi=1.0, bins=128):
    g = torch.Generator().manual_seed(seed)
    data = (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    mn, mx = data.min().reshape(1), data.max().reshape(1)
    hist = torch.histc(data.float(), bins=bins, min=float(mn), max=float(mx))
    return data, mn, mx, torch.cumsum(hist, 0).to(torch.int32)


@pytest.mark.parametrize("with_offset", [False, True])
@pytest.mark.parametrize("shape,lo,hi", [((2, 2, 3, 4), -1, 1), ((5, 5), -1, 1),
                                         ((7, 33), 0.2, 3.0), ((1,), 0.5, 0.5 + 1e-3),
                                         ((301,), -5.0, -0.5)])
def test_matches_golden(with_offset, shape, lo, hi):
    data, mn, mx, cumsum = make(shape, seed=len(shape), lo=lo, hi=hi)
    scale, offset = na.npu_ifmr(data, mn, mx, cumsum, with_offset=with_offset, **ARGS)
    assert scale.shape == (1,) and offset.shape == (1,) and scale.dtype == torch.float32
    s, o, scales, offsets = numpy_golden(data.numpy(), cumsum.numpy(), mn.item(), mx.item(),
                                         with_offset, **ARGS)
    assert scale.item() == pytest.approx(s, rel=1e-6)
    assert offset.item() == o
    # the chosen candidate's float64 loss is the smallest (up to float32 loss rounding)
    best = min(loss64(data, float(a), float(b)) for a, b in zip(scales, offsets))
    assert loss64(data, scale.item(), offset.item()) <= best * (1 + 1e-5) + 1e-12


def test_doc_example_values():
    data = torch.tensor([0.4508, 0.6513, 0.4734, 0.1924, 0.0402, 0.5502, 0.0694, 0.9032,
                         0.4844, 0.5361, 0.9369, 0.7874, 0.5157, 0.1863, 0.4574, 0.8033,
                         0.5986, 0.8090, 0.7605, 0.8252, 0.4264, 0.8952, 0.2279, 0.9746,
                         0.0803, 0.7114, 0.8773, 0.2341, 0.6497, 0.0423, 0.8407, 0.9515,
                         0.1821, 0.5931, 0.7160, 0.4968, 0.7977, 0.0899, 0.9572, 0.0146,
                         0.2804, 0.8569, 0.2292, 0.1118, 0.5747, 0.4064, 0.8370, 0.1611]
                        ).reshape(2, 2, 3, 4)
    mn, mx = torch.min(data), torch.max(data)             # 0-dim, as in the seed example
    cdf = torch.cumsum(torch.histc(data, bins=128, min=mn, max=mx), dim=0).int()
    scale, offset = na.npu_ifmr(data, mn, mx, cdf, with_offset=False, **ARGS)
    assert scale.shape == () and offset.shape == ()
    assert round(scale.item(), 4) == 0.0080 and offset.item() == 0.0


def test_small_hand_made_case():
    # with_offset: offset = -(round(min / scale) + 128) uses half to even; check one exactly
    # constructed case against the golden
    data = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    mn, mx = data.min().reshape(1), data.max().reshape(1)
    cumsum = torch.arange(1, 9, dtype=torch.int32)
    for wo in (False, True):
        got = na.npu_ifmr(data, mn, mx, cumsum, 0.9, 0.9, 0.5, 1.5, 0.25, wo)
        s, o, _, _ = numpy_golden(data.numpy(), cumsum.numpy(), -1.0, 4.0, wo, 0.9, 0.9,
                                  0.5, 1.5, 0.25)
        assert got[0].item() == pytest.approx(s, rel=1e-7) and got[1].item() == o


def test_float16_data_and_inputs_unchanged():
    data, mn, mx, cumsum = make((6, 10), dtype=torch.float16, seed=4)
    x = data.t()                                            # non-contiguous
    saved = [t.clone() for t in (x, mn, mx, cumsum)]
    scale, offset = na.npu_ifmr(x, mn, mx, cumsum, with_offset=True, **ARGS)
    assert scale.dtype == torch.float16 and offset.dtype == torch.float16
    assert all(torch.equal(a, b) for a, b in zip((x, mn, mx, cumsum), saved))
    s, o, _, _ = numpy_golden(x.float().numpy(), cumsum.numpy(), mn.item(), mx.item(), True,
                              **ARGS)
    assert scale.item() == pytest.approx(s, rel=1e-3) and offset.item() == o


def test_constant_data_with_offset():
    data = torch.full((4, 4), 0.25)
    mn, mx = data.min().reshape(1), data.max().reshape(1)
    cumsum = torch.full((8,), 16, dtype=torch.int32)
    scale, offset = na.npu_ifmr(data, mn, mx, cumsum, with_offset=True, **ARGS)
    s, o, _, _ = numpy_golden(data.numpy(), cumsum.numpy(), 0.25, 0.25, True, **ARGS)
    assert math.isclose(scale.item(), s, rel_tol=1e-6) and offset.item() == o


@pytest.mark.parametrize("index,value,exc,msg", [
    (0, torch.ones(4, dtype=torch.float64), TypeError, "expected data dtype"),
    (0, torch.ones(0), ValueError, "expected data"),
    (1, torch.zeros(2), RuntimeError, "expected data_min a single value"),
    (2, torch.zeros(1, dtype=torch.float16), TypeError, "expected data_max the dtype of data"),
    (3, torch.ones(4), TypeError, "expected cumsum dtype"),
    (3, torch.ones(2, 2, dtype=torch.int32), ValueError, "expected cumsum a 1-D tensor"),
    (4, -0.1, ValueError, "expected min_percentile a value in"),
    (5, 1.5, ValueError, "expected max_percentile a value in"),
    (6, 1.3, ValueError, "expected search_start a value in"),
    (8, 0.0, ValueError, "expected search_step a positive value"),
])
def test_bad_inputs(index, value, exc, msg):
    data, mn, mx, cumsum = make((4, 4))
    args = [data, mn, mx, cumsum, 0.999999, 0.999999, 0.7, 1.3, 0.01, False]
    args[index] = value
    with pytest.raises(exc, match="npu_ifmr: " + msg):
        na.npu_ifmr(*args)


def test_strict_products():
    data, mn, mx, cumsum = make((4, 4))
    with targets.strict("A2"):
        na.npu_ifmr(data, mn, mx, cumsum, with_offset=False, **ARGS)
    want = na.npu_ifmr(data, mn, mx, cumsum, with_offset=False, **ARGS)
    # ops-nn quant/ifmr/README.md lists the 950 (its only kernel config is ascend950).
    with targets.strict("950"):
        got = na.npu_ifmr(data, mn, mx, cumsum, with_offset=False, **ARGS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    with targets.strict("310P"), pytest.raises(RuntimeError, match="npu_ifmr: expected a product"):
        na.npu_ifmr(data, mn, mx, cumsum, with_offset=False, **ARGS)


def test_no_autograd():
    data, mn, mx, cumsum = make((4, 4))
    with pytest.raises(RuntimeError, match="npu_ifmr: expected inputs"):
        na.npu_ifmr(data.requires_grad_(), mn, mx, cumsum, with_offset=False, **ARGS)
