# Seed 004, torch_npu.npu_quantize, 调用示例 / 单算子模式调用.  Copied from the documentation
# unchanged.
import torch
import torch_npu
x = torch.randn((2, 3, 12), dtype=torch.float).npu()
scale = torch.tensor(([3] * 12),dtype=torch.float).npu()
out = torch_npu.npu_quantize(x, scale, None, torch.qint8, -1, False)
print(out)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004, div_mode False:  result = (input * scales) + zero_points (None: 0), rounded (half to
# even) and saturated to int8.  Evaluated in float64.
exact = x.to(torch.float64) * scale.to(torch.float64)
assert out.dtype == torch.int8 and out.shape == x.shape, (out.dtype, out.shape)
diff = (out.double() - torch.round(exact).clamp(-128, 127)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-5
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (out, exact)
print("EXAMPLE OK")
