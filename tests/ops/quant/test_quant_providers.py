"""The "compiled" provider (torch.compile of the reference) must give the reference's results
bit for bit: quantized integers leave no room for a fused multiply-add or a reciprocal that the
reference does not compute."""

from __future__ import annotations

import torch

import npu_anywhere as na
from npu_anywhere import use_providers
from npu_anywhere.kernels import compiled


def _both(fn, *args, **kwargs):
    with use_providers("reference"):
        ref = fn(*args, **kwargs)
    with compiled.compiling_after(0), use_providers("compiled"):
        got = fn(*args, **kwargs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape
        assert torch.equal(r, g)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_dynamic_quant_compiled_matches_reference():
    x = torch.randn(257, 384, generator=_gen(0)).to(torch.bfloat16)
    s = (torch.rand(384, generator=_gen(1)) + 0.5).to(torch.bfloat16)
    _both(na.npu_dynamic_quant, x, smooth_scales=s)


def test_dynamic_quant_asymmetric_compiled_matches_reference():
    # contiguous float32 input: the reference works in place on its own float32 copy only,
    # never on the caller's tensor (eager or compiled)
    x = torch.randn(300, 256, generator=_gen(2))
    before = x.clone()
    _both(na.npu_dynamic_quant_asymmetric, x)
    assert torch.equal(x, before)


def test_quantize_and_anti_quant_compiled_match_reference():
    x = torch.randn(64, 96, generator=_gen(3)) * 40
    scales = torch.rand(96, generator=_gen(4)) + 0.25
    zp = torch.randint(-5, 5, (96,), generator=_gen(5), dtype=torch.int32)
    _both(na.npu_quantize, x, scales, zp, torch.qint8, -1, True)
    packed = torch.randint(-2 ** 31, 2 ** 31 - 1, (64, 12), generator=_gen(6), dtype=torch.int32)
    _both(na.npu_anti_quant, packed, torch.randn(96, generator=_gen(7)),
          offset=torch.randn(96, generator=_gen(8)), dst_dtype=torch.bfloat16)
