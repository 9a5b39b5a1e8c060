# Seed 004, torch_npu.npu_moe_gating_top_k_backward, 调用示例 (单算子模式调用).  Copied from the
# documentation; only the indentation that the seed text lost was restored.
import torch
import torch_npu
# 示例参数：M=2048, N=192, K=10，sigmoid 模式，PanGuV3 典型 shape
M, N, K = 2048, 192, 10
norm_type = 1
routed_scaling_factor = 1.0
eps = 1e-20
# 构造输入（模拟前向算子的保存值）
x_norm = torch.rand(M, N, dtype=torch.float32).npu() # 前向 normOut
grad_y = torch.randn(M, K, dtype=torch.bfloat16).npu() # 上游梯度
expert_idx = torch.randint(0, N, (M, K), dtype=torch.int32).npu() # 前向 expertIdxOut
# 调用反向算子
grad_x = torch_npu.npu_moe_gating_top_k_backward(
    x_norm, grad_y, expert_idx,
    norm_type=norm_type,
    routed_scaling_factor=routed_scaling_factor,
    eps=eps)
print(f"grad_x shape: {grad_x.shape}") # [2048, 192]
print(f"grad_x dtype: {grad_x.dtype}") # bfloat16（与 grad_y 一致）

# --- added by npu_anywhere tests: check the numbers ---
# y = r * s / (sum(s) + eps) with s = x_norm[expert_idx] (x_norm = sigmoid(x)); grad_x is
# dL/dx = dL/ds * x_norm * (1 - x_norm).  Golden: float64 autograd through s (a row may repeat
# an expert: randint ids; both slots then add up).
s_all = x_norm.cpu().double().requires_grad_(True)
s = s_all.gather(1, expert_idx.cpu().long())
y = routed_scaling_factor * s / (s.sum(-1, keepdim=True) + eps)
(d_norm,) = torch.autograd.grad(y, s_all, grad_y.cpu().double())
want = d_norm * s_all.detach() * (1 - s_all.detach())
assert grad_x.shape == (M, N) and grad_x.dtype == torch.bfloat16
err = (grad_x.cpu().double() - want).abs()
assert float((err - 1e-2 * want.abs()).max()) <= 1e-5, float(err.max())
print("EXAMPLE OK")
