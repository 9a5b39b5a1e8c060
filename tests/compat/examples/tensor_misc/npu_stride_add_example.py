# Seed 004, torch_npu.npu_stride_add, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a=torch.tensor([[[[[1.]]]]]).npu()
b=torch_npu.npu_stride_add(a, a, 0, 0, 1)
b

# --- added by npu_anywhere tests: check the numbers ---
# one C1 block of 16 channels: channel 0 is 1 + 1, the 15 padding channels add to 0.
assert b.shape == (1, 16, 1, 1, 1)
assert b.cpu().reshape(-1).tolist() == [2.0] + [0.0] * 15
print("EXAMPLE OK")
