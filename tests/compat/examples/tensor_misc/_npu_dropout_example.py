# Seed 004, torch_npu._npu_dropout, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
input = torch.tensor([1.,2.,3.,4.]).npu()
input
prob = 0.3
output, mask = torch_npu._npu_dropout(input, prob)
output
mask

# --- added by npu_anywhere tests: check the numbers ---
# output = input * keep / (1 - p); mask: 16 bytes (one 128-bit block), element e = bit e % 8 of
# byte e // 8, pad bits 0.  The random bits themselves differ from the NPU's.
assert mask.dtype == torch.uint8 and mask.shape == (16,)
bits = [(int(mask[e // 8]) >> (e % 8)) & 1 for e in range(128)]
assert not any(bits[4:])
for e in range(4):
    want = float(input[e]) / 0.7 if bits[e] else 0.0
    assert abs(float(output[e]) - want) <= 1e-6 * abs(want), (e, output, bits[:4])
print("EXAMPLE OK")
