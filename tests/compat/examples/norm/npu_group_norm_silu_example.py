# Seed 004, torch_npu.npu_group_norm_silu, 调用示例 / 单算子调用 (copied as is).
import torch
import numpy as np
import torch_npu
dtype = np.float32
shape_x = [24,320,48,48]
num_groups = 32
shape_c = [320]
eps = 0.00001
x_npu=torch.randn(shape_x,dtype=torch.float32).npu()
gamma_npu=torch.randn(shape_c,dtype=torch.float32).npu()
beta_npu=torch.randn(shape_c,dtype=torch.float32).npu()
out_npu, mean_npu, rstd_out = torch_npu.npu_group_norm_silu(x_npu, gamma_npu, beta_npu, group=num_groups, eps=eps)
x_npu=torch.randn(shape_x,dtype=torch.bfloat16).npu()
gamma_npu=torch.randn(shape_c,dtype=torch.bfloat16).npu()
beta_npu=torch.randn(shape_c,dtype=torch.bfloat16).npu()
out_npu, mean_npu, rstd_out = torch_npu.npu_group_norm_silu(x_npu, gamma_npu, beta_npu, group=num_groups, eps=eps)
x_npu=torch.randn(shape_x,dtype=torch.float16).npu()
gamma_npu=torch.randn(shape_c,dtype=torch.float16).npu()
beta_npu=torch.randn(shape_c,dtype=torch.float16).npu()
out_npu, mean_npu, rstd_out = torch_npu.npu_group_norm_silu(x_npu, gamma_npu, beta_npu, group=num_groups, eps=eps)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnGroupNormSilu:  per (n, group): y = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta;
# out = y / (1 + exp(-y));  meanOut = E[x];  rstdOut = 1 / sqrt(Var[x] + eps)   (last call, fp16)
n, c = shape_x[0], shape_x[1]
xg = x_npu.to(torch.float64).reshape(n, num_groups, -1)
mean = xg.mean(-1, keepdim=True)
var = ((xg - mean) ** 2).mean(-1, keepdim=True)
y = ((xg - mean) / torch.sqrt(var + eps)).reshape(shape_x)
y = y * gamma_npu.to(torch.float64).reshape(1, c, 1, 1) \
    + beta_npu.to(torch.float64).reshape(1, c, 1, 1)
expected = y / (1 + torch.exp(-y))
assert out_npu.shape == tuple(shape_x) and out_npu.dtype == torch.float16
assert mean_npu.shape == rstd_out.shape == (n, num_groups) and mean_npu.dtype == torch.float16
torch.testing.assert_close(out_npu.to(torch.float64), expected, rtol=2e-3, atol=2e-3)
torch.testing.assert_close(mean_npu.to(torch.float64), mean.reshape(n, num_groups),
                           rtol=2e-3, atol=1e-4)
torch.testing.assert_close(rstd_out.to(torch.float64),
                           (1 / torch.sqrt(var + eps)).reshape(n, num_groups), rtol=2e-3, atol=0)
print("EXAMPLE OK")
