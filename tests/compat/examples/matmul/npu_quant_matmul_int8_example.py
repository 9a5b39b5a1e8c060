# Seed 004, torch_npu.npu_quant_matmul, 调用示例 / 单算子调用 / int8类型输入场景.  Copied from the
# documentation (unused imports kept).
import torch
import torch_npu
import logging
import os
cpu_x1 = torch.randint(-5, 5, (1, 256, 768), dtype=torch.int8)
cpu_x2 = torch.randint(-5, 5, (31, 768, 16), dtype=torch.int8)
scale = torch.randn(16, dtype=torch.float32)
offset = torch.randn(16, dtype=torch.float32)
bias = torch.randint(-5, 5, (31, 1, 16), dtype=torch.int32)
# Method 1: You can directly call npu_quant_matmul
npu_out = torch_npu.npu_quant_matmul(cpu_x1.npu(), cpu_x2.npu(), scale.npu(), offset=offset.npu(), bias=bias.npu())
# Method 2: You can first call npu_trans_quant_param to convert scale and offset from float32 to int64 when output dtype is not torch.bfloat16 and pertoken_scale is none
scale_1 = torch_npu.npu_trans_quant_param(scale.npu(), offset.npu())
npu_out = torch_npu.npu_quant_matmul(cpu_x1.npu(), cpu_x2.npu(), scale_1, bias=bias.npu())

# --- added by npu_anywhere tests: check the numbers ---
# aclnnQuantMatmulV4: out = (x1 @ x2 + bias) * scale + offset, int8 output (scale as the fp19
# field of npu_trans_quant_param's word, offset rounded to an integer).
import numpy as np
acc = cpu_x1.double() @ cpu_x2.double() + bias.double()
s19 = torch.from_numpy((scale.numpy().view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))
golden = torch.round(acc * s19.double() + torch.round(offset.double())).clamp(-128, 127)
assert npu_out.dtype == torch.int8 and npu_out.shape == (31, 256, 16), npu_out.shape
diff = (npu_out.cpu().double() - golden).abs()
assert diff.max() <= 1 and (diff > 0).double().mean() < 0.01, diff.max()
print("EXAMPLE OK")
