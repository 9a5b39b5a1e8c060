# Seed 004, torch_npu.npu_dynamic_quant_asymmetric, 单算子模式调用 / 只有一个输入x, 进行int8量化.
# Copied from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 8), dtype=torch.half).npu()
y, scale, offset = torch_npu.npu_dynamic_quant_asymmetric(x)
print(y, scale, offset)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004:  scale = (rowMax(x) - rowMin(x)) / (127 - (-128));  offset = 127 - rowMax(x) / scale;
#            y = round(x / scale + offset).   Evaluated in float64.
x64 = x.to(torch.float64)
mx, mn = x64.amax(-1, keepdim=True), x64.amin(-1, keepdim=True)
scale64 = (mx - mn) / 255
offset64 = 127 - mx / scale64
exact = x64 / scale64 + offset64
assert y.dtype == torch.int8 and y.shape == (3, 8), (y.dtype, y.shape)
assert scale.shape == offset.shape == (3,) and scale.dtype == offset.dtype == torch.float32
torch.testing.assert_close(scale.double(), scale64.squeeze(-1), rtol=3e-7, atol=0)
torch.testing.assert_close(offset.double(), offset64.squeeze(-1), rtol=0, atol=1e-4)
diff = (y.double() - torch.round(exact).clamp(-128, 127)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-3
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (y, exact)
print("EXAMPLE OK")
