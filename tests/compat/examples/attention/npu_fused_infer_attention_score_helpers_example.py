# Seed 004, torch_npu._npu_fused_infer_attention_score_get_max_workspace and
# _npu_fused_infer_attention_score_infer_output, 调用示例 / 单算子调用方式 (copied; the second
# example's full-width comma in "out，softmax_lse =" is a Python syntax error and is written ",").
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
# 调用FIA算子
out = torch_npu._npu_fused_infer_attention_score_get_max_workspace(q, k, v, num_heads = 8, input_layout = "BNSD", scale = scale, pre_tokens=65535, next_tokens=65535)

# 调用FIA算子
out, softmax_lse = torch_npu._npu_fused_infer_attention_score_infer_output(q, k, v, num_heads = 8, input_layout = "BNSD")

# --- added by npu_anywhere tests: check the numbers ---
# infer_output returns zero tensors of the op's output shapes (no lse: softmax_lse_flag False).
assert out.shape == (1, 8, 164, 128) and out.dtype == torch.float16, (out.shape, out.dtype)
assert softmax_lse.dtype == torch.float32 and softmax_lse.numel() == 0
ws = torch_npu._npu_fused_infer_attention_score_get_max_workspace(q, k, v, num_heads=8, input_layout="BNSD")
assert ws.dim() == 1 and ws.dtype == torch.float16
print("EXAMPLE OK")
