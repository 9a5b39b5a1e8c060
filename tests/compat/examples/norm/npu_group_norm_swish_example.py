# Seed 004, torch_npu.npu_group_norm_swish, 调用示例 (copied as is).
import torch
import torch_npu
input = torch.randn(3, 4, 6, dtype=torch.float32).npu()
weight = torch.randn(input.size(1), dtype=torch.float32).npu()
bias = torch.randn(input.size(1), dtype=torch.float32).npu()
num_groups = input.size(1)
swish_scale = 1.0
eps = 1e-5
out = torch_npu.npu_group_norm_swish(input, num_groups, weight, bias, eps=eps, swish_scale=swish_scale)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnGroupNormSwish: per (n, group) y = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta;
# out = y / (1 + exp(-swish_scale * y)); returns (out, mean, rstd) with mean/rstd (N, num_groups)
y_out, mean, rstd = out
x64 = input.to(torch.float64)
m = x64.mean(-1, keepdim=True)                       # num_groups == C: one channel per group
v = ((x64 - m) ** 2).mean(-1, keepdim=True)
y = (x64 - m) / torch.sqrt(v + eps) * weight.to(torch.float64)[:, None] \
    + bias.to(torch.float64)[:, None]
expected = y / (1 + torch.exp(-swish_scale * y))
assert y_out.shape == (3, 4, 6) and mean.shape == rstd.shape == (3, 4)
torch.testing.assert_close(y_out.to(torch.float64), expected, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(mean.to(torch.float64), m[..., 0], rtol=1e-5, atol=1e-6)
torch.testing.assert_close(rstd.to(torch.float64), 1 / torch.sqrt(v[..., 0] + eps),
                           rtol=1e-5, atol=0)
print("EXAMPLE OK")
