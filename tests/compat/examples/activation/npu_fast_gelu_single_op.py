# Seed 004, torch_npu.npu_fast_gelu, 示例 (单算子调用).  Copied from the documentation unchanged.
# (The 图模式调用 example needs torchair, which is not emulated.)
import os
import torch
import torch_npu
import numpy as np
data_var = np.random.uniform(0, 1, [4, 2048, 16, 128]).astype(np.float32)
x = torch.from_numpy(data_var).to(torch.float32).npu()
y = torch_npu.npu_fast_gelu(x).cpu().numpy()

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004, formula 2 (Atlas A2/A3, the default): fast_gelu(x) = x / (1 + e^(-1.702 x)).
x64 = torch.from_numpy(data_var).to(torch.float64)
expected = x64 / (1 + torch.exp(-1.702 * x64))
assert y.shape == (4, 2048, 16, 128) and y.dtype == np.float32, (y.shape, y.dtype)
torch.testing.assert_close(torch.from_numpy(y).to(torch.float64), expected, rtol=1.3e-6, atol=1e-6)
print("EXAMPLE OK")
