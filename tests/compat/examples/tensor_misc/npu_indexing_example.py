# Seed 004, torch_npu.npu_indexing, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.tensor([[1, 2, 3, 4],[5, 6, 7, 8]], dtype=torch.int32).to("npu")
input
output = torch_npu.npu_indexing(input, [0, 0], [2, 2], [1, 1])
output

# --- added by npu_anywhere tests: check the numbers ---
# output[i, j] = input[begin[0] + i * 1, begin[1] + j * 1] for i < 2, j < 2 (end exclusive).
want = [[int(input[i, j]) for j in range(0, 2)] for i in range(0, 2)]
assert output.dtype == torch.int32 and output.cpu().tolist() == want == [[1, 2], [5, 6]]
print("EXAMPLE OK")
