# Seed 004, torch_npu.empty_with_format, 示例.  The interactive session as a script.
import torch
import torch_npu
out = torch_npu.empty_with_format((2, 3), dtype=torch.float32, device="npu")

# --- added by npu_anywhere tests: check the numbers ---
# Uninitialised values of the given shape and dtype, in the default ND format (2).
assert out.shape == (2, 3) and out.dtype == torch.float32
assert torch_npu.get_npu_format(out) == 2
print("EXAMPLE OK")
