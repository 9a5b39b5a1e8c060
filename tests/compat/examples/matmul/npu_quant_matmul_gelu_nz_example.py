# Seed 004, torch_npu.npu_quant_matmul_gelu, 调用示例 / 单算子调用(A8W8量化, NZ格式, gelu_tanh激活).
# Copied from the documentation.
import torch
import torch_npu
m, k, n = 128, 256, 512
x1 = torch.randint(-5, 5, (m, k), dtype=torch.int8).npu()
x2 = torch.randint(-5, 5, (k, n), dtype=torch.int8).npu()
# 将x2转换为NZ格式以提升性能
x2_nz = torch_npu.npu_format_cast(x2.contiguous(), 29) # 29为ACL_FORMAT_FRACTAL_NZ
x1_scale = torch.randn(m, dtype=torch.float32).abs().npu() * 0.01
x2_scale = torch.randn(n, dtype=torch.float32).abs().npu() * 0.01
# 自动识别NZ格式并调用对应接口
output = torch_npu.npu_quant_matmul_gelu(x1, x2_nz, x1_scale, x2_scale, approximate="gelu_tanh")

# --- added by npu_anywhere tests: check the numbers ---
# The NZ weight holds x2's values: out = gelu_tanh(x1 @ x2 * x2_scale * x1_scale), float16.
import math
q = (x1.cpu().double() @ x2.cpu().double()) * x2_scale.cpu().double() * x1_scale.cpu().double()[:, None]
golden = 0.5 * q * (1 + torch.tanh(math.sqrt(2 / math.pi) * (q + 0.044715 * q ** 3)))
assert output.shape == (m, n) and output.dtype == torch.float16
torch.testing.assert_close(output.cpu().double(), golden, rtol=2 ** -10, atol=2 ** -12)
print("EXAMPLE OK")
