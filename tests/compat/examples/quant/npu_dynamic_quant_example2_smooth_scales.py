# Seed 004, torch_npu.npu_dynamic_quant, 调用示例 / 单算子模式调用 / 使用smooth_scales输入.  Copied
# from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 3), dtype = torch.float16).to("npu")
smooth_scales = torch.rand((3,), dtype = torch.float16).to("npu")
output, scale = torch_npu.npu_dynamic_quant(x, smooth_scales=smooth_scales)
print(output)
print(scale)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004:  scale = rowMax(abs(x * smooth_scales)) / 127;  y = round(x * smooth_scales / scale).
v = x.to(torch.float64) * smooth_scales.to(torch.float64)
scale64 = v.abs().amax(dim=-1) / 127
exact = v / scale64[:, None]
assert output.dtype == torch.int8 and output.shape == x.shape, (output.dtype, output.shape)
assert scale.dtype == torch.float32 and scale.shape == (3,), (scale.dtype, scale.shape)
torch.testing.assert_close(scale.to(torch.float64), scale64, rtol=3e-7, atol=0)
diff = (output.to(torch.float64) - torch.round(exact)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-4
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (output, exact)
print("EXAMPLE OK")
