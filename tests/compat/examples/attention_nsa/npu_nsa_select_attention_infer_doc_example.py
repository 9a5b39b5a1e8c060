# seed 004, npu_nsa_select_attention_infer, 调用示例 (copied as is).
import torch
import torch_npu
query = torch.randn([1, 1, 768], dtype=torch.float16).npu()
key = torch.randn([246, 64, 384], dtype=torch.float16).npu()
value = torch.randn([246, 64, 256], dtype=torch.float16).npu()
topk_indices = torch.tensor([[[0, -1], [0, -1]]], device="npu", dtype=torch.int32)
block_table = torch.tensor([[1, 0]], device="npu", dtype=torch.int32)
scale_value = 2.0
head_num = 4
key_value_head_num = 2
select_block_size = 64
select_block_count = 2
page_block_size = 64
layout = 'BSH'
actual_seq_qlen = None
actual_seq_kvlen = [82] * query.size(0)
atten_mask = None
torch_npu.npu_nsa_select_attention_infer(query, key, value, topk_indices, scale_value, head_num, key_value_head_num, select_block_size, select_block_count, page_block_size, layout=layout, atten_mask=atten_mask, block_table=block_table, actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen)

# --- added by npu_anywhere tests: check the numbers ---
# Block 0 of the sequence (its first 64 tokens: page block_table[0, 0] = 1) for both key heads;
# -1 ends the selection.  softmax(2 * q . k) @ v per query head in float64.
out = torch_npu.npu_nsa_select_attention_infer(
    query, key, value, topk_indices, scale_value, head_num, key_value_head_num,
    select_block_size, select_block_count, page_block_size, layout=layout,
    atten_mask=atten_mask, block_table=block_table, actual_seq_qlen=actual_seq_qlen,
    actual_seq_kvlen=actual_seq_kvlen)
q = query.cpu().double().view(4, 192)
k = key.cpu().double().view(246, 64, 2, 192)[1]
v = value.cpu().double().view(246, 64, 2, 128)[1]
expected = torch.cat([torch.softmax(k[:, h // 2] @ q[h] * scale_value, 0) @ v[:, h // 2]
                      for h in range(4)]).view(1, 1, 512)
assert out.shape == (1, 1, 512) and out.dtype == torch.float16
torch.testing.assert_close(out.cpu().double(), expected, rtol=1e-2, atol=1e-2)
print("EXAMPLE OK")
