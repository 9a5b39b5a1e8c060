# Seed 004, torch_npu.npu_fused_infer_attention_score.out, 调用示例 / 单算子调用方式 (copied as is;
# the printed tensor is omitted).
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
workspace = torch.randn(2000000, dtype=torch.float16).npu()
output = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
softmax_lse = torch.randn(1, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
# 调用FIA算子
out = torch_npu.npu_fused_infer_attention_score.out(q, k, v, workspace=workspace, out=[output, softmax_lse], num_heads = 8, input_layout = "BNSD", scale = scale, pre_tokens=65535, next_tokens=65535)

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
expected = torch.softmax(s, -1) @ v.double()
assert out[0] is output and out[1] is softmax_lse
torch.testing.assert_close(output.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
