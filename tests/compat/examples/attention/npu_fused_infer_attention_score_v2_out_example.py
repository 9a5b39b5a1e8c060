# Seed 004, torch_npu.npu_fused_infer_attention_score_v2.out and the v2 graph helpers
# (_get_max_workspace, _infer_output), 调用示例 / 单算子调用方式 (copied; the infer_output example's
# full-width comma in "out，softmax_lse =" is a Python syntax error and is written ",").
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
softmax_scale = 1/math.sqrt(128.0)
# 调用FIA算子
out = torch_npu.npu_fused_infer_attention_score_v2.out(q, k, v, workspace=workspace, out=[output, softmax_lse], num_query_heads = 8, input_layout = "BNSD", softmax_scale = softmax_scale, pre_tokens=65535, next_tokens=65535)

# 调用FIA算子
ws = torch_npu._npu_fused_infer_attention_score_v2_get_max_workspace(q, k, v, num_query_heads = 8, input_layout = "BNSD", softmax_scale = softmax_scale, pre_tokens=65535, next_tokens=65535)

# 调用FIA算子
out2, softmax_lse2 = torch_npu._npu_fused_infer_attention_score_v2_infer_output(q, v, num_query_heads = 8, input_layout = "BNSD")

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * softmax_scale
expected = torch.softmax(s, -1) @ v.double()
assert out[0] is output
torch.testing.assert_close(output.double(), expected, rtol=2e-3, atol=2e-3)
assert ws.dim() == 1 and ws.dtype == torch.float16
assert out2.shape == q.shape and out2.dtype == torch.float16 and softmax_lse2.numel() == 0
print("EXAMPLE OK")
