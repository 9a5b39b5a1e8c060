# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例7：伪量化（KV分离模式）+ Decode (copied as is).
import torch
import torch_npu
import math

B, Q_N, Q_S, D = 1, 8, 1, 128
KV_N, KV_S = 2, 2048

q = torch.randn(B, Q_N, Q_S, D, dtype=torch.bfloat16).npu()
k = torch.randint(-128, 127, (B, KV_N, KV_S, D), dtype=torch.int8).npu()
v = torch.randint(-128, 127, (B, KV_N, KV_S, D), dtype=torch.int8).npu()

# KV分离perchannel量化因子: shape (1, KV_N, 1, D)或(1, KV_N, D)或(1, H)
key_antiquant_scale = torch.ones(1, KV_N, 1, D, dtype=torch.bfloat16).npu() * 0.01
value_antiquant_scale = torch.ones(1, KV_N, 1, D, dtype=torch.bfloat16).npu() * 0.01
#对称量化：不传offset

scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    key_antiquant_scale=key_antiquant_scale,
    value_antiquant_scale=value_antiquant_scale,
    key_antiquant_mode=0,     # perchannel
    value_antiquant_mode=0,
    num_heads=Q_N,
    num_key_value_heads=KV_N,
    input_layout="BNSD",
    scale=scale
)

print(out.dtype)   # torch.bfloat16
print(out.shape)   # torch.Size([1, 8, 1, 128])

# --- added by npu_anywhere tests: check the numbers ---
kf, vf = k.double() * 0.01, v.double() * 0.01                       # per-channel scale 0.01
qd = q.double()[0, :, 0]                                             # [Q_N, D]
expected = torch.stack([torch.softmax(qd[h] @ kf[0, h // 4].T * scale, -1) @ vf[0, h // 4]
                        for h in range(Q_N)])
assert out.dtype == torch.bfloat16 and out.shape == (1, 8, 1, 128)
torch.testing.assert_close(out[0, :, 0].double(), expected, rtol=1.6e-2, atol=1.6e-2)
print("EXAMPLE OK")
