# Seed 004, torch_npu.npu_anti_quant, 调用示例 / 单算子模式调用.  Copied from the documentation
# unchanged.
import torch
import torch_npu
x_tensor = torch.tensor([1,2,3,4], dtype=torch.int8).npu()
scale = torch.tensor([2.0], dtype=torch.float).npu()
offset = torch.tensor([2.0], dtype=torch.float).npu()
out = torch_npu.npu_anti_quant(x_tensor, scale, offset=offset, dst_dtype=torch.float16)

# --- added by npu_anywhere tests: check the numbers ---
# Seed 004:  anti_quant(x) = (x + offset) * scale  ->  (1+2)*2, (2+2)*2, (3+2)*2, (4+2)*2.
assert out.dtype == torch.float16 and out.shape == (4,), (out.dtype, out.shape)
assert out.tolist() == [6.0, 8.0, 10.0, 12.0], out
print("EXAMPLE OK")
