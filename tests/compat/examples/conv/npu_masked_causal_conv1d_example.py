# Seed 004, torch_npu.npu_masked_causal_conv1d, 调用示例.  Copied unchanged.
import torch
import torch_npu
S, B, H, W = 2048, 4, 768, 3
input = torch.randn(S, B, H, dtype=torch.bfloat16).npu()
weight = torch.randn(W, H, dtype=torch.bfloat16).npu()
mask = torch.rand(B, S).npu() > 0.3
output = torch_npu.npu_masked_causal_conv1d(input, weight, mask=mask)

# --- added by npu_anywhere tests: check the numbers ---
# output[s] = sum_k weight[k] * input[s - 2 + k] (zero before s = 0), zeroed where mask[b, s]
# is False; in float64.
x64, w64 = input.cpu().double(), weight.cpu().double()
want = w64[2] * x64
want[1:] += w64[1] * x64[:-1]
want[2:] += w64[0] * x64[:-2]
want = want * mask.cpu().t().unsqueeze(-1).double()
torch.testing.assert_close(output.cpu().double(), want, rtol=1.6e-2, atol=1e-2)
assert output.shape == (S, B, H) and output.dtype == torch.bfloat16
print("EXAMPLE OK")
