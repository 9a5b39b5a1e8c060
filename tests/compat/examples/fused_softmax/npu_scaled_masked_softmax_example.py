# Seed 004, torch_npu.npu_scaled_masked_softmax, 示例.  Copied from the documentation with one
# change: the documented shape [4, 4, 2048, 2048] (67 million float32 elements, with several
# as large temporaries on a CPU) is [4, 4, 128, 128] here.
import torch
import torch_npu

shape = [4, 4, 128, 128]
x = torch.rand(shape).npu()
mask = torch.zeros_like(x).bool()
scale = 1.0
fixed_triu_mask = False

output = torch_npu.npu_scaled_masked_softmax(x, mask, scale, fixed_triu_mask)
output.shape

# --- added by npu_anywhere tests: check the numbers ---
# Nothing masked: out = softmax(x * scale, dim=-1), here taken in float64.
assert output.shape == torch.Size(shape) and output.dtype == torch.float32
z = x.cpu().double() * scale
expected = torch.exp(z - z.max(-1, keepdim=True).values)
expected = expected / expected.sum(-1, keepdim=True)
torch.testing.assert_close(output.cpu().double(), expected, rtol=1e-5, atol=1e-7)
print("EXAMPLE OK")
