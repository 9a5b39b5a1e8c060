# Seed 004, torch_npu.npu_dynamic_quant, 调用示例 / 单算子模式调用 / 只有一个输入x.  Copied from the
# documentation unchanged.
import torch
import torch_npu
x = torch.rand((3, 3), dtype = torch.float16).to("npu")
output, scale = torch_npu.npu_dynamic_quant(x)
print(output)
print(scale)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004:  scale = rowMax(abs(x)) / DTYPE_MAX;  y = round(x / scale), DTYPE_MAX = 127 (int8).
# Evaluated in float64; round half to even; a value within a hair of a .5 boundary may go either
# way (the NPU works in float32).
x64 = x.to(torch.float64)
scale64 = x64.abs().amax(dim=-1) / 127
exact = x64 / scale64[:, None]
assert output.dtype == torch.int8 and output.shape == x.shape, (output.dtype, output.shape)
assert scale.dtype == torch.float32 and scale.shape == (3,), (scale.dtype, scale.shape)
torch.testing.assert_close(scale.to(torch.float64), scale64, rtol=3e-7, atol=0)
diff = (output.to(torch.float64) - torch.round(exact)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-4
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (output, exact)
print("EXAMPLE OK")
