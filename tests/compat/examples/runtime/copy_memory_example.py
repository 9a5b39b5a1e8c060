# Seed 004, torch_npu.copy_memory_, 示例.  The interactive session as a script.
import torch
import torch_npu
a=torch.IntTensor([0, 0, -1]).npu()
b=torch.IntTensor([1, 1, 1]).npu()
out = torch_npu.copy_memory_(a, b)

# --- added by npu_anywhere tests: check the numbers ---
# dst takes src's elements and is returned (tensor([1, 1, 1], dtype=torch.int32)).
assert out is a and out.dtype == torch.int32
assert a.cpu().tolist() == [1, 1, 1]
print("EXAMPLE OK")
