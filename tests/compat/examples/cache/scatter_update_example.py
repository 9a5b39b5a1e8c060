# Seed 004, torch_npu.scatter_update, 调用示例 / 单算子模式调用.  Copied from the documentation
# unchanged.
import torch
import torch_npu
import numpy as np
data = torch.tensor([[[[1,1,1,1,1,1,1,1],[2,2,2,2,2,2,2,2]]]], dtype=torch.float32).npu()
indices = torch.tensor ([1],dtype=torch.int64).npu()
updates = torch.tensor([[[[3,3,3,3,3,3,3,3]]]] , dtype=torch.float32).npu()
out = torch_npu.scatter_update(data, indices, updates, axis=-2)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnInplaceScatterUpdate (indices 1-D, axis -2):
#     out[i][j][indices[i] + k][l] = updates[i][j][k][l];  every other element copied from data,
# which scatter_update leaves unchanged.
expected = data.to(torch.float64).clone()
for i in range(updates.shape[0]):
    for j in range(updates.shape[1]):
        for k in range(updates.shape[2]):
            expected[i, j, int(indices[i]) + k, :] = updates[i, j, k, :].to(torch.float64)
assert out.dtype == torch.float32 and out.shape == (1, 1, 2, 8), (out.dtype, out.shape)
assert torch.equal(out.to(torch.float64), expected), out
assert torch.equal(data, torch.tensor([[[[1.] * 8, [2.] * 8]]])), "data must be unchanged"
print("EXAMPLE OK")
