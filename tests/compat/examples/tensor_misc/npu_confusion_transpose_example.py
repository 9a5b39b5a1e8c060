# Seed 004, torch_npu.npu_confusion_transpose, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
x = torch.rand(2, 3, 4, 6).npu()
x.shape
y = torch_npu.npu_confusion_transpose(x, (0, 2, 1, 3), (2, 4, 18), True)
y.shape
y2 = torch_npu.npu_confusion_transpose(x, (0, 2, 1), (2, 12, 6), False)
y2.shape

# --- added by npu_anywhere tests: check the numbers ---
# True: permute then reshape; False: reshape then permute (index arithmetic in float64).
x64 = x.cpu().to(torch.float64)
assert y.shape == (2, 4, 18) and y2.shape == (2, 6, 12)
for a in range(2):
    for b in range(4):
        for c in range(18):
            # y[a, b, c] = x.permute(0, 2, 1, 3)[a, b, c // 6, c % 6] = x[a, c // 6, b, c % 6]
            assert float(y[a, b, c]) == float(x64[a, c // 6, b, c % 6])
flat = x64.reshape(-1)
for a in range(2):
    for b in range(6):
        for c in range(12):
            # y2[a, b, c] = x.reshape(2, 12, 6)[a, c, b]
            assert float(y2[a, b, c]) == float(flat[a * 72 + c * 6 + b])
print("EXAMPLE OK")
