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
# ignored rows).  In float64 on every 16th row (the loss too: the mean of those rows' terms
# against the same rows of log_prob, and the full mean from log_prob's picked entries).
rows = torch.arange(0, N, 16)
x64 = input.cpu()[rows].to(torch.float64)
lse = x64.logsumexp(-1)
torch.testing.assert_close(log_prob.cpu()[rows].double(), x64 - lse[:, None], rtol=1e-5, atol=1e-5)
picked = log_prob.cpu().double()[torch.arange(N), target.cpu()]
torch.testing.assert_close(loss.cpu().double(), (-picked.mean()).reshape(1), rtol=1e-5, atol=1e-6)
assert loss.shape == (1,) and log_prob.shape == (N, C) and log_prob.dtype == torch.float32
print("EXAMPLE OK")
