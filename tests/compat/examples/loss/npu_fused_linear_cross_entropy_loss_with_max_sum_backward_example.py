# Seed 004, torch_npu.npu_fused_linear_cross_entropy_loss_with_max_sum_backward, 示例.  Copied
# unchanged (the doctest prompts removed).
import torch
import torch_npu
grad = torch.randn(128, dtype=torch.float32).npu()
input_tensor = torch.randn(128, 64, dtype=torch.float16).npu()
weight_tensor = torch.randn(256, 64, dtype=torch.float16).npu()
target_mask = torch.zeros((128 + 7) // 8, dtype=torch.uint8).npu()
masked_target = torch.randint(0, 256, (128,), dtype=torch.int32).npu()
softmax = torch.randn(128, 256, dtype=torch.float32).npu()
input_grad, weight_grad = torch_npu.npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
grad, input_tensor, weight_tensor, target_mask, masked_target, softmax=softmax)

# --- added by npu_anywhere tests: check the numbers ---
# No row is masked: g = (softmax - onehot(masked_target)) * grad[:, None], rounded to float16;
# input_grad = g @ weight, weight_grad = g.T @ input, in float64 here.
g = softmax.cpu().double().clone()
g[torch.arange(128), masked_target.cpu().long()] -= 1.0
g = (g * grad.cpu().double()[:, None]).half().double()
torch.testing.assert_close(input_grad.cpu().double(), g @ weight_tensor.cpu().double(),
                           rtol=2e-3, atol=5e-2)
torch.testing.assert_close(weight_grad.cpu().double(), g.t() @ input_tensor.cpu().double(),
                           rtol=2e-3, atol=5e-2)
assert input_grad.dtype == weight_grad.dtype == torch.float16
assert input_grad.shape == (128, 64) and weight_grad.shape == (256, 64)
print("EXAMPLE OK")
