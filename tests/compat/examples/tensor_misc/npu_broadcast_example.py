# Seed 004, torch_npu.npu_broadcast, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
x = torch.tensor([[1], [2], [3]]).npu()
x.shape
torch_npu.npu_broadcast(x, [3, 4])

# --- added by npu_anywhere tests: check the numbers ---
# y[i, j] = x[i, 0]: the doc's printed [[1]*4, [2]*4, [3]*4].
y = torch_npu.npu_broadcast(x, [3, 4])
assert y.cpu().tolist() == [[int(x[i, 0])] * 4 for i in range(3)] == [[1] * 4, [2] * 4, [3] * 4]
assert y.is_contiguous()
print("EXAMPLE OK")
