# Seed 004, torch_npu.npu_slice, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.tensor([[1,2,3,4,5], [6,7,8,9,10]], dtype=torch.float16).to("npu")
offsets = [0, 0]
size = [2, 2]
output = torch_npu.npu_slice(input, offsets, size)
output

# --- added by npu_anywhere tests: check the numbers ---
# output[i, j] = input[offsets[0] + i, offsets[1] + j]: the doc's [[1, 2], [6, 7]].
want = [[float(input[i, j]) for j in range(2)] for i in range(2)]
assert output.dtype == torch.float16 and output.cpu().tolist() == want == [[1, 2], [6, 7]]
print("EXAMPLE OK")
