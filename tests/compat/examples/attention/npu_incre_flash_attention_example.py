# Seed 004, torch_npu.npu_incre_flash_attention, 调用示例 / 单算子调用 (copied as is; the printed
# tensor is omitted).
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(2, 1, 40 * 128, dtype=torch.float16).npu()
k = torch.randn(2, 1, 40 * 128, dtype=torch.float16).npu()
v = torch.randn(2, 1, 40 * 128, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
# 调用IFA算子
out = torch_npu.npu_incre_flash_attention(q, k, v, num_heads=40, input_layout="BSH", scale_value=scale)

# --- added by npu_anywhere tests: check the numbers ---
# One key per batch: softmax over a single score is 1, so the output is the value itself.
assert out.shape == q.shape and out.dtype == torch.float16, (out.shape, out.dtype)
torch.testing.assert_close(out, v, rtol=0, atol=0)
print("EXAMPLE OK")
