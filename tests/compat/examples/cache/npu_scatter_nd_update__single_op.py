# Seed 004, torch_npu.npu_scatter_nd_update_, 调用示例 / 单算子模式调用.  Copied from the
# documentation unchanged.  (The 图模式调用 example needs torchair, which is not emulated.)
import torch
import torch_npu
import numpy as np
data_var = np.random.uniform(0, 1, [24, 128]).astype(np.float16)
var = torch.from_numpy(data_var).to(torch.float16).npu()
data_indices = np.random.uniform(0, 12, [12, 1]).astype(np.int32)
indices = torch.from_numpy(data_indices).to(torch.int32).npu()
data_updates = np.random.uniform(1, 2, [12, 128]).astype(np.float16)
updates = torch.from_numpy(data_updates).to(torch.float16).npu()
torch_npu.npu_scatter_nd_update_(var, indices, updates)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: var[indices[j][0]] = updates[j] in place (a repeated index keeps one of its
# updates, unspecified which); every other row keeps its value.
candidates = {}
for j in range(data_indices.shape[0]):
    candidates.setdefault(int(data_indices[j, 0]), []).append(
        torch.from_numpy(data_updates[j]).to(torch.float64))
got = var.to(torch.float64)
for row in range(24):
    if row in candidates:
        assert any(torch.equal(got[row], c) for c in candidates[row]), row
    else:
        assert torch.equal(got[row], torch.from_numpy(data_var[row]).to(torch.float64)), row
print("EXAMPLE OK")
