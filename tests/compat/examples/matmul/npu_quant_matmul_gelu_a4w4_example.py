# Seed 004, torch_npu.npu_quant_matmul_gelu, 调用示例 / 单算子调用(A4W4量化).  Copied from the
# documentation.
import torch
import torch_npu
m, k, n = 128, 256, 512
# 生成INT4数据(以INT32格式存储)
x1_fp = torch.randn(m, k, dtype=torch.float32).npu()
x2_fp = torch.randn(k, n, dtype=torch.float32).npu()
# 量化为INT4
scale_tmp = torch.ones(1, dtype=torch.float32).npu()
x1 = torch_npu.npu_quantize(x1_fp, scale_tmp, None, torch.quint4x2, -1, False)
x2 = torch_npu.npu_quantize(x2_fp, scale_tmp, None, torch.quint4x2, -1, False)
x1_scale = torch.randn(m, dtype=torch.float32).abs().npu() * 0.01
x2_scale = torch.randn(n, dtype=torch.float32).abs().npu() * 0.01
# A4W4量化仅支持ND格式, 不支持NZ格式
output = torch_npu.npu_quant_matmul_gelu(x1, x2, x1_scale, x2_scale, approximate="gelu_tanh")

# --- added by npu_anywhere tests: check the numbers ---
# npu_quantize with scale 1 rounds to int4 (half to even, saturated to [-8, 7]) and packs eight
# values per int32 word; out = gelu_tanh(int4(x1) @ int4(x2) * x2_scale * x1_scale), float16.
import math
a = torch.round(x1_fp.cpu().double()).clamp(-8, 7)
b = torch.round(x2_fp.cpu().double()).clamp(-8, 7)
assert x1.dtype == torch.int32 and x1.shape == (m, k // 8) and x2.shape == (k, n // 8)
q = (a @ b) * x2_scale.cpu().double() * x1_scale.cpu().double()[:, None]
golden = 0.5 * q * (1 + torch.tanh(math.sqrt(2 / math.pi) * (q + 0.044715 * q ** 3)))
assert output.shape == (m, n) and output.dtype == torch.float16
torch.testing.assert_close(output.cpu().double(), golden, rtol=2 ** -10, atol=2 ** -12)
print("EXAMPLE OK")
