# Seed 004, torch_npu.npu_alloc_float_status, npu_clear_float_status and npu_get_float_status,
# 示例 (three interactive sessions as one script).
import torch
import torch_npu
input = torch.randn([1,2,3]).npu()
output = torch_npu.npu_alloc_float_status(input)
x = torch.rand(2).npu()
cleared = torch_npu.npu_clear_float_status(x)
x = torch.rand(2).npu()
status = torch_npu.npu_get_float_status(x)

# --- added by npu_anywhere tests: check the numbers ---
# Each prints tensor([0., 0., 0., 0., 0., 0., 0., 0.]): eight float32 zeros.
for t in (output, cleared, status):
    assert t.dtype == torch.float32 and t.cpu().tolist() == [0.0] * 8
print("EXAMPLE OK")
