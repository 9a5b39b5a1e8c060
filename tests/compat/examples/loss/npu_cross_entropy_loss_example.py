# Seed 004, torch_npu.npu_cross_entropy_loss, 调用示例.  Copied unchanged.
import torch
import torch_npu
N = 4096
C = 8080
input = torch.randn(N, C).npu()
target = torch.arange(0, N).npu()
loss, log_prob, _, _ = torch_npu.npu_cross_entropy_loss(input, target)

# --- added by npu_anywhere tests: check the numbers ---
# log_prob = x - logsumexp(x, -1); loss = mean_n(-log_prob[n, target_n]) (mean, no weight, no
# ignored rows).  Checked in float64 on every 64th row for log_prob, all rows for the loss.
x64 = input.cpu().to(torch.float64)
lse = x64.logsumexp(-1)
picked = x64[torch.arange(N), target.cpu()] - lse
torch.testing.assert_close(loss.cpu().double(), (-picked.mean()).reshape(1), rtol=1e-5, atol=1e-6)
rows = torch.arange(0, N, 64)
torch.testing.assert_close(log_prob.cpu()[rows].double(), x64[rows] - lse[rows, None],
                           rtol=1e-5, atol=1e-5)
assert loss.shape == (1,) and log_prob.shape == (N, C) and log_prob.dtype == torch.float32
print("EXAMPLE OK")
