# Seed 004, torch_npu.npu_anchor_response_flags, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
x = torch.rand(100, 4).npu()
y = torch_npu.npu_anchor_response_flags(x, [60, 60], [2, 2], 9)
print(y.shape)

# --- added by npu_anywhere tests: check the numbers ---
# Every centre of rand(0, 1) boxes lies in grid cell 0 (stride 2): its 9 anchors are flagged.
assert y.shape == torch.Size([32400]) and y.dtype == torch.uint8
want = torch.zeros(32400, dtype=torch.uint8)
want[:9] = 1
assert torch.equal(y.cpu(), want)
print("EXAMPLE OK")
