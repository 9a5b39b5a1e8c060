# Seed 004, torch_npu.npu_moe_finalize_routing, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
expert_num = 16
token_len = 10
top_k = 4
num_rows = 50
device =torch.device('npu')
dtype = torch.float32
expanded_permuted_rows = torch.randn((num_rows * top_k, token_len), device=device, dtype=dtype)
skip1 = torch.randn((num_rows, token_len), device=device, dtype=dtype)
skip2_optional = torch.randn((num_rows, token_len), device=device, dtype=dtype)
bias = torch.randn((expert_num, token_len), device=device, dtype=dtype)
scales = torch.randn((num_rows, top_k), device=device, dtype=dtype)
expert_for_source_row = torch.randint(low=0, high=expert_num, size=(num_rows, top_k), device=device, dtype=torch.int32)
expanded_src_to_dst_row = torch.randint(low=0, high=num_rows * top_k, size=(num_rows * top_k,), device=device, dtype=torch.int32)
drop_pad_mode = 0
output = torch_npu.npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2_optional, bias, scales, expanded_src_to_dst_row, expert_for_source_row, drop_pad_mode)

# --- added by npu_anywhere tests: check the numbers ---
# out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[idx[k * num_rows + i]] + bias[expert[i, k]])
rows = expanded_permuted_rows.cpu().double()
idx = expanded_src_to_dst_row.cpu().tolist()
want = skip1.cpu().double() + skip2_optional.cpu().double()
for i in range(num_rows):
    for k in range(top_k):
        e = int(expert_for_source_row[i, k])
        want[i] += float(scales[i, k]) * (rows[idx[k * num_rows + i]] + bias.cpu().double()[e])
assert output.shape == (num_rows, token_len) and output.dtype == dtype
torch.testing.assert_close(output.cpu().double(), want, rtol=1e-5, atol=1e-5)
print("EXAMPLE OK")
