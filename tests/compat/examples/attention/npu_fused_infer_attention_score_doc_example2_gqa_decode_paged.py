# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md, 调用示例 /
# 示例2：GQA + Decode + PageAttention (copied as is).
import torch
import torch_npu
import math

# =====数据准备=====
B = 1
Q_N = 8           # query heads
KV_N = 2          # key/value heads (GQA: Q_N / KV_N = 4)
Q_S = 1           # decode阶段query长度= 1
D = 128
KV_S = 2048       # KV Cache总长度
block_size = 128
#计算需要的block数量
max_block_num = (KV_S + block_size - 1) // block_size  # = 16

# BSH layout: query为3维(B, S, H_q)，其中H_q = Q_N * D
H_q = Q_N * D    # = 1024
H_kv = KV_N * D  # = 256
q = torch.randn(B, Q_S, H_q, dtype=torch.float16).npu()
# KV Cache: BnBsH格式(blocknum, block_size, H_kv)
k = torch.randn(max_block_num, block_size, H_kv, dtype=torch.float16).npu()
v = torch.randn(max_block_num, block_size, H_kv, dtype=torch.float16).npu()

# block_table: (B, max_block_num)，存储block id
block_table = torch.arange(max_block_num, dtype=torch.int32).unsqueeze(0).npu()
scale = 1.0 / math.sqrt(D)

# PageAttention场景必须传入actual_seq_lengths_kv
act_seq_len_kv = [KV_S]

# =====调用算子=====
out, _ = torch_npu.npu_fused_infer_attention_score(
    q, k, v,
    actual_seq_lengths_kv=act_seq_len_kv,
    num_heads=Q_N,
     num_key_value_heads=KV_N,   # GQA:指定KV head数
    input_layout="BSH",          # kv cache为BnBsH时用BSH
    scale=scale,
    block_table=block_table,
    block_size=block_size
)

print(out.shape)  # torch.Size([1, 1, 1024])

# --- added by npu_anywhere tests: check the numbers ---
# block_table is arange: the cache rows in order are the sequence; query head h reads KV head h // 4.
kd = k.reshape(-1, KV_N, D)[:KV_S].double().permute(1, 0, 2)          # [KV_N, KV_S, D]
vd = v.reshape(-1, KV_N, D)[:KV_S].double().permute(1, 0, 2)
qd = q.reshape(Q_N, D).double()
expected = torch.stack([torch.softmax(qd[h] @ kd[h // 4].T * scale, -1) @ vd[h // 4]
                        for h in range(Q_N)])
assert out.shape == (1, 1, H_q) and out.dtype == torch.float16
torch.testing.assert_close(out.reshape(Q_N, D).double(), expected, rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
