# Seed 004, torch_npu.npu_mhc_pre_backward, 单算子模式调用.  Copied unchanged.
import torch
import torch_npu
import numpy as np
B=1
S=1024
n=4
D=2560
x = torch.randn(B, S, n, D).bfloat16()
phi = torch.randn(n*n + 2*n, n*D)
alpha = torch.tensor([1.1, 0.9, 1.05])
bias = torch.randn(n*n + 2*n) * 0.1
gamma = torch.randn(n, D)
grad_x_post = torch.randn(B, S, n, D).bfloat16()
x_ = x.detach().clone().requires_grad_(True)
phi_ = phi.detach().clone().requires_grad_(True)
alpha_ = alpha.detach().clone().requires_grad_(True)
bias_ = bias.detach().clone().requires_grad_(True)
dh_in = torch.randn(B, S, D).bfloat16()
dh_post = torch.randn(B, S, n)
dh_res = torch.randn(B, S, n, n)
# 正向传播
h_in, h_post, h_res, inv_rms, h_mix, h_pre = torch_npu.npu_mhc_pre(
x_.npu(), phi_.npu(), alpha_.npu(), bias_.npu(), gamma=gamma.npu(), out_flag=1
)
# 调用npu接口
dx1, dphi1, da1, db1, dgamma1 = torch_npu.npu_mhc_pre_backward(
x.npu(), phi.npu(), alpha.npu(),
dh_in.npu(), dh_post.npu(), dh_res.npu(),
inv_rms.npu(), h_mix.npu(), h_pre.npu(), h_post.npu(), gamma=gamma.npu(), grad_x_post=grad_x_post.npu()
)

# --- added by npu_anywhere tests: check the numbers ---
# Autograd through the forward op gives the same gradients (it calls the backward op); bias and
# grad_x_post are checked against their closed forms: d bias = the pre-activation gradients
# summed over tokens, and grad_x_post adds to dx.
dh_pre = (dh_in.double().unsqueeze(-2) * x.double()).sum(-1)
s = h_pre.cpu().double() - 1e-6
want_bias_pre = (dh_pre * s * (1 - s)).sum((0, 1))
want_bias_res = dh_res.double().reshape(B, S, -1).sum((0, 1))
torch.testing.assert_close(db1.cpu()[:n].double(), want_bias_pre, rtol=1e-3, atol=1e-2)
torch.testing.assert_close(db1.cpu()[2 * n:].double(), want_bias_res, rtol=1e-4, atol=1e-3)
dx0 = torch_npu.npu_mhc_pre_backward(
    x.npu(), phi.npu(), alpha.npu(), dh_in.npu(), dh_post.npu(), dh_res.npu(),
    inv_rms, h_mix, h_pre, h_post, gamma=gamma.npu())[0]
torch.testing.assert_close(dx1.cpu().double(), dx0.cpu().double() + grad_x_post.double(),
                           rtol=2e-2, atol=0.5)
assert dx1.dtype == torch.bfloat16 and dphi1.shape == phi.shape and dgamma1.shape == (n, D)
print("EXAMPLE OK")
