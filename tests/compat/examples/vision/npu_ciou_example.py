# Seed 004, torch_npu.npu_ciou, 示例.  Copied unchanged (the >>> prompts dropped).
import torch
import torch_npu
box1 = torch.randn(4, 32).npu()
box1.requires_grad = True
box2 = torch.randn(4, 32).npu()
box2.requires_grad = True
ciou = torch_npu.npu_ciou(box1, box2, trans=True, is_cross=False, mode=0)
l = ciou.sum()
l.backward()

# --- added by npu_anywhere tests: check the numbers ---
# CIoU = IoU - rho^2 / c^2 - alpha * v (eps 1e-9) in float64; the gradient holds alpha constant.
import math
b1 = box1.detach().cpu().double().requires_grad_()
b2 = box2.detach().cpu().double().requires_grad_()
eps = 1e-9
x1, x2, y1, y2 = b1[0] - b1[2] / 2, b1[0] + b1[2] / 2, b1[1] - b1[3] / 2, b1[1] + b1[3] / 2
X1, X2, Y1, Y2 = b2[0] - b2[2] / 2, b2[0] + b2[2] / 2, b2[1] - b2[3] / 2, b2[1] + b2[3] / 2
inter = ((torch.min(x2, X2) - torch.max(x1, X1)).clamp(0)
         * (torch.min(y2, Y2) - torch.max(y1, Y1)).clamp(0))
w1, h1, w2, h2 = x2 - x1, y2 - y1 + eps, X2 - X1, Y2 - Y1 + eps
iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
c2 = (torch.max(x2, X2) - torch.min(x1, X1)) ** 2 + (torch.max(y2, Y2) - torch.min(y1, Y1)) ** 2 + eps
rho2 = ((X1 + X2 - x1 - x2) ** 2 + (Y1 + Y2 - y1 - y2) ** 2) / 4
v = 4 / math.pi ** 2 * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
alpha = (v / (1 + eps - iou + v)).detach()
want = (iou - rho2 / c2 - alpha * v)[None]
want.sum().backward()
assert ciou.shape == (1, 32)
torch.testing.assert_close(ciou.detach().cpu().double(), want.detach(), rtol=1e-4, atol=1e-5)
torch.testing.assert_close(box1.grad.cpu().double(), b1.grad, rtol=1e-3, atol=1e-4)
torch.testing.assert_close(box2.grad.cpu().double(), b2.grad, rtol=1e-3, atol=1e-4)
print("EXAMPLE OK")
