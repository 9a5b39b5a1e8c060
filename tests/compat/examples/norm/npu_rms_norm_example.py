# Seed 004, torch_npu.npu_rms_norm, 示例 (copied as is; the printed tensor is omitted).
import torch
import torch_npu
x = torch.randn(24, 1, 128).npu()
w = torch.randn(128).npu()
out1 = torch_npu.npu_rms_norm(x, w, epsilon=1e-5)[0]
print(out1)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004 / aclnnRmsNorm:  Rms(x) = sqrt(mean(x_i^2) + eps);  RmsNorm(x_i) = x_i / Rms(x) * g_i
x64, w64 = x.to(torch.float64), w.to(torch.float64)
rms = torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-5)
expected = x64 / rms * w64
assert out1.shape == x.shape and out1.dtype == torch.float32, (out1.shape, out1.dtype)
torch.testing.assert_close(out1.to(torch.float64), expected, rtol=1e-5, atol=1e-5)
y, rstd = torch_npu.npu_rms_norm(x, w, epsilon=1e-5)
assert rstd.shape == (24, 1, 1) and rstd.dtype == torch.float32, (rstd.shape, rstd.dtype)
torch.testing.assert_close(rstd.to(torch.float64), 1.0 / rms, rtol=1e-5, atol=0)
print("EXAMPLE OK")
