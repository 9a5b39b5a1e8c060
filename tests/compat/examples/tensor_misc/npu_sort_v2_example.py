# Seed 004, torch_npu.npu_sort_v2, 示例 (the >>> lines, printed results dropped).
import torch
import torch_npu
x = torch.randn(3, 4).npu()
x
sorted_x = torch_npu.npu_sort_v2(x)
sorted_x

# --- added by npu_anywhere tests: check the numbers ---
# Each row ascending, values unchanged (the doc's printout shows float16-rounded values, which
# this emulation does not reproduce; see npu_sort_v2's docstring).
x64 = x.cpu().to(torch.float64)
for r in range(3):
    assert [float(v) for v in sorted_x[r].cpu()] == sorted(float(v) for v in x64[r])
assert sorted_x.shape == (3, 4) and sorted_x.dtype == torch.float32
print("EXAMPLE OK")
