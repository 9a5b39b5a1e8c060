# Seed 004, torch_npu.npu_dynamic_quant_asymmetric, 单算子模式调用 / 使用smooth_scales输入,
# 非MoE场景(不使用group_index), 进行int8量化.  Copied from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 8), dtype=torch.half).npu()
smooth_scales = torch.rand((8,), dtype=torch.half).npu()
y, scale, offset = torch_npu.npu_dynamic_quant_asymmetric(x, smooth_scales=smooth_scales)
print(y, scale, offset)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: x is first multiplied by smooth_scales, then quantized as without them.
v = x.to(torch.float64) * smooth_scales.to(torch.float64)
mx, mn = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
scale64 = (mx - mn) / 255
exact = v / scale64 + (127 - mx / scale64)
assert y.dtype == torch.int8 and y.shape == (3, 8)
torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
diff = (y.double() - torch.round(exact).clamp(-128, 127)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-3
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (y, exact)
print("EXAMPLE OK")
