# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_quant_lightning_indexer.md, 调用示例 /
# 单算子模式调用 (copied as is; seed 004 gives no example for this op).
import torch
import torch_npu
import numpy as np
import torch.nn as nn
import math

n1 = 64
n2 = 1
d = 128
block_size = 128
layout_key = "PA_BSND"
layout_query = "BSND"
query_quant_mode = 0
key_quant_mode = 0
np.random.seed(0)
# -------------
b = 24
t = None
s1 = 4
s2 = 512
act_seq_q = None
act_seq_k = None
sparse_mode = 0
sparse_count = 2048
max_block_table_num = (s2 + block_size - 1) // block_size
block_table = torch.tensor([range(b * max_block_table_num)], dtype = torch.int32).reshape(b, -1)
key = torch.tensor(np.random.uniform(-128, 127, (b * max_block_table_num, block_size, n2, d))).to(torch.int8)
key_dequant_scale = torch.tensor(np.random.uniform(0, 10, (b * max_block_table_num, block_size, n2)))
key_dequant_scale = key_dequant_scale.to(torch.float16)
query = torch.tensor(np.random.uniform(-128, 127, (b, s1, n1, d))).to(torch.int8)
query_dequant_scale = torch.tensor(np.random.uniform(0, 10, (b, s1, n1))).to(torch.float16)
weights = torch.tensor(np.random.uniform(0, 0.01, (b, s1, n1))).to(torch.float16)
actual_seq_lengths_query = torch.tensor(np.random.uniform(s1, s1, (b))).to(torch.int32) \
                            if act_seq_q is None else torch.tensor(act_seq_q).to(torch.int32)
actual_seq_lengths_key = torch.tensor(np.random.uniform(s2, s2, (b))).to(torch.int32) \
                            if act_seq_k is None else torch.tensor(act_seq_k).to(torch.int32)

npu_out = torch_npu.npu_quant_lightning_indexer(query.npu(), key.npu(), weights.npu(), query_dequant_scale.npu(),
                                                key_dequant_scale.npu(),
                                                actual_seq_lengths_query=actual_seq_lengths_query.npu(),
                                                actual_seq_lengths_key=actual_seq_lengths_key.npu(),
                                                block_table=block_table.npu(),
                                                query_quant_mode=query_quant_mode,
                                                key_quant_mode=key_quant_mode,
                                                layout_query=layout_query,
                                                layout_key=layout_key, sparse_count=sparse_count,
                                                sparse_mode=sparse_mode)

# --- added by npu_anywhere tests: check the numbers ---
# score[s, t] = kscale[t] * sum_h weights[s, h] * qscale[s, h] * relu(q[s, h] . k[t]) in
# float64 (the block table is the identity); sparse_mode 0 and s2 = 512 < sparse_count, so
# each row lists all 512 keys by descending score, then -1.  Near-equal scores may trade
# places after the kernel's float16 storage, so scores are compared, not positions.
out = npu_out.cpu()
assert out.shape == (b, s1, n2, sparse_count) and out.dtype == torch.int32
assert (out[..., s2:] == -1).all()
q64 = query.float()               # int8 dot products are exact in float32 (|dot| < 2**24)
k64 = key.float().reshape(b, s2, d)
ks64 = key_dequant_scale.double().reshape(b, s2)
hw = (weights * query_dequant_scale).double()                       # [b, s1, n1]
dots = torch.einsum("bsnd,btd->bsnt", q64, k64).clamp_min(0).double()
score = (hw.unsqueeze(-1) * dots).sum(2) * ks64.unsqueeze(1)        # [b, s1, s2]
idx = out[:, :, 0, :s2].long()
assert torch.equal(idx.sort(-1).values, torch.arange(s2).expand(b, s1, s2))
picked = score.gather(-1, idx)
best = score.sort(-1, descending=True).values
torch.testing.assert_close(picked, best, rtol=2e-3, atol=0)
print("EXAMPLE OK")
