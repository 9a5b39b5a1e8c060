# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例5：int8后量化 (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 8, 164, 128
KV_N, KV_S = 8, 1024

q = torch.randn(B, Q_N, Q_S, D, dtype=torch.float16).npu()
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()

# pertensor量化因子: shape (1, 1, 1)或标量shape
quant_scale2 = torch.tensor([0.01], dtype=torch.float32).npu()
#不传quant_offset2则默认为0

scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    quant_scale2=quant_scale2,
    num_heads=Q_N,
    input_layout="BNSD",
    scale=scale,
    pre_tokens=65535,
    next_tokens=65535
)

print(out.dtype)  # torch.int8
print(out.shape)  # torch.Size([1, 8, 164, 128])

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
expected = (torch.softmax(s, -1) @ v.double() * 0.01).round().clamp(-128, 127)
assert out.dtype == torch.int8 and out.shape == (1, 8, 164, 128)
assert (out.double() - expected).abs().max() <= 1
print("EXAMPLE OK")
