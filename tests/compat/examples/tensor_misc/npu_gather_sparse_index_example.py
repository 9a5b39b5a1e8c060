# Seed 004, torch_npu.npu_gather_sparse_index, 调用示例 (copied as is).
import torch
import torch_npu
inputs = torch.randn(16, 32).npu()
index = torch.randint(0, 16, [2, 3]).npu()
out = torch_npu.npu_gather_sparse_index(inputs, index)

# --- added by npu_anywhere tests: check the numbers ---
# out[i, j, :] = inputs[index[i, j], :];  out.shape = index.shape + inputs.shape[1:]
x64 = inputs.cpu().to(torch.float64)
assert out.shape == (2, 3, 32) and out.dtype == torch.float32
for i in range(2):
    for j in range(3):
        assert torch.equal(out[i, j].cpu().to(torch.float64), x64[int(index[i, j])])
print("EXAMPLE OK")
