# seed 004, npu_rms_norm_quant, 调用示例 (copied as is).
import torch
import torch_npu
eps = 1e-6
x = torch.randn(16, dtype = torch.float16).npu()
gamma = torch.randn(16, dtype = torch.float16).npu()
beta = torch.zeros(16, dtype = torch.float16).npu()
scale = torch.ones(1, dtype = torch.float16).npu()
offset = torch.zeros(1, dtype = torch.int8).npu()
y = torch_npu.npu_rms_norm_quant(x, gamma, beta, scale, offset, eps)
_ = y.cpu().numpy()

# --- added by npu_anywhere tests: check the numbers ---
# quant_in = x / sqrt(mean(x^2) + eps) * gamma + beta;  y = rint(quant_in / scale + offset)
xd = x.cpu().double()
q = xd / torch.sqrt((xd * xd).mean() + eps) * gamma.cpu().double() + beta.cpu().double()
want = torch.round(q / scale.cpu().double() + offset.cpu().double()).clamp(-128, 127)
assert y.dtype == torch.int8 and y.shape == (16,)
assert (y.cpu().double() - want).abs().max().item() <= 1
print("EXAMPLE OK")
