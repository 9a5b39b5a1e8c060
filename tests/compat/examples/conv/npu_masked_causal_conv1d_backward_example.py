# Seed 004, torch_npu.npu_masked_causal_conv1d_backward, 调用示例.  Copied unchanged.
import torch
import torch_npu
S, B, H, W = 2048, 4, 768, 3
grad_output = torch.randn(S, B, H, dtype=torch.bfloat16).npu()
input = torch.randn(S, B, H, dtype=torch.bfloat16).npu()
weight = torch.randn(W, H, dtype=torch.bfloat16).npu()
mask = torch.rand(B, S).npu() > 0.3
grad_input, grad_weight = torch_npu.npu_masked_causal_conv1d_backward(
grad_output, input, weight, mask=mask
)

# --- added by npu_anywhere tests: check the numbers ---
# g = grad_output * mask; grad_input[s] = sum_k weight[k] * g[s + 2 - k];
# grad_weight[k] = sum_{s, b} g[s] * input[s - 2 + k]; in float64.
g = grad_output.cpu().double() * mask.cpu().t().unsqueeze(-1).double()
x64, w64 = input.cpu().double(), weight.cpu().double()
want_gi = w64[2] * g
want_gi[:-1] += w64[1] * g[1:]
want_gi[:-2] += w64[0] * g[2:]
want_gw = torch.stack([(g[2:] * x64[:-2]).sum((0, 1)), (g[1:] * x64[:-1]).sum((0, 1)),
                       (g * x64).sum((0, 1))])
torch.testing.assert_close(grad_input.cpu().double(), want_gi, rtol=1.6e-2, atol=1e-2)
torch.testing.assert_close(grad_weight.cpu().double(), want_gw, rtol=1.6e-2, atol=1.0)
assert grad_weight.shape == (W, H) and grad_input.dtype == torch.bfloat16
print("EXAMPLE OK")
