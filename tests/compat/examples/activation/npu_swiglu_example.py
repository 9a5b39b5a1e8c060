# Seed 004, torch_npu.npu_swiglu, 调用示例.  Copied from the documentation unchanged.
import torch
import torch_npu
input_tensor = torch.randn(2, 32, 6, 6)
output = torch_npu.npu_swiglu(input_tensor.npu(), dim = -1)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: outputs = swiglu(x, dim=-1) = swish(A) * B = A * sigmoid(A) * B, where A and B are
# x cut in two along dim (A the first half).
x64 = input_tensor.to(torch.float64)
A, B = x64[..., :3], x64[..., 3:]
expected = A * (1.0 / (1.0 + torch.exp(-A))) * B
assert output.shape == (2, 32, 6, 3) and output.dtype == torch.float32, (output.shape, output.dtype)
torch.testing.assert_close(output.to(torch.float64), expected, rtol=1e-6, atol=1e-6)
print("EXAMPLE OK")
