# Seed 004, torch_npu.one_, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
x = torch.rand(2, 3).npu()
x
torch_npu.one_(x)

# --- added by npu_anywhere tests: check the numbers ---
# x is filled with ones in place (and returned).
assert x.cpu().tolist() == [[1.0] * 3] * 2
assert torch_npu.one_(x) is x
print("EXAMPLE OK")
