# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md,
# 调用示例 / 示例4：learnable_sink + 非量化约束 (copied as is).
import torch
import torch_npu
import math

S_q = 164
S_kv = 1024
Q_N, KV_N = 8, 8
D = 128               # value的D ≤ 128

# query/key/value: TND布局, bfloat16
q = torch.randn(S_q, Q_N, D, dtype=torch.bfloat16).npu()
k = torch.randn(S_kv, KV_N, D, dtype=torch.bfloat16).npu()
v = torch.randn(S_kv, KV_N, D, dtype=torch.bfloat16).npu()

# learnable_sink: shape=(Q_N,), dtype=bfloat16
learnable_sink = torch.randn(Q_N, dtype=torch.bfloat16).npu()

# TND场景必须传入actual_seq_qlen / actual_seq_kvlen
actual_seq_qlen = [S_q]
actual_seq_kvlen = [S_kv]

softmax_scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score_v2(
    q, k, v,
    learnable_sink=learnable_sink,          # 可学习的Sink Token
    actual_seq_qlen=actual_seq_qlen,
    actual_seq_kvlen=actual_seq_kvlen,
    num_query_heads=Q_N,
    num_key_value_heads=KV_N,
    input_layout="TND",
    softmax_scale=softmax_scale,
    sparse_mode=0
)

print(out)

# --- added by npu_anywhere tests: check the numbers ---
# The sink is one more logit per head in the softmax denominator, with no value row.
s = torch.einsum("qnd,knd->nqk", q.double(), k.double()) * softmax_scale
sink = learnable_sink.double().reshape(Q_N, 1, 1).expand(Q_N, S_q, 1)
p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
expected = (p @ v.double().transpose(0, 1)).transpose(0, 1)
assert out.shape == (S_q, Q_N, D) and out.dtype == torch.bfloat16
torch.testing.assert_close(out.double(), expected, rtol=1.6e-2, atol=1.6e-2)
print("EXAMPLE OK")
