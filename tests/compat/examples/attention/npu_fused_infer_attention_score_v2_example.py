# Seed 004, torch_npu.npu_fused_infer_attention_score_v2, 调用示例 / 单算子模式调用 (copied as is;
# the printed tensor is omitted).
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
softmax_scale = 1/math.sqrt(128.0)
actseqlen = [164]
actseqlenkv = [1024]
# 调用FIA算子
out, _ = torch_npu.npu_fused_infer_attention_score_v2(q, k, v,
actual_seq_qlen = actseqlen, actual_seq_kvlen = actseqlenkv,
num_query_heads = 8, input_layout = "BNSD", softmax_scale = softmax_scale, pre_tokens=65535, next_tokens=65535)

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * softmax_scale
expected = torch.softmax(s, -1) @ v.double()
assert out.shape == q.shape and out.dtype == torch.float16, (out.shape, out.dtype)
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
