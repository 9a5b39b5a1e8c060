# Seed 004, torch_npu.npu_dynamic_quant_asymmetric, 单算子模式调用 / 使用smooth_scales输入,
# MoE场景(使用group_index), 进行int8量化.  Copied from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 8), dtype=torch.half).npu()
smooth_scales = torch.rand((2, 8), dtype=torch.half).npu()
group_index = torch.Tensor([1, 3]).to(torch.int32).npu()
y, scale, offset = torch_npu.npu_dynamic_quant_asymmetric(x, smooth_scales=smooth_scales, group_index=group_index)
print(y, scale, offset)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: smooth_scales[0] applies to x[0:group_index[0]], smooth_scales[i] to
# x[group_index[i-1]:group_index[i]]: here row 0 uses smooth_scales[0], rows 1-2 smooth_scales[1].
s64 = smooth_scales.to(torch.float64)
v = x.to(torch.float64) * torch.stack([s64[0], s64[1], s64[1]])
mx, mn = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
scale64 = (mx - mn) / 255
exact = v / scale64 + (127 - mx / scale64)
assert y.dtype == torch.int8 and y.shape == (3, 8)
torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
diff = (y.double() - torch.round(exact).clamp(-128, 127)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-3
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (y, exact)
print("EXAMPLE OK")
