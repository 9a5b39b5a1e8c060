"""The eager fast path of ``NpuOp.__call__``: plain eager calls skip the dispatcher, every other
call goes through it -- so modes, FakeTensor, autograd and the profiler still see the op."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import npu_anywhere as na
from npu_anywhere import library
from npu_anywhere.ops.norm.rms_norm import rms_norm_op


class _SeenOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _inputs(requires_grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 8, generator=g, dtype=torch.float64, requires_grad=requires_grad)
    return x, torch.rand(8, generator=g, dtype=torch.float64) + 0.5


def test_plain_call_skips_the_dispatcher_and_equals_torch_ops(monkeypatch):
    x, gamma = _inputs()
    calls = []
    monkeypatch.setattr(type(rms_norm_op), "_kernel",
                        lambda self, *a, **k: calls.append(self.name) or
                        self.providers.select(*a, **k).fn(*a, **k))
    y, rstd = na.npu_rms_norm(x, gamma, 1e-6)
    assert calls == ["npu_rms_norm"]
    want = torch.ops.npu.npu_rms_norm(x, gamma, 1e-6)
    assert torch.equal(y, want[0]) and torch.equal(rstd, want[1])


def test_a_dispatch_mode_sees_the_op():
    x, gamma = _inputs()
    with _SeenOps() as seen:
        na.npu_rms_norm(x, gamma, 1e-6)
    assert any("npu_rms_norm" in n for n in seen.names), seen.names


def test_fake_tensors_and_requires_grad_take_the_dispatcher():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(3, 8))
        y, rstd = na.npu_rms_norm(x, torch.ones(8), 1e-6)
    assert y.shape == (3, 8) and rstd.shape == (3, 1)
    x, gamma = _inputs(requires_grad=True)
    y, _ = na.npu_rms_norm(x, gamma, 1e-6)
    assert y.grad_fn is not None                      # autograd recorded the op
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_forbidden_autograd_still_raises_through_the_public_function():
    q = torch.randn(2, 1, 2, 32, requires_grad=True)
    cos = torch.randn(1, 1, 2, 32)
    with pytest.raises(RuntimeError, match="npu_interleave_rope: expected inputs that do not "
                       "require grad"):
        na.npu_interleave_rope(q, cos, cos)


def test_the_profiler_records_the_op():
    x, gamma = _inputs()
    with torch.profiler.profile() as prof:
        na.npu_rms_norm(x, gamma, 1e-6)
    assert any("npu_rms_norm" in e.name for e in prof.events())


def test_only_registered_function_modes_are_transparent():
    from torch.overrides import TorchFunctionMode

    class Other(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x, gamma = _inputs()
    assert library._plain_eager((x, gamma, 1e-6), {})
    with Other():
        assert not library._plain_eager((x, gamma, 1e-6), {})
    with torch.inference_mode():
        assert library._plain_eager((x, gamma, 1e-6), {})
    assert not library._plain_eager((torch.nn.Parameter(x.detach()), gamma, 1e-6), {})
    with torch.no_grad():             # a Parameter is still a subclass
        assert not library._plain_eager((torch.nn.Parameter(x.detach()), gamma, 1e-6), {})
