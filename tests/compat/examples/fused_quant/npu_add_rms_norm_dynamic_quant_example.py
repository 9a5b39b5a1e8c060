# seed 004, npu_add_rms_norm_dynamic_quant, 调用示例 (copied as is, except the marked line: the
# doc's call uses names it never defines -- x1_n, gamma_n, s1_n, eps_f... -- a doc defect).
import torch
import torch_npu
x1 = torch.randn(3, 4, 8, dtype=torch.float16, device='npu')
x2 = torch.randn(3, 4, 8, dtype=torch.float16, device='npu')
gamma = torch.ones(8, dtype=torch.float16, device='npu')
beta = torch.zeros(8, dtype=torch.float16, device='npu')
smooth_scale1 = torch.ones(8, dtype=torch.float16, device='npu')
smooth_scale2 = torch.ones(8, dtype=torch.float16, device='npu')
epsilon = 1e-6
output_mask = [True, True]
x1_n, x2_n, gamma_n, s1_n, s2_n, beta_n, eps_f = x1, x2, gamma, smooth_scale1, smooth_scale2, beta, epsilon  # added
y1_npu, y2_npu, x_out_npu, s1_npu, s2_npu = torch_npu.npu_add_rms_norm_dynamic_quant(
x1_n, x2_n, gamma_n,
smooth_scale1=s1_n,
smooth_scale2=s2_n,
beta=beta_n,
epsilon=eps_f,
output_mask=output_mask,
)

# --- added by npu_anywhere tests: check the numbers ---
# x = x1 + x2; y = x / rms(x) * gamma + beta; v = y * smooth; scale = rowMax|v| / 127; q = rint(v / scale)
s = x1.cpu().double() + x2.cpu().double()
y = s / torch.sqrt((s * s).mean(-1, keepdim=True) + epsilon) * gamma.cpu().double() + beta.cpu().double()
for q_npu, sc_npu, smooth in ((y1_npu, s1_npu, smooth_scale1), (y2_npu, s2_npu, smooth_scale2)):
    v = y * smooth.cpu().double()
    scale = v.abs().amax(-1, keepdim=True) / 127
    want = torch.round(v / scale).clamp(-128, 127)
    assert q_npu.dtype == torch.int8 and q_npu.shape == (3, 4, 8) and sc_npu.shape == (3, 4)
    assert (q_npu.cpu().double() - want).abs().max().item() <= 1
    torch.testing.assert_close(sc_npu.cpu().double(), scale.squeeze(-1), rtol=1e-5, atol=0)
assert torch.equal(x_out_npu.cpu(), s.to(torch.float16))
print("EXAMPLE OK")
