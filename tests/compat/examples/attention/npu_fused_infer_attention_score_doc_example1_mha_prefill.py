# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例1：MHA + Prefill（基础场景） (copied as is).
import torch
import torch_npu
import math

# =====数据准备=====
B, Q_N, Q_S, D = 1, 8, 164, 128
KV_N, KV_S = 8, 1024

# query/key/value形状: (B, N, S, D) — BNSD布局
q = torch.randn(B, Q_N, Q_S, D, dtype=torch.float16).npu()
k = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()
v = torch.randn(B, KV_N, KV_S, D, dtype=torch.float16).npu()

# scale必须设置为1/sqrt(D)
scale = 1.0 / math.sqrt(D)

# actual_seq_lengths:长度为1表示所有batch共用
# actual_seq_lengths_kv: key/value的有效长度
act_seq_len = [Q_S]
act_seq_len_kv = [KV_S]

# =====调用算子=====
# MHA: num_heads == num_key_value_heads (或不传num_key_value_heads默认为0)
out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    actual_seq_lengths=act_seq_len,
    actual_seq_lengths_kv=act_seq_len_kv,
    num_heads=Q_N,
    input_layout="BNSD",
    scale=scale,
    pre_tokens=65535,
    next_tokens=65535
)

print(out.shape)  # torch.Size([1, 8, 164, 128])

# --- added by npu_anywhere tests: check the numbers ---
s = torch.einsum("bnqd,bnkd->bnqk", q.double(), k.double()) * scale
expected = torch.softmax(s, -1) @ v.double()
assert out.dtype == torch.float16
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
