# Seed 004, torch_npu.npu_pad, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.tensor([[20, 20, 10, 10]], dtype=torch.float16).to("npu")
paddings = [1, 1, 1, 1]
output = torch_npu.npu_pad(input, paddings)
output

# --- added by npu_anywhere tests: check the numbers ---
# one zero before and after each dim (dim 0 first): the doc's printed 3 x 6 result.
want = [[0.0] * 6, [0.0, 20.0, 20.0, 10.0, 10.0, 0.0], [0.0] * 6]
assert output.dtype == torch.float16 and output.cpu().tolist() == want
print("EXAMPLE OK")
