# seed 004, npu_nsa_select_attention, 调用示例 (copied as is).
import torch
import torch_npu
import numpy as np
query = torch.randn(256, 16, 192, dtype=torch.float16).npu()
key = torch.randn(3072, 4, 192, dtype=torch.float16).npu()
value = torch.randn(3072, 4, 128, dtype=torch.float16).npu()
topk_indices = torch.randn(256, 4, 16).int().npu()
scale_value = 1.0
head_num = 16
select_block_size = 64
select_block_count = 16
atten_mask = torch.randn(512, 2048).bool().npu()
actual_seq_qlen = [128, 256]
actual_seq_kvlen = [2048, 3072]
torch_npu.npu_nsa_select_attention(query, key, value, topk_indices, scale_value, head_num, select_block_size, select_block_count, atten_mask=atten_mask, actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen)

# --- added by npu_anywhere tests: check the numbers ---
# With a mask the causal rule applies (key p of the batch seen by its query row i iff p <= i);
# negative block numbers select nothing.  A few rows rebuilt in float64.
out, mx, sm = torch_npu.npu_nsa_select_attention(
    query, key, value, topk_indices, scale_value, head_num, select_block_size,
    select_block_count, atten_mask=atten_mask, actual_seq_qlen=actual_seq_qlen,
    actual_seq_kvlen=actual_seq_kvlen)
assert out.shape == (256, 16, 128) and mx.shape == sm.shape == (256, 16, 8)
q, k, v, topk = (t.cpu() for t in (query.double(), key.double(), value.double(), topk_indices))
for t in (5, 100, 130, 255):
    b0, kv0, i = (0, 0, t) if t < 128 else (1, 2048, t - 128)
    for h in (0, 7, 15):
        n = h // 4
        pos = [c * 64 + j for c in topk[t, n].tolist() if c >= 0 for j in range(64)]
        pos = [p for p in pos if p <= i]
        if not pos:
            continue
        s = k[kv0 + torch.tensor(pos), n] @ q[t, h] * scale_value
        want = torch.softmax(s, 0) @ v[kv0 + torch.tensor(pos), n]
        torch.testing.assert_close(out[t, h].cpu().double(), want, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(mx[t, h, 0].cpu().double(), s.max(), rtol=1e-3, atol=1e-2)
print("EXAMPLE OK")
