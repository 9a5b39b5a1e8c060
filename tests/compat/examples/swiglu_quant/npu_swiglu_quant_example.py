# seed 004, npu_swiglu_quant, 调用示例.  The seed wraps the body in a torch_npu.testing
# TestCase (class TestNPUSwigluQuant / run_tests), which the shim does not provide: the
# scaffolding lines (the torch_npu.testing imports, the class line, run_tests) are dropped and
# the test body runs at module level; every other line is as in the seed, indentation restored.
import os
import shutil
import unittest
import numpy as np
import torch
import torch_npu

batch_size = 4608
hidden_size = 2048
x_shape = (batch_size, hidden_size)
input_data = np.random.randn(*x_shape).astype(np.float32)
quant_mode = 1
group_list_type = 0
dst_type = torch.int8
activate_left = False
offsets = None
num_groups = 8
group_sizes = batch_size // num_groups
group_index = [(i + 1) * group_sizes for i in range(num_groups)]
smooth_scales = np.random.randn(num_groups, hidden_size // 2).astype(np.float32)
device = "npu"
npu_x = torch.from_numpy(input_data).to(device)
npu_group_index = torch.from_numpy(np.array(group_index)).to(device)
npu_smooth_scales = torch.from_numpy(smooth_scales).to(device)
result = torch_npu.npu_swiglu_quant(
    npu_x,
    smooth_scales=npu_smooth_scales,
    offsets=offsets,
    group_index=npu_group_index,
    activate_left=False,
    quant_mode=quant_mode,
    group_list_type=group_list_type,
    dst_type=dst_type
)

# --- added by npu_anywhere tests: check the numbers ---
# act = A * swish(B) (activate_left=False);  t = act * smooth_scales[g]  (cumsum groups)
# scale = 127 / max|t| per row;  y = rint(t * scale), saturated to int8
y, scale = result
xd = torch.from_numpy(input_data).double()
n = hidden_size // 2
a, b = xd[:, :n], xd[:, n:]
act = a * (b / (1 + torch.exp(-b)))
s = torch.from_numpy(smooth_scales).double()
rows_s = s.repeat_interleave(group_sizes, dim=0)
t = act * rows_s
want_scale = 127.0 / t.abs().amax(-1)
want = torch.round(t * want_scale[:, None]).clamp(-128, 127)
assert y.dtype == torch.int8 and y.shape == (batch_size, n)
assert scale.dtype == torch.float32 and scale.shape == (batch_size,)
diff = (y.cpu().double() - want).abs()
assert diff.max().item() <= 1 and (diff > 0).double().mean().item() < 1e-3
assert torch.allclose(scale.cpu().double(), want_scale, rtol=1e-5, atol=0)
print("EXAMPLE OK")
