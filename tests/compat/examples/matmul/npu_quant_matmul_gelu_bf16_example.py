# Seed 004, torch_npu.npu_quant_matmul_gelu, 调用示例 / 单算子调用(A8W8量化, BF16输出).  Copied
# from the documentation.
import torch
import torch_npu
m, k, n = 64, 128, 256
x1 = torch.randint(-5, 5, (m, k), dtype=torch.int8).npu()
x2 = torch.randint(-5, 5, (k, n), dtype=torch.int8).npu()
x1_scale = torch.randn(m, dtype=torch.float32).abs().npu() * 0.01
x2_scale = torch.randn(n, dtype=torch.bfloat16).abs().npu() * 0.01 # BF16 scale
# 输出数据类型由x2_scale的类型决定, 此处输出为bfloat16
output = torch_npu.npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, approximate="gelu_tanh")
print(output.dtype) # torch.bfloat16

# --- added by npu_anywhere tests: check the numbers ---
# bfloat16 x2_scale -> bfloat16 output; out = gelu_tanh(x1 @ x2 * x2_scale * x1_scale).
import math
q = (x1.cpu().double() @ x2.cpu().double()) * x2_scale.cpu().double() * x1_scale.cpu().double()[:, None]
golden = 0.5 * q * (1 + torch.tanh(math.sqrt(2 / math.pi) * (q + 0.044715 * q ** 3)))
assert output.shape == (m, n) and output.dtype == torch.bfloat16
torch.testing.assert_close(output.cpu().double(), golden, rtol=2 ** -8, atol=2 ** -10)
print("EXAMPLE OK")
