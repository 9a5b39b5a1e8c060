# Seed 004, torch_npu.npu_mhc_pre, 调用示例 1 (单算子模式).  Copied unchanged.
import torch
import torch_npu
T, n, D = 1024, 8, 2560
x = torch.randn(T, n, D, dtype=torch.bfloat16).npu()
phi = torch.randn(n * n + 2 * n, n * D, dtype=torch.float32).npu()
alpha = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float32).npu()
bias_pre = torch.full((n,), 0.01, dtype=torch.float32)
bias_post = torch.full((n,), 0.01, dtype=torch.float32)
bias_res = torch.full((n, n), 0.01, dtype=torch.float32)
bias = torch.cat([bias_pre, bias_post, bias_res.reshape(-1)], dim=0).npu()
gamma = torch.randn(n, D, dtype=torch.float32).npu()
out_flag = 1
h_in, h_post, h_res, inv_rms, h_mix, h_pre = torch_npu.npu_mhc_pre(
x,
phi,
alpha,
bias,
gamma=gamma,
out_flag=out_flag
)

# --- added by npu_anywhere tests: check the numbers ---
# The doc formula in float64 on every 64th token: x' = x / rms(x) * gamma, H = alpha * x' phi^T
# + b, sigmoid(+hc_eps) for H_pre, 2 * sigmoid for H_post, h_in = sum_j H_pre[j] x[j].
rows = torch.arange(0, T, 64)
xs = x.cpu()[rows].double()
rms = torch.sqrt(xs.square().mean((-2, -1)) + 1e-6)
proj = ((xs * gamma.cpu().double()).reshape(len(rows), -1) @ phi.cpu().double().t()) / rms[:, None]
b = bias.cpu().double()
pre = torch.sigmoid(0.5 * proj[:, :n] + b[:n]) + 1e-6
post = 2 * torch.sigmoid(0.5 * proj[:, n:2 * n] + b[n:2 * n])
res = (0.5 * proj[:, 2 * n:] + b[2 * n:]).reshape(-1, n, n)
torch.testing.assert_close(h_pre.cpu()[rows].double(), pre, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(h_post.cpu()[rows].double(), post, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(h_res.cpu()[rows].double(), res, rtol=1e-4, atol=1e-2)
torch.testing.assert_close(inv_rms.cpu()[rows].double(), 1 / rms, rtol=1e-5, atol=0)
torch.testing.assert_close(h_in.cpu()[rows].double(), (pre[:, :, None] * xs).sum(1),
                           rtol=1e-2, atol=5e-2)
assert h_in.dtype == torch.bfloat16 and h_in.shape == (T, D) and h_mix.shape == (T, n * n + 2 * n)
print("EXAMPLE OK")
