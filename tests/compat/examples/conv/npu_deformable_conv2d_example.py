# Seed 004, torch_npu.npu_deformable_conv2d, 示例 (doctest prompts removed).
import torch
import torch_npu
x = torch.rand(16, 32, 32, 32).npu()
weight = torch.rand(32, 32, 5, 5).npu()
offset = torch.rand(16, 75, 32, 32).npu()
output, _ = torch_npu.npu_deformable_conv2d(x, weight, offset, None, kernel_size=[5, 5], stride = [1, 1, 1, 1], padding = [2, 2, 2, 2])
print(output.shape)

# --- added by npu_anywhere tests: check the numbers ---
# The doc prints torch.Size([16, 32, 32, 32]).  Values: deformOut at sampled points is
# mask * bilinear(x, oh - 2 + ki + offset_y, ow - 2 + kj + offset_x) (offset channels: x
# offsets, y offsets, masks), and out = conv2d(deformOut, weight, stride=5); in float64.
import math
assert output.shape == (16, 32, 32, 32)
# deformOut of the first 2 images (the example drops it; recomputing all 16 would double the
# example's time)
out, deform = torch_npu.npu_deformable_conv2d(x[:2], weight, offset[:2], None, kernel_size=[5, 5],
                                              stride=[1, 1, 1, 1], padding=[2, 2, 2, 2])
torch.testing.assert_close(out, output[:2])
xc, oc = x.cpu().double(), offset.cpu().double()
gen = torch.Generator().manual_seed(0)
for n, c, oh, ow, ki, kj in torch.randint(0, 5, (40, 6), generator=gen).tolist():
    n, c, oh, ow = n % 2, c * 6, oh * 7, ow * 7
    k = ki * 5 + kj
    py = oh - 2 + ki + float(oc[n, 25 + k, oh, ow])
    px = ow - 2 + kj + float(oc[n, k, oh, ow])
    y0, x0 = math.floor(py), math.floor(px)
    val = 0.0
    for yy, xx, wgt in ((y0, x0, (y0 + 1 - py) * (x0 + 1 - px)), (y0, x0 + 1, (y0 + 1 - py) * (px - x0)),
                        (y0 + 1, x0, (py - y0) * (x0 + 1 - px)), (y0 + 1, x0 + 1, (py - y0) * (px - x0))):
        if 0 <= yy < 32 and 0 <= xx < 32:
            val += float(xc[n, c, yy, xx]) * wgt
    want = val * float(oc[n, 50 + k, oh, ow])
    assert abs(float(deform[n, c, oh * 5 + ki, ow * 5 + kj]) - want) < 1e-5, (n, c, oh, ow, ki, kj)
want_out = torch.nn.functional.conv2d(deform.cpu().double(), weight.cpu().double(), stride=5)
torch.testing.assert_close(out.cpu().double(), want_out, rtol=1e-5, atol=1e-4)
print("EXAMPLE OK")
