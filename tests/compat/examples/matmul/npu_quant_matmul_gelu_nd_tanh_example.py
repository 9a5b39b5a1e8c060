# Seed 004, torch_npu.npu_quant_matmul_gelu, 调用示例 / 单算子调用(A8W8量化, ND格式, gelu_tanh激活).
# Copied from the documentation.
import torch
import torch_npu
# 准备输入数据
m, k, n = 128, 256, 512
x1 = torch.randint(-5, 5, (m, k), dtype=torch.int8).npu()
x2 = torch.randint(-5, 5, (k, n), dtype=torch.int8).npu()
x1_scale = torch.randn(m, dtype=torch.float32).abs().npu() * 0.01
x2_scale = torch.randn(n, dtype=torch.float32).abs().npu() * 0.01
# 调用融合算子
output = torch_npu.npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, approximate="gelu_tanh")
print(output.shape) # torch.Size([128, 512])
print(output.dtype) # torch.float16

# --- added by npu_anywhere tests: check the numbers ---
# qbmm = x1 @ x2 * x2_scale * x1_scale; out = gelu_tanh(qbmm), float16.
import math
q = (x1.cpu().double() @ x2.cpu().double()) * x2_scale.cpu().double() * x1_scale.cpu().double()[:, None]
golden = 0.5 * q * (1 + torch.tanh(math.sqrt(2 / math.pi) * (q + 0.044715 * q ** 3)))
assert output.shape == (128, 512) and output.dtype == torch.float16
torch.testing.assert_close(output.cpu().double(), golden, rtol=2 ** -10, atol=2 ** -12)
print("EXAMPLE OK")
