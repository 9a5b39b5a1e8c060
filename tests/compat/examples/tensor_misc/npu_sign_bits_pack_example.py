# Seed 004, torch_npu.npu_sign_bits_pack, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a = torch.tensor([5,4,3,2,0,-1,-2, 4,3,2,1,0,-1,-2],dtype=torch.float32).npu()
b = torch_npu.npu_sign_bits_pack(a, 2)
b

# --- added by npu_anywhere tests: check the numbers ---
# bit e = (a[e] >= 0), 8 per byte, least significant first, the tail padded with 0 bits.
bits = [int(float(v) >= 0) for v in a.cpu().to(torch.float64)] + [0, 0]
want = [[sum(bits[8 * k + j] << j for j in range(8))] for k in range(2)]
assert b.cpu().tolist() == want == [[159], [15]] and b.dtype == torch.uint8
print("EXAMPLE OK")
