# Seed 004, torch_npu.npu_mhc_sinkhorn, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
device = "npu:0"
x_shape = [1, 128, 4 , 4]
x = torch.rand(x_shape, dtype=torch.float32).clamp(min=1e-4)
x_npu = x.npu()
eps = 1e-6
num_iters = 20
out_flag = 0
y = torch_npu.npu_mhc_sinkhorn(x_npu, eps=eps, num_iters=num_iters, out_flag=out_flag)

# --- added by npu_anywhere tests: check the numbers ---
# The doc iteration in float64: softmax + eps, a column normalisation, then num_iters - 1 rounds
# of row and column normalisation (every sum + eps); the result is doubly stochastic.
cur = torch.softmax(x.double(), -1) + eps
cur = cur / (cur.sum(-2, keepdim=True) + eps)
for _ in range(num_iters - 1):
    cur = cur / (cur.sum(-1, keepdim=True) + eps)
    cur = cur / (cur.sum(-2, keepdim=True) + eps)
out = y[0].cpu()
torch.testing.assert_close(out.double(), cur, rtol=1e-5, atol=1e-6)
torch.testing.assert_close(out.sum(-1), torch.ones(1, 128, 4), rtol=0, atol=1e-3)
print("EXAMPLE OK")
