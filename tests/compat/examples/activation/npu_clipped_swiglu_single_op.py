# Seed 004, torch_npu.npu_clipped_swiglu, 调用示例 (单算子调用).  Copied from the documentation;
# only the indentation that the seed text lost was restored.  (The 图模式调用 example needs
# torchair, which is not emulated.)
import torch
import torch_npu
tokens_num = 4608
hidden_size = 2048
x = torch.randint(-10, 10, (tokens_num, hidden_size), dtype=torch.float32)
group_index = torch.randint(1, 101, (4, ), dtype=torch.int64)
y = torch_npu.npu_clipped_swiglu(
    x.npu(),
    group_index=group_index.npu(),
    dim=-1,
    alpha=1.702,
    limit=7.0,
    bias=1.0,
    interleaved=True
)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004: x = x[:sum(group_index)];  interleaved: A = x[:, ::2], B = x[:, 1::2]
#           A = A.clamp(max=limit); B = B.clamp(-limit, limit)
#           y = A * sigmoid(alpha * A) * (B + bias)
# Rows past sum(group_index) are not computed; npu_anywhere returns zeros there (op-plugin's
# CPU golden does the same; on the NPU they hold uninitialized memory).
rows = int(group_index.sum())
x64 = x.to(torch.float64)[:rows]
A = x64[:, ::2].clamp(max=7.0)
B = x64[:, 1::2].clamp(min=-7.0, max=7.0)
expected = A * (1 / (1 + torch.exp(-1.702 * A))) * (B + 1.0)
assert y.shape == (tokens_num, hidden_size // 2) and y.dtype == torch.float32, (y.shape, y.dtype)
torch.testing.assert_close(y[:rows].to(torch.float64), expected, rtol=1.3e-6, atol=1e-5)
assert torch.count_nonzero(y[rows:]) == 0
print("EXAMPLE OK")
