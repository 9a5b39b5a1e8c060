# Seed 004, torch_npu.npu_rotated_box_decode, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
anchor_boxes = torch.tensor([[[4.137],[33.72],[29.4], [54.06], [41.28]]], dtype=torch.float16).to("npu")
deltas = torch.tensor([[[0.0244], [-1.992], [0.2109], [0.315], [-37.25]]], dtype=torch.float16).to("npu")
weight = torch.tensor([1., 1., 1., 1., 1.], dtype=torch.float16).npu()
out = torch_npu.npu_rotated_box_decode(anchor_boxes, deltas, weight)
print(out)

# --- added by npu_anywhere tests: check the numbers ---
# The formula in float64: centre + delta * size, size * exp(delta), atan(tan(angle) + delta).
import math
a = [float(v) for v in anchor_boxes.cpu().flatten()]
d = [float(v) for v in deltas.cpu().flatten()]
w, h = max(a[2] - a[0], 1.0), max(a[3] - a[1], 1.0)
cx, cy = a[0] + w / 2 + d[0] * w, a[1] + h / 2 + d[1] * h
gw, gh = w * math.exp(d[2]), h * math.exp(d[3])
angle = math.degrees(math.atan(math.tan(math.radians(a[4])) + d[4]))
want = torch.tensor([cx - gw / 2, cy - gh / 2, cx + gw / 2, cy + gh / 2, angle])
torch.testing.assert_close(out.cpu().flatten().float(), want.float(), rtol=2e-3, atol=2e-3)
doc = torch.tensor([1.7861, -10.5781, 33.0000, 17.2969, -88.4375])
torch.testing.assert_close(out.cpu().flatten().float(), doc, rtol=2e-3, atol=1e-3)
print("EXAMPLE OK")
