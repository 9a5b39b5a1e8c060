# Seed 004, torch_npu.npu_rotated_box_encode, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
anchor_boxes = torch.tensor([[[30.69], [32.6], [45.94], [59.88], [-44.53]]], dtype=torch.float16).to("npu")
gt_bboxes = torch.tensor([[[30.44], [18.72], [33.22], [45.56], [8.5]]], dtype=torch.float16).to("npu")
weight = torch.tensor([1., 1., 1., 1., 1.], dtype=torch.float16).npu()
out = torch_npu.npu_rotated_box_encode(anchor_boxes, gt_bboxes, weight)
print(out)

# --- added by npu_anywhere tests: check the numbers ---
# The formula in float64: centres, log size ratios and the tan difference of the angles.
import math
a = [float(v) for v in anchor_boxes.cpu().flatten()]
g = [float(v) for v in gt_bboxes.cpu().flatten()]
def centre(b):
    w, h = max(b[2] - b[0], 1.0), max(b[3] - b[1], 1.0)
    return b[0] + w / 2, b[1] + h / 2, w, h
(ax, ay, aw, ah), (gx, gy, gw, gh) = centre(a), centre(g)
want = torch.tensor([(gx - ax) / aw, (gy - ay) / ah, math.log(gw / aw), math.log(gh / ah),
                     math.tan(math.radians(g[4])) - math.tan(math.radians(a[4]))])
torch.testing.assert_close(out.cpu().flatten().float(), want.float(), rtol=2e-3, atol=1e-3)
doc = torch.tensor([-0.4253, -0.5166, -1.7021, -0.0162, 1.1328])
torch.testing.assert_close(out.cpu().flatten().float(), doc, rtol=2e-3, atol=1e-3)
assert out.shape == (1, 5, 1) and out.dtype == torch.float16
print("EXAMPLE OK")
