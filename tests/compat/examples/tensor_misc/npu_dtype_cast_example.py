# Seed 004, torch_npu.npu_dtype_cast, 示例一 and 示例二 (the >>> lines, printed results dropped;
# the FakeTensor block's "..." continuation lines indented).
import torch
import torch_npu
torch_npu.npu_dtype_cast(torch.tensor([0, 0.5, -1.]).npu(), dtype=torch.int)
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    x = torch.rand(2, dtype=torch.float32).npu()
    res = torch_npu.npu_dtype_cast(x, torch.float16)

res

# --- added by npu_anywhere tests: check the numbers ---
# float -> int truncates toward zero: [0, 0.5, -1] -> [0, 0, -1] (the doc's printed result).
out = torch_npu.npu_dtype_cast(torch.tensor([0, 0.5, -1.]).npu(), dtype=torch.int)
assert out.dtype == torch.int32 and out.cpu().tolist() == [int(v) for v in (0.0, 0.5, -1.0)]
assert res.shape == (2,) and res.dtype == torch.float16
assert type(res).__name__ == "FakeTensor"
print("EXAMPLE OK")
