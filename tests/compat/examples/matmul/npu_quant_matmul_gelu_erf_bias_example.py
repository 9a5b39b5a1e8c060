# Seed 004, torch_npu.npu_quant_matmul_gelu, 调用示例 / 单算子调用(A8W8量化, ND格式, gelu_erf激活,
# 带bias).  Copied from the documentation.
import torch
import torch_npu
m, k, n = 128, 256, 512
x1 = torch.randint(-5, 5, (m, k), dtype=torch.int8).npu()
x2 = torch.randint(-5, 5, (k, n), dtype=torch.int8).npu()
x1_scale = torch.randn(m, dtype=torch.float32).abs().npu() * 0.01
x2_scale = torch.randn(n, dtype=torch.float32).abs().npu() * 0.01
bias = torch.randn(n, dtype=torch.float32).npu() * 0.1
# 使用gelu_erf激活并添加bias
output = torch_npu.npu_quant_matmul_gelu(
x1, x2, x1_scale, x2_scale, bias=bias, approximate="gelu_erf"
)

# --- added by npu_anywhere tests: check the numbers ---
# float32 bias is added after dequantization: qbmm = x1 @ x2 * x2_scale * x1_scale + bias;
# out = gelu_erf(qbmm) = 0.5 * qbmm * (1 + erf(qbmm / sqrt(2))), float16.
import math
q = (x1.cpu().double() @ x2.cpu().double()) * x2_scale.cpu().double() * x1_scale.cpu().double()[:, None]
q = q + bias.cpu().double()
golden = 0.5 * q * (1 + torch.special.erf(q / math.sqrt(2)))
assert output.shape == (m, n) and output.dtype == torch.float16
torch.testing.assert_close(output.cpu().double(), golden, rtol=2 ** -10, atol=2 ** -12)
print("EXAMPLE OK")
