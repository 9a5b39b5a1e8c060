# Seed 004, torch_npu.npu_bert_apply_adam, 示例.  Copied unchanged (the doctest prompts removed,
# the printed var_out line dropped: it shows NPU random data).
import torch
import torch_npu
var_in = torch.rand(321538).uniform_(-32., 21.).npu()
m_in = torch.zeros(321538).npu()
v_in = torch.zeros(321538).npu()
grad = torch.rand(321538).uniform_(-0.05, 0.03).npu()
max_grad_norm = -1.
beta1 = 0.9
beta2 = 0.99
weight_decay = 0.
lr = 0.
epsilon = 1e-06
global_grad_norm = 0.
var_before = var_in.clone()
var_out, m_out, v_out = torch_npu.npu_bert_apply_adam(lr, beta1, beta2, epsilon, grad, max_grad_norm, global_grad_norm, weight_decay, out=(var_in, m_in, v_in))
var_out

# --- added by npu_anywhere tests: check the numbers ---
# adam mode, max_grad_norm <= 0 (no clipping), m = v = 0 before:
# m = (1 - beta1) * grad, v = (1 - beta2) * grad ** 2, var = var - lr * m / (sqrt(v) + eps) = var.
g = grad.cpu().double()
b1 = float(torch.tensor(beta1, dtype=torch.float32))
b2 = float(torch.tensor(beta2, dtype=torch.float32))
torch.testing.assert_close(m_out.cpu().double(), (1 - b1) * g, rtol=2e-6, atol=1e-9)
torch.testing.assert_close(v_out.cpu().double(), (1 - b2) * g * g, rtol=2e-6, atol=1e-12)
assert torch.equal(var_out.cpu(), var_before.cpu())
assert var_out is var_in and m_out is m_in and v_out is v_in
print("EXAMPLE OK")
