# Seed 004, torch_npu.npu_rotated_iou, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
import numpy as np
a=np.random.uniform(0,1,(2,2,5)).astype(np.float16)
b=np.random.uniform(0,1,(2,3,5)).astype(np.float16)
box1=torch.from_numpy(a).to("npu")
box2=torch.from_numpy(a).to("npu")
output = torch_npu.npu_rotated_iou(box1, box2, trans=False, mode=0, is_cross=True)
output

# --- added by npu_anywhere tests: check the numbers ---
# The printed NPU values come from random boxes; check the geometry instead: both arguments
# are the same boxes, so the diagonal is 1 and the matrix symmetric, and with angles below one
# degree each IoU is within a few percent of the axis-aligned float64 IoU of the same boxes.
out = output.cpu().double()
assert output.shape == (2, 2, 2) and output.dtype == torch.float16
torch.testing.assert_close(torch.diagonal(out, dim1=1, dim2=2), torch.ones(2, 2,
                           dtype=torch.float64), rtol=0, atol=2e-3)
torch.testing.assert_close(out, out.transpose(1, 2), rtol=0, atol=2e-3)
x = torch.from_numpy(a).double()
lo, hi = x[..., :2] - x[..., 2:4] / 2, x[..., :2] + x[..., 2:4] / 2
span = (torch.minimum(hi[:, :, None], hi[:, None]) - torch.maximum(lo[:, :, None], lo[:, None]))
inter = span.clamp(min=0).prod(-1)
area = x[..., 2] * x[..., 3]
axis_iou = inter / (area[:, :, None] + area[:, None] - inter)
assert (out - axis_iou).abs().max() < 0.08, (out, axis_iou)
print("EXAMPLE OK")
