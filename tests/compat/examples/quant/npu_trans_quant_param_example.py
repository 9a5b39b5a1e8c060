# Seed 004, torch_npu.npu_trans_quant_param, 调用示例 / 单算子模式调用.  Copied from the
# documentation unchanged.
import torch
import torch_npu
import logging
import os
scale = torch.randn(16, dtype=torch.float32)
offset = torch.randn(16, dtype=torch.float32)
npu_out = torch_npu.npu_trans_quant_param(scale.npu(), offset.npu(), round_mode=0)

# --- added by npu_anywhere tests: check the numbers ---
# CANN aclnnTransQuantParamV3 formula (op-plugin golden test_npu_trans_quant_param.py):
#   out = (scale_bits & 0xFFFFE000) | (1 << 46) | ((clamp(round(offset), -256, 255) & 0x1FF) << 37)
import numpy as np

bits = scale.numpy().view(np.uint32).astype(np.int64)
off = np.clip(np.round(offset.numpy().astype(np.float64)), -256, 255).astype(np.int64)
expected = (bits & 0xFFFFE000) | (1 << 46) | ((off & 0x1FF) << 37)
assert npu_out.dtype == torch.int64 and npu_out.shape == (16,), (npu_out.dtype, npu_out.shape)
assert np.array_equal(npu_out.cpu().numpy(), expected), (npu_out, expected)
print("EXAMPLE OK")
