# Seed 004, torch_npu.npu_masked_fill_range, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
a=torch.rand(4,4).npu()
a
start = torch.tensor([[0,1,2]], dtype=torch.int32).npu()
end = torch.tensor([[1,2,3]], dtype=torch.int32).npu()
value = torch.tensor([1], dtype=torch.float).npu()
out = torch_npu.npu_masked_fill_range(a, start, end, value, 1)
out

# --- added by npu_anywhere tests: check the numbers ---
# row j gets value[0] at columns start[0, j] <= k < end[0, j]: the diagonal (0,0), (1,1), (2,2).
a64 = a.cpu().to(torch.float64)
for r in range(4):
    for c in range(4):
        want = 1.0 if (r < 3 and int(start[0, r]) <= c < int(end[0, r])) else float(a64[r, c])
        assert float(out[r, c]) == want
print("EXAMPLE OK")
