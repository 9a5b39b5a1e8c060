# Seed 004, torch_npu.npu_quant_scatter, 调用示例 / 单算子模式调用.  Copied from the
# documentation unchanged.  (The 图模式调用 example needs torchair, which is not emulated.)
import torch
import torch_npu
import numpy as np
data_var = np.random.uniform(0, 1, [24, 4096, 128]).astype(np.int8)
var = torch.from_numpy(data_var).to(torch.int8).npu()
data_indices = np.random.uniform(0, 1, [24]).astype(np.int32)
indices = torch.from_numpy(data_indices).to(torch.int32).npu()
data_updates = np.random.uniform(1, 2, [24, 1, 128]).astype(np.float16)
updates = torch.from_numpy(data_updates).to(torch.bfloat16).npu()
data_quant_scales = np.random.uniform(0, 1, [1, 1, 128]).astype(np.float16)
quant_scales = torch.from_numpy(data_quant_scales).to(torch.bfloat16).npu()
data_quant_zero_points = np.random.uniform(0, 1, [1, 1, 128]).astype(np.float16)
quant_zero_points = torch.from_numpy(data_quant_zero_points).to(torch.bfloat16).npu()
axis = -2
quant_axis = -1
reduce = "update"
out = torch_npu.npu_quant_scatter(var, indices, updates, quant_scales, quant_zero_points, axis=axis, quant_axis=quant_axis, reduce=reduce)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnInplaceQuantScatter (hicann/ops-nn index/quant_update_scatter, golden in float32):
#     q = clip(round_half_even(float32(updates) / float32(s) + float32(z)), -128, 127)
# with s, z the scales / zero points flattened along the last dim; then
#     out[i][indices[i] + k][:] = q[i][k][:]   (axis -2), every other element copied from var,
# which npu_quant_scatter leaves unchanged.
y = (updates.to(torch.float32) / quant_scales.reshape(-1).to(torch.float32)
     + quant_zero_points.reshape(-1).to(torch.float32)).to(torch.float64)
low = y.floor()
frac = y - low
up = (frac > 0.5) | ((frac == 0.5) & (low.remainder(2) == 1))
q = (low + up.to(torch.float64)).clamp(-128, 127)
expected = var.to(torch.float64).clone()
for i in range(updates.shape[0]):
    start = int(indices[i])
    expected[i, start:start + updates.shape[1], :] = q[i]
assert out.dtype == torch.int8 and out.shape == (24, 4096, 128), (out.dtype, out.shape)
assert torch.equal(out.to(torch.float64), expected), "quantized slabs differ"
assert torch.equal(var, torch.from_numpy(data_var)), "var must be unchanged"
assert (out[:, 0, :] >= 1).all(), out[:, 0, :]       # updates >= 1 and scales < 1, z >= 0
print("EXAMPLE OK")
