# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_lightning_indexer.md, 调用示例 /
# 单算子模式调用 (copied as is; seed 004 gives no example for this op).
import torch
import torch_npu
import math
import numpy as np
# 生成随机数据, 并发送到npu
b = 1
s1 = 1
s2 = 8192
n1 = 64
n2 = 1
d = 128
block_size = 256

query = torch.tensor(np.random.uniform(-10, 10, (b, s1, n1, d))).to(torch.bfloat16).npu()
key = torch.tensor(np.random.uniform(-10, 10, (b*(s2//block_size), block_size, n2, d))).to(torch.bfloat16).npu()
weights = torch.tensor(np.random.uniform(-1, 1, (b, s1, n1))).to(torch.bfloat16).npu()
actual_seq_lengths_query = torch.tensor(np.random.uniform(s1, s1, (b))).to(torch.int32).npu()
actual_seq_lengths_key = torch.tensor(np.random.uniform(s2, s2, (b))).to(torch.int32).npu()
block_table = torch.tensor([range(b*s2//block_size)], dtype=torch.int32).reshape(b, -1).npu()
layout_query = 'BSND'
layout_key = 'PA_BSND'
sparse_count = 2048
sparse_mode = 3

# 调用lightning_indexer算子
sparse_indices, sparse_values = torch_npu.npu_lightning_indexer(
        query, key, weights, actual_seq_lengths_query=actual_seq_lengths_query, 
        actual_seq_lengths_key=actual_seq_lengths_key, block_table=block_table, layout_query=layout_query, 
        layout_key=layout_key, sparse_count=sparse_count, sparse_mode=sparse_mode)

print(sparse_indices)

# --- added by npu_anywhere tests: check the numbers ---
# score[t] = sum_h weights[h] * relu(query[h] . key[t]) in float64 over the paged keys (the
# block table is the identity here); the selected keys must carry the 2048 highest scores, best
# first (positions of near-equal scores may trade places, so the scores are compared).
q64 = query.cpu().double()[0, 0]                                   # [n1, d]
k64 = key.cpu().double()[block_table.cpu()[0].long()].reshape(-1, d)[:s2]
w64 = weights.cpu().double()[0, 0]
score = (w64.unsqueeze(1) * (q64 @ k64.T).clamp_min(0)).sum(0)     # [s2]
idx = sparse_indices.cpu()[0, 0, 0].long()
assert sparse_indices.shape == (b, s1, n2, sparse_count) and sparse_indices.dtype == torch.int32
assert (idx >= 0).all() and idx.unique().numel() == sparse_count
best = score.sort(descending=True).values[:sparse_count]
torch.testing.assert_close(score[idx], best, rtol=1e-6, atol=1e-6 * float(best[0]))
print("EXAMPLE OK")
