# Seed 004, torch_npu.npu_one_hot, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a=torch.IntTensor([5, 3, 2, 1]).npu()
b=torch_npu.npu_one_hot(a, depth=5)
b

# --- added by npu_anywhere tests: check the numbers ---
# b[i, c] = 1 if a[i] == c else 0 for c < depth (5 is out of range: an all-zero row).
want = [[1.0 if int(a[i]) == c else 0.0 for c in range(5)] for i in range(4)]
assert b.dtype == torch.float32 and b.cpu().tolist() == want
assert want[0] == [0.0] * 5
print("EXAMPLE OK")
