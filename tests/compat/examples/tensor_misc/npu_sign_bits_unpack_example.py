# Seed 004, torch_npu.npu_sign_bits_unpack, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a = torch.tensor([159, 15], dtype=torch.uint8).npu()
b = torch_npu.npu_sign_bits_unpack(a, 2, torch.float32)
b

# --- added by npu_anywhere tests: check the numbers ---
# value e = +1 if bit e % 8 of byte e // 8 is set, else -1; reshaped to (2, -1).
want = [[1.0 if (int(byte) >> j) & 1 else -1.0 for j in range(8)] for byte in a.cpu()]
assert b.cpu().tolist() == want and b.dtype == torch.float32 and b.shape == (2, 8)
print("EXAMPLE OK")
