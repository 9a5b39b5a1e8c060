# Seed 004, torch_npu.npu_mish, 示例, turned from doctest lines into a script: the `>>> `
# prompts were dropped, the two imports added and the echoed value printed.
import torch
import torch_npu

x = torch.rand(10, 30, 10).npu()
y = torch_npu.npu_mish(x)
print(y.shape)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: mish(x) = x * tanh(softplus(x)), softplus(x) = ln(1 + e^x).
x64 = x.to(torch.float64)
assert y.shape == torch.Size([10, 30, 10]) and y.dtype == torch.float32
torch.testing.assert_close(y.to(torch.float64), x64 * torch.tanh(torch.log(1 + torch.exp(x64))), rtol=1.3e-6, atol=1e-6)
print("EXAMPLE OK")
