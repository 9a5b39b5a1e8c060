# Seed 004, torch_npu.npu_scatter_nd_update, 调用示例 / 单算子模式调用.  Copied from the
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
out = torch_npu.npu_scatter_nd_update(var, indices, updates)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: updates.shape = indices.shape[:-1] + input.shape[a:] (a = indices.shape[-1] = 1);
#     out[indices[j][0]] = updates[j];  every other row is input's; input is unchanged.
# The example's random indices may repeat a row; the NPU then keeps one of the updates (which
# one is unspecified), so a repeated row must hold one of its candidates.
expected = torch.from_numpy(data_var).to(torch.float64)
candidates = {}
for j in range(data_indices.shape[0]):
    candidates.setdefault(int(data_indices[j, 0]), []).append(
        torch.from_numpy(data_updates[j]).to(torch.float64))
got = out.to(torch.float64)
assert out.dtype == torch.float16 and out.shape == (24, 128), (out.dtype, out.shape)
for row in range(24):
    if row in candidates:
        assert any(torch.equal(got[row], c) for c in candidates[row]), row
    else:
        assert torch.equal(got[row], expected[row]), row
assert torch.equal(var.to(torch.float64), expected), "npu_scatter_nd_update must not touch var"
print("EXAMPLE OK")
