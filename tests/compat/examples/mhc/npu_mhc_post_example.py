# Seed 004, torch_npu.npu_mhc_post, 单算子模式调用.  The seed's h_post_shape [1, 1, 2] does not
# match x's n = 4 (a doc defect, rejected on every path); this is op-plugin's current text of
# the same example (docs/zh/custom_APIs/torch_npu/torch_npu-npu_mhc_post.md), copied unchanged
# but for its NPU-availability preamble (the examples run without claiming an NPU).
import torch
import torch_npu
import numpy as np
x_shape = [1,4,512]
h_res_shape = [1,4,4]
h_out_shape = [1,512]
h_post_shape = [1,4]
x = torch.rand(x_shape, dtype=torch.float16)
h_res = torch.rand(h_res_shape, dtype=torch.float32)
h_out = torch.rand(h_out_shape, dtype=torch.float16)
h_post = torch.rand(h_post_shape, dtype=torch.float32)
x_npu = x.npu()
h_res_npu = h_res.npu()
h_out_npu = h_out.npu()
h_post_npu = h_post.npu()
y_npu = torch_npu.npu_mhc_post(x_npu, h_res_npu, h_out_npu, h_post_npu)
# h_res缺省时:
# y_npu = torch_npu.npu_mhc_post(x_npu, None, h_out_npu, h_post_npu)

# --- added by npu_anywhere tests: check the numbers ---
# y[j] = sum_i h_res[i, j] x[i] + h_post[j] h_out (the doc's H_res^T x_l), in float64.
xd, hd = x.double(), h_out.double()
want = h_res.double().transpose(-1, -2) @ xd + h_post.double()[..., None] * hd[:, None, :]
assert y_npu.dtype == torch.float16 and y_npu.shape == x.shape
torch.testing.assert_close(y_npu.cpu().double(), want, rtol=2e-3, atol=2e-3)
y_plain = torch_npu.npu_mhc_post(x_npu, None, h_out_npu, h_post_npu)
torch.testing.assert_close(y_plain.cpu().double(), xd + h_post.double()[..., None] * hd[:, None, :],
                           rtol=2e-3, atol=2e-3)
print("EXAMPLE OK")
