# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例8：Prefix + Prefill（共享前缀） (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 8, 164, 128
KV_N, KV_S = 8, 1024
prefix_S = 32

q = torch.randn(B, Q_N, Q_S, D, dtype=torch.float16).npu()
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()

#共享前缀: batch=1, S=prefix_S, N/D与k/v一致
key_prefix = torch.randn(1, KV_N, prefix_S, D, dtype=torch.float16).npu()
value_prefix = torch.randn(1, KV_N, prefix_S, D, dtype=torch.float16).npu()

scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    key_shared_prefix=key_prefix,
    value_shared_prefix=value_prefix,
    num_heads=Q_N,
    input_layout="BNSD",
    scale=scale,
    pre_tokens=65535,
    next_tokens=65535
)

print(out.shape)  # torch.Size([1, 8, 164, 128])

# --- added by npu_anywhere tests: check the numbers ---
kk = torch.cat([key_prefix.double(), k.double()], dim=2)
vv = torch.cat([value_prefix.double(), v.double()], dim=2)
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), kk) * scale
expected = torch.softmax(s, -1) @ vv
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
