# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_add_rms_norm.md, 调用示例 (copied as is;
# npu_add_rms_norm is not in seed 004).
import torch
import torch_npu

x1 = torch.rand(4, 8, dtype=torch.float16, device='npu') * 100
x2 = torch.rand(4, 8, dtype=torch.float16, device='npu') * 100
gamma = torch.rand(8, dtype=torch.float16, device='npu') * 100
epsilon = 1e-6

y, rstd, x = torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=epsilon)

print("y:", y)
print("y.shape:", y.shape)
print("y.dtype:", y.dtype)
print("rstd:", rstd)
print("rstd.dtype:", rstd.dtype)
print("x:", x)

# --- added by npu_anywhere tests: check the numbers ---
# x = x1 + x2;  RMSNorm(x_i) = x_i / sqrt(mean(x^2) + epsilon) * gamma_i
s = x1.to(torch.float64) + x2.to(torch.float64)
rms = torch.sqrt((s * s).mean(-1, keepdim=True) + epsilon)
assert (y.dtype, rstd.dtype, x.dtype) == (torch.float16, torch.float32, torch.float16)
assert y.shape == x.shape == (4, 8) and rstd.shape == (4, 1)
torch.testing.assert_close(y.to(torch.float64), s / rms * gamma.to(torch.float64),
                           rtol=4e-3, atol=1e-2)
assert torch.equal(x, s.to(torch.float16))
torch.testing.assert_close(rstd.to(torch.float64), 1.0 / rms, rtol=1e-3, atol=0)
print("EXAMPLE OK")
