# Seed 004, torch_npu.npu_gelu_mul, 调用示例.  Copied from the documentation unchanged.
import torch
import torch_npu
shape = [100, 400]
mode = "none"
input = torch.rand(shape, dtype=torch.float16).npu()
output = torch_npu.npu_gelu_mul(input, approximate=mode)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: x1 = input[..., :d], x2 = input[..., d:];  "none": GELU(x) = 0.5 * x * [1 + erf(x / sqrt(2))]
#           out = GELU(x1) * x2
import math
x64 = input.to(torch.float64)
x1, x2 = x64[..., :200], x64[..., 200:]
expected = 0.5 * x1 * (1 + torch.erf(x1 / math.sqrt(2))) * x2
assert output.shape == (100, 200) and output.dtype == torch.float16, (output.shape, output.dtype)
torch.testing.assert_close(output.to(torch.float64), expected, rtol=1e-3, atol=1e-5)
print("EXAMPLE OK")
