# Seed 004, torch_npu.npu_dynamic_block_quant, 调用示例.  Copied from the documentation unchanged
# (the interactive ">>>" prompts removed).
import torch
import torch_npu
x = torch.rand(3, 4).to("npu").to(torch.float16)
min_scale = 0
dst_type = 1
row_block_size = 1
col_block_size = 128
y, scale = torch_npu.npu_dynamic_block_quant(x, min_scale=min_scale, dst_type=dst_type, row_block_size=row_block_size, col_block_size=col_block_size)
y
scale

# --- added by npu_anywhere tests: check the numbers ---
# aclnnDynamicBlockQuant:  scale = block_max(abs(x)) / 127 (one block per row here: 1 x 128
# covers the 4 columns);  y = round(x / scale), half to even.  Evaluated in float64; a value
# within a hair of a .5 boundary may go either way (the NPU works in float32).
x64 = x.to(torch.float64)
scale64 = x64.abs().amax(dim=-1, keepdim=True) / 127
exact = x64 / scale64
assert y.dtype == torch.int8 and y.shape == (3, 4), (y.dtype, y.shape)
assert scale.dtype == torch.float32 and scale.shape == (3, 1), (scale.dtype, scale.shape)
torch.testing.assert_close(scale.to(torch.float64), scale64, rtol=3e-7, atol=0)
diff = (y.to(torch.float64) - torch.round(exact)).abs()
near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-4
assert bool(((diff == 0) | (near_tie & (diff <= 1))).all()), (y, exact)
assert bool((y.abs().amax(dim=-1) == 127).all()), y
print("EXAMPLE OK")
