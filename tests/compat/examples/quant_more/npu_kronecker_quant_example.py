# Seed 004, torch_npu.npu_kronecker_quant, 调用示例.  Copied from the documentation unchanged.
import torch
import torch_npu
x = torch.rand((16, 3, 64), dtype=torch.bfloat16).npu()
p1 = torch.rand((3, 3), dtype=torch.bfloat16).npu()
p2 = torch.rand((64, 64), dtype=torch.bfloat16).npu()
out, quant_scale = torch_npu.npu_kronecker_quant(x, p1, p2, 0.7848)

# --- added by npu_anywhere tests: check the numbers ---
# aclnnFlatQuant:  x'' = p1 @ (x @ p2);  quant_scale[k] = max|x''[k]| / (7 / clip_ratio);
# out = int4(x'' / quant_scale), saturated to [-8, 7], eight int4 values per int32 (low nibble
# first).  Evaluated in float64; the NPU stores x @ p2 in bfloat16 and x'' in float16, so a
# value may differ by 1 and the scale by the float16 rounding.
clip = 0.7848
v = p1.to(torch.float64) @ (x.to(torch.float64) @ p2.to(torch.float64))
scale64 = v.abs().amax(dim=(1, 2)) / (7 / clip)
exact = v / scale64[:, None, None]
assert out.dtype == torch.int32 and out.shape == (16, 3, 8), (out.dtype, out.shape)
assert quant_scale.dtype == torch.float32 and quant_scale.shape == (16,), quant_scale.shape
torch.testing.assert_close(quant_scale.to(torch.float64), scale64, rtol=2e-2, atol=0)
words = out.to(torch.int64) & 0xFFFFFFFF
nib = torch.stack([(words >> (4 * j)) & 0xF for j in range(8)], dim=-1).reshape(16, 3, 64)
vals = torch.where(nib >= 8, nib - 16, nib).to(torch.float64)
want = torch.round(exact).clamp(-8, 7)
assert bool(((vals - want).abs() <= 1).all()), (vals, want)
assert bool((vals == 7).any()), vals            # clipping: the largest values saturate at 7
print("EXAMPLE OK")
