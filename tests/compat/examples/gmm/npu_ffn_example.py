# Seed 004, torch_npu.npu_ffn, 调用示例 (单算子模式调用).  Copied from the documentation
# unchanged.
import torch
import torch_npu
import logging
import os
cpu_x = torch.randn((1, 1280), device='npu', dtype=torch.float16)
cpu_weight1 = torch.randn(1280, 10240, device='npu', dtype=torch.float16)
cpu_weight2 = torch.randn(10240, 1280, device='npu', dtype=torch.float16)
activation = "fastgelu"
npu_out = torch_npu.npu_ffn(cpu_x.npu(), cpu_weight1.npu(), cpu_weight2.npu(), activation, inner_precise=1)

# --- added by npu_anywhere tests: check the numbers ---
# out = fastgelu(x @ W1) @ W2 with fastgelu(h) = h / (1 + exp(-1.702 h)); inner_precise=1
# (float16 high-performance mode) rounds x @ W1 and the activation to float16.
h = (cpu_x.double() @ cpu_weight1.double()).half().double()
a = (h / (1 + torch.exp(-1.702 * h))).half().double()
golden = a @ cpu_weight2.double()
assert npu_out.shape == (1, 1280) and npu_out.dtype == torch.float16
torch.testing.assert_close(npu_out.double(), golden, rtol=2e-3, atol=golden.abs().max().item() * 2e-3)
print("EXAMPLE OK")
