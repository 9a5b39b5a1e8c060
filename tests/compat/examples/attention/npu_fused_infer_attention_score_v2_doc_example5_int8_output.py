# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md,
# 调用示例 / 示例5：int8后量化 (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 8, 164, 128
KV_N = 8
KV_S = 1024

# query/key/value: bfloat16, BNSD
q = torch.randn(B, Q_N, Q_S, D, dtype=torch.bfloat16).npu()
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.bfloat16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.bfloat16).npu()

# quant_scale_out: 必传，bfloat16 输入时同时支持float32 / bfloat16
# perchannel: 输出BNSD推荐 (1, Q_N, 1, D)
quant_scale_out = torch.randn(1, Q_N, 1, D, dtype=torch.float32).npu()
# quant_offset_out: 可选，类型和shape与scale一致，不传则默认0

softmax_scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score_v2(
    q, k, v,
    quant_scale_out=quant_scale_out,        # 输出int8 必传
    num_query_heads=Q_N,
    input_layout="BNSD",
    softmax_scale=softmax_scale,
    pre_tokens=65535,
    next_tokens=65535
)

print(out.dtype)  # torch.int8
print(out.shape)  # torch.Size([1, 8, 164, 128])

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * softmax_scale
expected = (torch.softmax(s, -1) @ v.double() * quant_scale_out.double()).round().clamp(-128, 127)
assert out.dtype == torch.int8 and out.shape == (1, 8, 164, 128)
assert (out.double() - expected).abs().max() <= 1
print("EXAMPLE OK")
