# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_quant_sparse_flash_attention.md, 调用示例 /
# 单算子模式调用 (copied as is; seed 004 gives no example for this op).
import torch
import torch_npu
import numpy as np
import random
import math
# 生成随机数据，并发送到npu
query_type = torch.bfloat16
scale_value = 0.041666666666666664
sparse_block_size = 1
sparse_block_count = 2048
b = 1
s1 = 1
s2 = 8192
n1 = 128
n2 = 1
dn = 512
dr = 64
tile_size = 128
block_size = 256
layout_query = 'BSND'
s2_act = 4096

query = torch.tensor(np.random.uniform(-10, 10, (b, s1, n1, dn))).to(query_type)
key = torch.tensor(np.random.uniform(-5, 10, (b * (s2 // block_size), block_size, n2, dn))).to(torch.int8)
value = key.clone().npu()
idxs = random.sample(range(s2_act - s1 + 1), sparse_block_count)
sparse_indices = torch.tensor([idxs for _ in range(b * s1 * n2)]).reshape(b, s1, n2, sparse_block_count). \
    to(torch.int32).npu()
query_rope = torch.tensor(np.random.uniform(-10, 10, (b, s1, n1, dr))).to(query_type)
key_rope = torch.tensor(np.random.uniform(-10, 10, (b * (s2 // block_size), block_size, n2, dr))).to(query_type)
act_seq_q = torch.tensor([s1] * b).to(torch.int32).npu()
act_seq_kv = torch.tensor([s2_act] * b).to(torch.int32).npu()
antiquant_scale = torch.tensor(np.random.uniform(-100, 100, (b * (s2 // block_size), block_size, n2,
    dn // tile_size))).to(torch.float32)
key = torch.cat((key, key_rope.view(torch.int8), antiquant_scale.view(torch.int8)), axis=3).npu()
query = torch.cat((query, query_rope), axis=3).npu()
block_table = torch.tensor([range(b * s2 // block_size)], dtype=torch.int32).reshape(b, -1).npu()

# 调用qsfa算子
out = torch_npu.npu_kv_quant_sparse_flash_attention(query, key, value, sparse_indices,
    scale_value=scale_value, sparse_block_size=sparse_block_size,
    actual_seq_lengths_query=act_seq_q, actual_seq_lengths_kv=act_seq_kv,
    layout_query='BSND', layout_kv='PA_BSND', sparse_mode=3, block_table=block_table,
    attention_mode=2, quant_scale_repo_mode=1, tile_size=tile_size, key_quant_mode=2,
    value_quant_mode=2, rope_head_dim=64)

print(out)

# --- added by npu_anywhere tests: check the numbers ---
# Dequantized key k = bf16(int8 * repeat(scale, 128)) is also the value (MLA-absorb);
# out = softmax(scale_value * [q, q_rope] . [k, k_rope]) @ k over the selected tokens, all below
# the causal limit s2_act - s1 + 1, in float64 (the block table is the identity).
raw = key.cpu()[..., :dn].reshape(-1, dn).double()[:s2_act]
sc = antiquant_scale.double().reshape(-1, dn // tile_size)[:s2_act]
k_deq = (raw * sc.repeat_interleave(tile_size, -1)).to(query_type).double()
k_rope = key_rope.double().reshape(-1, dr)[:s2_act]
sel = torch.tensor(idxs).long()
k_all = torch.cat([k_deq, k_rope], -1)[sel]                              # [K, dn + dr]
q64 = query.cpu().double()[0, 0]                                          # [n1, dn + dr]
p = torch.softmax(scale_value * q64 @ k_all.T, -1)
expected = p @ k_deq[sel]
assert out.shape == (b, s1, n1, dn) and out.dtype == query_type
got = out.cpu()[0, 0].double()
torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2 * float(k_deq.abs().max()))
print("EXAMPLE OK")
