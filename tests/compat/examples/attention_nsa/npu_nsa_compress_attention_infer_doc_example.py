# seed 004, npu_nsa_compress_attention_infer, 调用示例 (copied as is).
import torch
import torch_npu
query = torch.randn([1, 32, 65], dtype=torch.float16).npu()
key = torch.randn([25, 48, 65], dtype=torch.float16).npu()
value = torch.randn([25, 48, 18], dtype=torch.float16).npu()
scale_value = 0.01
head_num = 32
key_value_head_num = 1
select_block_size = 32
select_block_count = 397
page_block_size = 48
compress_block_size = 32
compress_stride = 16
block_table = torch.tensor([[23, 2, 20, 22, 4, 21, 7, 12, 3, 20, 20, 0, 15, 0, 4, 8, 10, 20, 21, 18, 18, 18, 11, 12, 20]]).int().npu()
actual_cmp_seq_kvlen = [1180]
torch_npu.npu_nsa_compress_attention_infer(query, key, value, scale_value, head_num, key_value_head_num, select_block_size, select_block_count, page_block_size, compress_block_size, compress_stride, block_table=block_table, actual_cmp_seq_kvlen=actual_cmp_seq_kvlen)

# --- added by npu_anywhere tests: check the numbers ---
# Attention over the 1180 compressed tokens read page by page (float64); the selection keeps
# block 0 and the last two of ceil((1179 * 16 + 32) / 32) = 591 blocks first.
out, topk = torch_npu.npu_nsa_compress_attention_infer(
    query, key, value, scale_value, head_num, key_value_head_num, select_block_size,
    select_block_count, page_block_size, compress_block_size, compress_stride,
    block_table=block_table, actual_cmp_seq_kvlen=actual_cmp_seq_kvlen)
table = block_table.cpu()[0].long()
pos = torch.arange(1180)
k = key.cpu().double()[table[pos // 48], pos % 48]           # [1180, 65]
v = value.cpu().double()[table[pos // 48], pos % 48]         # [1180, 18]
p = torch.softmax(query.cpu().double()[0] @ k.T * scale_value, -1)
assert out.shape == (1, 32, 18) and topk.shape == (1, 1, 397) and topk.dtype == torch.int32
torch.testing.assert_close(out.cpu().double()[0], p @ v, rtol=1e-2, atol=1e-2)
assert topk[0, 0, :3].tolist() == [0, 589, 590]
assert len(set(topk[0, 0].tolist())) == 397 and int(topk.max()) < 591
print("EXAMPLE OK")
