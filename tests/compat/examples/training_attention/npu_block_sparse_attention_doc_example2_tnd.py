# seed 004, torch_npu.npu_block_sparse_attention, 调用示例 / TND 布局 (indentation restored).
import torch
import torch_npu
T, N, D = 32, 8, 64
num_kv_heads = 8
scale_value = 1.0 / (D ** 0.5)
block_shape = [128, 128] # blockShapeY 须为 128 的倍数
ceil_q = (T + block_shape[0] - 1) // block_shape[0]
ceil_kv = (T + block_shape[1] - 1) // block_shape[1]
query = torch.randn(T, N, D, dtype=torch.float16).npu()
key = torch.randn(T, num_kv_heads, D, dtype=torch.float16).npu()
value = torch.randn(T, num_kv_heads, D, dtype=torch.float16).npu()
block_sparse_mask = torch.ones(1, N, ceil_q, ceil_kv, dtype=torch.int8).npu()
attention_out, softmax_lse = torch_npu.npu_block_sparse_attention(
query, key, value, block_sparse_mask, block_shape,
q_input_layout="TND", kv_input_layout="TND",
num_key_value_heads=num_kv_heads, scale_value=scale_value, inner_precise=1,
actual_seq_lengths=[T], actual_seq_lengths_kv=[T], softmax_lse_flag=1
)
print(attention_out.shape) # (T, N, D)

# --- added by npu_anywhere tests: check the numbers ---
# one sequence, every block selected: dense attention per head in float64, lse = logsumexp
s = torch.einsum("qnd,knd->nqk", query.double(), key.double()) * scale_value
expected = torch.einsum("nqk,knd->qnd", torch.softmax(s, -1), value.double())
assert attention_out.shape == (T, N, D) and softmax_lse.shape == (T, N, 1)
torch.testing.assert_close(attention_out.double(), expected, rtol=5e-3, atol=5e-3)
torch.testing.assert_close(softmax_lse[..., 0].double(), torch.logsumexp(s, -1).T,
                           rtol=1e-3, atol=1e-3)
print("EXAMPLE OK")
