# Seed 004, torch_npu.npu_silu, 示例, turned from doctest lines into a script: the `>>> `
# prompts were dropped, the two imports added and the echoed value printed.
import torch
import torch_npu

a=torch.rand(2,8).npu()
output = torch_npu.npu_silu(a)
print(output)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: Swish(x) = x * sigmoid(x).
a64 = a.to(torch.float64)
assert output.shape == (2, 8) and output.dtype == torch.float32, (output.shape, output.dtype)
torch.testing.assert_close(output.to(torch.float64), a64 / (1 + torch.exp(-a64)), rtol=1.3e-6, atol=1e-6)
print("EXAMPLE OK")
