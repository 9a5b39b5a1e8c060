# Seed 004, torch_npu.npu_mhc_sinkhorn_backward, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
device = "npu:0"
x_shape = [128, 4 , 4]
T, n, _ = x_shape
x = torch.rand(x_shape, dtype=torch.float32, requires_grad=True).clamp(min=1e-4)
x_npu = x.npu()
eps = 1e-6
num_iters = 20
out_flag = 1
# 正向传播
y, norm_out, sum_out = torch_npu.npu_mhc_sinkhorn(x_npu, eps=eps, num_iters=num_iters, out_flag=out_flag)
# 反向传播
grad_y = torch.randn(T, n, n, dtype=torch.float32)
torch.autograd.backward(tensors=[y], grad_tensors=[grad_y.npu()])

# --- added by npu_anywhere tests: check the numbers ---
# x is a non-leaf (clamp), so compare the backward op with float64 autograd of the doc iteration.
xd = x.detach().double().requires_grad_()
cur = torch.softmax(xd, -1) + eps
cur = cur / (cur.sum(-2, keepdim=True) + eps)
for _ in range(num_iters - 1):
    cur = cur / (cur.sum(-1, keepdim=True) + eps)
    cur = cur / (cur.sum(-2, keepdim=True) + eps)
(want,) = torch.autograd.grad(cur, xd, grad_y.double())
got = torch_npu.npu_mhc_sinkhorn_backward(grad_y.npu(), norm_out, sum_out)
torch.testing.assert_close(got.cpu().double(), want, rtol=1e-3, atol=1e-5)
assert norm_out.shape == (2 * num_iters * T * n * 8,) and sum_out.shape == (2 * num_iters * T * 8,)
print("EXAMPLE OK")
