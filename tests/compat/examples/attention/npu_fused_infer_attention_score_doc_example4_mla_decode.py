# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例4：MLA + Decode（Multi-head Latent Attention） (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 16, 1, 512   # MLA场景D=512
KV_N, KV_S = 1, 2048
rope_D = 64                       # RoPE维度固定64

# query: (B, Q_N, Q_S, D)
q = torch.randn(B, Q_N, Q_S, D, dtype=torch.float16).npu()
# key/value: (B, KV_N, KV_S, D)
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()

# RoPE张量: shape中D=64，其余维度与q/k一致
q_rope = torch.randn(B, Q_N, Q_S, rope_D, dtype=torch.float16).npu()
k_rope = torch.randn(B, KV_N, KV_S, rope_D, dtype=torch.float16).npu()

scale = 1.0 / math.sqrt(D + rope_D)  # MLA场景有效维度= D + 64

out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    query_rope=q_rope,
    key_rope=k_rope,
    num_heads=Q_N,
    num_key_value_heads=KV_N,
    input_layout="BNSD",
    scale=scale,
    sparse_mode=0
)

print(out.shape)  # torch.Size([1, 16, 1, 512])

# --- added by npu_anywhere tests: check the numbers ---
# score = scale * (q . k + q_rope . k_rope); the output reads value.
s = (torch.einsum("bnqd,bmkd->bnqk", q.double(), k.double())
     + torch.einsum("bnqd,bmkd->bnqk", q_rope.double(), k_rope.double())) * scale
expected = torch.softmax(s, -1) @ v.double()
assert out.shape == (1, 16, 1, 512)
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
