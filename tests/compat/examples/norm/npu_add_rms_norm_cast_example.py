# Seed 004, torch_npu.npu_add_rms_norm_cast, 调用示例 (copied as is).
import torch
import torch_npu
input_x1 = torch.randn([20, 10, 64], dtype=torch.float16).npu()
input_x2 = torch.randn([20, 10, 64], dtype=torch.float16).npu()
input_gamma = torch.randn([64], dtype=torch.float16).npu()
y1, y2, rstd, x = torch_npu.npu_add_rms_norm_cast(input_x1, input_x2, input_gamma)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnAddRmsNormCast:  x = x1 + x2;  y2 = x / sqrt(mean(x^2) + eps) * g;  y1 = float(y2)
s = input_x1.to(torch.float64) + input_x2.to(torch.float64)
rms = torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-6)
expected = s / rms * input_gamma.to(torch.float64)
assert (y1.dtype, y2.dtype, rstd.dtype, x.dtype) == (torch.float32, torch.float16,
                                                     torch.float32, torch.float16)
assert y1.shape == y2.shape == x.shape == (20, 10, 64) and rstd.shape == (20, 10, 1)
torch.testing.assert_close(y2.to(torch.float64), expected, rtol=4e-3, atol=4e-3)
assert torch.equal(y1, y2.float())
assert torch.equal(x, s.to(torch.float16))
torch.testing.assert_close(rstd.to(torch.float64), 1.0 / rms, rtol=1e-3, atol=0)
print("EXAMPLE OK")
