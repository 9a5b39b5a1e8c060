# Seed 004, torch_npu.empty_with_swapped_memory, 调用示例.  Copied unchanged.
import torch
import torch_npu
swapped_tensor = torch_npu.empty_with_swapped_memory([12, 12], dtype=torch.float32, device=torch.device("npu:0"))
swapped_tensor.zero_()

# --- added by npu_anywhere tests: check the numbers ---
assert swapped_tensor.shape == (12, 12) and swapped_tensor.dtype == torch.float32
assert swapped_tensor.abs().sum().item() == 0.0
print("EXAMPLE OK")
