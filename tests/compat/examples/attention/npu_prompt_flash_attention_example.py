# Seed 004, torch_npu.npu_prompt_flash_attention, 调用示例 / 单算子调用 (copied as is; the printed
# tensor is omitted).
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
actseqlen = [164]
actseqlenkv = [1024]
# 调用PFA算子
out = torch_npu.npu_prompt_flash_attention(q, k, v,
actual_seq_lengths = actseqlen, actual_seq_lengths_kv = actseqlenkv,
num_heads = 8, input_layout = "BNSD", scale_value=scale, pre_tokens=65535, next_tokens=65535)

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
expected = torch.softmax(s, -1) @ v.double()
assert out.shape == q.shape and out.dtype == torch.float16, (out.shape, out.dtype)
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
