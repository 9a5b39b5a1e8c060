# seed 004, npu_nsa_compress, 调用示例 (copied as is).
import torch
import torch_npu
import numpy as np
actual_seq_len = np.random.randint(0, 100, [48])
actual_seq_len = np.cumsum(actual_seq_len).astype(np.int64)
head_num = 4
head_dim = 128
compress_block_size = 16
compress_stride = 16
input = torch.randn(actual_seq_len[-1], head_num, head_dim, dtype=torch.float16).npu()
weight = torch.randn(compress_block_size, head_num, dtype=torch.float16).npu()
torch_npu.npu_nsa_compress(input, weight, compress_block_size, compress_stride, actual_seq_len=actual_seq_len)

# --- added by npu_anywhere tests: check the numbers ---
# Every window of 16 tokens, every 16 tokens, inside each batch, weighted per head (float64).
out = torch_npu.npu_nsa_compress(input, weight, compress_block_size, compress_stride,
                                 actual_seq_len=actual_seq_len)
x, w = input.cpu().double(), weight.cpu().double()
rows, start = [], 0
for end in actual_seq_len.tolist():
    for first in range(start, end - compress_block_size + 1, compress_stride):
        rows.append((x[first:first + compress_block_size] * w[:, :, None]).sum(0))
    start = end
expected = torch.stack(rows)
assert out.shape == expected.shape and out.dtype == torch.float16
torch.testing.assert_close(out.cpu().double(), expected, rtol=1e-2, atol=5e-2)
print("EXAMPLE OK")
