# Seed 004, torch_npu.npu_gemma_rms_norm, 调用示例 (copied as is).
import torch
import torch_npu
input_x = torch.randn([20, 10, 64], dtype=torch.float32).npu()
input_gamma = torch.randn([64], dtype=torch.float32).npu()
y, rstd = torch_npu.npu_gemma_rms_norm(input_x, input_gamma)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnGemmaRmsNorm:  y_i = x_i / sqrt(mean(x^2) + eps) * (1 + g_i), eps = 1e-6 by default
x64, g64 = input_x.to(torch.float64), input_gamma.to(torch.float64)
rms = torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6)
assert y.shape == input_x.shape and y.dtype == torch.float32, (y.shape, y.dtype)
assert rstd.shape == (20, 10, 1) and rstd.dtype == torch.float32, (rstd.shape, rstd.dtype)
torch.testing.assert_close(y.to(torch.float64), x64 / rms * (1 + g64), rtol=1e-5, atol=1e-5)
torch.testing.assert_close(rstd.to(torch.float64), 1.0 / rms, rtol=1e-5, atol=0)
print("EXAMPLE OK")
