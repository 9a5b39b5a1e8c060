# Seed 004, torch_npu.npu_mhc_post_backward, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
grad_output_shape = (1, 4, 1024)
x_shape = (1, 4, 1024)
h_res_shape = (1, 4, 4)
h_out_shape = (1, 1024)
h_post_shape = (1, 4)
grad_output = (torch.rand(grad_output_shape, dtype=torch.bfloat16)).clamp(min=1e-4)
x = (torch.rand(x_shape, dtype=torch.bfloat16)).clamp(min=1e-4)
h_res = (torch.rand(h_res_shape, dtype=torch.float32)).clamp(min=1e-4)
h_out = (torch.rand(h_out_shape, dtype=torch.bfloat16)).clamp(min=1e-4)
h_post = (torch.rand(h_post_shape, dtype=torch.float32)).clamp(min=1e-4)
grad_output_npu = grad_output.npu()
x_npu = x.npu()
h_res_npu = h_res.npu()
h_out_npu = h_out.npu()
h_post_npu = h_post.npu()
grad_x, grad_h_res, grad_h_out, grad_h_post = torch_npu.npu_mhc_post_backward(grad_output_npu, x_npu, h_res_npu, h_out_npu, h_post_npu)

# --- added by npu_anywhere tests: check the numbers ---
# y[j] = sum_i h_res[i, j] x[i] + h_post[j] h_out, so in float64: grad_x = h_res @ g,
# grad_h_res = x @ g^T, grad_h_out = sum_j h_post[j] g[j], grad_h_post = g . h_out.
g, xd = grad_output.double(), x.double()
torch.testing.assert_close(grad_x.cpu().double(), h_res.double() @ g, rtol=1e-2, atol=1e-2)
torch.testing.assert_close(grad_h_res.cpu().double(), xd @ g.transpose(-1, -2), rtol=1e-5, atol=1e-3)
torch.testing.assert_close(grad_h_out.cpu().double(), (g * h_post.double()[..., None]).sum(-2),
                           rtol=1e-2, atol=1e-2)
torch.testing.assert_close(grad_h_post.cpu().double(), (g * h_out.double()[:, None]).sum(-1),
                           rtol=1e-5, atol=1e-3)
assert grad_x.dtype == torch.bfloat16 and grad_h_res.dtype == torch.float32
print("EXAMPLE OK")
