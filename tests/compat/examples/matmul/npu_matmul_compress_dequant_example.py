# Seed 004, torch_npu.npu_matmul_compress_dequant, 示例.  Copied from the documentation with the
# ">>> " prompts removed (x2 is the reconstructed [K, N] weight, as its comment says).
import torch
import torch_npu
m, k, n = 16, 256, 128
x1 = torch.ones((m, k), dtype=torch.int8).npu()
x2 = torch.zeros((k, n), dtype=torch.int8).npu() # 实际使用时为压缩权重重建结果
compress_index = torch.zeros(8, dtype=torch.int8).npu() # 压缩索引，shape 与压缩格式一致
bias = torch.zeros((1, n), dtype=torch.int32).npu()
scale = torch.ones((1, n), dtype=torch.float32).npu()
out = torch_npu.npu_matmul_compress_dequant(x1, x2, compress_index, bias, scale)
out.shape

# --- added by npu_anywhere tests: check the numbers ---
# aclnnMatmulCompressDequant: out = float16((x1 @ x2 + bias) * scale), here on random data too.
assert out.shape == torch.Size([16, 128]) and out.dtype == torch.float16 and not out.any()
x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8).npu()
x2 = torch.randint(-128, 128, (k, n), dtype=torch.int8).npu()
bias = torch.randint(-1000, 1000, (1, n), dtype=torch.int32).npu()
scale = (torch.rand(1, n) * 0.01).npu()
out = torch_npu.npu_matmul_compress_dequant(x1, x2, compress_index, bias, scale)
golden = (x1.cpu().double() @ x2.cpu().double() + bias.cpu().double()) * scale.cpu().double()
err = (out.cpu().double() - golden).abs() / golden.abs().clamp_min(1e-3)
assert err.max() <= 2 ** -10, err.max()
print("EXAMPLE OK")
