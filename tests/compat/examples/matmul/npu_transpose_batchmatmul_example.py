# Seed 004, torch_npu.npu_transpose_batchmatmul, 调用示例 / 单算子调用.  Copied from the
# documentation.
import torch
import torch_npu
M, K, N, Batch = 32, 512, 128, 32
x1 = torch.randn((M, Batch, K), dtype=torch.float16)
x2 = torch.randn((Batch, K, N), dtype=torch.float16)
scale = torch.rand((Batch * N, ), dtype=torch.float32)
scale = torch_npu.npu_trans_quant_param(scale.npu(), round_mode=1)
y = torch_npu.npu_transpose_batchmatmul(x1.npu(), x2.npu(), scale=scale.npu(),
perm_x1=[1, 0, 2], perm_y=[1, 0, 2])

# --- added by npu_anywhere tests: check the numbers ---
# Y = int8((x1^T1 @ x2)^Ty reshaped (M, 1, B*N) * scale): the scale is the fp19 field (bits
# 13..31) of npu_trans_quant_param's word, results rounded half to even and saturated.
import numpy as np
acc = torch.einsum("mbk,bkn->mbn", x1.double(), x2.double()).reshape(M, Batch * N)
bits = (scale.cpu().numpy() & 0xFFFFE000).astype(np.uint32)
s19 = torch.from_numpy(bits.view(np.float32).astype(np.float64))
golden = torch.round(acc * s19).clamp(-128, 127).reshape(M, 1, Batch * N)
assert y.dtype == torch.int8 and y.shape == (M, 1, Batch * N), (y.dtype, y.shape)
diff = (y.cpu().double() - golden).abs()
# float32 accumulation against the float64 golden: a step at the odd rounding boundary only.
assert diff.max() <= 1 and (diff > 0).double().mean() < 0.01, diff.max()
print("EXAMPLE OK")
