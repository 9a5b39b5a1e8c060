# Seed 004, torch_npu.npu_moe_gating_top_k_backward, 调用示例 (通过正向算子自动反向调用).  Copied
# from the documentation; only the indentation that the seed text lost was restored.
import torch
import torch_npu
M, N, K = 2048, 192, 10
# 前向传播
x = torch.randn(M, N, dtype=torch.bfloat16, requires_grad=False).npu().requires_grad_(True)
y, expert_idx, x_norm = torch_npu.npu_moe_gating_top_k(
    x, K, norm_type=1, routed_scaling_factor=1.0, eps=1e-20, out_flag=True)
# 模拟上游梯度
grad_y = torch.randn_like(y)
# 反向传播
y.backward(grad_y)
grad_x = x.grad.detach().clone()
print(f"grad_x shape: {grad_x.shape}") # [2048, 192]

# --- added by npu_anywhere tests: check the numbers ---
# Forward: s = sigmoid(x); expert_idx = top-10 of s (no groups, no bias; ties: lower index);
# y = s[idx] / (sum + eps).  Backward: float64 autograd of that formula through the same ids.
x64 = x.detach().cpu().double().requires_grad_(True)
s = torch.sigmoid(x64)
order = torch.sort(s.detach(), dim=-1, descending=True, stable=True).indices[:, :K]
assert torch.equal(expert_idx.cpu().long(), order)
torch.testing.assert_close(x_norm.cpu().double(), s.detach(), rtol=1e-6, atol=1e-7)
picked = s.gather(1, order)
y64 = picked / (picked.sum(-1, keepdim=True) + 1e-20)
torch.testing.assert_close(y.detach().cpu().double(), y64.detach(), rtol=1e-2, atol=1e-5)
(want,) = torch.autograd.grad(y64, x64, grad_y.cpu().double())
assert grad_x.shape == (M, N) and grad_x.dtype == torch.bfloat16
err = (grad_x.cpu().double() - want).abs()
assert float((err - 1e-2 * want.abs()).max()) <= 1e-5, float(err.max())
print("EXAMPLE OK")
