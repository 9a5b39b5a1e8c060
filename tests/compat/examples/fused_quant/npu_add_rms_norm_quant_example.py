# seed 004, npu_add_rms_norm_quant, 调用示例 (copied as is).
import torch
import torch_npu
x_shape = [16, 32]
quant_shape = [32, ]
x1 = torch.randn(x_shape, dtype=torch.float16).npu()
x2 = torch.randn(x_shape, dtype=torch.float16).npu()
gamma = torch.randn(quant_shape, dtype=torch.float16).npu()
beta = torch.randn(quant_shape, dtype=torch.float16).npu()
scales1 = torch.randn(quant_shape, dtype=torch.float32).npu()
zero_points1 = torch.randint(-10, 10, quant_shape, dtype=torch.int32).npu()
y1, _, x_out = torch_npu.npu_add_rms_norm_quant(x1, x2, gamma, scales1, zero_points1, beta)

# --- added by npu_anywhere tests: check the numbers ---
# x = x1 + x2;  y = x / sqrt(mean(x^2) + 1e-6) * gamma + beta;  y1 = rint(y / scales1 + zp1)
s = x1.cpu().double() + x2.cpu().double()
y = s / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-6) * gamma.cpu().double() \
    + beta.cpu().double()
want = torch.round(y / scales1.cpu().double() + zero_points1.cpu().double()).clamp(-128, 127)
assert y1.dtype == torch.int8 and y1.shape == (16, 32) and x_out.dtype == torch.float16
diff = (y1.cpu().double() - want).abs()
assert diff.max().item() <= 1, diff.max()       # op-plugin's tolerance (float16 intermediates)
assert torch.equal(x_out.cpu(), s.to(torch.float16))
print("EXAMPLE OK")
