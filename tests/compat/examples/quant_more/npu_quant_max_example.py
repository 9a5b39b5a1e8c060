# Seed 004, torch_npu.npu_quant_max, 调用示例 / 单算子调用.  Copied from the documentation
# unchanged.
import torch
import torch_npu
# 输入数据
x_tensor = torch.randn((16, 128), dtype=torch.bfloat16).npu()
scale = torch.tensor([2.0], dtype=torch.float32).npu()
# 调用算子
y, amax = torch_npu.npu_quant_max(x_tensor, scale, round_mode="rint", dst_dtype=torch.float8_e5m2)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004:  y = cast(x * scale, dst_dtype),  amax = max(|x|).  x * 2 is exact, so y is x * 2
# rounded half to even to float8_e5m2 (2 mantissa bits): within 1/8 relative, and exactly the
# nearest e5m2 value.
x64 = x_tensor.to(torch.float64)
assert y.dtype == torch.float8_e5m2 and y.shape == (16, 128), (y.dtype, y.shape)
assert amax.dtype == torch.bfloat16 and amax.shape == (1,), (amax.dtype, amax.shape)
assert amax.item() == x64.abs().max().item(), amax
prod = x64 * 2.0
torch.testing.assert_close(y.to(torch.float64), prod, rtol=0.125, atol=2 ** -16)
assert torch.equal(y.view(torch.uint8), prod.to(torch.float32).to(torch.float8_e5m2).view(torch.uint8))
print("EXAMPLE OK")
