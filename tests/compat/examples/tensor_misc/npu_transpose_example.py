# Seed 004, torch_npu.npu_transpose, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
x = torch.randn(2, 3, 5).npu()
x.shape
x1 = torch_npu.npu_transpose(x, (2, 0, 1))
x1.shape

# --- added by npu_anywhere tests: check the numbers ---
# x1[i, j, k] = x[j, k, i], a new contiguous tensor.
assert x1.shape == (5, 2, 3) and x1.is_contiguous()
for i in range(5):
    for j in range(2):
        for k in range(3):
            assert float(x1[i, j, k]) == float(x[j, k, i])
print("EXAMPLE OK")
