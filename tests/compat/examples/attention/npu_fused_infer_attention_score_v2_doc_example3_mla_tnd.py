# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score_v2.md,
# 调用示例 / 示例3：MLA + TND约束 (copied as is).
import torch
import torch_npu
import math

Q_N, KV_N = 8, 8
D = 128
D_rope = 64

# TND场景：T为所有Batch的seqlen累加和
# actual_seq_qlen表示每个batch的累加seqlen
# 单batch场景: T = S
S_q = 164
S_kv = 1024

# query:  (T, Q_N, D)     → (164, 8, 128)
# key:    (T, KV_N, D)    → (1024, 8, 128)
# value:  (T, KV_N, D)    → (1024, 8, 128)
q = torch.randn(S_q, Q_N, D, dtype=torch.float16).npu()
k = torch.randn(S_kv, KV_N, D, dtype=torch.float16).npu()
v = torch.randn(S_kv, KV_N, D, dtype=torch.float16).npu()

# query_rope: (T, Q_N, 64)
# key_rope:   (T, KV_N, 64)
query_rope = torch.randn(S_q, Q_N, D_rope, dtype=torch.float16).npu()
key_rope   = torch.randn(S_kv, KV_N, D_rope, dtype=torch.float16).npu()

# TND场景必须传入actual_seq_qlen / actual_seq_kvlen
# 元素为当前batch与之前所有batch的S累加和（单batch直接给S值）
actual_seq_qlen = [S_q]
actual_seq_kvlen = [S_kv]

softmax_scale = 1.0 / math.sqrt(D)

out, _ = torch_npu.npu_fused_infer_attention_score_v2(
    q, k, v,
    query_rope=query_rope,
    key_rope=key_rope,
    actual_seq_qlen=actual_seq_qlen,       # TND场景必须传入
    actual_seq_kvlen=actual_seq_kvlen,     # TND场景必须传入
    num_query_heads=Q_N,
    num_key_value_heads=KV_N,
    input_layout="TND",                    # TND布局
    softmax_scale=softmax_scale,
    sparse_mode=0,                         # 不传atten_mask
    inner_precise=1                        # 仅支持 0 或 1
)

print(out)  #tensor([[[...]]], device='npu:0', dtype=torch.float16)

# --- added by npu_anywhere tests: check the numbers ---
s = (torch.einsum("qnd,knd->nqk", q.double(), k.double())
     + torch.einsum("qnd,knd->nqk", query_rope.double(), key_rope.double())) * softmax_scale
expected = (torch.softmax(s, -1) @ v.double().transpose(0, 1)).transpose(0, 1)
assert out.shape == (S_q, Q_N, D) and out.dtype == torch.float16
torch.testing.assert_close(out.double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
