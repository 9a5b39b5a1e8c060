# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md, 调用示例 /
# 单算子模式调用 (copied as is; seed 004 gives no example for this op).
import torch
import torch_npu
import numpy as np
import random

query_type = torch.float16
scale_value = 0.041666666666666664
sparse_block_size = 1
sparse_block_count = 2048
t = 10
b = 4
s1 = 1
s2 = 8192
n1 = 128
n2 = 1
dn = 512
dr = 64
tile_size = 128
block_size = 256
s2_act = 4096
attention_mode = 2
return_softmax_lse = False

query = torch.tensor(np.random.uniform(-10, 10, (b, s1, n1, dn))).to(query_type)
key = torch.tensor(np.random.uniform(-5, 10, (b, s2, n2, dn))).to(query_type)
value = key.clone()
# 注意：此处使用 random.sample 仅为演示目的，生产环境中应使用稀疏选择算法（如 lightning_indexer）生成 sparse_indices
idxs = random.sample(range(s2_act - s1 + 1), sparse_block_count)
sparse_indices = torch.tensor([idxs for _ in range(b * s1 * n2)]).reshape(b, s1, n2, sparse_block_count). \
    to(torch.int32)
query_rope = torch.tensor(np.random.uniform(-10, 10, (b, s1, n1, dr))).to(query_type)
key_rope = torch.tensor(np.random.uniform(-10, 10, (b, s2, n2, dr))).to(query_type)
act_seq_q = [s1] * b
act_seq_kv = [s2_act] * b

query = query.npu()
key = key.npu()
value = value.npu()
sparse_indices = sparse_indices.npu()
query_rope = query_rope.npu()
key_rope = key_rope.npu()
act_seq_q = torch.tensor(act_seq_q).to(torch.int32).npu()
act_seq_kv = torch.tensor(act_seq_kv).to(torch.int32).npu()

attention_out, softmax_max, softmax_sum = torch_npu.npu_sparse_flash_attention(
    query, key, value, sparse_indices, scale_value, block_table=None,
    actual_seq_lengths_query=act_seq_q, actual_seq_lengths_kv=act_seq_kv,
    query_rope=query_rope, key_rope=key_rope, sparse_block_size=sparse_block_size,
    layout_query='BSND', layout_kv='BSND', sparse_mode=3, pre_tokens=(1<<63)-1, next_tokens=(1<<63)-1,
    attention_mode = attention_mode, return_softmax_lse = return_softmax_lse)

# --- added by npu_anywhere tests: check the numbers ---
# out = softmax(scale * ([q, q_rope] . [k, k_rope])) @ value over the selected tokens
# (sparse_block_size 1; every index is below the causal limit act_seq_kv - s1 + 1) in float64,
# checked on the first batch (every batch uses the same indices).
sel = torch.tensor(idxs).long()
q64 = torch.cat([query.cpu(), query_rope.cpu()], -1).double()[:1]      # [1, s1, n1, dn + dr]
k64 = torch.cat([key.cpu(), key_rope.cpu()], -1).double()[:1, sel, 0]   # [1, K, dn + dr]
v64 = value.cpu().double()[:1, sel, 0]                                  # [1, K, dn]
p = torch.softmax(scale_value * torch.einsum("bsnd,bkd->bsnk", q64, k64), -1)
expected = torch.einsum("bsnk,bkd->bsnd", p, v64)
assert attention_out.shape == (b, s1, n1, dn) and attention_out.dtype == query_type
assert softmax_max.numel() == 0 and softmax_sum.numel() == 0
torch.testing.assert_close(attention_out.cpu()[:1].double(), expected, rtol=1e-2, atol=5e-2)
print("EXAMPLE OK")
