# Seed 004, torch_npu.npu_rotated_overlaps, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
import numpy as np
a=np.random.uniform(0,1,(1,3,5)).astype(np.float16)
b=np.random.uniform(0,1,(1,2,5)).astype(np.float16)
box1=torch.from_numpy(a).to("npu")
box2=torch.from_numpy(a).to("npu")
output = torch_npu.npu_rotated_overlaps(box1, box2, trans=False)
output

# --- added by npu_anywhere tests: check the numbers ---
# Same boxes on both sides: the diagonal is each box's area w * h, the matrix is symmetric,
# and with angles below one degree each overlap is close to the axis-aligned float64 one.
out = output.cpu().double()
x = torch.from_numpy(a).double()
assert output.shape == (1, 3, 3) and output.dtype == torch.float16
torch.testing.assert_close(torch.diagonal(out, dim1=1, dim2=2), x[..., 2] * x[..., 3],
                           rtol=2e-3, atol=1e-3)
torch.testing.assert_close(out, out.transpose(1, 2), rtol=0, atol=2e-3)
lo, hi = x[..., :2] - x[..., 2:4] / 2, x[..., :2] + x[..., 2:4] / 2
span = (torch.minimum(hi[:, :, None], hi[:, None]) - torch.maximum(lo[:, :, None], lo[:, None]))
assert (out - span.clamp(min=0).prod(-1)).abs().max() < 0.03
print("EXAMPLE OK")
