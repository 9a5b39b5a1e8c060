"""torch.compile of a block of npu ops under the shim: fullgraph (aot_eager and inductor), the
compiled providers, autograd, and `.npu()` / `is_npu` inside a compiled region; also seeding
under ``-W error::UserWarning``."""

import warnings

import torch
import torch_npu

from blocks import NpuBlock, golden_block

with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    torch.manual_seed(0)  # no "Set seed for `npu` device does not take effect"
    torch_npu.npu.manual_seed(0)

# Pure torch code compiles with the shim installed (Dynamo looks up Tensor.is_npu while it
# traces the shim's TorchFunctionMode, before any backend runs).
x = torch.randn(5)
torch.testing.assert_close(torch.compile(lambda t: t.sin(), backend="eager", fullgraph=True)(x),
                           x.sin())

block = NpuBlock(hidden=16, inter=24).npu()
x = torch.randn(2, 3, 16).npu()
r1, r2 = torch.randn(1, 3, 1, 16).npu(), torch.randn(1, 3, 1, 16).npu()
x4 = x.unsqueeze(2)  # rotary_mul takes 4-D [B, S, N, D]


def run(module, t):
    return module(t, r1, r2).squeeze(2)


golden = golden_block(block, x4, r1, r2).squeeze(2)
eager = run(block, x4)
torch.testing.assert_close(eager.double(), golden, rtol=1e-4, atol=1e-4)

compiled = torch.compile(run, backend="aot_eager", fullgraph=True)
torch.testing.assert_close(compiled(block, x4).double(), golden, rtol=1e-4, atol=1e-4)

# Autograd through the compiled block, against the float64 golden's gradients.
xg = x4.detach().clone().requires_grad_(True)
compiled(block, xg).sum().backward()
x64 = x4.detach().double().requires_grad_(True)
golden_block(block, x64, r1, r2).sum().backward()
torch.testing.assert_close(xg.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
assert block.gamma.grad is not None and block.gamma.grad.is_npu

# A transfer and is_npu inside a compiled region (of an intermediate tensor, too).
def with_transfer(t):
    u = t.npu() * 2
    return u + 1 if u.is_npu else u - 1


t = torch.randn(4)
torch.testing.assert_close(torch.compile(with_transfer, backend="aot_eager", fullgraph=True)(t), t * 2 + 1)

# The compiled providers (Inductor-compiled references) from the first call, under the shim.
import npu_anywhere as na
from npu_anywhere.kernels import compiled as compiled_kernels

gamma = torch.rand(16).npu() + 0.5
with na.use_providers("reference"):
    ref_y, ref_rstd = torch_npu.npu_rms_norm(x, gamma)
with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
    fast_y, fast_rstd = torch_npu.npu_rms_norm(x, gamma)
torch.testing.assert_close(fast_y, ref_y, rtol=2e-6, atol=1e-6)
torch.testing.assert_close(fast_rstd, ref_rstd, rtol=2e-6, atol=1e-6)
expected = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.double()
torch.testing.assert_close(fast_y.double(), expected, rtol=1e-5, atol=1e-5)

print("COMPILE BLOCK OK")
