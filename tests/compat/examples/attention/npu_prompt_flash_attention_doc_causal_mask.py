# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_prompt_flash_attention.md, 调用示例 /
# 单算子调用 (copied; the interactive ">>> " / "... " prompts and the echoed output are removed).
import torch
import torch_npu
import math

# 生成随机数据，并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
actseqlen = [164]
actseqlenkv = [1024]
atten_mask = torch.triu(torch.ones((164, 1024), dtype=torch.bool), diagonal=1).npu()

# 调用PFA算子
out = torch_npu.npu_prompt_flash_attention(q, k, v,
atten_mask = atten_mask, actual_seq_lengths = actseqlen, actual_seq_lengths_kv = actseqlenkv,
num_heads = 8, input_layout = "BNSD", scale_value=scale, pre_tokens=65535, next_tokens=65535)
print(out.shape)
print(out.dtype)

# --- added by npu_anywhere tests: check the numbers ---
# triu(diagonal=1) masks (True) every key after the query's position: top-left causal.
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
s = s.masked_fill(atten_mask, float("-inf"))
expected = torch.softmax(s, -1) @ v.double()
assert out.shape == (1, 8, 164, 128) and out.dtype == torch.float16
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
