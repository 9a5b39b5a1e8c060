# seed 004, torch_npu.npu_block_sparse_attention, 调用示例 / BNSD 布局 (indentation restored).
import torch
import torch_npu
B, N, S, D = 2, 8, 32, 64
num_kv_heads = 8
scale_value = 1.0 / (D ** 0.5)
block_shape = [128, 128] # blockShapeY 须为 128 的倍数
ceil_q = (S + block_shape[0] - 1) // block_shape[0]
ceil_kv = (S + block_shape[1] - 1) // block_shape[1]
query = torch.randn(B, N, S, D, dtype=torch.float16).npu()
key = torch.randn(B, num_kv_heads, S, D, dtype=torch.float16).npu()
value = torch.randn(B, num_kv_heads, S, D, dtype=torch.float16).npu()
block_sparse_mask = torch.ones(B, N, ceil_q, ceil_kv, dtype=torch.int8).npu()
attention_out, _ = torch_npu.npu_block_sparse_attention(
query, key, value, block_sparse_mask, block_shape,
q_input_layout="BNSD", kv_input_layout="BNSD",
num_key_value_heads=num_kv_heads, scale_value=scale_value, inner_precise=1,
)
print(attention_out.shape) # (B, N, S, D)

# --- added by npu_anywhere tests: check the numbers ---
# every block is selected: dense softmax attention in float64
s = torch.einsum("bnqd,bnkd->bnqk", query.double(), key.double()) * scale_value
expected = torch.softmax(s, -1) @ value.double()
assert attention_out.shape == (B, N, S, D) and attention_out.dtype == torch.float16
torch.testing.assert_close(attention_out.double(), expected, rtol=5e-3, atol=5e-3)
print("EXAMPLE OK")
