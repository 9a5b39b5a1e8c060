# Seed 004, torch_npu.npu_diou, 示例 (it calls the contrib helper).  Copied unchanged (the >>>
# prompts dropped).
import torch
import torch_npu
box1 = torch.randn(4, 32).npu()
box1.requires_grad = True
box2 = torch.randn(4, 32).npu()
box2.requires_grad = True
diou = torch_npu.contrib.function.npu_diou(box1, box2)
l = diou.sum()
l.backward()

# --- added by npu_anywhere tests: check the numbers ---
# The helper's defaults are trans=True, is_cross=False, mode=0: DIoU = IoU - rho^2 / c^2 (eps
# 1e-9 on the heights, the union and c^2) in float64, and its float64 autograd gradient.
b1 = box1.detach().cpu().double().requires_grad_()
b2 = box2.detach().cpu().double().requires_grad_()
eps = 1e-9
lo1, hi1 = b1[:2] - b1[2:] / 2, b1[:2] + b1[2:] / 2
lo2, hi2 = b2[:2] - b2[2:] / 2, b2[:2] + b2[2:] / 2
side = (torch.min(hi1, hi2) - torch.max(lo1, lo2)).clamp(0)
size1, size2 = hi1 - lo1, hi2 - lo2
union = size1[0] * (size1[1] + eps) + size2[0] * (size2[1] + eps) - side.prod(0) + eps
hull = torch.max(hi1, hi2) - torch.min(lo1, lo2)
rho2 = (((lo2 + hi2) - (lo1 + hi1)) ** 2).sum(0) / 4
want = (side.prod(0) / union - rho2 / ((hull ** 2).sum(0) + eps))[None]
want.sum().backward()
assert diou.shape == (1, 32)
torch.testing.assert_close(diou.detach().cpu().double(), want.detach(), rtol=1e-4, atol=1e-5)
torch.testing.assert_close(box1.grad.cpu().double(), b1.grad, rtol=1e-3, atol=1e-4)
torch.testing.assert_close(box2.grad.cpu().double(), b2.grad, rtol=1e-3, atol=1e-4)
print("EXAMPLE OK")
